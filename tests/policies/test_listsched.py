"""The list schedulers' building blocks against plain reference versions."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.listsched import Timeline


def plain_earliest_start(starts: list[float], ends: list[float], ready: float,
                         duration: float) -> float:
    """Insertion as the HEFT paper states it: the first idle gap from ``ready`` on that
    holds ``duration``, else after the last busy interval."""
    start = ready
    for s, e in zip(starts, ends, strict=True):
        if e <= ready:
            continue
        if start + duration <= s:
            return start
        start = max(start, e)
    return start


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 6)), max_size=60),
       st.integers(0, 50), st.integers(0, 8), st.sampled_from([0.25, 1.0, 0.1]))
def test_earliest_start_is_the_first_gap_that_fits(jobs, ready, duration, unit) -> None:  # type: ignore[no-untyped-def]
    # Intervals placed as a scheduler places them (each at its own earliest start), on a
    # grid of ``unit`` so that gaps exactly as long as the op are common.
    line = Timeline()
    for i, (at, length) in enumerate(jobs):
        start = line.earliest_start(at * unit, length * unit)
        line.insert(start, start + length * unit, i)
    assert line.ends == sorted(line.ends)
    want = plain_earliest_start(line.starts, line.ends, ready * unit, duration * unit)
    assert line.earliest_start(ready * unit, duration * unit) == want
