"""Data parallelism as a transform: one replica of the training step per device, gradients
all-reduced by bucket as the backward pass produces them, each all-reduce simulated as the
ring algorithm's own point-to-point transfers.

:func:`data_parallel` rebuilds a zoo model's step at ``batch / replicas`` and copies it
once per device. Weight gradients are grouped into buckets of at most ``bucket_bytes`` in
the order the backward pass makes them (as PyTorch's DistributedDataParallel buckets). Each
bucket's ring all-reduce over ``p`` replicas (Patarasuk and Yuan, JPDC 2009) is its steps:
every replica packs the bucket, then in each of ``2 (p - 1)`` steps receives a chunk of
``bytes / p`` from the replica before it in the ring, adds it to its own (the ``p - 1``
reduce-scatter steps) or keeps it (the ``p - 1`` all-gather steps), and finally unpacks
the reduced gradients for its update. The chunks are tensors between ops on neighbouring
devices, so they are transfers on the cluster's links, with their contention. On a ring
of identical links with free compute the all-reduce takes
``2 (p - 1) / p * bytes / bandwidth + 2 (p - 1) * latency``.

Each device's communication steps have the highest priority: simulated with
``order="priority"`` on devices with a second compute stream they start as soon as their
chunk arrives, overlapping the rest of the backward pass, as NCCL's kernels on their own
CUDA stream do; on a device with one stream (the catalog's) a step waits for the running
kernel, and the all-reduce overlaps only the transfers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import replace

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.parallel import device_names, micro_step, renamed
from policies.plans import Plan, order_by_priority
from workloads.errors import PlacementError
from workloads.graph import Graph
from workloads.op import Op, Tensor

__all__ = ["data_parallel"]


def _replica(step: Graph, r: int) -> list[Op]:
    """Replica ``r``'s copy of the step: every op and tensor prefixed, co-placement groups
    kept apart from the other replicas'."""
    def local(name: str) -> str:
        return f"r{r}/{name}"

    out = []
    for op in step:
        attrs: dict[str, object] = {"replica": r}
        if "colocate" in op.attrs:
            attrs["colocate"] = local(str(op.attrs["colocate"]))
        # every replica holds its own weights and optimizer state; parameters count once
        copy = renamed(op, local, attrs, keeps_state=True)
        out.append(replace(copy, params=op.params if r == 0 else 0))
    return out


def _buckets(step: Graph, bucket_bytes: int) -> list[list[Tensor]]:
    """Weight gradients in the order the backward pass makes them, in buckets of at most
    ``bucket_bytes`` (a larger gradient alone)."""
    updates = [op for op in step if op.kind.endswith("_update")]
    wanted = {t for op in updates for t in op.inputs}
    tensors = {t.name: t for op in step for t in op.outputs}
    made = [t for name in step.topological_order() for t in step.op(name).outputs
            if t.name in wanted and step.op(name).kind == "backward"]
    buckets: list[list[Tensor]] = []
    size = 0
    for t in made:
        if not buckets or size + t.nbytes > bucket_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append(tensors[t.name])
        size += t.nbytes
    return buckets


