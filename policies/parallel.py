"""Pipeline parallelism as a transform: micro-batches of a training step, stages pinned to
devices, each device's order set by the schedule (GPipe or 1F1B).

:func:`pipeline` takes a zoo model's forward graph (its ``meta`` names the model and batch),
builds one micro-batch's training step at ``batch / microbatches``, cuts it into stages
(the ``pipeline`` policy's contiguous stages, a layer's forward, backward, weights and
update together), copies the forward and backward ops once per micro-batch, accumulates
each weight's gradient as each micro-batch's backward ends (one running sum, as GPipe and
PipeDream-flush do) and updates the weights once, then orders every stage's device:

* ``gpipe`` (Huang et al., NeurIPS 2019): every micro-batch's forward, then every
  backward: a stage holds the activations of all micro-batches at once.
* ``1f1b`` (PipeDream-flush, Narayanan et al., ICML 2021): stage ``s`` of ``S`` runs
  ``S - s - 1`` forwards first, then one forward and one backward in turn, then the
  remaining backwards: at most ``S - s`` micro-batches' activations are held.

With uniform stages and free transfers both take ``(M + S - 1)`` slots of one forward and
one backward, an idle fraction of ``(S - 1) / (M + S - 1)`` (the pipeline bubble).
The result is a :class:`~policies.plans.Plan` (placement pinned by the transform),
validated like any other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.pipeline import Pipeline
from policies.plans import Plan
from workloads.errors import PlacementError
from workloads.graph import Graph
from workloads.op import Op, Tensor

__all__ = ["SCHEDULES", "communication_first", "copied_layout", "copy_ops", "device_names",
           "insert_after",
           "micro_step", "pipeline", "rebuilt", "renamed"]

#: The pipeline schedules :func:`pipeline` knows.
SCHEDULES = ("gpipe", "1f1b")


def rebuilt(forward: Graph, who: str, *, batch: int | None = None,
            tp: int | None = None) -> Graph:
    """Zoo model ``forward`` built again at ``batch`` and tensor-parallel shard ``tp``
    (each by default as ``forward`` has it), from the model its ``meta`` names."""
    from workloads.zoo import build_model

    meta = forward.meta
    model, given = meta.get("model"), meta.get("batch")
    if not isinstance(model, str) or not isinstance(given, int):
        raise PlacementError(f"{who}: graph {forward.name!r}: expected a zoo model's "
                             f"forward graph (meta naming model and batch), got meta "
                             f"{dict(meta)}")
    return build_model(model, batch=given if batch is None else batch,
                       dtype=str(meta.get("dtype", "fp32")), seq_len=meta.get("seq_len"),
                       tp=int(meta.get("tp", 1)) if tp is None else tp)


def micro_step(forward: Graph, microbatches: int, optimizer: str) -> Graph:
    """One micro-batch's training step, rebuilt from the zoo at its batch."""
    from workloads.training import training_graph

    batch = forward.meta.get("batch")
    if isinstance(batch, int) and batch % microbatches:
        raise PlacementError(f"pipeline: batch {batch} must be a multiple of microbatches, "
                             f"got {microbatches}")
    whole = batch // microbatches if isinstance(batch, int) else None
    return training_graph(rebuilt(forward, "pipeline", batch=whole), optimizer)


def copy_ops(graph: Graph, prefix: str, k: int, attr: str,
             params: Callable[[Op, int], int]) -> list[Op]:
    """Copy ``k`` of every op of ``graph``: names prefixed ``<prefix><k>/``, ``attrs[attr]
    = k``, co-placement groups kept apart from the other copies', ``params(op, k)``
    parameters counted."""
    def local(name: str) -> str:
        return f"{prefix}{k}/{name}"

    out = []
    for op in graph:
        attrs: dict[str, object] = {attr: k}
        if "colocate" in op.attrs:
            attrs["colocate"] = local(str(op.attrs["colocate"]))
        out.append(replace(renamed(op, local, attrs, keeps_state=True), params=params(op, k)))
    return out


def copied_layout(inner: Plan, prefix: str, homes: Sequence[Mapping[str, str]]
                  ) -> tuple[dict[str, str], dict[str, tuple[str, ...]], dict[str, list[str]]]:
    """Placement, device groups and device orders of ``len(homes)`` copies of ``inner``
    (copy ``k``: names prefixed ``<prefix><k>/``, device ``d`` on ``homes[k][d]``)."""
    placement = {f"{prefix}{k}/{n}": home[d] for k, home in enumerate(homes)
                 for n, d in inner.placement.items()}
    groups = {f"{prefix}{k}/{n}": tuple(home[d] for d in group)
              for k, home in enumerate(homes) for n, group in inner.device_groups.items()}
    order = {home[d]: [f"{prefix}{k}/{n}" for n in o] for k, home in enumerate(homes)
             for d, o in inner.order.items()}
    return placement, groups, order


