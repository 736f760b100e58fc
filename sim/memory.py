"""Memory accounting, one part of a run (:class:`sim.engine.Simulation`).

Parameters are resident from the start; an op's outputs and workspace are allocated when it
starts, its workspace freed when it ends and a tensor when its last reader (or outgoing
transfer) ends; a received copy is held from the transfer's request. The run's hot path adds
and takes bytes itself (``used``, and ``timeline`` as flat (time, device, bytes) triples:
a call per tensor would cost more than the sum); this part owns those lists, says what a run
starts with, and decides what an allocation past a device's peak means
(:meth:`MemoryAccounts.over_peak`). A run of several jobs swaps it for
:class:`sim.tenants.JobAccounts` (accounts per job, a device's use their sum).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from sim.engine import Simulation

__all__ = ["MemoryAccounts"]


class MemoryAccounts:
    """One account per device index, holding its resident parameters from time 0. The
    first allocation past a device's capacity makes the run infeasible, named in
    ``overflow`` (the run goes on, so its trace shows what followed).

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from policies import plan
    >>> from sim import simulate
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> r = simulate(plan(build_model("mlp", batch=4), c, "single_device"), c, RooflineCost(c))
    >>> r.feasible, max(r.peak_memory_bytes.values()) >= max(r.resident_bytes.values())
    (True, True)
    """

    def __init__(self, run: Simulation, resident: np.ndarray) -> None:
        self.run = run
        self.capacity = [run.cluster.device(d).memory_bytes for d in run.devices]
        self.used: list[int] = resident.tolist()
        self.resident = list(self.used)
        self.peak = list(self.used)
        # (time, device, bytes) triples laid flat: numbers only, nothing for the GC to scan
        self.timeline: list[float] = [x for d, u in enumerate(self.used) for x in (0.0, d, u)]
        self.overflow = ""
        for d, used in enumerate(self.used):
            if used > self.capacity[d]:
                self._overflow(d, used, "resident parameters")
                break

    def over_peak(self, d: int, used: int, op: int, transfer: int | None) -> None:
        """Device index ``d`` holds ``used`` bytes, more than its peak so far, as op ``op``
        starts (``transfer`` None) or transfer ``transfer`` is requested (``op`` -1)."""
        self.peak[d] = used
        if used > self.capacity[d] and not self.overflow:
            self._overflow(d, used, self.cause(op, transfer))

    def cause(self, op: int, transfer: int | None) -> str:
        """What allocated: an op starting, a transfer requested, or parameters arriving."""
        run = self.run
        if transfer is not None:
            return f"transfer {run.transfer_names[transfer]!r} requested"
        return "its parameters arrive" if op < 0 else f"op {run.names[op]!r} starts"

    def _overflow(self, d: int, used: int, what: str) -> None:
        self.overflow = (f"out of memory on device {self.run.devices[d]!r} at "
                         f"t={self.run.env.now:.6g} s ({what}): needs {used} bytes, has "
                         f"{self.capacity[d]}")
