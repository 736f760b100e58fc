"""sim: the discrete-event simulator (simpy) that executes a Plan on a Cluster.

>>> from sim import simulate, TRACE_COLUMNS
>>> TRACE_COLUMNS[:3]
('job', 'name', 'kind')
"""

from sim.engine import ORDERS, simulate
from sim.gantt import plot_gantt
from sim.result import TRACE_COLUMNS, SimResult, chrome_trace

__all__ = ["ORDERS", "TRACE_COLUMNS", "SimResult", "chrome_trace", "plot_gantt", "simulate"]
