"""Whole training steps run by the executor against PyTorch: the same forward graph, inputs
and starting weights, differentiated by torch's autograd and updated by ``torch.optim``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from policies import plan
from runtime import NumpyEngine, execute
from runtime.executor import make_inputs
from runtime.training import trainable_shapes
from runtime.weights import weight_arrays
from workloads import Graph, GraphBuilder, build_model, training_graph
from workloads.zoo.sequence import gpt2_small

torch = pytest.importorskip("torch", reason="torch is not installed")
F = torch.nn.functional


def _cnn_with_batchnorm(batch: int) -> Graph:
    b = GraphBuilder("cnn_bn", "fp64")
    x = b.input((batch, 3, 12, 12))
    x = b.max_pool2d(b.relu(b.batchnorm(b.conv2d(x, 6, 3, padding=1, name="c1"),
                                        name="bn1")), 2)
    y = b.relu(b.batchnorm(b.conv2d(x, 6, 3, padding=1, name="c2"), name="bn2"))
    x = b.global_avg_pool(b.relu(b.add(x, y)))
    b.softmax(b.linear(b.flatten(x), 5, name="fc"))
    return b.build()


MODELS = {
    "mlp": lambda: build_model("mlp", batch=4, dtype="fp64"),
    "lenet5": lambda: build_model("lenet5", batch=3, dtype="fp64"),
    "cnn_bn": lambda: _cnn_with_batchnorm(3),
    # attention, a split, layer norms, GELU and an output head tied to the embedding
    "gpt2_tiny": lambda: gpt2_small(batch=2, dtype="fp64", seq_len=8, layers=2, dim=16,
                                    heads=2, vocab=50),
}


def _torch_forward(graph: Graph, inputs: Mapping[str, np.ndarray],
                   weights: Mapping[str, Mapping[str, Any]]) -> Any:
    """Interpret ``graph`` with torch's functional ops; returns the graph's last output."""
    values: dict[str, Any] = {}
    for name in graph.topological_order():
        op = graph.op(name)
        w = weights.get(op.attrs.get("shares", name), {})
        x = [values[t] for t in op.inputs]
        outs = _torch_op(op, x, w, inputs)
        values |= dict(zip((t.name for t in op.outputs), outs, strict=True))
    return values[graph.outputs[-1]]


def _torch_op(op, x, w, inputs) -> tuple:
    a, k = op.attrs, op.kind
    if k == "input":
        return (torch.tensor(inputs[op.output.name]),)
    if k == "split":
        pieces = torch.split(x[0], [*a["sizes"], x[0].shape[a["axis"]] - sum(a["sizes"])],
                             dim=a["axis"])[:len(a["sizes"])]
        return tuple(p.squeeze(a["axis"]) if a.get("squeeze") else p for p in pieces)
    if k == "linear":
        weight = w["weight"] if "weight" in w else w["table"].T
        out = x[0] @ weight + (w["bias"] if a.get("bias") else 0)
    elif k == "conv2d":
        out = F.conv2d(x[0], w["weight"], w.get("bias"), stride=a["stride"],
                       padding=a["padding"], groups=a["groups"])
    elif k == "batchnorm":
        out = F.batch_norm(x[0], w["mean"], w["var"], w["scale"], w["shift"],
                           training=False, eps=a["eps"])
    elif k == "layernorm":
        out = F.layer_norm(x[0], x[0].shape[-1:], w["scale"], w["shift"], a["eps"])
    elif k == "embedding":
        out = F.embedding(x[0], w["table"])
    elif k in ("max_pool2d", "avg_pool2d"):
        pool = F.max_pool2d if k == "max_pool2d" else F.avg_pool2d
        out = pool(x[0], a["kernel"], a["stride"], a["padding"])
    elif k == "global_avg_pool":
        out = x[0].mean(dim=(2, 3), keepdim=True)
    elif k in ("flatten", "reshape"):
        out = x[0].reshape(op.output.shape)
    elif k == "transpose":
        out = x[0].permute(*a["perm"])
    elif k == "matmul":
        out = x[0] @ x[1]
    elif k == "mul":
        out = x[0] * a["scalar"] if "scalar" in a else x[0] * x[1]
    elif k == "softmax":
        out = F.softmax(x[0], dim=-1)
    elif k == "add":
        out = x[0] + x[1]
    elif k == "gelu":
        out = F.gelu(x[0], approximate=a.get("approximate", "none"))
    else:
        out = {"relu": torch.relu, "tanh": torch.tanh}[k](x[0])
    return (out,)


def _torch_steps(forward: Graph, inputs: Mapping[str, np.ndarray], labels: np.ndarray,
                 make_optimizer, steps: int) -> dict[str, np.ndarray]:
    """Trainable weights after ``steps`` steps, flat per owner in placelab's slot order."""
    weights, trained = {}, []
    for op in forward:
        if op.params:
            arrays = weight_arrays(op, 0, np.float64)
            weights[op.name] = {k: torch.tensor(v, requires_grad=k in trainable_shapes(op))
                                for k, v in arrays.items()}
            trained += [weights[op.name][k] for k in trainable_shapes(op)]
    opt = make_optimizer(trained)
    for _ in range(steps):
        opt.zero_grad()
        probs = _torch_forward(forward, inputs, weights)
        F.nll_loss(torch.log(probs.reshape(-1, probs.shape[-1])),
                   torch.tensor(labels).reshape(-1)).backward()
        opt.step()
    return {name: torch.cat([slots[k].detach().reshape(-1)
                             for k in trainable_shapes(forward.op(name))]).numpy()
            for name, slots in weights.items()}


