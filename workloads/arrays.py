"""A graph flattened into integer arrays, for executors whose hot loops index by number.

Ops are numbered in topological order; tensors in that order of their producers. Edges are
the distinct (consumer, tensor) pairs, sorted by consumer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from workloads.dtypes import DTYPE_BYTES, OP_CLASSES

if TYPE_CHECKING:
    from workloads.graph import Graph

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
        DTYPES = tuple(DTYPE_BYTES)
        names = graph.topological_order()
        position = {name: i for i, name in enumerate(names)}
        ops = [graph.op(name) for name in names]
        tensor_names, tensor_bytes, tensor_producer, out_offsets = [], [], [], [0]
        for i, op in enumerate(ops):
            for t in op.outputs:
                tensor_names.append(t.name)
                tensor_bytes.append(t.nbytes)
                tensor_producer.append(i)
            out_offsets.append(len(tensor_names))
        tensor_index = {name: k for k, name in enumerate(tensor_names)}
        src, dst, tensor = [], [], []
        for j, op in enumerate(ops):
            for name in (op.inputs if len(op.inputs) < 2 else dict.fromkeys(op.inputs)):
                k = tensor_index[name]
                src.append(tensor_producer[k])
                dst.append(j)
                tensor.append(k)
        workspace = np.fromiter((op.workspace_bytes for op in ops), np.int64, len(ops))
        tbytes = np.asarray(tensor_bytes, dtype=np.int64)
        producers = np.asarray(tensor_producer, dtype=np.int64)
        out_bytes = np.zeros(len(ops), dtype=np.int64)
        np.add.at(out_bytes, producers, tbytes)
        return cls(
            names=names, position=position, tensor_names=tuple(tensor_names),
            tensor_index=tensor_index, tensor_bytes=tbytes,
            tensor_producer=producers,
            out_offsets=np.asarray(out_offsets, dtype=np.int64),
            edge_src=np.asarray(src, dtype=np.int64),
            edge_dst=np.asarray(dst, dtype=np.int64),
            edge_tensor=np.asarray(tensor, dtype=np.int64),
            alloc_bytes=out_bytes + workspace, workspace_bytes=workspace,
            param_bytes=np.fromiter((op.param_bytes for op in ops), np.int64, len(ops)),
            flops=np.fromiter((op.flops for op in ops), np.float64, len(ops)),
            moved_bytes=np.fromiter((op.bytes_read + op.bytes_written for op in ops),
                                    np.float64, len(ops)),
            op_class=np.fromiter((OP_CLASSES.index(op.op_class) for op in ops), np.int64,
                                 len(ops)),
            dtype=np.fromiter((DTYPES.index(op.dtype) for op in ops), np.int64, len(ops)),
        )
