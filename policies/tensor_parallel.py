"""Tensor parallelism (Megatron-LM, Shoeybi et al. 2019) as a transform, and its hybrids
with pipeline and data parallelism.

:func:`tensor_parallel` builds one rank's shard of a zoo transformer (``build_model(...,
tp=T)``: the query/key/value or ``c_attn`` and the first feed-forward layer column-split,
``heads / T`` heads, the attention output and second feed-forward layer row-split), makes
its training step and copies it once per rank. Then, per transformer layer, Megatron's
communication: forward, an all-reduce of each row-split layer's partial output (the ``g``
operator) before the residual reads it; backward, an all-reduce of the gradient the
column-split layers send to their input (the ``f`` operator; BERT's separate query, key
and value gradients are summed first, as Megatron's fused QKV layer makes one), so each
layer all-reduces two activations forward and two backward, ``batch * seq * dim``
elements each. Everything else (embeddings, layer norms, residuals, the head) runs whole
on every rank, as Megatron runs layer norms without sequence parallelism; its embeddings
and head, which Megatron splits by vocabulary, are not split here.

:func:`parallelize` composes ``dp x pp x tp``: the shard is pipelined (``pp`` stages,
micro-batches, GPipe or 1F1B), copied ``tp`` times with its collectives, and the whole
replicated ``dp`` times with gradient all-reduces per device. Devices are laid out as
Megatron lays ranks: tensor-parallel ranks on consecutive devices (inside a node), then
stages, then data-parallel replicas.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.data_parallel import replicate
from policies.parallel import (
    SCHEDULES,
    communication_first,
    copied_layout,
    copy_ops,
    device_names,
    insert_after,
    micro_step,
    pipeline,
    rebuilt,
)
from policies.plans import Plan
from workloads.collectives import collective
from workloads.errors import PlacementError
from workloads.graph import Graph
from workloads.op import Op, Tensor

__all__ = ["parallelize", "split_ranks", "tensor_parallel"]


def _rank_params(op: Op, j: int) -> int:
    """Parameters counted once over the ranks: a split layer's on every rank, whole
    layers' and a row-split layer's bias on rank 0."""
    split = op.attrs.get("parallel")
    if j == 0 or split == "column":
        return op.params
    if split == "row" and op.params:
        return op.params - (op.output.shape[-1] if op.attrs.get("bias") else 0)
    return 0


def _forward_collectives(graph: Graph, degree: int) -> list[tuple[Op, list[str]]]:
    """The all-reduce of each row-split layer's output, and the producers it follows."""
    out = []
    for op in graph:
        if op.attrs.get("parallel") == "row" and op.kind == "linear":
            t = op.output
            members = [[Tensor(f"t{j}/{t.name}", t.shape, t.dtype)] for j in range(degree)]
            out.append((collective(f"tp/{op.name}", "all_reduce", members), [op.name]))
    return out


def _input_gradients(graph: Graph) -> dict[str, list[str]]:
    """Per input of the column-split layers, the partial gradients they send it."""
    partial: dict[str, list[str]] = {}
    for op in graph:
        if op.attrs.get("parallel") != "column":
            continue
        back = f"{op.name}.backward"
        if back not in graph:
            continue
        x = op.inputs[0]
        for t in graph.op(back).outputs:
            if t.name.startswith(f"{x}.grad@"):
                partial.setdefault(x, []).append(t.name)
    return partial


