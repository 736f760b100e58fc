"""sim: the discrete-event simulator (simpy) that executes a Plan on a Cluster.

Names are imported on first use, so ``import sim`` loads neither simpy nor pandas.

>>> from sim import simulate, TRACE_COLUMNS
>>> TRACE_COLUMNS[:3]
('job', 'name', 'kind')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workloads.lazy import attach

if TYPE_CHECKING:
    from sim.engine import simulate
    from sim.gantt import plot_gantt
    from sim.options import LINK_MODELS, ORDERS
    from sim.result import TRACE_COLUMNS, SimResult, TraceColumns, chrome_trace

_WHERE = {"LINK_MODELS": "options", "ORDERS": "options", "TRACE_COLUMNS": "result",
          "SimResult": "result", "TraceColumns": "result", "chrome_trace": "result",
          "plot_gantt": "gantt", "simulate": "engine"}

__all__ = ["LINK_MODELS", "ORDERS", "TRACE_COLUMNS", "SimResult", "TraceColumns", "chrome_trace",
           "plot_gantt", "simulate"]

__getattr__, __dir__ = attach(__name__, _WHERE)
