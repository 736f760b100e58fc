"""The simulator's event core: a heap of (time, sequence, callback, value).

Every event of a run is a callback due at a time; events due at the same time run in the
order they were scheduled. That is simpy's rule for events of one priority (its heap key is
time, priority, event id), and the time of an event is computed the same way
(``now + delay``), so a run gives bit for bit what it gave on simpy. The simulator needs no
more of simpy than this (no processes, no resources), and simpy's dispatch costs 1.6x
(private attributes) to 1.8x (public API) this core's per event
(``benchmarks/event_core.py``). simpy stays the test suite's oracle (``tests/sim/oracle.py``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from itertools import count
from typing import Any

__all__ = ["EventQueue"]


class EventQueue:
    """Callbacks due at simulated times; :attr:`now` is the time of the one running.

    >>> q = EventQueue()
    >>> seen = []
    >>> q.schedule(2.0, seen.append, "late")
    >>> q.schedule(1.0, seen.append, "early")
    >>> q.schedule(1.0, seen.append, "early, second")
    >>> q.run()
    >>> seen, q.now
    (['early', 'early, second', 'late'], 2.0)
    """

    __slots__ = ("_heap", "_ids", "now")

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[Any], None], Any]] = []
        self._ids = count()

    def schedule(self, delay: float, callback: Callable[[Any], None], value: Any) -> None:
        """Call ``callback(value)`` at ``now + delay`` (``delay`` >= 0)."""
        heapq.heappush(self._heap, (self.now + delay, next(self._ids), callback, value))

    def run(self) -> None:
        """Run every event, in time order, until none is left."""
        heap, pop = self._heap, heapq.heappop
        while heap:
            self.now, _, callback, value = pop(heap)
            callback(value)

    def __len__(self) -> int:
        """The events not yet run."""
        return len(self._heap)
