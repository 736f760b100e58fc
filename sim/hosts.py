"""Devices that share their host: ops slow each other down while they compute at once.

Logical devices carved out of one machine (the NumPy engine's threads on one CPU, slices of
one accelerator, chiplets on one memory system) share cores, caches and memory bandwidth.
A cluster says so per host (``Cluster.host_slowdown``): while ``k`` of a host's devices
compute at once, each of their ops progresses ``1 + (s - 1)(k - 1)`` times more slowly
than alone (``s`` the host's slowdown: two devices at once run ``s`` times slower). Rates
change whenever an op on the host starts or ends; an op's work left is settled then and its
end foreseen anew, as :mod:`sim.links` does for flows sharing a link. A host with a slowdown
of 1, or a device on a host of its own, runs as it does without this model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hwmodels.spec import Cluster

if TYPE_CHECKING:
    from sim.engine import Simulation

__all__ = ["HostSharing", "shared_hosts"]


def shared_hosts(cluster: Cluster) -> tuple[list[int], list[float]] | None:
    """Per device its host's index (-1: a device that nothing slows), and per host its
    slowdown; None where no host of two or more devices has one above 1.

    >>> from hwmodels import Cluster, Device, Link
    >>> d = tuple(Device(n, "cpu", {"fp32": 1e9}, 2**30, 1e9) for n in ("a", "b", "c"))
    >>> links = (Link("a", "b", 1e9), Link("b", "c", 1e9))
    >>> c = Cluster("c", d, links, hosts={"a": "h", "b": "h", "c": "g"},
    ...             host_slowdown={"h": 1.5})
    >>> shared_hosts(c)
    ([0, 0, -1], [1.5])
    """
    hosts = [h for h, s in cluster.host_slowdown.items()
             if s > 1 and sum(1 for x in cluster.hosts.values() if x == h) > 1]
    if not hosts:
        return None
    index = {h: i for i, h in enumerate(hosts)}
    return ([index.get(cluster.hosts.get(d, ""), -1) for d in cluster.device_names],
            [cluster.host_slowdown[h] for h in hosts])


class HostSharing:
    """Ops on devices of a shared host progress at the host's current rate (see the
    module): a part of a run (:class:`sim.engine.Simulation`) that takes over the starts
    and ends of those ops.

    ``device_host`` gives per device index its host (-1: none), ``slowdown`` per host its
    slowdown; ``physical``, per device index the device it is a view of (several tenants'
    views of one device count once), itself by default.
    """

    def __init__(self, run: Simulation, device_host: list[int], slowdown: list[float],
                 physical: list[int] | None = None) -> None:
        self.run = run
        self.device_host, self.host_slowdown = device_host, slowdown
        self.physical_of = physical or list(range(len(device_host)))
        self.host_running: list[dict[int, int]] = [{} for _ in slowdown]  # op -> device
        self.host_settled = [0.0] * len(slowdown)
        self.host_rate = [1.0] * len(slowdown)
        self.host_work = list(run.op_time)  # each op's time alone
        self.host_left: dict[int, float] = {}  # running op -> its work left at ``settled``
        self.host_version = [0] * len(run.op_time)
        self._plain_start, self._plain_done = run.start_op, run.on_op_done
        run.start_op, run.on_op_done = self._start_op, self._base_end

    def _start_op(self, op: int, d: int, stream: int) -> None:
        self._plain_start(op, d, stream)
        h = self.device_host[d]
        if h >= 0:
            self._settle(h)
            self.host_left[op] = self.host_work[op]
            self.host_running[h][op] = d
            self._foresee(h)

    def _base_end(self, op: int) -> None:
        """The plain end event, ignored for ops on a shared host (their end is foreseen
        here)."""
        if self.device_host[self.run.op_dev[op]] < 0:
            self._plain_done(op)

    def _shared_end(self, at: tuple[int, int]) -> None:
        op, version = at
        if version != self.host_version[op]:
            return  # foreseen before the host's rate changed
        run = self.run
        h = self.device_host[run.op_dev[op]]
        self._settle(h)
        del self.host_running[h][op], self.host_left[op]
        run.op_time[op] = run.env.now - run.start[op]
        self._foresee(h)
        self._plain_done(op)

    def _settle(self, h: int) -> None:
        """Charge the host's running ops the work done since the last change."""
        now = self.run.env.now
        done = (now - self.host_settled[h]) * self.host_rate[h]
        for op in self.host_running[h]:
            self.host_left[op] -= done
        self.host_settled[h] = now

    def _foresee(self, h: int) -> None:
        """The host's rate for the devices now busy, and each running op's end at it."""
        busy = len({self.physical_of[d] for d in self.host_running[h].values()})
        self.host_rate[h] = 1.0 / (1.0 + (self.host_slowdown[h] - 1.0) * max(busy - 1, 0))
        schedule = self.run.env.schedule
        for op in self.host_running[h]:
            self.host_version[op] += 1
            schedule(max(self.host_left[op], 0.0) / self.host_rate[h], self._shared_end,
                     (op, self.host_version[op]))
