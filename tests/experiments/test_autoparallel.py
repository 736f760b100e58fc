"""``autoparallel``: its winner against hand-picked strategies, its bound, its breakdown."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.autoparallel import Strategy, autoparallel, candidates
from experiments.cli import main
from hwmodels import get_cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments" / "scripts"))


@pytest.fixture(scope="module")
def bert() -> pd.DataFrame:
    # SGD, as the parallel-scaling study trains
    return autoparallel("bert_base", "quad-v100-nvlink", global_batch=8, seq_len=32,
                        optimizer="sgd", gpus=[2, 4], workers=1, refine=2)


def test_the_winner_beats_every_hand_picked_strategy(bert: pd.DataFrame) -> None:
    from parallel_scaling import run, strategies  # the study's own strategies, built alike

    hand = [run("quad-v100-nvlink", "bert_base", 8, 32, "fp16", *s)
            for n in (2, 4) for s in strategies("bert_base", n)]
    best = bert.iloc[0]
    assert best["why"] == "fastest" and best["feasible"]
    assert best["step_s"] <= min(r["step_s"] for r in hand if r["feasible"]) * (1 + 1e-12)


def test_pruning_loses_nothing_against_building_every_candidate(bert: pd.DataFrame) -> None:
    every = autoparallel("bert_base", "quad-v100-nvlink", global_batch=8, seq_len=32,
                         optimizer="sgd", gpus=[2, 4], workers=1, exhaustive=True)
    assert every["reason"].astype(str).str.startswith("pruned").sum() == 0
    assert every.attrs["untried"].startswith("every setting")
    assert bert.iloc[0]["step_s"] == every.iloc[0]["step_s"]
    ran = every[every["step_s"].notna()]
    assert (ran["bound_s"] <= ran["step_s"] * (1 + 1e-9)).all()  # every bound holds


def test_bounds_hold_on_a_cluster_of_unlike_devices() -> None:
    # a CPU, a V100 and an A100 (hetero-box): the bound takes each op's fastest device
    df = autoparallel("bert_base", "hetero-box", global_batch=8, seq_len=32, dtype="fp32",
                      optimizer="sgd", gpus=[1, 2], workers=1, exhaustive=True)
    ran = df[df["step_s"].notna()]
    assert len(ran) > 3 and (ran["bound_s"] <= ran["step_s"] * (1 + 1e-9)).all()


def test_one_device_spends_its_step_computing(bert: pd.DataFrame) -> None:
    one = autoparallel("bert_base", "quad-v100-nvlink", global_batch=8, seq_len=32,
                       optimizer="sgd", gpus=[1], workers=1)
    row = one.iloc[0]
    assert row["strategy"] == "one device"
    assert row["compute_s"] == pytest.approx(row["step_s"], rel=1e-12)
    assert row["bubble_s"] == pytest.approx(0, abs=1e-12) and row["exposed_comm_s"] == 0
    losers = bert[bert["why"].str.contains("%")]
    assert losers["why"].str.match(r"\+\d+\.\d%: (compute|bubble or waiting|exposed "
                                   r"communication) \+").all()


def test_candidates_divide_the_batch_and_keep_tensor_parallelism_in_a_host() -> None:
    cluster = get_cluster("dgx-h100-x2-ib")  # two hosts of eight
    found = candidates(cluster, 12, [16])
    assert found and all(12 % s.dp == 0 and s.tp <= 8 and s.gpus == 16 for s in found)
    assert Strategy(2, 8, 1, 1, "1f1b", 25.0, "hierarchical") in found
    assert all(12 // s.dp % s.microbatches == 0 for s in found)


def test_the_command_prints_the_table_and_refuses_bad_counts(capsys) -> None:
    code = main(["autoparallel", "--model", "mlp", "--cluster", "quad-v100-nvlink",
                 "--global-batch", "16", "--gpus", "1,2", "--workers", "1", "--json"])
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert code == 0 and data["rows"][0]["why"] == "fastest"
    assert math.isfinite(data["rows"][0]["step_s"])
    code = main(["autoparallel", "--model", "mlp", "--cluster", "quad-v100-nvlink",
                 "--gpus", "2,9"])
    out, err = capsys.readouterr()
    assert code == 2 and err == ("placelab: error: autoparallel: gpus must be between 1 and "
                                 "cluster 'quad-v100-nvlink''s 4, got 9\n")


@settings(max_examples=200, deadline=None)
@given(stages=st.lists(st.floats(0.0, 10.0), min_size=2, max_size=8),
       microbatches=st.integers(1, 16), streams=st.integers(1, 3))
def test_the_pipeline_bound_is_below_every_split_of_the_work(
        stages: list[float], microbatches: int, streams: int) -> None:
    # whatever the stages' shares of one micro-batch's work, fill + busiest + drain is at
    # least the bound (the bound is the smallest such maximum)
    from experiments.autoparallel import bound

    total = sum(stages)
    a = max(microbatches / streams, 1.0)
    worst = max(sum(stages[:s]) + a * c for s, c in enumerate(stages))
    strategy = Strategy(1, 1, len(stages), microbatches)
    assert bound(strategy, 0.0, total, streams) <= worst * (1 + 1e-9) + 1e-12
