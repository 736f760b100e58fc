from __future__ import annotations

import pytest

from experiments import RESULT_COLUMNS, compare, read_results, write_results


def test_compare_rows_and_speedup() -> None:
    df = compare(["resnet50"], ["workstation"], ["single_device", "round_robin"], batch=2)
    assert tuple(df.columns) == RESULT_COLUMNS
    base = df.set_index("policy").loc["single_device"]
    assert base["speedup_vs_single_device"] == 1.0
    rr = df.set_index("policy").loc["round_robin"]
    assert rr["speedup_vs_single_device"] == pytest.approx(
        base["makespan_s"] / rr["makespan_s"])


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_results_round_trip(tmp_path, suffix: str) -> None:
    df = compare(["mlp"], "workstation", ["heft"])
    path = write_results(df, tmp_path / f"r{suffix}")
    back = read_results(path)
    assert list(back["policy"]) == ["heft"]
    assert back["makespan_s"].iloc[0] == pytest.approx(df["makespan_s"].iloc[0])
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left behind
