"""Collectives lowered to their algorithms' point-to-point steps, for the executors.

A plan's collective op (:mod:`workloads.collectives`) is placed on a device group.
:func:`lower` replaces it by ops on each member's device: a *pack* of the member's inputs
into one buffer, the algorithm's steps (each reads the chunk a neighbour made, so the chunk
crosses the link between them as an ordinary transfer, with its contention) and an
*unpack* into the member's outputs. Every step op carries ``attrs["collective"]``, so a
Trace marks its rows ``collective``. The algorithms (``B`` the bytes a member brings, ``p``
members, links of bandwidth ``bw`` and latency ``L``, free compute):

* ring all-reduce (Patarasuk and Yuan, JPDC 2009): ``p - 1`` reduce-scatter steps then
  ``p - 1`` all-gather steps of ``B / p``: ``2 (p-1)/p · B/bw + 2 (p-1) L``;
* tree all-reduce: a binomial-tree reduce to member 0, then the mirror broadcast, the
  whole buffer per hop (Thakur, Rabenseifner and Gropp, IJHPCA 2005):
  ``2 ⌈log2 p⌉ (B/bw + L)``;
* hierarchical all-reduce (as NCCL and Horovod run it across nodes): a ring reduce-scatter
  inside each node (``g`` devices), a ring all-reduce of each ``B / g`` shard among the
  devices of the same local rank on the ``n`` nodes, a ring all-gather inside each node:
  ``2 (g-1)/g · B/bw_node + 2 (g-1) L_node + 2 (n-1)/n · B/g/bw_net + 2 (n-1) L_net``;
* ring reduce-scatter and all-gather: ``p - 1`` steps of ``B / p``;
* tree broadcast from member 0: ``⌈log2 p⌉`` hops of the whole buffer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hwmodels.spec import Cluster
from policies.plans import Plan
from workloads.collectives import member_inputs, member_outputs, payload_bytes
from workloads.dtypes import dtype_bytes
from workloads.errors import PlacementError
from workloads.graph import Graph
from workloads.op import Op, Tensor

__all__ = ["lower"]


class _Steps:
    """The ops one collective becomes, member by member, and each member's latest buffer."""

    def __init__(self, op: Op, members: int) -> None:
        self.op, self.p = op, members
        self.dtype = op.outputs[0].dtype
        self.ops: list[Op] = []
        self.mine: list[list[str]] = [[] for _ in range(members)]
        self.buf: list[str | None] = [None] * members
        self.size = [0] * members  # elements of each member's latest buffer

    def emit(self, m: int, label: str, inputs: Sequence[str], elements: int, *,
             reduce: bool = False) -> str:
        """Member ``m``'s step ``label`` making a buffer of ``elements`` from ``inputs``."""
        name = f"{self.op.name}@{m}.{label}"
        out = Tensor(name, (max(1, elements),), self.dtype)
        nbytes = out.nbytes
        self.ops.append(Op(name, "add" if reduce else "reshape",
                           "elementwise" if reduce else "data_movement",
                           inputs=tuple(inputs), outputs=(out,),
                           attrs={"collective": self.op.name, "member": m, "step": label},
                           flops=elements if reduce else 0,
                           bytes_read=2 * nbytes if reduce else 0,
                           bytes_written=nbytes if reduce else 0))
        self.mine[m].append(name)
        self.buf[m], self.size[m] = name, elements
        return name

    def pack(self, m: int, elements: int) -> None:
        """Member ``m``'s inputs copied into one buffer (a framework's bucket)."""
        inputs = member_inputs(self.op, m)
        out = Tensor(f"{self.op.name}@{m}.pack", (max(1, elements),), self.dtype)
        nbytes = out.nbytes
        self.ops.append(Op(out.name, "concat", "data_movement", inputs=inputs, outputs=(out,),
                           attrs={"collective": self.op.name, "member": m, "step": "pack"},
                           bytes_read=nbytes if inputs else 0,
                           bytes_written=nbytes if inputs else 0))
        self.mine[m].append(self.ops[-1].name)
        self.buf[m], self.size[m] = self.ops[-1].name, elements

    def unpack(self, m: int) -> None:
        """Member ``m``'s outputs, from its last buffer."""
        outputs = member_outputs(self.op, m)
        nbytes = sum(t.nbytes for t in outputs)
        self.ops.append(Op(f"{self.op.name}@{m}.unpack", "split", "data_movement",
                           inputs=(str(self.buf[m]),), outputs=outputs,
                           attrs={"collective": self.op.name, "member": m, "step": "unpack"},
                           bytes_read=nbytes, bytes_written=nbytes))
        self.mine[m].append(self.ops[-1].name)

    def ring(self, ring: Sequence[int], steps: int, elements: int, reduce: bool,
             tag: str) -> None:
        """``steps`` ring steps among ``ring``: each member takes its predecessor's chunk
        and adds it to its own (``reduce``) or keeps it."""
        q = len(ring)
        for m in ring:  # a phase's chunks are views of the buffer the last phase left
            if self.size[m] != elements:
                self.emit(m, f"{tag}.view", (str(self.buf[m]),), elements)
        for k in range(steps):
            before = [self.buf[m] for m in ring]
            for j, m in enumerate(ring):
                self.emit(m, f"{tag}{k}", (str(before[(j - 1) % q]), str(before[j])),
                          elements, reduce=reduce)

    def tree_reduce(self, elements: int) -> None:
        """Binomial-tree reduce to member 0: at level ``l`` member ``i + 2^l`` sends to
        ``i`` for every ``i`` a multiple of ``2^(l+1)``."""
        for level in range(_levels(self.p)):
            stride = 1 << level
            for i in range(0, self.p - stride, 2 * stride):
                self.emit(i, f"up{level}", (str(self.buf[i + stride]), str(self.buf[i])),
                          elements, reduce=True)

    def tree_broadcast(self, elements: int) -> None:
        """The mirror of :meth:`tree_reduce`: member 0's buffer down the same tree."""
        for level in reversed(range(_levels(self.p))):
            stride = 1 << level
            for i in range(0, self.p - stride, 2 * stride):
                child = self.buf[i + stride]
                self.emit(i + stride, f"down{level}", (str(self.buf[i]),)
                          + ((child,) if child is not None else ()), elements)


