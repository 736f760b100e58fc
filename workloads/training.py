"""Training graphs: a forward graph extended with its loss, backward ops and weight updates.

For every forward op on a path to the loss there is one ``backward`` op. It reads the
gradients of the op's outputs (summing contributions of several readers), the op's inputs
(activations saved in the forward pass, so they stay alive until it runs) and its weights;
it writes a gradient for each input that needs one and, for an op with weights, a weight
gradient. FLOPs: matmul and convolution pay the forward FLOPs once per gradient they
compute, each activation operand's and the weights' (so a step costs about three forwards,
and a product of two activations such as attention's Q.K^T pays twice); other classes pay
the forward FLOPs once. Each weight gets an update op that reads its gradient(s) and holds the
optimizer's state as resident bytes. Weights shared across ops (``attrs["shares"]``) collect
every user's gradient in the owner's update.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from workloads.dtypes import DTYPE_BYTES
from workloads.errors import GraphError
from workloads.op import Op, Tensor

if TYPE_CHECKING:
    from workloads.graph import Graph

__all__ = ["OPTIMIZERS", "Optimizer", "training_graph"]


@dataclass(frozen=True)
class Optimizer:
    """State slots per parameter and FLOPs per parameter of one update."""

    kind: str
    state_per_param: int
    flops_per_param: int


#: SGD: ``w -= lr * g``; momentum: a velocity buffer; Adam: first and second moments.
OPTIMIZERS: dict[str, Optimizer] = {
    "sgd": Optimizer("sgd_update", 0, 2),
    "momentum": Optimizer("momentum_update", 1, 4),
    "adam": Optimizer("adam_update", 2, 12),
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


def _backward(forward: Graph, op: Op, grads_in: list[str], needs: set[str],
              tensors: dict[str, Tensor]) -> tuple[Op, list[str], tuple[str, int] | None]:
    """The backward op of ``op``, the input-gradient tensors it writes, and its weights."""
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
    # operand's (both of Q.K^T's) and the weights'.
    flops = op.flops * (len(grad_of) + (1 if weights else 0)) if dense else op.flops
    weight_bytes = weights[1] * itemsize if weights else 0
    saved = sum(forward.tensor(n).nbytes for n in dict.fromkeys(op.inputs))
    reads = sum(tensors[n].nbytes for n in grads_in) + saved + weight_bytes
    view = op.bytes_read == 0 and op.bytes_written == 0
    back = Op(
        name=f"{op.name}.backward", kind="backward", op_class=op.op_class,
        inputs=tuple(grads_in) + tuple(dict.fromkeys(op.inputs)), outputs=tuple(outs),
        attrs={"of": op.name, "of_kind": op.kind}, flops=flops,
        bytes_read=0 if view else reads,
        bytes_written=0 if view else sum(t.nbytes for t in outs),
    )
    return back, grad_of, weights


def training_graph(forward: Graph, optimizer: str = "sgd") -> Graph:
    """One training step of ``forward``: loss, backward ops, weight updates.

    >>> from workloads import build_model
    >>> fwd = build_model("mlp", batch=32)
    >>> step = training_graph(fwd, "adam")
    >>> step.params == fwd.params, 2.5 < step.flops / fwd.flops < 3.1
    (True, True)
    """
    if optimizer not in OPTIMIZERS:
        raise GraphError(f"training graph: optimizer must be one of "
                         f"{', '.join(OPTIMIZERS)}, got {optimizer!r}")
    opt = OPTIMIZERS[optimizer]
    target = _loss_target(forward)
    needs = _needs_grad(forward, target)
    out = target.outputs[0]
    labels = Op("labels", "input", "source", outputs=(Tensor("labels", out.shape[:-1] or (1,),
                                                             "int64"),))
    seed = Tensor(f"{out.name}.grad@loss", out.shape, out.dtype)
    loss = Op("loss", "cross_entropy", "reduction", inputs=(out.name, "labels"),
              outputs=(seed,), flops=4 * out.numel,
              bytes_read=out.nbytes + labels.outputs[0].nbytes, bytes_written=seed.nbytes)
    ops: list[Op] = [*forward.ops, labels, loss]
    tensors: dict[str, Tensor] = {seed.name: seed}
    grads: dict[str, list[str]] = {out.name: [seed.name]}
    wgrads: dict[str, list[str]] = {}
    for name in reversed(forward.topological_order()):
        if name not in needs:
            continue
        op = forward.op(name)
        grads_in = [g for t in op.outputs for g in grads.get(t.name, [])]
        if not grads_in:
            continue
        back, grad_of, weights = _backward(forward, op, grads_in, needs, tensors)
        ops.append(back)
        for t in back.outputs:
            tensors[t.name] = t
        for tensor, grad in zip(grad_of, back.outputs, strict=False):
            grads.setdefault(tensor, []).append(grad.name)
        if weights:
            wgrads.setdefault(weights[0], []).append(back.outputs[-1].name)
    for owner, parts in wgrads.items():
        ops.append(_update(forward.op(owner), parts, tensors, opt))
    from workloads.graph import Graph  # here: the optimizer table is read without networkx

    return Graph(f"{forward.name}.train.{optimizer}", ops)


def _update(owner: Op, parts: list[str], tensors: dict[str, Tensor], opt: Optimizer) -> Op:
    itemsize = DTYPE_BYTES[owner.dtype]
    weights = owner.params * itemsize
    state = opt.state_per_param * weights
    return Op(
        name=f"{owner.name}.update", kind=opt.kind, op_class="elementwise",
        inputs=tuple(parts), outputs=(), attrs={"weights_of": owner.name},
        flops=opt.flops_per_param * owner.params + owner.params * (len(parts) - 1),
        bytes_read=sum(tensors[p].nbytes for p in parts) + weights + state,
        bytes_written=weights + state, param_bytes=state,
    )