def communication_first(graph: Graph, collectives: set[str]) -> dict[str, float]:
    """Priorities that start a collective whenever it is ready and the other ops in one
    topological order."""
    position = {name: i for i, name in enumerate(graph.topological_order())}
    return {name: (1.0 if name in collectives else 0.0) - i / (len(position) + 1)
            for name, i in position.items()}


def insert_after(order: list[str], name: str, producers: set[str]) -> None:
    """Put ``name`` into a device ``order`` right after the last of ``producers`` there."""
    last = max((i for i, n in enumerate(order) if n in producers), default=-1)
    order.insert(last + 1, name)


def device_names(cluster: Cluster, count: int, devices: Sequence[str] | None, who: str,
                 what: str) -> list[str]:
    """``devices`` (or the cluster's first ``count``), checked: ``count`` distinct devices
    of the cluster."""
    names = list(devices) if devices is not None else list(cluster.device_names[:count])
    if not 1 <= count == len(names) or len(set(names)) != len(names) or \
            any(n not in cluster.device_names for n in names):
        raise PlacementError(f"{who}: {what} must be between 1 and the cluster's "
                             f"{len(cluster.device_names)} devices (named once each), got "
                             f"{what}={count} over {names}")
    return names


def renamed(op: Op, rename: Callable[[str], str], attrs: Mapping[str, Any], *,
            keeps_state: bool) -> Op:
    """A copy of ``op`` with its name, inputs and outputs renamed and ``attrs`` added; the
    state it keeps (parameters, running statistics) only where ``keeps_state``."""
    return replace(op, name=rename(op.name), inputs=tuple(map(rename, op.inputs)),
                   outputs=tuple(replace(t, name=rename(t.name)) for t in op.outputs),
                   attrs={**op.attrs, **attrs}, params=op.params if keeps_state else 0,
                   param_bytes=op.param_bytes if keeps_state else 0)


def _shared(op: Op) -> bool:
    """Weights and their updates exist once; everything else once per micro-batch."""
    return op.kind == "parameter" or op.kind.endswith("_update")


def _copies(step: Graph, microbatches: int) -> tuple[list[Op], dict[str, str]]:
    """Every micro-batch's copy of the per-micro-batch ops, weight gradients summed into
    the name the update reads; returns the ops and each op's original."""
    shared = {t.name for op in step if _shared(op) for t in op.outputs}
    updates = [op for op in step if op.kind.endswith("_update")]
    wgrads = {t for op in updates for t in op.inputs if t not in shared}
    origin: dict[str, str] = {}
    ops: list[Op] = [op for op in step if op.kind == "parameter"]
    origin.update({op.name: op.name for op in ops})
    for m in range(microbatches):
        def local(name: str, m: int = m) -> str:
            return name if name in shared else f"mb{m}/{name}"
        for op in step:
            if _shared(op):
                continue
            # state an op keeps (running statistics) exists once
            copy = renamed(op, local, {"microbatch": m}, keeps_state=m == 0)
            ops.append(copy)
            origin[copy.name] = op.name
    tensors = {t.name: (t, op) for op in step for t in op.outputs}
    for grad in sorted(wgrads):
        tensor, producer = tensors[grad]
        group = {"colocate": producer.attrs["colocate"]} if "colocate" in producer.attrs \
            else {}
        # accumulated in place as each micro-batch's backward ends (one sum held, not M
        # gradients); the last sum carries the name the update reads
        previous = f"mb0/{grad}"
        for m in range(1, microbatches) if microbatches > 1 else (0,):
            name = grad if m == microbatches - 1 or microbatches == 1 else f"{grad}.acc{m}"
            inputs = (previous, f"mb{m}/{grad}") if microbatches > 1 else (previous,)
            total = Op(f"{grad}.sum{m}", "add", "elementwise", inputs=inputs,
                       outputs=(Tensor(name, tensor.shape, tensor.dtype),),
                       attrs={**group, "microbatch": m, "accumulates": grad},
                       flops=tensor.numel if microbatches > 1 else 0,
                       bytes_read=len(inputs) * tensor.nbytes, bytes_written=tensor.nbytes)
            ops.append(total)
            origin[total.name] = producer.name
            previous = name
    for op in updates:
        ops.append(op)
        origin[op.name] = op.name
    return ops, origin