def _run(step: Graph, policy: str, devices: int, steps: int) -> dict[str, np.ndarray]:
    engine = NumpyEngine(devices=devices)
    return execute(plan(step, engine.cluster(), policy), engine, warmup=0,
                   repeats=steps).parameters


@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_step_equals_torch_autograd(model: str) -> None:
    # SGD with lr = 1: the weights move by exactly minus their gradient.
    forward = MODELS[model]()
    step = training_graph(forward, "sgd", hyperparameters={"lr": 1.0})
    inputs = make_inputs(step)
    ours = _run(step, "heft", 2, 1)
    theirs = _torch_steps(forward, inputs, inputs["labels"],
                          lambda p: torch.optim.SGD(p, lr=1.0), 1)
    assert ours.keys() == theirs.keys()
    start = {name: np.concatenate([np.ravel(v) for k, v in weight_arrays(
        forward.op(name), 0, np.float64).items() if k in trainable_shapes(forward.op(name))])
        for name in ours}
    for name in ours:
        np.testing.assert_allclose(ours[name] - start[name], theirs[name] - start[name],
                                   rtol=1e-9, atol=1e-12, err_msg=f"{model}: {name}")


@pytest.mark.parametrize(("optimizer", "make"), [
    ("momentum", lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)),
    ("adam", lambda p: torch.optim.Adam(p, lr=0.001)),
])
def test_three_steps_equal_torch_optim(optimizer: str, make) -> None:
    # Repeats are successive steps: state (velocity, moments, Adam's step) carries over.
    forward = MODELS["cnn_bn"]()
    step = training_graph(forward, optimizer)
    inputs = make_inputs(step)
    ours = _run(step, "m_etf", 2, 3)
    theirs = _torch_steps(forward, inputs, inputs["labels"], make, 3)
    for name in ours:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-9, atol=1e-12,
                                   err_msg=f"{optimizer}: {name}")


def test_weights_travelling_between_devices_change_nothing() -> None:
    # Without co-placement a random plan sends weights, gradients and saved activations
    # across devices; the step must equal the one-device step exactly.
    forward = MODELS["lenet5"]()
    step = training_graph(forward, "adam", colocate="none")
    engine = NumpyEngine(devices=3)
    spread = plan(step, engine.cluster(), "random:seed=4")
    assert any(t.tensor.endswith(".weights") for t in spread.transfers)
    ours = execute(spread, engine, warmup=0, repeats=1).parameters
    alone = _run(step, "single_device", 1, 1)
    for name in ours:
        np.testing.assert_array_equal(ours[name], alone[name])


def test_training_memory_holds_weights_state_and_saved_activations() -> None:
    forward = MODELS["mlp"]()
    step = training_graph(forward, "adam")
    engine = NumpyEngine(devices=1)
    result = execute(plan(step, engine.cluster(), "single_device"), engine, warmup=0,
                     repeats=1)
    weights = 8 * forward.params
    saved = sum(step.tensor(t).nbytes for op in step if op.kind == "backward"
                for t in op.inputs if t in {o.name for f in forward for o in f.outputs})
    assert result.peak_memory_bytes["cpu0"] >= 3 * weights + saved  # w, m, v + activations


def test_a_kind_without_a_backward_kernel_is_refused_before_running() -> None:
    from workloads import PlacelabError

    step = training_graph(build_model("lstm", batch=1, seq_len=2, dtype="fp64"))
    engine = NumpyEngine(devices=1)
    with pytest.raises(PlacelabError, match="kind 'lstm_cell' has no backward kernel; "
                                            "kinds with one: add, avg_pool2d, batchnorm"):
        execute(plan(step, engine.cluster(), "single_device"), engine)


def test_every_zoo_model_but_the_lstm_has_a_kernel_for_every_training_op() -> None:
    from runtime.training import bind, check_trainable
    from workloads import list_models

    trainable = set()
    for name in list_models():
        sequences = ("lstm", "bert_base", "gpt2_small", "bert_large", "gpt2_large", "gpt3_xl",
                     "gpt3_xl_neusight", "gpt3_2.7b", "opt_1.3b")
        seq: dict[str, Any] = {"seq_len": 4} if name in sequences else {}
        step = training_graph(build_model(name, **seq))
        try:
            for op in step:
                if op.kind not in ("input", "parameter"):
                    check_trainable(step, op)
                    bind(step, op)
        except Exception as err:
            assert name == "lstm" and "'lstm_cell' has no backward kernel" in str(err)
        else:
            trainable.add(name)
    assert trainable == set(list_models()) - {"lstm"}
