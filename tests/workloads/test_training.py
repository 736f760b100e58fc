from __future__ import annotations

import pytest

from hwmodels import RooflineCost, get_cluster
from policies import Plan
from sim import simulate
from workloads import GraphError, build_model
from workloads.training import OPTIMIZERS, training_graph


def test_a_step_costs_about_three_forwards_for_conv_and_matmul_nets() -> None:
    fwd = build_model("resnet50", batch=8)
    step = training_graph(fwd)
    # dX and dW each cost a forward for every conv/linear except dX of the first conv.
    first = fwd.op("conv1").flops
    dense = sum(op.flops for op in fwd if op.op_class in ("matmul", "conv"))
    other = fwd.flops - dense
    sgd = 2 * fwd.params
    loss = 4 * fwd.op("softmax").output.numel
    assert step.flops == fwd.flops + 2 * dense - first + other + sgd + loss
    assert 2.9 < step.flops / fwd.flops < 3.0


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_every_weight_is_updated_once_with_its_optimizer_state(optimizer: str) -> None:
    fwd = build_model("lstm", batch=2, seq_len=4)
    step = training_graph(fwd, optimizer)
    updates = [op for op in step if op.kind == OPTIMIZERS[optimizer].kind]
    owners = {op.attrs["weights_of"] for op in updates}
    assert owners == {op.name for op in fwd if op.params}
    state = OPTIMIZERS[optimizer].state_per_param
    assert sum(op.param_bytes for op in updates) == state * 4 * fwd.params
    # weights shared over time steps: one update reads every step's gradient
    w_ih = next(op for op in updates if op.attrs["weights_of"] == "l0.t0.w_ih")
    assert w_ih.inputs == (*(f"l0.t{t}.w_ih.wgrad" for t in (3, 2, 1, 0)), "l0.t0.w_ih.weights")
    assert step.params == fwd.params


def test_backward_ops_cover_the_path_to_the_loss_only() -> None:
    fwd = build_model("inception_v3")
    step = training_graph(fwd)
    backward = {op.attrs["of"] for op in step if op.kind == "backward"}
    assert "fc" in backward and "Conv2d_1a_3x3.conv" in backward
    assert not any(name.startswith("AuxLogits") for name in backward)  # second output
    assert "input" not in backward


def test_activations_stay_alive_until_their_backward_op() -> None:
    fwd = build_model("mlp", batch=64)
    step = training_graph(fwd, "momentum")
    cluster = get_cluster("workstation")
    order = step.topological_order()
    plan = Plan(step, dict.fromkeys(order, "gpu0"), {"gpu0": order})
    result = simulate(plan, cluster, RooflineCost(cluster))
    saved = {t for op in step if op.kind == "backward" for t in op.inputs
             if t in {o.name for f in fwd for o in f.outputs}}
    resident = sum(op.param_bytes for op in step)  # the velocities: one per weight
    weights = sum(op.output.nbytes for op in step if op.kind == "parameter")
    assert result.peak_memory_bytes["gpu0"] >= resident + weights + sum(
        step.tensor(t).nbytes for t in saved)
    assert result.resident_bytes["gpu0"] == resident == weights == fwd.param_bytes
    assert step.param_bytes == 2 * fwd.param_bytes


def test_unknown_optimizer_is_named() -> None:
    with pytest.raises(GraphError, match="optimizer must be one of sgd, momentum, adam, "
                                         "got 'lion'"):
        training_graph(build_model("mlp"), "lion")


def test_a_product_of_two_activations_pays_for_both_gradients_as_torch_counts() -> None:
    # Attention's scores = Q @ K^T: the backward computes dQ and dK, two matmuls of the
    # forward's size. PyTorch's FlopCounterMode around backward() is the reference.
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from torch.utils.flop_counter import FlopCounterMode

    from workloads import GraphBuilder

    b = GraphBuilder("qk")
    x = b.input((2, 8, 16))
    q, k = b.linear(x, 16, bias=False, name="q"), b.linear(x, 16, bias=False, name="k")
    kt = b.transpose(k, (0, 2, 1), name="kt")
    b.softmax(b.matmul(q, kt, name="scores"), name="probs")
    step = training_graph(b.build())
    ours = step.op("scores.backward").flops + step.op("q.backward").flops + \
        step.op("k.backward").flops

    xt = torch.randn(2, 8, 16, requires_grad=True)
    wq = torch.randn(16, 16, requires_grad=True)
    wk = torch.randn(16, 16, requires_grad=True)
    scores = (xt @ wq) @ (xt @ wk).transpose(1, 2)
    with FlopCounterMode(display=False) as counter:
        scores.backward(torch.ones_like(scores))
    # x's own gradient through q and k is not asked of the graph (x is a graph input)
    x_grads = 2 * 2 * (2 * 8 * 16 * 16)
    assert ours == counter.get_total_flops() - x_grads


def test_weights_are_read_by_their_forward_backward_and_update_ops() -> None:
    fwd = build_model("lenet5", batch=2)
    step = training_graph(fwd, "adam")
    for owner in (op for op in fwd if op.params):
        param = step.op(f"{owner.name}.weights")
        assert param.kind == "parameter" and param.output.shape == (owner.params,)
        assert step.consumers(param.output.name) == (
            owner.name, f"{owner.name}.backward", f"{owner.name}.update")
        assert step.op(owner.name).param_bytes == owner.param_bytes - param.output.nbytes
    assert step.params == fwd.params
    assert step.param_bytes == 3 * fwd.param_bytes  # weights and Adam's two moments


def test_shared_weights_travel_to_every_user() -> None:
    fwd = build_model("lstm", batch=2, seq_len=3)
    step = training_graph(fwd)
    readers = set(step.consumers("l0.t0.w_ih.weights"))
    assert {f"l0.t{t}.w_ih" for t in range(3)} <= readers
    assert {f"l0.t{t}.w_ih.backward" for t in range(3)} <= readers


@pytest.mark.parametrize(("colocate", "fc1", "relu1"), [
    ("ops", ("fc1.weights", "fc1", "fc1.backward", "fc1.update"), ("relu1", "relu1.backward")),
    ("weights", ("fc1.weights", "fc1", "fc1.update"), None),
    ("none", None, None),
])
def test_colocation_modes_group_as_documented(colocate: str, fc1: tuple[str, ...] | None,
                                              relu1: tuple[str, ...] | None) -> None:
    groups = training_graph(build_model("mlp"), colocate=colocate).groups
    assert groups.get("fc1") == fc1 and groups.get("relu1") == relu1
    assert not any("loss" in ops or "labels" in ops for ops in groups.values())


def test_unknown_colocation_mode_is_named() -> None:
    with pytest.raises(GraphError, match="colocate must be one of ops, weights, none, got "
                                         "'all'"):
        training_graph(build_model("mlp"), colocate="all")


def test_a_malformed_group_name_is_refused() -> None:
    from workloads import Graph
    from workloads.op import Op, Tensor

    g = Graph("g", [Op("x", "input", "source", outputs=(Tensor("x", (2,)),),
                       attrs={"colocate": 3})])
    with pytest.raises(GraphError, match=r"op 'x': attrs\.colocate must be a non-empty string "
                                         "naming a group, got 3"):
        _ = g.groups
