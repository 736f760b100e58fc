"""sim: the discrete-event simulator that executes a Plan on a Cluster.

Names are imported on first use, so ``import sim`` loads neither the engine nor pandas.

>>> from sim import simulate, TRACE_COLUMNS
>>> TRACE_COLUMNS[:3]
('job', 'name', 'kind')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workloads.lazy import attach

if TYPE_CHECKING:
    from sim.delta import DeltaEvaluator, search_evaluator
    from sim.engine import evaluator, simulate
    from sim.gantt import plot_gantt
    from sim.options import LINK_MODELS, ORDERS
    from sim.result import TRACE_COLUMNS, SimResult, TraceColumns, chrome_trace
    from sim.sharing import SHARING, SharingPolicy, make_sharing, register_sharing
    from sim.tenants import Job, TenantResult, jain_index, simulate_jobs

_WHERE = {"LINK_MODELS": "options", "ORDERS": "options", "TRACE_COLUMNS": "result",
          "SimResult": "result", "TraceColumns": "result", "chrome_trace": "result",
          "plot_gantt": "gantt", "simulate": "engine", "evaluator": "engine", "SHARING": "sharing",
          "SharingPolicy": "sharing", "make_sharing": "sharing",
          "register_sharing": "sharing", "Job": "tenants", "TenantResult": "tenants",
          "jain_index": "tenants", "simulate_jobs": "tenants", "DeltaEvaluator": "delta",
          "search_evaluator": "delta"}

__all__ = ["LINK_MODELS", "ORDERS", "SHARING", "TRACE_COLUMNS", "DeltaEvaluator", "Job",
           "SharingPolicy",
           "SimResult", "TenantResult", "TraceColumns", "chrome_trace", "evaluator",
           "jain_index",
           "make_sharing", "plot_gantt", "register_sharing", "search_evaluator", "simulate",
           "simulate_jobs"]

__getattr__, __dir__ = attach(__name__, _WHERE)
