"""The result of a simulated run: summary figures, the Trace and its Chrome-trace export.

The Trace is one pandas schema for simulated and real runs alike: one row per compute op or
transfer with ``job, name, kind, device, src, dst, stream, start_s, end_s, flops, bytes``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from workloads.io import write_text_atomic

if TYPE_CHECKING:
    from policies.plans import Plan

__all__ = ["TRACE_COLUMNS", "SimResult", "build_trace", "chrome_trace"]

TRACE_COLUMNS: tuple[str, ...] = ("job", "name", "kind", "device", "src", "dst", "stream",
                                  "start_s", "end_s", "flops", "bytes")


def build_trace(run: Any, job: str) -> pd.DataFrame:
    """The Trace of a finished simulation run, rows sorted by start time.

    ``stream`` names the lanes a row occupies: ``device/streamK`` for compute;
    ``device/copyK`` and the link channels (comma-separated) for a transfer.
    """
    ops = [run.plan.graph.op(name) for name in run.names]
    devices = np.array(run.devices, dtype=object)
    op_dev = np.asarray(run.op_dev, dtype=np.int64)
    n = len(run.names)
    compute = pd.DataFrame({
        "job": [job] * n, "name": list(run.names), "kind": ["compute"] * n,
        "device": devices[op_dev] if n else [], "src": [""] * n, "dst": [""] * n,
        "stream": [f"{run.devices[d]}/stream{s}" for d, s in zip(run.op_dev, run.stream,
                                                                  strict=True)],
        "start_s": run.start, "end_s": run.end,
        "flops": [op.flops for op in ops],
        "bytes": [op.bytes_read + op.bytes_written for op in ops],
    })
    m = len(run.t_src)
    moved = pd.DataFrame({
        "job": [job] * m, "name": [t.name for t in run.plan.transfers],
        "kind": ["transfer"] * m, "device": [""] * m,
        "src": [run.devices[d] for d in run.t_src],
        "dst": [run.devices[d] for d in run.t_dst],
        "stream": [",".join((f"{run.devices[d]}/copy{e}", *c))
                   for d, e, c in zip(run.t_src, run.t_engine, run.t_channels, strict=True)],
        "start_s": run.t_start, "end_s": run.t_end,
        "flops": [0] * m, "bytes": run.t_bytes,
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
    _run: Any = field(default=None, repr=False, compare=False)

    @cached_property
    def trace(self) -> pd.DataFrame:
        """One row per compute op or transfer (see ``TRACE_COLUMNS``), by start time."""
        return build_trace(self._run, self.job)

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures (the keys ``placelab simulate --json`` prints)."""
        return {
            "makespan_s": self.makespan_s, "feasible": self.feasible, "reason": self.reason,
            "transfer_bytes": self.transfer_bytes,
            "peak_memory_bytes": self.peak_memory_bytes, "utilization": self.utilization,
            "busy_s": self.busy_s,
        }

    def memory_frame(self) -> pd.DataFrame:
        """Memory in use over time: one row per change, columns ``time_s, device, bytes``."""
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