def _backward_collectives(graph: Graph, degree: int
                          ) -> tuple[list[tuple[Op, list[str]]], list[tuple[Op, list[str]]],
                                     dict[str, str]]:
    """Sums of partial input gradients (per rank) and their all-reduces, each with the
    inner ops it follows, and the renaming of each rank's partial gradients to the reduced
    sum its reader takes instead."""
    sums: list[tuple[Op, list[str]]] = []
    collectives: list[tuple[Op, list[str]]] = []
    reads: dict[str, str] = {}
    for x, grads in _input_gradients(graph).items():
        t = graph.tensor(grads[0])
        producers = [graph.producer(g) for g in grads]
        total = grads[0] if len(grads) == 1 else f"{x}.grad@tp"
        for j in range(degree):
            if len(grads) > 1:
                sums.append((Op(f"t{j}/{total}", "add", "elementwise",
                                inputs=[f"t{j}/{g}" for g in grads],
                                outputs=(Tensor(f"t{j}/{total}", t.shape, t.dtype),),
                                attrs={"tp_rank": j}, flops=(len(grads) - 1) * t.numel,
                                bytes_read=len(grads) * t.nbytes, bytes_written=t.nbytes),
                             producers))
            reads.update((f"t{j}/{g}", f"t{j}/{total}.reduced") for g in grads)
        members = [[Tensor(f"t{j}/{total}", t.shape, t.dtype)] for j in range(degree)]
        collectives.append((collective(f"tp/{x}.grad", "all_reduce", members), producers))
    return sums, collectives, reads


def _rewired(op: Op, reads: dict[str, str]) -> Op:
    """``op`` reading each renamed tensor's replacement once (a backward op's partial
    gradients become the one reduced sum)."""
    if not any(i in reads for i in op.inputs):
        return op
    inputs = tuple(dict.fromkeys(reads.get(i, i) for i in op.inputs))
    attrs = dict(op.attrs)
    if "grads" in attrs:
        attrs["grads"] = int(attrs["grads"]) - (len(op.inputs) - len(inputs))
    return replace(op, inputs=inputs, attrs=attrs)


def split_ranks(inner: Plan, cluster: Cluster, *, degree: int,
                devices: Sequence[str] | None = None) -> Plan:
    """``degree`` tensor-parallel copies of ``inner`` (a plan of one rank's shard, on its
    own devices) with Megatron's all-reduces; rank ``j`` of the shard's device ``s`` is
    device ``s * degree + j`` of ``cluster``'s (or ``devices``).

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> p = tensor_parallel(build_model("gpt2_small", seq_len=64), c, RooflineCost(c),
    ...                     degree=4)
    >>> len(p.device_groups), p.graph.params == build_model("gpt2_small").params
    (48, True)
    """
    width = len(inner.devices)
    names = device_names(cluster, degree * width, devices, "tensor_parallel",
                         "degree x devices per rank")
    began = time.perf_counter()
    own = sorted(inner.devices, key=cluster.device_names.index)  # the cluster's order
    home = [{d: names[s * degree + j] for s, d in enumerate(own)} for j in range(degree)]
    g = inner.graph
    sums, backward, reads = _backward_collectives(g, degree)
    forward = _forward_collectives(g, degree)
    for c, _ in forward:
        reads.update(zip(c.inputs, (t.name for t in c.outputs), strict=True))
    ops = [_rewired(op, reads) for j in range(degree) for op in copy_ops(
        g, "t", j, "tp_rank", _rank_params)]
    ops += [op for op, _ in sums] + [c for c, _ in forward + backward]
    placement, groups, order = copied_layout(inner, "t", home)
    # each sum after the partial gradients, each all-reduce after what it reduces, on the
    # device (of rank j) that makes them
    for op, after in sums:
        j = int(op.attrs["tp_rank"])
        placement[op.name] = home[j][inner.placement[after[0]]]
        insert_after(order[placement[op.name]], op.name, {f"t{j}/{a}" for a in after})
    for c, after in forward + backward:
        groups[c.name] = tuple(home[j][inner.placement[after[0]]] for j in range(degree))
        placement[c.name] = groups[c.name][0]
        for j, device in enumerate(groups[c.name]):
            made = {f"t{j}/{a}" for a in after} | {i for i in c.inputs if i in placement}
            insert_after(order[device], c.name, made)
    meta = {**g.meta, "tp": degree}
    graph = Graph(f"{g.name}.tp{degree}", ops, meta=meta)
    info = {**inner.info, "tp": degree, "tp_collectives": len(forward) + len(backward)}
    policy = "tensor_parallel" + (f"+{inner.policy}" if width > 1 else "")
    result = Plan(graph, placement, {d: tuple(o) for d, o in order.items()}, policy=policy,
                  priority=communication_first(graph, set(groups)), info=info,
                  placement_s=inner.placement_s + time.perf_counter() - began,
                  cluster=cluster.name, cluster_hash=cluster.definition_hash,
                  device_groups=groups)
    return result.validate(cluster)


