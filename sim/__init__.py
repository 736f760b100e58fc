"""sim: the discrete-event simulator (simpy) that executes a Plan on a Cluster.

>>> from sim import simulate, TRACE_COLUMNS
>>> TRACE_COLUMNS[:3]
('job', 'name', 'kind')
"""

from sim.engine import simulate
from sim.result import TRACE_COLUMNS, SimResult, chrome_trace

__all__ = ["TRACE_COLUMNS", "SimResult", "chrome_trace", "simulate"]
