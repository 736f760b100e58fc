"""A graph flattened into integer arrays, for executors whose hot loops index by number.

Ops are numbered in topological order; tensors in that order of their producers. Edges are
the distinct (consumer, tensor) pairs, sorted by consumer.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import TYPE_CHECKING

import numpy as np

from workloads.dtypes import DTYPE_BYTES, OP_CLASSES

if TYPE_CHECKING:
    from workloads.graph import Graph
    from workloads.op import Op, Tensor

__all__ = ["GraphArrays"]


@dataclass(frozen=True)
class GraphArrays:
    """Integer (and per-op cost) views of a :class:`~workloads.graph.Graph` (built once per graph).

    >>> from workloads import build_model
    >>> a = build_model("mlp").arrays
    >>> a.names[0], int(a.edge_src[0]), int(a.edge_dst[0])
    ('input', 0, 1)
    >>> a.flops.flags.writeable
    False
    """

    names: tuple[str, ...]
    position: dict[str, int]
    tensor_names: tuple[str, ...]
    tensor_index: dict[str, int]
    tensor_bytes: np.ndarray
    tensor_producer: np.ndarray
    out_offsets: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_tensor: np.ndarray
    alloc_bytes: np.ndarray
    workspace_bytes: np.ndarray
    param_bytes: np.ndarray
    flops: np.ndarray
    moved_bytes: np.ndarray
    op_class: np.ndarray  #: index into ``workloads.graph.OP_CLASSES``
    dtype: np.ndarray     #: index into ``DTYPES`` (the keys of ``DTYPE_BYTES``)

    def __post_init__(self) -> None:
        # Shared by every executor and policy of the graph: writing into one would change
        # their answers while the graph stays the same, so the arrays are read-only.
        for value in vars(self).values():
            if isinstance(value, np.ndarray):
                value.flags.writeable = False

    @classmethod
    def from_graph(cls, graph: Graph) -> GraphArrays:
        # Built with C-level iteration (map, chain, fromiter): graphs reach a million ops.
        names = graph.topological_order()
        ops = list(map(graph.ops_by_name().__getitem__, names))
        outputs = list(map(attrgetter("outputs"), ops))
        counts = np.fromiter(map(len, outputs), np.int64, len(ops))
        tensors = list(chain.from_iterable(outputs))
        tensor_names = tuple(map(attrgetter("name"), tensors))
        tensor_index = dict(zip(tensor_names, range(len(tensor_names)), strict=True))
        tbytes = np.fromiter(map(attrgetter("nbytes"), tensors), np.int64, len(tensors))
        producers = np.repeat(np.arange(len(ops), dtype=np.int64), counts)
        src, dst, tensor = cls._edges(ops, tensor_index, producers)
        out_bytes = np.zeros(len(ops), dtype=np.int64)
        np.add.at(out_bytes, producers, tbytes)
        workspace = _column(ops, "workspace_bytes", np.int64)
        classes = {c: i for i, c in enumerate(OP_CLASSES)}
        dtypes = {d: i for i, d in enumerate(DTYPE_BYTES)}
        return cls(
            names=names, position=dict(zip(names, range(len(names)), strict=True)),
            tensor_names=tensor_names, tensor_index=tensor_index,
            tensor_bytes=tbytes, tensor_producer=producers,
            out_offsets=np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
            edge_src=src, edge_dst=dst, edge_tensor=tensor,
            alloc_bytes=out_bytes + workspace, workspace_bytes=workspace,
            param_bytes=_column(ops, "param_bytes", np.int64),
            flops=_column(ops, "flops", np.float64),
            # Summed as floats: the sum of two int64 counts may pass int64.
            moved_bytes=(_column(ops, "bytes_read", np.float64)
                         + _column(ops, "bytes_written", np.float64)),
            op_class=np.fromiter(map(classes.__getitem__, map(attrgetter("op_class"), ops)),
                                 np.int64, len(ops)),
            dtype=_first_output_dtype(tensors, counts, dtypes),
        )

    @staticmethod
    def _edges(ops: list[Op], tensor_index: dict[str, int],
               producer: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(producer, consumer, tensor) of every distinct (consumer, tensor) pair."""
        inputs = list(map(attrgetter("inputs"), ops))
        per_op = np.fromiter(map(len, inputs), np.int64, len(ops))
        total = int(per_op.sum())
        tensor = np.fromiter(map(tensor_index.__getitem__, chain.from_iterable(inputs)),
                             np.int64, total)
        dst = np.repeat(np.arange(len(ops), dtype=np.int64), per_op)
        distinct = np.fromiter(map(len, map(frozenset, inputs)), np.int64, len(ops))
        if (distinct < per_op).any():  # an op reads one tensor twice: one edge
            key = dst * max(len(tensor_index), 1) + tensor
            _, first = np.unique(key, return_index=True)
            keep = np.sort(first)
            tensor, dst = tensor[keep], dst[keep]
        return producer[tensor], dst, tensor


def _column(ops: list[Op], field: str, dtype: type) -> np.ndarray:
    return np.fromiter(map(attrgetter(field), ops), dtype, len(ops))


def _first_output_dtype(tensors: list[Tensor], counts: np.ndarray,
                        codes: dict[str, int]) -> np.ndarray:
    """Each op's compute dtype (``Op.dtype``: its first output's, fp32 without outputs)."""
    of_tensor = np.fromiter(map(codes.__getitem__, map(attrgetter("dtype"), tensors)),
                            np.int64, len(tensors))
    first = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    out = np.full(len(counts), codes["fp32"], dtype=np.int64)
    has = counts > 0
    out[has] = of_tensor[first[has]]
    return out
