"""The result of a simulated run: summary figures, the Trace and its Chrome-trace export.

The Trace is one pandas schema for simulated and real runs alike: one row per compute op or
transfer with ``job, name, kind, device, src, dst, stream, start_s, end_s, flops, bytes``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from workloads.errors import PlacelabError
from workloads.io import write_text_atomic

if TYPE_CHECKING:
    import pandas as pd

    from policies.plans import Plan

__all__ = ["TRACE_COLUMNS", "SimResult", "TraceColumns", "chrome_trace"]

TRACE_COLUMNS: tuple[str, ...] = ("job", "name", "kind", "device", "src", "dst", "stream",
                                  "start_s", "end_s", "flops", "bytes")


@dataclass(frozen=True)
class TraceColumns:
    """What a run measured, as compact columns: the Trace before it is a DataFrame.

    Ops are in ``names`` order with their device (an index into ``devices``), stream,
    start and end; transfers with source and destination device, copy engine, the link
    channels they held, start and end. Keeping these instead of the executor's state lets
    a result outlive its run at a few arrays' cost.
    """

    devices: tuple[str, ...]
    names: tuple[str, ...]
    op_device: np.ndarray
    op_stream: np.ndarray
    op_start: np.ndarray
    op_end: np.ndarray
    op_flops: np.ndarray
    op_bytes: np.ndarray
    transfer_names: tuple[str, ...] = ()
    transfer_src: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    transfer_dst: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    transfer_engine: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    transfer_channels: tuple[tuple[str, ...], ...] = ()
    transfer_start: np.ndarray = field(default_factory=lambda: np.zeros(0))
    transfer_end: np.ndarray = field(default_factory=lambda: np.zeros(0))
    transfer_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: Several jobs' rows: their names, and each op's and transfer's job (an index).
    jobs: tuple[str, ...] = ()
    op_job: np.ndarray | None = None
    transfer_job: np.ndarray | None = None
    #: The ops that are steps of a collective (their rows' kind is ``collective``).
    collective: frozenset[str] = frozenset()

    def _job_column(self, job: str, rows: int, index: np.ndarray | None) -> Any:
        if index is None or not self.jobs:
            return [job] * rows
        return np.array(self.jobs, dtype=object)[index] if rows else []

    def frame(self, job: str) -> pd.DataFrame:
        """The Trace: one row per op or transfer (``TRACE_COLUMNS``), by start time.

        ``stream`` names the lanes a row occupies: ``device/streamK`` for compute;
        ``device/copyK`` and the link channels (comma-separated) for a transfer.
        """
        import pandas as pd

        devices = np.array(self.devices, dtype=object)
        n, m = len(self.names), len(self.transfer_names)
        compute = pd.DataFrame({
            "job": self._job_column(job, n, self.op_job), "name": list(self.names),
            "kind": [("collective" if x in self.collective else "compute")
                     for x in self.names] if self.collective else ["compute"] * n,
            "device": devices[self.op_device] if n else [], "src": [""] * n,
            "dst": [""] * n,
            "stream": [f"{self.devices[d]}/stream{s}" for d, s in
                       zip(self.op_device.tolist(), self.op_stream.tolist(), strict=True)],
            "start_s": self.op_start, "end_s": self.op_end, "flops": self.op_flops,
            "bytes": self.op_bytes,
        })
        moved = pd.DataFrame({
            "job": self._job_column(job, m, self.transfer_job),
            "name": list(self.transfer_names), "kind": ["transfer"] * m,
            "device": [""] * m, "src": devices[self.transfer_src] if m else [],
            "dst": devices[self.transfer_dst] if m else [],
            "stream": [",".join((f"{self.devices[d]}/copy{e}", *c)) for d, e, c in
                       zip(self.transfer_src.tolist(), self.transfer_engine.tolist(),
                           self.transfer_channels, strict=True)],
            "start_s": self.transfer_start, "end_s": self.transfer_end, "flops": [0] * m,
            "bytes": self.transfer_bytes,
        })
        trace = pd.concat([compute, moved], ignore_index=True) if m else compute
        trace = trace.astype({"start_s": "float64", "end_s": "float64", "flops": "int64",
                              "bytes": "int64"})
        return trace.sort_values("start_s", kind="stable", ignore_index=True)


@dataclass
class SimResult:
    """What a simulation reports. ``feasible`` is False with a ``reason`` when a device ran
    out of memory; the times are still those the plan would take. The :attr:`trace` is built
    on first access."""

    makespan_s: float
    feasible: bool
    reason: str
    busy_s: dict[str, float]
    utilization: dict[str, float]
    transfer_bytes: int
    peak_memory_bytes: dict[str, int]
    memory_capacity_bytes: dict[str, int]
    resident_bytes: dict[str, int]
    #: Memory in use over time, as flat (time_s, device index, bytes) triples.
    memory_log: list[float] = field(repr=False)
    devices: tuple[str, ...] = ()
    plan: Plan | None = field(default=None, repr=False)
    cluster: str = ""
    job: str = "job0"
    columns: TraceColumns | None = field(default=None, repr=False, compare=False)
    #: Per source of op times (``roofline``, ``predictor``, ``profile``, ...): how many
    #: ops it priced, their seconds and that share of all ops' seconds.
    cost_sources: dict[str, dict[str, float]] = field(default_factory=dict)

    @cached_property
    def trace(self) -> pd.DataFrame:
        """One row per compute op or transfer (see ``TRACE_COLUMNS``), by start time."""
        if self.columns is None:
            raise PlacelabError("simulation result: no trace was recorded")
        return self.columns.frame(self.job)

    @property
    def collective_bytes(self) -> int:
        """The bytes of :attr:`transfer_bytes` that collectives' steps moved."""
        if self.plan is None or not self.plan.step_of:
            return 0
        return sum(t.nbytes for t in self.plan.transfers if t.producer in self.plan.step_of)

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures (the keys ``placelab simulate --json`` prints)."""
        return {
            "makespan_s": self.makespan_s, "feasible": self.feasible, "reason": self.reason,
            "transfer_bytes": self.transfer_bytes, "collective_bytes": self.collective_bytes,
            "peak_memory_bytes": self.peak_memory_bytes, "utilization": self.utilization,
            "busy_s": self.busy_s, "cost_sources": self.cost_sources,
        }

    def memory_frame(self) -> pd.DataFrame:
        """Memory in use over time: one row per change, columns ``time_s, device, bytes``."""
        import pandas as pd

        log = np.asarray(self.memory_log, dtype=float).reshape(-1, 3)
        names = np.asarray(self.devices, dtype=object)
        return pd.DataFrame({"time_s": log[:, 0],
                             "device": names[log[:, 1].astype(int)] if len(log) else [],
                             "bytes": log[:, 2].astype(np.int64)})

    def write_gantt(self, path: str | Path, *, title: str = "") -> Path:
        """Write a Gantt chart of the trace (PNG or SVG by suffix)."""
        from sim.gantt import plot_gantt

        return plot_gantt(self.trace, path, title=title)

    def to_chrome_trace(self) -> dict[str, Any]:
        return chrome_trace(self.trace)

    def write_chrome_trace(self, path: str | Path) -> Path:
        """Write the trace as Chrome-trace JSON (opens in Perfetto and chrome://tracing)."""
        return write_text_atomic(path, json.dumps(self.to_chrome_trace()))


def chrome_trace(trace: pd.DataFrame) -> dict[str, Any]:
    """Chrome-trace events: a process per device (lanes: its streams and copy engines) and
    one ``links`` process with a lane per link channel; a transfer appears on every lane it
    holds.

    >>> import pandas as pd
    >>> df = pd.DataFrame([dict(job="j", name="a", kind="compute", device="gpu0", src="",
    ...     dst="", stream="gpu0/stream0", start_s=0.0, end_s=1e-3, flops=1, bytes=0)])
    >>> [e["dur"] for e in chrome_trace(df)["traceEvents"] if e["ph"] == "X"]
    [1000.0]
    """
    pids: dict[str, int] = {}
    lanes: dict[str, tuple[int, int]] = {}
    events: list[dict[str, Any]] = []
    for row in trace.itertuples(index=False):
        args = {"job": row.job, "flops": int(row.flops), "bytes": int(row.bytes),
                "src": row.src, "dst": row.dst}
        for lane in row.stream.split(","):
            if lane not in lanes:
                process = lane.split("/")[0] if "/" in lane else "links"
                pid = pids.setdefault(process, len(pids))
                lanes[lane] = (pid, len(lanes))
            pid, tid = lanes[lane]
            events.append({"name": row.name, "cat": row.kind, "ph": "X", "pid": pid,
                           "tid": tid, "ts": row.start_s * 1e6,
                           "dur": (row.end_s - row.start_s) * 1e6, "args": args})
    for process, pid in pids.items():
        events.append({"name": "process_name", "ph": "M", "pid": pid,
                       "args": {"name": process}})
    for lane, (pid, tid) in lanes.items():
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"name": lane}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def source_shares(labels: Sequence[str], seconds: np.ndarray) -> dict[str, dict[str, float]]:
    """Per label: how many ops, their seconds and their share of all seconds.

    >>> source_shares(["a", "b", "a"], np.array([1.0, 2.0, 1.0]))["a"]
    {'ops': 2, 'seconds': 2.0, 'share': 0.5}
    """
    total = float(np.sum(seconds))
    out: dict[str, dict[str, float]] = {}
    for label, t in zip(labels, np.asarray(seconds, dtype=float).tolist(), strict=True):
        entry = out.setdefault(label, {"ops": 0, "seconds": 0.0, "share": 0.0})
        entry["ops"] += 1
        entry["seconds"] += t
    for entry in out.values():
        entry["share"] = entry["seconds"] / total if total > 0 else 0.0
    return out
