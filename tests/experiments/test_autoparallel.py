"""``autoparallel``: its winner against hand-picked strategies, its bound, its breakdown."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd
import pytest

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
    # an EPYC, two L4s and an NPU (hetero-box): the bound takes each op's fastest device
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
    for bad, said in (("2,2", "--gpus: expected each name once, got '2' twice"),
                      ("2,x", "autoparallel: --gpus must be integers >= 1 separated by "
                              "commas, got '2,x'")):
        code = main(["autoparallel", "--model", "mlp", "--cluster", "quad-v100-nvlink",
                     "--gpus", bad])
        assert (code, capsys.readouterr().err) == (2, f"placelab: error: {said}\n")


def test_a_shape_out_of_memory_at_its_middle_settings_is_retried(monkeypatch) -> None:
    import dataclasses

    from hwmodels import registry

    base = get_cluster("quad-v100-nvlink")
    small = dataclasses.replace(base, name="quad-small-memory", devices=tuple(
        dataclasses.replace(d, memory_bytes=int(0.55e9)) for d in base.devices))
    monkeypatch.setitem(registry._CLUSTERS, small.name, small)
    # GPT-2 small's SGD step on two 0.55 GB devices: a two-stage pipeline fits only with
    # eight micro-batches, not at its middle setting (four)
    df = autoparallel("gpt2_small", small.name, global_batch=16, seq_len=64,
                      optimizer="sgd", gpus=[2], workers=1)
    assert df.iloc[0]["strategy"].startswith("pp2 (m8")
    middle = df[df["strategy"] == "pp2 (m4 1f1b)"].iloc[0]
    assert middle["why"].startswith("memory: out of memory")


def test_refine_must_be_a_positive_count() -> None:
    from workloads.errors import PlacelabError

    with pytest.raises(PlacelabError, match=r"autoparallel: refine must be an int >= 1, "
                                            r"got 0"):
        autoparallel("mlp", "quad-v100-nvlink", global_batch=8, refine=0)


def test_a_pool_finds_the_winner_one_process_finds() -> None:
    alone = autoparallel("mlp", "quad-v100-nvlink", global_batch=64, workers=1)
    pooled = autoparallel("mlp", "quad-v100-nvlink", global_batch=64, workers=2)
    assert pooled.iloc[0]["strategy"] == alone.iloc[0]["strategy"]
    assert pooled.iloc[0]["step_s"] == alone.iloc[0]["step_s"]
    assert pooled.attrs["untried"] == alone.attrs["untried"]


def test_nothing_that_runs_is_an_error_not_an_empty_table() -> None:
    from workloads.errors import PlacelabError

    # FP16 on CPUs that have no FP16 rate: every strategy is not applicable
    with pytest.raises(PlacelabError, match=r"autoparallel: no strategy of training 'mlp' "
                                            r"on 'cpu-host' ran \(out of memory or not "
                                            r"applicable\); the first reason: not "
                                            r"applicable: op 'fc1' \(fp16\) runs on no "
                                            r"device of cluster 'cpu-host'"):
        autoparallel("mlp", "cpu-host", global_batch=8, dtype="fp16", workers=1)
