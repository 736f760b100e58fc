"""A job's state for the simulator's Python loop: its Plan laid out as flat integer lists
(the compiled loop lays a plan out from its arrays instead: :mod:`sim.slots`).

:func:`wire` turns one Plan into a :class:`Wiring`: per op, the copies it reads, the local
readers it wakes and the transfers it sends; per transfer, its route, duration and readers.
Indices are the job's own (ops in ``graph.arrays`` order, a *key* per tensor copy, devices
of the cluster). :func:`combine` lays several jobs end to end, shifting every index, so that
one event loop runs them all on one fabric; a single job needs no shift at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import numpy as np

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.plans import Plan
from workloads.arrays import GraphArrays

__all__ = ["Wiring", "combine", "wire"]


@dataclass(frozen=True)
class Wiring:
    """One job's per-op, per-copy and per-transfer columns (see :func:`wire`).

    A *key* names a tensor's copy on one device: tensor ``t``'s copy on its producer's
    device is ``t``; the copy transfer ``k`` brings to another device is
    ``n_tensors + k``. ``*_off`` columns are CSR offsets into the column they index.
    """

    names: tuple[str, ...]
    op_dev: np.ndarray          #: device index per op
    op_time: np.ndarray         #: seconds per op
    order: tuple[np.ndarray, ...]  #: per device, its ops in plan order
    read_ids: np.ndarray        #: keys each op reads (CSR by ``read_off``)
    read_off: np.ndarray
    pending: np.ndarray         #: inputs each op waits for
    wake: np.ndarray            #: local readers each op wakes (CSR by ``wake_off``)
    wake_off: np.ndarray
    own_ids: np.ndarray         #: keys each op produces (CSR by ``out_off``)
    out_off: np.ndarray
    alloc: np.ndarray           #: bytes an op allocates when it starts (outputs, workspace)
    workspace: np.ndarray
    refs: np.ndarray            #: per key, the readers and sends that hold it
    key_bytes: np.ndarray
    send: np.ndarray            #: transfers each op sends (CSR by ``send_off``)
    send_off: np.ndarray
    t_src: np.ndarray
    t_dst: np.ndarray
    t_bytes: np.ndarray
    t_key: np.ndarray           #: the key each transfer reads on its source
    t_duration: np.ndarray
    t_channels: tuple[tuple[str, ...], ...]
    t_readers: np.ndarray       #: ops each transfer wakes (CSR by ``t_readers_off``)
    t_readers_off: np.ndarray
    transfer_names: tuple[str, ...]
    resident: np.ndarray        #: parameter bytes per device
    op_flops: np.ndarray
    op_bytes: np.ndarray

    @property
    def n_ops(self) -> int:
        return len(self.names)


# How each column's entries shift when jobs are laid end to end.
_OP_REF = ("wake", "t_readers")
_KEY_REF = ("read_ids", "own_ids", "t_key")
_DEV_REF = ("op_dev", "t_src", "t_dst")
_OFFSETS = {"read_off": "read_ids", "wake_off": "wake", "out_off": "own_ids",
            "send_off": "send", "t_readers_off": "t_readers"}


def wire(plan: Plan, cluster: Cluster, cost: CostModel,
         op_time: np.ndarray | None = None) -> Wiring:
    """The flat lists of ``plan`` on ``cluster`` (``op_time``: the cost model's by default).

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from policies import plan
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> w = wire(plan(build_model("mlp"), c, "round_robin"), c, RooflineCost(c))
    >>> w.n_ops == len(w.op_time) and len(w.t_src) == len(w.t_duration)
    True
    """
    a = plan.graph.arrays
    devices = tuple(cluster.device_names)
    dev_index = {d: i for i, d in enumerate(devices)}
    op_dev = plan.device_codes(devices)
    n, n_dev, n_tensors = len(a.names), len(devices), len(a.tensor_bytes)
    transfers = plan.transfers
    m = len(transfers)
    t_tensor = np.fromiter((a.tensor_index[t.tensor] for t in transfers), np.int64, m)
    t_dst = np.fromiter((dev_index[t.dst] for t in transfers), np.int64, m)
    read_ids = _read_keys(a, op_dev, t_tensor, t_dst, n_dev)
    refs = np.bincount(read_ids, minlength=n_tensors + m)
    refs[:n_tensors] += np.bincount(t_tensor, minlength=n_tensors)
    local = op_dev[a.edge_src] == op_dev[a.edge_dst]
    by_src = np.argsort(a.edge_src[local], kind="stable")
    counts = np.bincount(a.edge_dst, minlength=n)
    durations, channels, readers, readers_off = _transfer_lists(plan, cluster, cost, a)
    producers = np.fromiter((a.position[t.producer] for t in transfers), np.int64, m)
    return Wiring(
        names=a.names, op_dev=op_dev,
        op_time=np.asarray(cost.op_times(plan.graph, op_dev) if op_time is None else op_time,
                           dtype=float),
        order=plan.order_positions(devices),
        read_ids=read_ids, read_off=_offsets(counts), pending=counts,
        wake=a.edge_dst[local][by_src],
        wake_off=_offsets(np.bincount(a.edge_src[local], minlength=n)),
        own_ids=np.arange(n_tensors), out_off=a.out_offsets,
        alloc=a.alloc_bytes, workspace=a.workspace_bytes, refs=refs,
        key_bytes=np.concatenate((a.tensor_bytes, a.tensor_bytes[t_tensor])),
        send=np.argsort(producers, kind="stable"),
        send_off=_offsets(np.bincount(producers, minlength=n)),
        t_src=np.fromiter((dev_index[t.src] for t in transfers), np.int64, m), t_dst=t_dst,
        t_bytes=np.fromiter((t.nbytes for t in transfers), np.int64, m), t_key=t_tensor,
        t_duration=durations, t_channels=channels, t_readers=readers,
        t_readers_off=readers_off, transfer_names=tuple(t.name for t in transfers),
        resident=np.bincount(op_dev, weights=a.param_bytes, minlength=n_dev).astype(np.int64),
        op_flops=a.flops.astype(np.int64), op_bytes=a.moved_bytes.astype(np.int64))


def _offsets(counts: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)


def _read_keys(a: GraphArrays, op_dev: np.ndarray, t_tensor: np.ndarray, t_dst: np.ndarray,
               n_dev: int) -> np.ndarray:
    """The key each edge's reader reads: the local copy, or the transfer's copy."""
    n_tensors = len(a.tensor_bytes)
    dst_dev = op_dev[a.edge_dst]
    remote_keys = t_tensor * n_dev + t_dst  # one transfer per tensor and device
    by_key = np.argsort(remote_keys, kind="stable")
    read_ids = a.edge_tensor.copy()
    far = op_dev[a.edge_src] != dst_dev
    if far.any():
        slot = np.searchsorted(remote_keys[by_key], a.edge_tensor[far] * n_dev + dst_dev[far])
        read_ids[far] = n_tensors + by_key[slot]
    return read_ids


def _transfer_lists(plan: Plan, cluster: Cluster, cost: CostModel, a: GraphArrays) -> tuple[
        np.ndarray, tuple[tuple[str, ...], ...], np.ndarray, np.ndarray]:
    """Each transfer's duration, link channels and readers (with their offsets)."""
    routes: dict[tuple[str, str], tuple[str, ...]] = {}
    durations: dict[tuple[int, str, str], float] = {}
    # Transfer time depends on size alone unless the model says otherwise: memoise it.
    by_size = type(cost).tensor_transfer_time is CostModel.tensor_transfer_time
    channels: list[tuple[str, ...]] = []
    duration: list[float] = []
    readers: list[int] = []
    offsets = [0]
    position = a.position
    for t in plan.transfers:
        pair = (t.src, t.dst)
        if pair not in routes:
            routes[pair] = tuple(h.channel for h in cluster.route(t.src, t.dst))
        channels.append(routes[pair])
        if by_size:
            size = (t.nbytes, t.src, t.dst)
            if size not in durations:
                durations[size] = cost.transfer_time(t.nbytes, t.src, t.dst)
            duration.append(durations[size])
        else:
            duration.append(cost.tensor_transfer_time(t.tensor, t.nbytes, t.src, t.dst))
        readers.extend(position[c] for c in t.consumers)
        offsets.append(len(readers))
    return (np.asarray(duration, dtype=float), tuple(channels),
            np.asarray(readers, dtype=np.int64), np.asarray(offsets, dtype=np.int64))


def combine(jobs: Sequence[Wiring], n_dev: int) -> Wiring:
    """Several jobs' wirings as one, job ``j``'s device ``d`` becoming ``j * n_dev + d``
    (a job's view of a device) and every op, key and transfer index shifted past the jobs
    before it.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from policies import plan
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> w = wire(plan(build_model("mlp"), c, "round_robin"), c, RooflineCost(c))
    >>> both = combine([w, w], 4)
    >>> both.n_ops == 2 * w.n_ops and len(both.order) == 8
    True
    """
    shift = {"op": 0, "key": 0, "transfer": 0}
    parts: list[Wiring] = []
    for j, w in enumerate(jobs):
        changes: dict[str, object] = {f: getattr(w, f) + shift["op"] for f in _OP_REF}
        changes |= {f: getattr(w, f) + shift["key"] for f in _KEY_REF}
        changes |= {f: getattr(w, f) + j * n_dev for f in _DEV_REF}
        changes["send"] = w.send + shift["transfer"]
        changes["order"] = tuple(o + shift["op"] for o in w.order)
        parts.append(replace(w, **changes))  # type: ignore[arg-type]
        shift["op"] += w.n_ops
        shift["key"] += len(w.key_bytes)
        shift["transfer"] += len(w.t_src)
    return _concatenate(parts)


def _concatenate(parts: list[Wiring]) -> Wiring:
    joined: dict[str, object] = {}
    for f in fields(Wiring):
        columns = [getattr(w, f.name) for w in parts]
        if f.name in _OFFSETS:
            base = np.cumsum([0] + [len(getattr(w, _OFFSETS[f.name])) for w in parts])
            joined[f.name] = np.concatenate(
                [c[:-1] + b for c, b in zip(columns, base, strict=False)] + [base[-1:]])
        elif f.name in ("order", "names", "t_channels", "transfer_names"):
            joined[f.name] = tuple(x for c in columns for x in c)
        else:
            joined[f.name] = np.concatenate(columns)
    return Wiring(**joined)  # type: ignore[arg-type]
