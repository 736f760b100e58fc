from __future__ import annotations

import pytest

from experiments import RESULT_COLUMNS, compare, read_results, write_results
from hwmodels import Cluster, Device, Link, register_cluster
from workloads import Graph, GraphBuilder, register_model
from workloads.zoo import MODELS


def _twin_branches(batch: int = 1, dtype: str = "fp32") -> Graph:
    """Two equal, independent matmuls on one small input: twice the work of one."""
    b = GraphBuilder("twins", dtype)
    x = b.input((batch, 64))
    b.linear(x, 4096, name="left")
    b.linear(x, 4096, name="right")
    return b.build()


def test_compare_rows_and_speedup() -> None:
    # On two equal devices joined by a link with no latency and huge bandwidth, round robin
    # puts one branch on each device: half the single-device time, so a speedup of 2.
    spec = Device("twin-gpu", "gpu", {"fp32": 1e13}, 2**34, 1e12)
    register_cluster(Cluster("twin-box", (spec.instance("g0"), spec.instance("g1")),
                             (Link("g0", "g1", 1e15, 0.0),)))
    register_model("twin_branches", _twin_branches)
    try:
        df = compare(["twin_branches"], ["twin-box"], ["single_device", "round_robin"])
    finally:
        MODELS.unregister("twin_branches")
    assert tuple(df.columns) == RESULT_COLUMNS
    speedup = df.set_index("policy")["speedup_vs_single_device"]
    assert speedup["single_device"] == 1.0
    assert speedup["round_robin"] == pytest.approx(2.0, rel=1e-6)


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_results_round_trip(tmp_path, suffix: str) -> None:
    df = compare(["mlp"], "workstation", ["heft"])
    path = write_results(df, tmp_path / f"r{suffix}")
    back = read_results(path)
    assert list(back["policy"]) == ["heft"]
    assert back["makespan_s"].iloc[0] == pytest.approx(df["makespan_s"].iloc[0])
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left behind
