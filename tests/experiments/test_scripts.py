"""The runnable studies in experiments/scripts/ run (in their quick form) and say true things."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pandas as pd
import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "experiments" / "scripts"


def test_whatif_npu_study(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", ["whatif_npu.py", "--quick", "--out", str(tmp_path)])
    runpy.run_path(str(SCRIPTS / "whatif_npu.py"), run_name="__main__")
    df = pd.read_parquet(tmp_path / "whatif_npu.parquet")
    assert (tmp_path / "whatif_npu.png").read_bytes()[:4] == b"\x89PNG"
    fits = df[df["memory_gib"] == 64]
    assert fits["feasible"].all() and not df[df["memory_gib"] == 0.5]["feasible"].any()
    # more bandwidth never makes the step slower; capacity does not change its time
    assert fits.sort_values("bandwidth_tbps")["step_s"].is_monotonic_decreasing
    by_bw = df.groupby("bandwidth_tbps")["step_s"].nunique()
    assert (by_bw == 1).all()
    # split over two NPUs: METIS cuts by bytes, not link speed, so its plan is the same at
    # every bandwidth, and the faster link carries its transfers sooner
    links = pd.read_parquet(tmp_path / "whatif_npu_links.parquet")
    metis = links[links["policy"] == "metis"].sort_values("link_gbps")
    assert metis["feasible"].all() and len(metis) == 2
    assert metis["makespan_s"].is_monotonic_decreasing
    assert metis["transfer_bytes"].nunique() == 1


def test_zoo_table_lists_every_model() -> None:
    namespace = runpy.run_path(str(SCRIPTS / "zoo_table.py"))
    table = namespace["markdown"](namespace["rows"]())
    from workloads import list_models

    assert all(f"`{name}`" in table for name in list_models())
    assert "| `resnet50` | 177 | 25,557,032 |" in table


def test_abstraction_cost_study(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("torch", reason="torch is not installed: the study's PyTorch rows "
                                        "are what this checks beside placelab's")
    monkeypatch.setattr(sys, "argv", ["abstraction_cost.py", "--quick", "--out",
                                      str(tmp_path)])
    namespace = runpy.run_path(str(SCRIPTS / "abstraction_cost.py"), run_name="__main__")
    df = pd.read_parquet(tmp_path / "abstraction_cost.parquet")
    assert (tmp_path / "abstraction_cost.png").read_bytes()[:4] == b"\x89PNG"
    runs = df.set_index(["graph", "runtime"])
    assert runs.loc[("lenet5 forward", "placelab executor"), "step_s"] > 0
    assert runs.loc[("lenet5 forward", "straight-line loop"), "overhead_us_per_op"] == 0
    assert "not traced" in runs.loc[("mlp training step", "TorchScript"), "skipped"]
    # on one device the simulated step is the sum of op times: each microsecond of launch
    # overhead adds one microsecond per op that computes (sources cost nothing)
    from policies import plan
    from runtime import NumpyEngine
    from workloads import build_model

    engine = NumpyEngine(devices=1)
    graph = build_model("lenet5", batch=8)
    curve = namespace["predictions"](plan(graph, engine.cluster(), "single_device"), engine)
    slope = (curve[-1]["predicted_s"] - curve[0]["predicted_s"]) / (
        (curve[-1]["launch_us"] - curve[0]["launch_us"]) * 1e-6)
    assert slope == pytest.approx(sum(op.op_class != "source" for op in graph), rel=1e-9)


def run_script(name: str, tmp_path: Path, monkeypatch) -> pd.DataFrame:
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--quick", "--workers", "1", "--out",
                                      str(tmp_path)])
    runpy.run_path(str(SCRIPTS / f"{name}.py"), run_name="__main__")
    assert (tmp_path / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    return pd.read_parquet(tmp_path / f"{name}.parquet")


def test_policy_shootout_study(tmp_path: Path, monkeypatch) -> None:
    from policies import POLICIES

    df = run_script("policy_shootout", tmp_path, monkeypatch)
    # every policy but the searches, whose cost is a budget of simulations
    assert set(df["policy"]) == {n for n in POLICIES.names() if n != "mcmc"}
    placed = df[df["makespan_s"].notna()]
    # no plan beats the lower bound (critical path and total work on the fastest devices)
    assert (placed["makespan_s"] >= placed["lower_bound_s"] * (1 - 1e-9)).all()
    assert (df[df["makespan_s"].isna()]["reason"] != "").all()  # every gap says why


def test_framework_apps_study(tmp_path: Path, monkeypatch) -> None:
    df = run_script("framework_apps", tmp_path, monkeypatch)
    best = df[df["feasible"]].groupby(["model", "variant"])["makespan_s"].min().unstack()
    assert set(best.index) == {"lenet5", "alexnet", "stacked_autoencoder", "lstm"}
    # the catalog's V100 has several times the Xeon 8380's peak rate and memory bandwidth:
    # it wins wherever work, not launch overhead, dominates (not on LeNet at batch 8)
    big = best.loc[["alexnet", "stacked_autoencoder", "lstm"]]
    assert (big["CPU (Xeon 8380)"] > 2 * big["1 GPU (V100)"]).all()
    # single_device is among the 4-GPU policies: the best 4-GPU plan is never slower
    assert (best["4 GPUs (V100, NVLink)"] <= best["1 GPU (V100)"] * (1 + 1e-9)).all()


def test_cuts_vs_listsched_study(tmp_path: Path, monkeypatch) -> None:
    from hwmodels import get_cluster

    df = run_script("cuts_vs_listsched", tmp_path, monkeypatch)
    # No byte moves faster than the fastest link of the box: the seconds transfers spent
    # moving are at least the bytes over that bandwidth (and both zero together).
    fastest = max(link.bandwidth for link in get_cluster("hetero-box").links)
    assert (df["transfer_s"] >= df["transfer_bytes"] / fastest * (1 - 1e-9)).all()
    assert ((df["transfer_bytes"] == 0) == (df["transfer_s"] == 0)).all()
    assert set(df["policy"]) >= {"metis", "heft"}


def test_cluster_churn_study(tmp_path: Path, monkeypatch) -> None:
    from hwmodels import get_device, loads

    df = run_script("cluster_churn", tmp_path, monkeypatch)
    single = df[df["policy"] == "single_device"].set_index("step")["makespan_s"]
    assert single.loc[0] == single.loc[4]  # retiring V100s leaves one V100's time alone
    assert single.loc[5] < single.loc[4]  # an H100 joins: the fastest single device is it
    text = (tmp_path / "clusters" / "step-6.toml").read_text()
    cluster = loads(text, known_models=get_device).clusters["dgx1-churn-6"]
    assert len(cluster.devices) == 6 and df["cluster_hash"].nunique() == 7


def test_tenant_sharing_study(tmp_path: Path, monkeypatch) -> None:
    df = run_script("tenant_sharing", tmp_path, monkeypatch)
    assert set(df["sharing"]) == {"exclusive", "fifo", "weighted_fair", "priority",
                                  "priority:preempt=false", "partition"}
    assert df["fairness"].between(0.5, 1.0).all()  # Jain's index over two jobs
    fifo = df[df["sharing"] == "fifo"].set_index(["cluster", "aware"])["throughput_per_s"]
    # placing the second job around the first never lowers throughput under fifo here
    for cluster in set(df["cluster"]):
        assert fifo.loc[(cluster, True)] >= fifo.loc[(cluster, False)] * (1 - 1e-9)


def test_parallel_scaling_study(tmp_path: Path, monkeypatch) -> None:
    df = run_script("parallel_scaling", tmp_path, monkeypatch)
    runs = df.set_index(["model", "dtype", "strategy", "gpus"])
    # two replicas' ring all-reduce moves every gradient twice (2 (p - 1) B)
    for dtype, itemsize in (("tf32", 4), ("fp16", 2)):
        moved = runs.loc[("resnet50", dtype, "dp", 2), "collective_gb"] * 1e9
        assert moved == pytest.approx(2 * 25_557_032 * itemsize, rel=1e-5)
    # Megatron on two ranks: four all-reduces of batch x seq x dim per layer, each sending
    # 2 (tp - 1) halves
    moved = runs.loc[("bert_base", "fp16", "tp", 2), "collective_gb"] * 1e9
    assert moved == pytest.approx(12 * 4 * 2 * 16 * 32 * 768 * 2, rel=1e-5)
    assert (df.loc[df["gpus"] == 1, "speedup"] == 1).all() and df["feasible"].all()
    bert = df[df["model"] == "bert_base"]
    assert (bert["efficiency"] <= 1 + 1e-9).all()  # fixed batch: no GPU does more than 1/n