def _levels(p: int) -> int:
    return math.ceil(math.log2(p)) if p > 1 else 0


def _elements(op: Op) -> int:
    """Elements a member brings (an all-gather: what it ends with): its payload."""
    return payload_bytes(op) // dtype_bytes(op.outputs[0].dtype)


def _nodes(op: Op, group: Sequence[str], cluster: Cluster) -> list[list[int]]:
    """Members by node (the cluster's hosts), every node with as many members."""
    nodes: dict[str, list[int]] = {}
    for m, device in enumerate(group):
        nodes.setdefault(cluster.hosts.get(device, device), []).append(m)
    sizes = {len(v) for v in nodes.values()}
    if len(sizes) != 1:
        raise PlacementError(f"collective {op.name!r}: the hierarchical algorithm needs as "
                             f"many members on every node, got "
                             f"{ {h: len(v) for h, v in nodes.items()} }")
    return list(nodes.values())


def _all_reduce(s: _Steps, cluster: Cluster, group: Sequence[str]) -> None:
    n, p, algorithm = _elements(s.op), s.p, s.op.attrs["algorithm"]
    everyone = list(range(p))
    if algorithm == "tree":
        for m in everyone:
            s.pack(m, n)
        s.tree_reduce(n)
        s.tree_broadcast(n)
    elif algorithm == "hierarchical":
        nodes = _nodes(s.op, group, cluster)
        g = len(nodes[0])
        shard = math.ceil(n / g)
        for m in everyone:
            s.pack(m, shard)
        for node in nodes:
            s.ring(node, g - 1, shard, True, "rs")
        for rank in range(g):
            across = [node[rank] for node in nodes]
            chunk = math.ceil(shard / len(nodes))
            s.ring(across, len(nodes) - 1, chunk, True, "xrs")
            s.ring(across, len(nodes) - 1, chunk, False, "xag")
        for node in nodes:
            s.ring(node, g - 1, shard, False, "ag")
    else:
        chunk = math.ceil(n / p)
        for m in everyone:
            s.pack(m, chunk)
        s.ring(everyone, p - 1, chunk, True, "rs")
        s.ring(everyone, p - 1, chunk, False, "ag")


def _lower_one(op: Op, group: Sequence[str], cluster: Cluster) -> _Steps:
    s = _Steps(op, len(group))
    n, p = _elements(op), len(group)
    if op.kind == "all_reduce":
        _all_reduce(s, cluster, group)
    elif op.kind == "broadcast":
        s.pack(0, n)
        s.tree_broadcast(n)
    else:  # ring reduce-scatter / all-gather
        chunk = math.ceil(n / p)
        for m in range(p):
            s.pack(m, chunk)
        s.ring(list(range(p)), p - 1, chunk, op.kind == "reduce_scatter", "s")
    for m in range(p):
        s.unpack(m)
    return s


def lower(plan: Plan, cluster: Cluster) -> Plan:
    """``plan`` with every collective replaced by its algorithm's steps on its devices
    (``plan`` itself when it has none). Each member's steps take the collective's place
    in that member's device order and inherit its priority.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from policies.data_parallel import data_parallel
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> p = data_parallel(build_model("mlp", batch=8), c, RooflineCost(c), replicas=4)
    >>> low = lower(p, c)
    >>> len(p.device_groups), len(low.device_groups), len(low.graph) - len(p.graph)
    (1, 0, 31)
    """
    if not plan.device_groups:
        return plan
    ops: list[Op] = []
    steps: dict[tuple[str, str], list[str]] = {}
    placement = dict(plan.placement)
    priority = dict(plan.priority)
    for op in plan.graph:
        group = plan.device_groups.get(op.name)
        if group is None:
            ops.append(op)
            continue
        s = _lower_one(op, group, cluster)
        ops += s.ops
        del placement[op.name]
        for m, device in enumerate(group):
            steps[op.name, device] = s.mine[m]
            placement.update((name, device) for name in s.mine[m])
            if op.name in plan.priority:
                priority.update((name, plan.priority[op.name]) for name in s.mine[m])
        priority.pop(op.name, None)
    order = {d: tuple(x for name in names for x in steps.get((name, d), (name,)))
             for d, names in plan.order.items()}
    graph = Graph(plan.graph.name, ops, meta=plan.graph.meta)
    low = Plan(graph, placement, order, policy=plan.policy, priority=priority or None,
               placement_s=plan.placement_s, estimated_makespan_s=plan.estimated_makespan_s,
               info=plan.info, cluster=plan.cluster, cluster_hash=plan.cluster_hash)
    low.step_of = {name: op for (op, _), names in steps.items() for name in names}
    return low