def _stage_order(graph: Graph, placement: dict[str, str], device: str, stage: int,
                 stages: int, microbatches: int, schedule: str) -> list[str]:
    """Device ``device``'s order: weights, the schedule's forwards and backwards by
    micro-batch, then gradient sums and updates."""
    mine = [n for n in graph.topological_order() if placement[n] == device]
    ops = graph.ops_by_name()
    first = [n for n in mine if ops[n].kind == "parameter"]
    last = [n for n in mine if "microbatch" not in ops[n].attrs and n not in first]
    fwd: list[list[str]] = [[] for _ in range(microbatches)]
    bwd: list[list[str]] = [[] for _ in range(microbatches)]
    for n in mine:
        m = ops[n].attrs.get("microbatch")
        if m is not None:
            backward = ops[n].kind == "backward" or "accumulates" in ops[n].attrs
            (bwd if backward else fwd)[m].append(n)
    sequence: list[str] = []
    if schedule == "gpipe":
        for m in range(microbatches):
            sequence += fwd[m]
        for m in range(microbatches):
            sequence += bwd[m]
    else:
        warm = min(stages - stage - 1, microbatches)
        for m in range(warm):
            sequence += fwd[m]
        for i in range(microbatches - warm):
            sequence += fwd[warm + i] + bwd[i]
        for m in range(microbatches - warm, microbatches):
            sequence += bwd[m]
    return first + sequence + last


def pipeline(forward: Graph, cluster: Cluster, cost: CostModel, *, stages: int,
             microbatches: int, schedule: str = "1f1b", optimizer: str = "sgd",
             devices: Sequence[str] | None = None) -> Plan:
    """The training step of ``forward`` pipelined over ``stages`` devices (the first of
    ``cluster``'s, or ``devices``) in ``microbatches`` micro-batches, ordered by
    ``schedule``.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> p = pipeline(build_model("mlp", batch=32), c, RooflineCost(c), stages=2,
    ...              microbatches=4)
    >>> sorted(p.order), p.info["schedule"], p.graph.meta["step"]
    (['gpu0', 'gpu1'], '1f1b', 'train.sgd')
    """
    if schedule not in SCHEDULES:
        raise PlacementError(f"pipeline: schedule must be one of {', '.join(SCHEDULES)}, "
                             f"got {schedule!r}")
    names = device_names(cluster, stages, devices, "pipeline", "stages")
    if microbatches < 1:
        raise PlacementError(f"pipeline: microbatches must be >= 1, got {microbatches}")
    began = time.perf_counter()
    step = micro_step(forward, microbatches, optimizer)
    stage_of = _stages(step, cluster, cost, names, microbatches)
    ops, origin = _copies(step, microbatches)
    graph = Graph(f"{step.name}.pp{stages}x{microbatches}", ops,
                  meta={**step.meta, "batch": forward.meta["batch"], "stages": stages,
                        "microbatches": microbatches, "schedule": schedule})
    placement = {op.name: stage_of[origin[op.name]] for op in graph}
    order = {d: _stage_order(graph, placement, d, k, stages, microbatches, schedule)
             for k, d in enumerate(names)}
    info: dict[str, Any] = {"schedule": schedule, "stages": stages,
                            "microbatches": microbatches}
    result = Plan(graph, placement, order, policy=f"pipeline.{schedule}", info=info,
                  placement_s=time.perf_counter() - began, cluster=cluster.name,
                  cluster_hash=cluster.definition_hash)
    return result.validate(cluster)


def _stages(step: Graph, cluster: Cluster, cost: CostModel, names: list[str],
            microbatches: int) -> dict[str, str]:
    """Each op of the micro-batch step on its stage's device: the ``pipeline`` policy's
    contiguous stages over ``names`` (cost times taken on the full cluster; weights and
    gradients crossing a cut once per step, not per micro-batch)."""
    if len(names) == 1:
        return dict.fromkeys(step.names, names[0])
    others = [d for d in cluster.device_names if d not in names]
    sub = cluster.without(*others) if others else cluster
    # the devices keep their names and speeds: the full cluster's cost model times them
    return dict(Pipeline(microbatches=microbatches).place(step, sub, cost).devices)
