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

import time
from collections.abc import Sequence
from dataclasses import replace

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.parallel import (
    communication_first,
    copied_layout,
    copy_ops,
    device_names,
    insert_after,
    micro_step,
)
from policies.plans import Plan
from workloads.collectives import collective
from workloads.errors import PlacementError
from workloads.graph import Graph
from workloads.op import Op, Tensor

__all__ = ["data_parallel", "replicate"]


def _gradients(step: Graph) -> list[str]:
    """The weight gradients the updates read, in the order the step makes them."""
    updates = [op for op in step if op.kind.endswith("_update")]
    state = {t.name for op in step if op.kind == "parameter" or op.kind.endswith("_update")
             for t in op.outputs}
    wanted = {t for op in updates for t in op.inputs if t not in state}
    return [t.name for name in step.topological_order() for t in step.op(name).outputs
            if t.name in wanted]


def _buckets(inner: Plan, gradients: list[str], device: str,
             bucket_bytes: int) -> list[list[Tensor]]:
    """The ``gradients`` made on ``device`` in the order the backward pass makes them, in
    buckets of at most ``bucket_bytes`` (a larger gradient alone)."""
    g = inner.graph
    buckets: list[list[Tensor]] = []
    size = 0
    for name in gradients:
        t = g.tensor(name)
        if inner.placement[g.producer(name)] != device:
            continue
        if not buckets or size + t.nbytes > bucket_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append(t)
        size += t.nbytes
    return buckets


def replicate(inner: Plan, cluster: Cluster, *, replicas: int,
              bucket_bytes: int = 25 * 2**20, algorithm: str = "ring",
              devices: Sequence[str] | None = None) -> Plan:
    """``replicas`` copies of the training step ``inner`` (on its own devices, any
    parallelism) on consecutive device sets of ``cluster`` (or ``devices``), each weight
    gradient all-reduced in buckets among the copies of the device that makes it.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from policies.parallel import pipeline
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> pp = pipeline(build_model("mlp", batch=16), c, RooflineCost(c), stages=2,
    ...               microbatches=2)
    >>> p = replicate(pp, c, replicas=2)
    >>> sorted(p.order), sorted(map(sorted, p.device_groups.values()))
    (['gpu0', 'gpu1', 'gpu2', 'gpu3'], [['gpu0', 'gpu2'], ['gpu1', 'gpu3']])
    """
    width = len(inner.devices)
    names = device_names(cluster, replicas * width, devices, "data_parallel",
                         "replicas x devices per replica")
    if bucket_bytes < 1:
        raise PlacementError(f"data_parallel: bucket_bytes must be >= 1, got {bucket_bytes}")
    began = time.perf_counter()
    own = sorted(inner.devices, key=cluster.device_names.index)  # the cluster's order
    home = [dict(zip(own, names[r * width:(r + 1) * width], strict=True))
            for r in range(replicas)]
    # every replica holds its own weights and optimizer state; parameters count once
    ops = [op for r in range(replicas) for op in copy_ops(
        inner.graph, "r", r, "replica", lambda op, k: op.params if k == 0 else 0)]
    placement, groups, order = copied_layout(inner, "r", home)
    gradients = _gradients(inner.graph) if replicas > 1 else []
    buckets = [(d, bucket) for d in own
               for bucket in _buckets(inner, gradients, d, bucket_bytes)]
    made = {t.name: op.name for op in ops for t in op.outputs}
    for b, (d, bucket) in enumerate(buckets):
        op = _all_reduce(bucket, b, replicas, algorithm)
        ops.append(op)
        groups[op.name] = tuple(home[r][d] for r in range(replicas))
        placement[op.name] = groups[op.name][0]
        for device in groups[op.name]:
            insert_after(order[device], op.name, {made[t] for t in op.inputs})
    reduced = {f"r{r}/{t.name}" for _, bucket in buckets for t in bucket
               for r in range(replicas)}
    ops = [op if not op.kind.endswith("_update") else replace(
        op, inputs=tuple(f"{i}.reduced" if i in reduced else i for i in op.inputs))
        for op in ops]
    meta = inner.graph.meta
    graph = Graph(f"{inner.graph.name}.dp{replicas}", ops,
                  meta={**meta, "batch": int(meta.get("batch", 1)) * replicas,
                        "replicas": replicas, "bucket_bytes": bucket_bytes})
    priority = communication_first(graph, set(groups))
    info = {**inner.info, "replicas": replicas, "buckets": len(buckets),
            "bucket_bytes": bucket_bytes, "algorithm": algorithm}
    policy = "data_parallel" + (f"+{inner.policy}" if width > 1 else "")
    result = Plan(graph, placement, order, policy=policy, priority=priority, info=info,
                  placement_s=inner.placement_s + time.perf_counter() - began,
                  cluster=cluster.name, cluster_hash=cluster.definition_hash,
                  device_groups=groups)
    return result.validate(cluster)


def _all_reduce(bucket: list[Tensor], b: int, replicas: int, algorithm: str) -> Op:
    """Bucket ``b``'s all-reduce: one collective op over the replicas' gradients."""
    return collective(f"ar{b}", "all_reduce",
                      [[Tensor(f"r{r}/{t.name}", t.shape, t.dtype) for t in bucket]
                       for r in range(replicas)],
                      algorithm=algorithm, attrs={"bucket": b})


def data_parallel(forward: Graph, cluster: Cluster, cost: CostModel, *, replicas: int,
                  bucket_bytes: int = 25 * 2**20, optimizer: str = "sgd",
                  algorithm: str = "ring", devices: Sequence[str] | None = None) -> Plan:
    """The training step of ``forward`` data-parallel over ``replicas`` devices (the first
    of ``cluster``'s, or ``devices``), gradients all-reduced in buckets of at most
    ``bucket_bytes`` (PyTorch DDP's default: 25 MiB) with ``algorithm`` (ring, tree or
    hierarchical). Simulate it with ``order="priority"`` for communication to overlap
    the backward pass.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> p = data_parallel(build_model("mlp", batch=32), c, RooflineCost(c), replicas=4)
    >>> sorted(p.order), p.info["buckets"], p.graph.meta["replicas"]
    (['gpu0', 'gpu1', 'gpu2', 'gpu3'], 1, 4)
    """
    names = device_names(cluster, replicas, devices, "data_parallel", "replicas")
    step = micro_step(forward, replicas, optimizer)
    inner = Plan(step, dict.fromkeys(step.names, names[0]),
                 {names[0]: step.topological_order()}, policy="single_device")
    return replicate(inner, cluster, replicas=replicas, bucket_bytes=bucket_bytes,
                     algorithm=algorithm, devices=names)
