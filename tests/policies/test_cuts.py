"""The graph-cut policies' handling of what METIS prints."""

from __future__ import annotations

import ctypes
import os

import pytest

from hwmodels import RooflineCost, get_cluster
from policies import plan
from policies.cuts import _c_output_to_stderr
from workloads import build_model, training_graph


def test_c_output_meanwhile_goes_to_standard_error_and_standard_output_comes_back(
        capfd: pytest.CaptureFixture[str]) -> None:
    libc = ctypes.CDLL(None)
    print("before", flush=True)
    with _c_output_to_stderr():
        libc.printf(b"from C\n")  # buffered by C's stdio, flushed on the way out
        os.write(1, b"to the descriptor\n")
    print("after", flush=True)
    libc.printf(b"C again\n")
    libc.fflush(None)
    out, err = capfd.readouterr()
    assert out == "before\nafter\nC again\n"
    assert err == "from C\nto the descriptor\n"


def test_without_a_c_library_by_name_the_descriptor_is_still_redirected(
        capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(name: object) -> None:  # as Windows' ctypes does with name None
        raise TypeError("LoadLibrary() argument 1 must be str, not None")

    monkeypatch.setattr(ctypes, "CDLL", refuse)
    with _c_output_to_stderr():
        os.write(1, b"to the descriptor\n")
    os.write(1, b"after\n")
    out, err = capfd.readouterr()
    assert (out, err) == ("after\n", "to the descriptor\n")


def test_metis_leaving_a_part_empty_prints_nothing_on_standard_output(
        capfd: pytest.CaptureFixture[str]) -> None:
    # 113 ops on 32 GPUs: METIS says it cannot bisect an empty graph, and still partitions
    step = training_graph(build_model("vgg16", batch=8), "sgd")
    cluster = get_cluster("dgx-h100-x4-ib")
    p = plan(step, cluster, "metis", RooflineCost(cluster))
    out, err = capfd.readouterr()
    assert out == ""
    assert "Cannot bisect a graph with 0 vertices" in err
    assert set(p.placement) == {op.name for op in step}
