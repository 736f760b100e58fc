"""Training graphs: a forward graph extended with its loss, backward ops and weight updates.

Weights are values of the graph: each op that owns parameters reads them from a
``parameter`` op (a source whose output, ``<op>.weights``, holds the trainable parameters
flat, in the order of the op's weight slots); the op keeps only its buffers (batch norm's
running statistics) as resident state. An op that shares another's weights reads the
owner's tensor, so placing them apart costs a transfer.

For every forward op on a path to the loss there is one ``backward`` op. It reads the
gradients of the op's outputs (summing contributions of several readers), the op's inputs
(activations saved in the forward pass, so they stay alive until it runs) and its weights
tensor; it writes a gradient for each input that needs one and, for an op with weights, a
flat weight gradient. FLOPs: matmul and convolution pay the forward FLOPs once per gradient they
compute, each activation operand's and the weights' (so a step costs about three forwards,
and a product of two activations such as attention's Q.K^T pays twice; fused attention,
both of its products in one op, twice its forward); other classes pay the forward FLOPs
once. Each weight gets an update op that reads its gradient(s) and the
weights it updates in place, and holds the optimizer's state as resident bytes. Weights
shared across ops (``attrs["shares"]``) collect every user's gradient in the owner's
update.

Co-placement (``attrs["colocate"]``, a group name; ops of one group must share a device):
with ``colocate="ops"`` (the default, what PyTorch's autograd and TensorFlow's
``colocate_gradients_with_ops`` do) a forward op, its backward op, and for an owner of
weights its parameter and update ops form one group; ``"weights"`` groups only an owner
with its parameter and update ops; ``"none"`` leaves every op free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from workloads.dtypes import DTYPE_BYTES
from workloads.errors import GraphError
from workloads.op import Op, Tensor, window_work

if TYPE_CHECKING:
    from workloads.graph import Graph

__all__ = ["COLOCATE", "OPTIMIZERS", "Optimizer", "training_graph"]

#: How ``training_graph`` groups ops that must share a device.
COLOCATE = ("ops", "weights", "none")


@dataclass(frozen=True)
class Optimizer:
    """State slots per parameter, FLOPs per parameter of one update, and the
    hyperparameters an update op carries (``torch.optim``'s defaults where it has them)."""

    kind: str
    state_per_param: int
    flops_per_param: int
    defaults: Mapping[str, float] = field(default_factory=dict)


#: SGD: ``w -= lr * g``; momentum: a velocity buffer; Adam: first and second moments.
OPTIMIZERS: dict[str, Optimizer] = {
    "sgd": Optimizer("sgd_update", 0, 2, {"lr": 0.01}),
    "momentum": Optimizer("momentum_update", 1, 4, {"lr": 0.01, "momentum": 0.9}),
    "adam": Optimizer("adam_update", 2, 12, {"lr": 0.001, "beta1": 0.9, "beta2": 0.999,
                                             "eps": 1e-8}),
}


def _loss_target(forward: Graph) -> Op:
    sinks = [forward.op(n) for n in forward.topological_order()
             if all(not forward.consumers(t.name) for t in forward.op(n).outputs)]
    sinks = [op for op in sinks if op.outputs and op.op_class != "source"]
    if not sinks:
        raise GraphError(f"graph {forward.name!r}: no output to put a loss on")
    return sinks[-1]


def _needs_grad(forward: Graph, target: Op) -> set[str]:
    """Ops whose outputs reach the loss, graph inputs excluded."""
    g = forward.to_networkx_view()
    import networkx as nx

    on_path = nx.ancestors(g, target.name) | {target.name}
    return {n for n in on_path if forward.op(n).op_class != "source"}


def _weights(forward: Graph, op: Op) -> tuple[str, int] | None:
    """(owner op, parameter count) of the weights ``op`` uses, if any."""
    if op.params:
        return op.name, op.params
    owner = op.attrs.get("shares")
    if owner:
        return owner, forward.op(owner).params
    return None


def _weights_tensor(owner: str) -> str:
    return f"{owner}.weights"


def _backward(forward: Graph, op: Op, grads_in: list[str], at: list[int], needs: set[str],
              tensors: dict[str, Tensor]) -> tuple[Op, list[str], tuple[str, int] | None]:
    """The backward op of ``op`` (``at[k]``: the output whose gradient ``grads_in[k]`` is),
    the input-gradient tensors it writes, and its weights."""
    itemsize = DTYPE_BYTES[op.dtype]
    outs: list[Tensor] = []
    grad_of: list[str] = []
    for name in dict.fromkeys(op.inputs):
        if forward.producer(name) in needs:
            t = forward.tensor(name)
            outs.append(Tensor(f"{name}.grad@{op.name}", t.shape, t.dtype))
            grad_of.append(name)
    weights = _weights(forward, op)
    if weights:
        outs.append(Tensor(f"{op.name}.wgrad", (weights[1],), op.dtype))
    dense = op.op_class in ("matmul", "conv")
    # A dense op pays its forward FLOPs once per gradient it computes: each activation
    # operand's (both of Q.K^T's) and the weights'. Fused attention is two products in one
    # op, Q.K^T and P.V, whose four gradient products come to twice its forward, however
    # many of q, k and v it has (one tensor in self-attention, three after projections).
    if op.kind == "attention":
        flops = 2 * op.flops
    elif dense:
        flops = op.flops * (len(grad_of) + (1 if weights else 0))
    else:
        flops = op.flops
    weight_bytes = weights[1] * itemsize if weights else 0
    saved = sum(forward.tensor(n).nbytes for n in dict.fromkeys(op.inputs))
    reads = sum(tensors[n].nbytes for n in grads_in) + saved + weight_bytes
    view = op.bytes_read == 0 and op.bytes_written == 0
    inputs = tuple(grads_in) + tuple(dict.fromkeys(op.inputs))
    back = Op(
        name=f"{op.name}.backward", kind="backward", op_class=op.op_class,
        inputs=inputs + ((_weights_tensor(weights[0]),) if weights else ()),
        outputs=tuple(outs),
        attrs={"of": op.name, "of_kind": op.kind, "grads": len(grads_in),
               **({"kernel": op.attrs["kernel"]} if "kernel" in op.attrs else {}),
               **_window_attrs(op),
               **({"grad_outputs": tuple(at)} if len(op.outputs) > 1 else {})}, flops=flops,
        bytes_read=0 if view else reads,
        bytes_written=0 if view else sum(t.nbytes for t in outs),
    )
    return back, grad_of, weights


def _window_attrs(op: Op) -> dict[str, int]:
    """The forward op's window work, which its backward op repeats (see
    :func:`workloads.op.window_work`)."""
    elements, items = window_work(op)
    return {"window_elements": elements, "window_items": items} if elements else {}


def training_graph(forward: Graph, optimizer: str = "sgd", colocate: str = "ops",
                   hyperparameters: Mapping[str, float] | None = None) -> Graph:
    """One training step of ``forward``: parameters, loss, backward ops, weight updates.

    ``hyperparameters`` override the optimizer's defaults (``lr``, ``momentum``, ``beta1``,
    ``beta2``, ``eps``); the update ops carry them.

    >>> from workloads import build_model
    >>> fwd = build_model("mlp", batch=32)
    >>> step = training_graph(fwd, "adam")
    >>> step.params == fwd.params, 2.5 < step.flops / fwd.flops < 3.1
    (True, True)
    >>> step.groups["fc1"]
    ('fc1.weights', 'fc1', 'fc1.backward', 'fc1.update')
    """
    if optimizer not in OPTIMIZERS:
        raise GraphError(f"training graph: optimizer must be one of "
                         f"{', '.join(OPTIMIZERS)}, got {optimizer!r}")
    if colocate not in COLOCATE:
        raise GraphError(f"training graph: colocate must be one of {', '.join(COLOCATE)}, "
                         f"got {colocate!r}")
    opt = OPTIMIZERS[optimizer]
    hyper = _hyperparameters(opt, optimizer, hyperparameters or {})
    target = _loss_target(forward)
    needs = _needs_grad(forward, target)
    out = target.outputs[0]
    labels = Op("labels", "input", "source", outputs=(Tensor("labels", out.shape[:-1] or (1,),
                                                             "int64"),))
    seed = Tensor(f"{out.name}.grad@loss", out.shape, out.dtype)
    loss = Op("loss", "cross_entropy", "reduction", inputs=(out.name, "labels"),
              outputs=(seed,), attrs={"classes": out.shape[-1]}, flops=4 * out.numel,
              bytes_read=out.nbytes + labels.outputs[0].nbytes, bytes_written=seed.nbytes)
    ops: list[Op] = [*_parameters(forward), *_lift(forward), labels, loss]
    tensors: dict[str, Tensor] = {seed.name: seed}
    grads: dict[str, list[str]] = {out.name: [seed.name]}
    wgrads: dict[str, list[str]] = {}
    for name in reversed(forward.topological_order()):
        if name not in needs:
            continue
        op = forward.op(name)
        pairs = [(g, i) for i, t in enumerate(op.outputs) for g in grads.get(t.name, [])]
        if not pairs:
            continue
        back, grad_of, weights = _backward(forward, op, [g for g, _ in pairs],
                                           [i for _, i in pairs], needs, tensors)
        ops.append(back)
        for t in back.outputs:
            tensors[t.name] = t
        for tensor, grad in zip(grad_of, back.outputs, strict=False):
            grads.setdefault(tensor, []).append(grad.name)
        if weights:
            wgrads.setdefault(weights[0], []).append(back.outputs[-1].name)
    for owner, parts in wgrads.items():
        ops.append(_update(forward.op(owner), parts, tensors, opt, hyper))
    from workloads.graph import Graph  # here: the optimizer table is read without networkx

    return Graph(f"{forward.name}.train.{optimizer}", _grouped(ops, forward, colocate),
                 meta={**forward.meta, "step": f"train.{optimizer}", "colocate": colocate})


def _parameters(forward: Graph) -> list[Op]:
    """One ``parameter`` op per owner of weights: its output is the weights, flat."""
    return [Op(_weights_tensor(op.name), "parameter", "source",
               outputs=(Tensor(_weights_tensor(op.name), (op.params,), op.dtype),),
               attrs={"weights_of": op.name})
            for op in forward if op.params and not op.attrs.get("shares")]


def _lift(forward: Graph) -> list[Op]:
    """Forward ops reading their weights as an input; an owner keeps only its buffers."""
    out = []
    for op in forward:
        owner = op.name if op.params and not op.attrs.get("shares") else op.attrs.get("shares")
        if not owner:
            out.append(op)
            continue
        weight_bytes = op.params * DTYPE_BYTES[op.dtype] if owner == op.name else 0
        out.append(replace(op, inputs=(*op.inputs, _weights_tensor(owner)),
                           param_bytes=op.param_bytes - weight_bytes))
    return out


def _grouped(ops: list[Op], forward: Graph, colocate: str) -> list[Op]:
    """``ops`` with ``attrs["colocate"]`` set as the ``colocate`` mode says."""
    if colocate == "none":
        return ops
    group: dict[str, str] = {}
    for op in ops:
        if op.kind == "parameter" or op.kind.endswith("_update"):
            group[op.name] = op.attrs["weights_of"]
        elif op.kind == "backward" and colocate == "ops":
            group[op.name] = op.attrs["of"]
    members = set(group.values())
    for op in forward:
        if op.name in members or (colocate == "ops" and f"{op.name}.backward" in group):
            group[op.name] = op.name
    return [replace(op, attrs={**op.attrs, "colocate": group[op.name]})
            if op.name in group else op for op in ops]


def _hyperparameters(opt: Optimizer, name: str, given: Mapping[str, float]
                     ) -> dict[str, float]:
    for key, value in given.items():
        if key not in opt.defaults:
            raise GraphError(f"training graph: optimizer {name!r} takes hyperparameters "
                             f"{', '.join(opt.defaults)}, got {key!r}")
        if not isinstance(value, int | float) or isinstance(value, bool) \
                or not math.isfinite(value) or value < 0:
            raise GraphError(f"training graph: hyperparameter {key!r} must be a finite "
                             f"number >= 0, got {value!r}")
    return {**opt.defaults, **{k: float(v) for k, v in given.items()}}


def _update(owner: Op, parts: list[str], tensors: dict[str, Tensor], opt: Optimizer,
            hyper: Mapping[str, float]) -> Op:
    itemsize = DTYPE_BYTES[owner.dtype]
    weights = owner.params * itemsize
    state = opt.state_per_param * weights
    return Op(
        name=f"{owner.name}.update", kind=opt.kind, op_class="elementwise",
        inputs=(*parts, _weights_tensor(owner.name)), outputs=(),
        attrs={"weights_of": owner.name, **hyper},
        flops=opt.flops_per_param * owner.params + owner.params * (len(parts) - 1),
        bytes_read=sum(tensors[p].nbytes for p in parts) + weights + state,
        bytes_written=weights + state, param_bytes=state,
    )