def tensor_parallel(forward: Graph, cluster: Cluster, cost: CostModel, *, degree: int,
                    optimizer: str = "sgd", devices: Sequence[str] | None = None) -> Plan:
    """The training step of zoo transformer ``forward`` split over ``degree`` devices
    (Megatron's tensor parallelism; see the module).

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> p = tensor_parallel(build_model("bert_base", seq_len=32), c, RooflineCost(c),
    ...                     degree=2)
    >>> sorted(p.order), p.info["tp_collectives"]  # 12 layers, 2 forward + 2 backward
    (['gpu0', 'gpu1'], 48)
    """
    return parallelize(forward, cluster, cost, tp=degree, optimizer=optimizer,
                       devices=devices)


def parallelize(forward: Graph, cluster: Cluster, cost: CostModel, *, dp: int = 1,
                pp: int = 1, tp: int = 1, microbatches: int = 1, schedule: str = "1f1b",
                bucket_bytes: int = 25 * 2**20, algorithm: str = "ring",
                optimizer: str = "sgd", devices: Sequence[str] | None = None) -> Plan:
    """The training step of zoo model ``forward`` over ``dp * pp * tp`` devices: ``dp``
    data-parallel replicas of a ``pp``-stage pipeline (``microbatches``, ``schedule``) of
    ``tp``-way tensor-parallel ranks. Simulate with ``order="priority"`` when ``pp == 1``
    (communication overlaps the backward pass), else in plan order (the schedule's).

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from workloads import build_model
    >>> c = get_cluster("dgx-h100-x2-ib")
    >>> p = parallelize(build_model("gpt2_small", batch=8, seq_len=128), c,
    ...                 RooflineCost(c), dp=2, pp=2, tp=4, microbatches=2)
    >>> len(p.order), p.info["tp"], p.info["replicas"], p.info["stages"]
    (16, 4, 2, 2)
    """
    for what, value in (("dp", dp), ("pp", pp), ("tp", tp), ("microbatches", microbatches)):
        if not isinstance(value, int) or value < 1:
            raise PlacementError(f"parallelize: {what} must be an int >= 1, got {value!r}")
    if schedule not in SCHEDULES:
        raise PlacementError(f"parallelize: schedule must be one of {', '.join(SCHEDULES)}, "
                             f"got {schedule!r}")
    names = device_names(cluster, dp * pp * tp, devices, "parallelize", "dp x pp x tp")
    batch = forward.meta.get("batch")
    if not isinstance(batch, int) or batch % dp:
        raise PlacementError(f"parallelize: batch must be a multiple of dp={dp}, got "
                             f"{batch!r}")
    local = rebuilt(forward, "parallelize", batch=batch // dp, tp=tp)
    # the shard's stages: one device per stage (the first device of each stage's ranks)
    stage_devices = [names[s * tp] for s in range(pp)]
    if pp > 1 or microbatches > 1:
        inner = pipeline(local, cluster, cost, stages=pp, microbatches=microbatches,
                         schedule=schedule, optimizer=optimizer, devices=stage_devices)
    else:
        step = micro_step(local, 1, optimizer)
        inner = Plan(step, dict.fromkeys(step.names, stage_devices[0]),
                     {stage_devices[0]: step.topological_order()}, policy="single_device",
                     priority=communication_first(step, set()))
    if tp > 1:
        inner = split_ranks(inner, cluster, degree=tp, devices=names[:pp * tp])
    if dp > 1:
        inner = replicate(inner, cluster, replicas=dp, bucket_bytes=bucket_bytes,
                          algorithm=algorithm, devices=names)
    inner.info.update(dp=dp, pp=pp, tp=tp)
    return inner
