"""The GPU times measured on a real GPU (``benchmarks/data/gpu_measured``) stay comparable:
each names a catalog GPU, its graphs are the zoo's as built today, op for op, and every
time is a finite positive number."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.gpu_measured import DATA, GRAPHS, catalog_name
from hwmodels.registry import get_device

FILES = sorted(DATA.glob("*.json"))


def test_there_is_a_measurement() -> None:
    assert FILES, f"no measurement under {DATA}"


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_a_measurement_matches_the_graphs_the_zoo_builds(path) -> None:  # type: ignore[no-untyped-def]
    document = json.loads(path.read_text())
    assert get_device(catalog_name(document["gpu"])).gpu is not None
    for name, measured in document["graphs"].items():
        graph = GRAPHS[name]()
        timed = set(measured["op_seconds"])
        assert timed <= set(graph.names), f"{name}: ops the zoo no longer builds"
        computing = {op.name for op in graph if op.op_class != "source"}
        assert computing <= timed, f"{name}: ops never timed"
        times = [*measured["op_seconds"].values(), *measured["makespans_s"]]
        assert all(math.isfinite(t) and t > 0 for t in times)


def test_a_gpu_the_catalog_does_not_know_is_refused_by_name() -> None:
    with pytest.raises(SystemExit, match="no catalog GPU for 'NVIDIA B300'"):
        catalog_name("NVIDIA B300")


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_no_gpu_measured_here_is_one_the_gpu_model_was_fitted_on(  # type: ignore[no-untyped-def]
        path) -> None:
    from hwmodels.gpufit import provenance_of
    from hwmodels.published import TRAINING_GPUS

    gpu = catalog_name(json.loads(path.read_text())["gpu"])
    assert gpu not in TRAINING_GPUS
    assert gpu not in provenance_of()["training_gpus"]  # what the shipped fit learnt from
