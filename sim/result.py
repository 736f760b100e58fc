"""The result of a simulated run: summary figures, the Trace and its Chrome-trace export.

The Trace is one pandas schema for simulated and real runs alike: one row per compute op or
transfer with ``job, name, kind, device, src, dst, stream, start_s, end_s, flops, bytes``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from workloads.io import write_text_atomic

if TYPE_CHECKING:
    from policies.plans import Plan

__all__ = ["TRACE_COLUMNS", "SimResult", "TraceRows", "chrome_trace"]

TRACE_COLUMNS: tuple[str, ...] = ("job", "name", "kind", "device", "src", "dst", "stream",
                                  "start_s", "end_s", "flops", "bytes")


class TraceRows:
    """Column-wise accumulator for trace rows (cheaper than a dict per row)."""

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {c: [] for c in TRACE_COLUMNS}
        self._append = [self.columns[c].append for c in TRACE_COLUMNS]

    def add(self, *values: Any) -> None:
        for append, value in zip(self._append, values, strict=True):
            append(value)

    def frame(self) -> pd.DataFrame:
        df = pd.DataFrame(self.columns, columns=list(TRACE_COLUMNS))
        return df.astype({"start_s": "float64", "end_s": "float64",
                          "flops": "int64", "bytes": "int64"})


@dataclass
class SimResult:
    """What a simulation reports. ``feasible`` is False with a ``reason`` when a device ran
    out of memory; the times are still those the plan would take."""

    makespan_s: float
    feasible: bool
    reason: str
    busy_s: dict[str, float]
    utilization: dict[str, float]
    transfer_bytes: int
    peak_memory_bytes: dict[str, int]
    memory_capacity_bytes: dict[str, int]
    trace: pd.DataFrame
    memory_timeline: list[tuple[float, int, int]] = field(repr=False)
    devices: tuple[str, ...] = ()
    plan: Plan | None = field(default=None, repr=False)
    cluster: str = ""

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
        times, devs, used = zip(*self.memory_timeline, strict=True) if self.memory_timeline \
            else ((), (), ())
        return pd.DataFrame({"time_s": times, "device": [self.devices[d] for d in devs],
                             "bytes": used})

    def to_chrome_trace(self) -> dict[str, Any]:
        return chrome_trace(self.trace)

    def write_chrome_trace(self, path: str | Path) -> Path:
        """Write the trace as Chrome-trace JSON (opens in Perfetto and chrome://tracing)."""
        return write_text_atomic(path, json.dumps(self.to_chrome_trace()))


def chrome_trace(trace: pd.DataFrame) -> dict[str, Any]:
    """Chrome-trace events: one process per device (or ``links``), one thread per stream.

    >>> df = pd.DataFrame([dict(job="j", name="a", kind="compute", device="gpu0", src="",
    ...     dst="", stream="gpu0/stream0", start_s=0.0, end_s=1e-3, flops=1, bytes=0)])
    >>> [e["dur"] for e in chrome_trace(df)["traceEvents"] if e["ph"] == "X"]
    [1000.0]
    """
    pids: dict[str, int] = {}
    tids: dict[str, int] = {}
    events: list[dict[str, Any]] = []
    for row in trace.itertuples(index=False):
        process = row.device if row.kind == "compute" else "links"
        pid = pids.setdefault(process, len(pids))
        tid = tids.setdefault(row.stream, len(tids))
        events.append({
            "name": row.name, "cat": row.kind, "ph": "X", "pid": pid, "tid": tid,
            "ts": row.start_s * 1e6, "dur": (row.end_s - row.start_s) * 1e6,
            "args": {"job": row.job, "flops": int(row.flops), "bytes": int(row.bytes),
                     "src": row.src, "dst": row.dst},
        })
    for process, pid in pids.items():
        events.append({"name": "process_name", "ph": "M", "pid": pid,
                       "args": {"name": process}})
    for stream, tid in tids.items():
        pid = pids[stream.split("/")[0]] if "/" in stream else pids.get("links", 0)
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"name": stream}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}
