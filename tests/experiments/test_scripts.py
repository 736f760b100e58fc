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
