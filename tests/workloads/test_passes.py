from __future__ import annotations

import pytest

from hwmodels import RooflineCost, get_cluster
from policies import plan
from sim import simulate
from workloads import Graph, GraphBuilder, GraphError, build_model, training_graph
from workloads.passes import PASSES, Pass, PassManager
from workloads.passes.standard import (
    CommonSubexpressionElimination,
    DeadCodeElimination,
    ElementwiseFusion,
)
from workloads.passes.testing import parametrize_with_checks


def test_registry_refuses_duplicates() -> None:
    class Again(Pass):
        name = "dce"

        def call(self, graph: Graph) -> tuple[Graph, bool]:
            return graph, False

    with pytest.raises(Exception, match="pass 'dce' is already registered"):
        PASSES.register("dce", Again)


def test_dce_drops_what_reaches_no_output_and_keeps_effects() -> None:
    g = build_model("inception_v3")
    main = Graph(g.name, g.ops, ["softmax"])
    pruned, changed = DeadCodeElimination()(main)
    aux = [op.name for op in g if op.name.startswith("AuxLogits")]
    assert changed and len(pruned) == len(g) - len(aux)
    assert pruned.params == g.params - sum(g.op(n).params for n in aux)
    step = training_graph(build_model("mlp"), "sgd")  # updates have no outputs: effects
    assert DeadCodeElimination()(step) == (step, False)


def test_cse_merges_duplicates_and_rewires_readers() -> None:
    b = GraphBuilder("dup")
    x = b.input((4, 8))
    r1, r2 = b.relu(x, name="r1"), b.relu(x, name="r2")
    b.add(r1, r2, name="sum")
    w1, w2 = b.linear(x, 8, name="w1"), b.linear(x, 8, name="w2")  # own weights: kept
    b.add(w1, w2, name="wsum")
    g, changed = CommonSubexpressionElimination()(b.build())
    assert changed and "r2" not in g and {"w1", "w2"} <= {op.name for op in g}
    assert g.op("sum").inputs == ("r1", "r1")
    assert CommonSubexpressionElimination()(g) == (g, False)  # idempotent


def test_fusion_folds_chains_and_removes_the_intermediates() -> None:
    b = GraphBuilder("chain")
    x = b.input((2, 3, 8, 8))
    y = b.relu(b.batchnorm(b.conv2d(x, 4, 3, padding=1, name="conv"), name="bn"),
               name="relu")
    b.softmax(b.flatten(y))
    g = b.build()
    fused, changed = ElementwiseFusion()(g)
    assert changed and [op.name for op in fused] == ["input", "conv", "flatten1", "softmax1"]
    conv = fused.op("conv")
    assert conv.attrs["fused"] == ("bn", "relu") and conv.op_class == "conv"
    assert conv.output.name == "relu"
    assert conv.flops == sum(g.op(n).flops for n in ("conv", "bn", "relu"))
    middle = g.op("conv").output.nbytes
    assert conv.bytes_written == g.op("relu").bytes_written
    assert conv.bytes_read == sum(g.op(n).bytes_read for n in ("conv", "bn", "relu")) \
        - 2 * middle
    assert fused.params == g.params and fused.flops == g.flops


def test_fusion_speeds_up_resnet50_on_a_gpu() -> None:
    # Fewer launches and no round trips of intermediates through memory: same FLOPs, less
    # time. (Numbers for the docs come from this same computation.)
    cluster = get_cluster("dgx-h100")
    cost = RooflineCost(cluster)
    g = build_model("resnet50", batch=32)
    fused, _ = PassManager(["fuse_elementwise"]).run(g)
    before = simulate(plan(g, cluster, "single_device", cost), cluster, cost).makespan_s
    after = simulate(plan(fused, cluster, "single_device", cost), cluster, cost).makespan_s
    assert fused.flops == g.flops and len(fused) < len(g) / 2
    assert after < 0.8 * before


def test_manager_names_the_failing_pass_and_those_before() -> None:
    class Broken(Pass):
        name = "broken"

        def call(self, graph: Graph) -> tuple[Graph, bool]:
            raise GraphError("cannot")

    with pytest.raises(GraphError, match=r"pass 'broken' failed \(passes run before it: "
                                         r"cse, dce\): cannot"):
        PassManager(["cse", "dce", Broken()]).run(build_model("mlp"))


def test_a_pass_may_not_lose_outputs() -> None:
    class Drop(Pass):
        name = "drop"

        def call(self, graph: Graph) -> tuple[Graph, bool]:
            return Graph(graph.name, graph.ops, graph.outputs[:-1]), True

    with pytest.raises(GraphError, match="pass 'drop': lost graph output 'softmax'"):
        Drop()(build_model("mlp"))


def test_unknown_op_kind_is_a_graph_error() -> None:
    from workloads import Op

    with pytest.raises(GraphError, match=r"op 'x': kind must be a known op kind .* got 'fft'"):
        Op("x", "fft", "elementwise")


@parametrize_with_checks(PASSES.names())
def test_pass_conformance(pass_, check) -> None:
    check(pass_)


def test_fusion_is_near_linear_on_long_chains() -> None:
    # 3,001 ops took 210 s when every rewrite rebuilt the graph; one sweep per round now.
    b = GraphBuilder("chain")
    x = b.input((64, 64))
    for _ in range(1500):
        x = b.relu(b.linear(x, 64))
    fused, changed = ElementwiseFusion()(b.build())
    assert changed and len(fused) == 1501
    assert all(op.attrs.get("fused") == (f"relu{i + 1}",)
               for i, op in enumerate(o for o in fused if o.kind == "linear"))


def test_passes_take_arguments_and_the_training_step_is_one() -> None:
    from workloads import build_model
    from workloads.passes import PassManager, make_pass
    from workloads.training import training_graph

    g = build_model("mlp", batch=4)
    stepped, modified = PassManager(["train:optimizer=adam,colocate=weights"]).run(g)
    assert modified and stepped == training_graph(g, "adam", colocate="weights")
    assert dict(stepped.meta) == {"model": "mlp", "batch": 4, "seq_len": None,
                                  "dtype": "fp32", "step": "train.adam",
                                  "colocate": "weights"}
    assert repr(make_pass("train:optimizer=momentum")) == (
        "TrainingStep(optimizer='momentum', colocate='ops')")
    with pytest.raises(GraphError, match="pass 'train': optimizer must be one of adam, "
                                         "momentum, sgd, got 'lion'"):
        make_pass("train:optimizer=lion")
    with pytest.raises(GraphError, match="pass 'cse': expected parameters key=value with "
                                         "keys among none, got 'depth=2'"):
        make_pass("cse:depth=2")
    with pytest.raises(GraphError, match=r"is already a train\.adam step; expected a forward"):
        PassManager(["train"]).run(stepped)


def test_graph_metadata_survives_passes_and_json() -> None:
    from workloads import Graph, build_model
    from workloads.passes import PassManager

    g = build_model("bert_base", batch=2, seq_len=16)
    fused, _ = PassManager(["fuse_elementwise", "cse", "dce"]).run(g)
    assert dict(fused.meta) == dict(g.meta) == {"model": "bert_base", "batch": 2,
                                                "seq_len": 16, "dtype": "fp32",
                                                "step": "forward"}
    assert Graph.from_json(fused.to_json()).meta == fused.meta
    with pytest.raises(GraphError, match=r"graph: meta\.batch.*got \[1\]"):
        Graph.from_json('{"format": "placelab.graph", "version": 1, "meta": {"batch": [1]}, '
                        '"ops": []}')