def _all_reduce(bucket: list[Tensor], b: int, replicas: int) -> list[Op]:
    """The ring all-reduce of bucket ``b`` as ops on each replica (see the module)."""
    nbytes = sum(t.nbytes for t in bucket)
    elements = math.ceil(sum(t.numel for t in bucket) / replicas)
    chunk = Tensor("chunk", (elements,), bucket[0].dtype)
    ops: list[Op] = []
    for r in range(replicas):
        ops.append(Op(f"r{r}/ar{b}.pack", "concat", "data_movement",
                      inputs=tuple(f"r{r}/{t.name}" for t in bucket),
                      outputs=(Tensor(f"r{r}/ar{b}.c0", chunk.shape, chunk.dtype),),
                      attrs={"replica": r, "collective": f"ar{b}", "bucket_bytes": nbytes}))
    steps = 2 * (replicas - 1)
    for k in range(steps):
        reduce = k < replicas - 1
        for r in range(replicas):
            before = (r - 1) % replicas
            ops.append(Op(f"r{r}/ar{b}.s{k}", "add" if reduce else "reshape",
                          "elementwise" if reduce else "data_movement",
                          inputs=(f"r{before}/ar{b}.c{k}", f"r{r}/ar{b}.c{k}"),
                          outputs=(Tensor(f"r{r}/ar{b}.c{k + 1}", chunk.shape, chunk.dtype),),
                          attrs={"replica": r, "collective": f"ar{b}", "step": k},
                          flops=elements if reduce else 0,
                          bytes_read=2 * chunk.nbytes if reduce else 0,
                          bytes_written=chunk.nbytes if reduce else 0))
    for r in range(replicas):
        ops.append(Op(f"r{r}/ar{b}.unpack", "split", "data_movement",
                      inputs=(f"r{r}/ar{b}.c{steps}",),
                      outputs=tuple(Tensor(f"r{r}/{t.name}.reduced", t.shape, t.dtype)
                                    for t in bucket),
                      attrs={"replica": r, "collective": f"ar{b}"}))
    return ops


def data_parallel(forward: Graph, cluster: Cluster, cost: CostModel, *, replicas: int,
                  bucket_bytes: int = 25 * 2**20, optimizer: str = "sgd",
                  devices: Sequence[str] | None = None) -> Plan:
    """The training step of ``forward`` data-parallel over ``replicas`` devices (the first
    of ``cluster``'s, or ``devices``), gradients all-reduced in buckets of at most
    ``bucket_bytes`` (PyTorch DDP's default: 25 MiB). Simulate it with
    ``order="priority"`` for communication to overlap the backward pass.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> p = data_parallel(build_model("mlp", batch=32), c, RooflineCost(c), replicas=4)
    >>> sorted(p.order), p.info["buckets"], p.graph.meta["replicas"]
    (['gpu0', 'gpu1', 'gpu2', 'gpu3'], 1, 4)
    """
    names = device_names(cluster, replicas, devices, "data_parallel", "replicas")
    if bucket_bytes < 1:
        raise PlacementError(f"data_parallel: bucket_bytes must be >= 1, got {bucket_bytes}")
    began = time.perf_counter()
    step = micro_step(forward, replicas, optimizer)
    ops = [op for r in range(replicas) for op in _replica(step, r)]
    buckets = _buckets(step, bucket_bytes) if replicas > 1 else []
    for b, bucket in enumerate(buckets):
        ops += _all_reduce(bucket, b, replicas)
    if buckets:  # each replica's update reads its reduced gradient
        reduced = {f"r{r}/{t.name}" for bucket in buckets for t in bucket
                   for r in range(replicas)}
        ops = [op if not op.kind.endswith("_update") else replace(
            op, inputs=tuple(f"{i}.reduced" if i in reduced else i for i in op.inputs))
            for op in ops]
    graph = Graph(f"{step.name}.dp{replicas}", ops,
                  meta={**step.meta, "batch": forward.meta["batch"], "replicas": replicas,
                        "bucket_bytes": bucket_bytes})
    placement = {op.name: names[int(op.attrs["replica"])] for op in graph}
    position = {name: i for i, name in enumerate(graph.topological_order())}
    # communication first whenever it is ready; the rest in one topological order
    priority = {name: (1.0 if "collective" in graph.op(name).attrs else 0.0)
                - position[name] / (len(position) + 1) for name in position}
    info = {"replicas": replicas, "buckets": len(buckets), "bucket_bytes": bucket_bytes}
    result = Plan(graph, placement, order_by_priority(graph, placement, priority),
                  policy="data_parallel", priority=priority, info=info,
                  placement_s=time.perf_counter() - began, cluster=cluster.name,
                  cluster_hash=cluster.definition_hash)
    return result.validate(cluster)
