"""The runnable studies in experiments/scripts/ run (in their quick form) and say true things."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pandas as pd

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
