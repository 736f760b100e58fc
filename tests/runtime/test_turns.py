"""Plans measured in turns (validation), and several calls' runs of one
plan combine into one result."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.executor import RunResult
from runtime.turns import run_in_turns
from workloads.errors import PlacelabError


def _result(makespans: list[float], busy: dict[str, float], peak: int) -> RunResult:
    return RunResult(makespans, {"cpu0": peak}, pd.DataFrame(), {}, [], ("cpu0",),
                     op_seconds=dict(busy), op_busy_s=dict(busy))


def test_calls_combine_into_every_repeat_and_the_median_of_their_medians() -> None:
    calls = [_result([1.0, 2.0], {"a": 1.0}, 10), _result([3.0], {"a": 5.0}, 30),
             _result([4.0, 5.0, 6.0], {"a": 2.0}, 20)]
    merged = RunResult.combine(calls)
    assert merged.makespans_s == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert merged.makespan_s == 3.5 and merged.spread_s == (1.0, 6.0)
    assert merged.op_busy_s == {"a": 2.0} and merged.peak_memory_bytes == {"cpu0": 30}


@settings(max_examples=30, deadline=None)
@given(repeats=st.integers(1, 9), rounds=st.integers(1, 4), plans=st.integers(1, 4))
def test_plans_run_in_turns_and_each_gets_its_repeats(repeats: int, rounds: int,
                                                      plans: int) -> None:
    import runtime.executor

    calls: list[tuple[int, int]] = []

    def fake(plan: int, engine: object, *, warmup: int, repeats: int, seed: int
             ) -> RunResult:
        calls.append((plan, repeats))
        return _result([plan + 1.0] * repeats, {}, 0)

    rounds = min(rounds, repeats)
    turns: list[int] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runtime.executor, "execute", fake)
        measured = run_in_turns(list(range(plans)), object(),  # type: ignore[arg-type]
                                repeats=repeats,
                                warmup=0, seed=0, rounds=rounds,
                                after_turn=lambda: turns.append(len(calls)))
    assert turns == [plans * (t + 1) for t in range(rounds)]  # asked as each turn ends
    assert [len(m.makespans_s) for m, _ in measured] == [repeats] * plans
    assert [set(m.makespans_s) for m, _ in measured] == [{p + 1.0} for p in range(plans)]
    assert all(spread == 0.0 for _, spread in measured)  # every turn took the same
    order = [p for p, _ in calls]
    assert order == list(range(plans)) * rounds  # each turn visits every plan once
    shares = [n for _, n in calls]
    assert max(shares) - min(shares) <= 1  # repeats spread evenly over the turns


def test_rounds_must_be_positive() -> None:
    from runtime import NumpyEngine
    from runtime.validate import validate
    from workloads import build_model

    with pytest.raises(PlacelabError, match="rounds must be >= 1, got 0"):
        validate(NumpyEngine(devices=1), {"mlp": build_model("mlp")}, ["single_device"],
                 rounds=0)
