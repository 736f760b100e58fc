"""The executor: the same outputs on one device as on several, the simulator's Trace schema,
measured memory against hand-derived counts, real parallelism, refusals before running, and
a whole model against PyTorch with the same weights."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from hwmodels import RooflineCost
from policies import Plan, order_by_priority, plan
from runtime import NumpyEngine, execute, make_inputs
from runtime.weights import weight_arrays
from sim import TRACE_COLUMNS, simulate
from workloads import GraphBuilder, GraphError, Op, PlacementError, Tensor, build_model
from workloads.errors import PlacelabError
from workloads.zoo.sequence import bert_base


def _models():
    return [("mlp", build_model("mlp", batch=4)), ("lenet5", build_model("lenet5", batch=2)),
            ("resnet50", build_model("resnet50")), ("lstm", build_model("lstm", seq_len=5)),
            ("bert_base", bert_base(batch=1, seq_len=16, layers=2)),
            ("inception_v3", build_model("inception_v3"))]


@pytest.mark.parametrize(("name", "graph"), _models(), ids=[m for m, _ in _models()])
def test_a_plan_over_two_devices_computes_what_one_device_does(name, graph) -> None:
    one, two = NumpyEngine(devices=1), NumpyEngine(devices=2)
    single = execute(plan(graph, one.cluster(), "single_device"), one, warmup=0, repeats=1)
    spread = plan(graph, two.cluster(), "round_robin")
    assert spread.transfers  # the split really crosses devices
    split = execute(spread, two, warmup=0, repeats=1)
    assert set(single.outputs) == set(split.outputs) == set(graph.outputs)
    for key, value in single.outputs.items():
        np.testing.assert_allclose(split.outputs[key], value, rtol=1e-5, atol=1e-6,
                                   err_msg=key)
        assert np.isfinite(value).all()


def test_the_trace_is_the_simulators_schema_and_joins_on_name() -> None:
    engine = NumpyEngine(devices=2)
    graph = build_model("lenet5", batch=2)
    p = plan(graph, engine.cluster(), "round_robin")
    run = execute(p, engine, warmup=0, repeats=2)
    cost = RooflineCost(engine.cluster())
    sim = simulate(p, engine.cluster(), cost).trace
    assert tuple(run.trace.columns) == TRACE_COLUMNS
    assert sorted(run.trace["name"]) == sorted(sim["name"])
    joined = run.trace.merge(sim, on="name", suffixes=("_run", "_sim"))
    assert len(joined) == len(graph) + len(p.transfers)
    assert (joined["kind_run"] == joined["kind_sim"]).all()
    assert (run.trace["end_s"] >= run.trace["start_s"]).all()
    assert len(run.makespans_s) == 2 and run.makespan_s > 0


def test_measured_memory_of_a_chain_matches_a_hand_count() -> None:
    # input x (4 x 256 fp32 = 4 KiB) -> fc1 (256 x 512 + 512 weights) -> relu -> fc2
    # (512 x 8 + 8). Peak: weights, then x + fc1's output while fc1 runs... hand count:
    b = GraphBuilder("chain")
    x = b.input((4, 256))
    h = b.linear(x, 512, name="fc1")
    r = b.relu(h, name="act")
    b.linear(r, 8, name="fc2")
    graph = b.build()
    engine = NumpyEngine(devices=1)
    run = execute(plan(graph, engine.cluster(), "single_device"), engine, warmup=0, repeats=1)
    weights = 4 * (256 * 512 + 512 + 512 * 8 + 8)
    x_b, h_b, out_b = 4 * 4 * 256, 4 * 4 * 512, 4 * 4 * 8
    # fc1 runs with x and h live; act with h and its own output (x freed after fc1)
    assert run.peak_memory_bytes["cpu0"] == weights + max(x_b + h_b, 2 * h_b, h_b + out_b)
    assert run.memory_log[-1][2] == weights + out_b  # the graph output stays


def test_two_logical_devices_run_at_the_same_time() -> None:
    b = GraphBuilder("two")
    x = b.input((512, 512))
    b.linear(x, 4096, name="left")
    b.linear(x, 4096, name="right")
    graph = b.build()
    engine = NumpyEngine(devices=2)
    placement = {"input": "cpu0", "left": "cpu0", "right": "cpu1"}
    p = Plan(graph, placement, order_by_priority(graph, placement))
    trace = execute(p, engine, warmup=1, repeats=1).trace.set_index("name")
    assert trace.loc["right", "start_s"] < trace.loc["left", "end_s"]
    assert trace.loc["left", "start_s"] < trace.loc["right", "end_s"]


def test_plans_for_another_cluster_and_unrunnable_ops_are_refused_before_running() -> None:
    graph = build_model("mlp")
    two = NumpyEngine(devices=2)
    p = plan(graph, NumpyEngine(devices=3).cluster(), "round_robin")
    with pytest.raises(PlacementError, match=r"plan: made for cluster 'numpy-3'"):
        execute(p, two)
    x = Op("x", "input", "source", outputs=(Tensor("x", (4,)),))
    odd = Op("odd", "opaque", "elementwise", inputs=("x",), outputs=(Tensor("o", (4,)),))
    from workloads import Graph

    g = Graph("odd", [x, odd])
    with pytest.raises(GraphError, match=r"op 'odd': kind 'opaque' has no kernel"):
        execute(plan(g, two.cluster(), "single_device"), two)
    from policies.data_parallel import data_parallel

    dp = data_parallel(build_model("mlp", batch=8), two.cluster(),
                       RooflineCost(two.cluster()), replicas=2)
    with pytest.raises(PlacelabError, match=r"got collective 'ar0' \(all_reduce\); "
                                            r"collectives are simulated, not run"):
        execute(dp, two)


def test_mlp_equals_torch_with_the_same_weights() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    graph = build_model("mlp", batch=8)
    engine = NumpyEngine(devices=2)
    run = execute(plan(graph, engine.cluster(), "round_robin"), engine, warmup=0, repeats=1,
                  seed=3)
    x = torch.tensor(make_inputs(graph, seed=3)["input"])
    for name in ("fc1", "fc2", "fc3"):
        w = weight_arrays(graph.op(name), 3, np.float32)
        x = x @ torch.tensor(w["weight"]) + torch.tensor(w["bias"])
        if name != "fc3":
            x = torch.relu(x)
    np.testing.assert_allclose(run.outputs["softmax"], torch.softmax(x, -1).numpy(),
                               rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["alexnet", "vgg16", "stacked_autoencoder", "gpt2_small"])
def test_every_other_zoo_model_runs_forward(name: str) -> None:
    kwargs: dict[str, Any] = {"seq_len": 16} if name == "gpt2_small" else {}
    graph = build_model(name, **kwargs)
    engine = NumpyEngine(devices=2)
    run = execute(plan(graph, engine.cluster(), "heft"), engine, warmup=0, repeats=1)
    for value in run.outputs.values():
        assert np.isfinite(value).all()
    if "softmax" in run.outputs:
        np.testing.assert_allclose(run.outputs["softmax"].sum(axis=-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("name", ["mlp", "resnet50", "bert_base", "inception_v3"])
def test_a_fused_graph_computes_what_the_unfused_one_does(name: str) -> None:
    from workloads.passes import PassManager

    kwargs: dict[str, Any] = {"seq_len": 16} if name == "bert_base" else {}
    graph = build_model(name, **kwargs)
    fused, changed = PassManager(["fuse_elementwise"]).run(graph)
    assert changed and len(fused) < len(graph)
    engine = NumpyEngine(devices=2)
    plain = execute(plan(graph, engine.cluster(), "heft"), engine, warmup=0, repeats=1)
    folded = execute(plan(fused, engine.cluster(), "heft"), engine, warmup=0, repeats=1)
    for key in fused.outputs:
        np.testing.assert_allclose(folded.outputs[key], plain.outputs[key], rtol=1e-5,
                                   atol=1e-6, err_msg=key)


def test_busy_times_tile_each_device_from_its_first_start_to_its_last_end() -> None:
    from policies import plan as make_plan
    from runtime import NumpyEngine, execute
    from workloads import build_model

    engine = NumpyEngine(devices=1)
    result = execute(make_plan(build_model("lenet5", batch=2), engine.cluster(),
                               "single_device"), engine, warmup=0, repeats=1)
    ops = result.trace[result.trace["kind"] == "compute"]
    span = ops["end_s"].max() - ops["start_s"].min()
    assert sum(result.op_busy_s.values()) == pytest.approx(span, rel=1e-9)
    assert all(result.op_busy_s[n] >= result.op_seconds[n] for n in result.op_seconds)


def test_numpy_asks_for_no_huge_pages_only_while_a_plan_runs() -> None:
    switch = np._core.multiarray._set_madvise_hugepage  # type: ignore[attr-defined]
    before = switch(True)
    try:
        with NumpyEngine().session():
            inside = switch(False)  # returns the setting the engine made
        with NumpyEngine(hugepages=True).session():
            kept = switch(True)
        after = switch(True)
    finally:
        switch(before)
    assert (inside, kept, after) == (False, True, True)
