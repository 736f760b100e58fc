"""The common IR's graph: the validated DAG :class:`Graph` of :class:`Op` and :class:`Tensor`.

Op costs are facts of the op (FLOPs, bytes moved, parameter and workspace bytes), never of a
device: hardware models turn them into times.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

import networkx as nx

from workloads.arrays import GraphArrays
from workloads.errors import GraphError
from workloads.op import Op, Tensor

__all__ = ["Edge", "Graph", "Op", "Tensor"]

FORMAT = "placelab.graph"
VERSION = 1


@dataclass(frozen=True)
class Edge:
    """A data dependency: ``tensor`` flows from op ``src`` to op ``dst``."""

    src: str
    dst: str
    tensor: Tensor


class Graph:
    """A validated DAG of ops; edges are implied by the tensors ops consume.

    Validation on construction: op and tensor names unique, every input produced by some op,
    no cycle. The op order given is kept; :meth:`topological_order` is deterministic.

    >>> from workloads.zoo import build_model
    >>> g = build_model("mlp", batch=8)
    >>> Graph.from_json(g.to_json()) == g
    True
    """

    def __init__(self, name: str, ops: Iterable[Op],
                 outputs: Iterable[str] | None = None) -> None:
        self.name = name
        self._ops: dict[str, Op] = {}
        self._producer: dict[str, str] = {}
        self._tensors: dict[str, Tensor] = {}
        for op in ops:
            self._add(op)
        self._consumers: dict[str, list[str]] = {t: [] for t in self._tensors}
        for op in self._ops.values():
            for tensor in op.inputs:
                if tensor not in self._producer:
                    raise GraphError(
                        f"op {op.name!r}: input tensor {tensor!r} is produced by no op"
                    )
                if op.name not in self._consumers[tensor]:
                    self._consumers[tensor].append(op.name)
        self._outputs = self._check_outputs(outputs)
        self._nx = self._build_nx()
        self._check_acyclic()
        self._topo: tuple[str, ...] = tuple(
            nx.lexicographical_topological_sort(self._nx, key=self._index.__getitem__)
        )

    def _check_outputs(self, outputs: Iterable[str] | None) -> tuple[str, ...]:
        if outputs is None:
            return tuple(t for t, readers in self._consumers.items() if not readers)
        names = tuple(dict.fromkeys(outputs))
        for name in names:
            if name not in self._tensors:
                raise GraphError(f"graph {self.name!r}: output {name!r} is not a tensor of "
                                 f"the graph")
        return names

    @property
    def outputs(self) -> tuple[str, ...]:
        """The tensors the graph computes for its user (default: those no op reads)."""
        return self._outputs

    def _add(self, op: Op) -> None:
        if op.name in self._ops:
            raise GraphError(f"graph {self.name!r}: duplicate op name {op.name!r}")
        self._ops[op.name] = op
        for tensor in op.outputs:
            if tensor.name in self._tensors:
                raise GraphError(
                    f"op {op.name!r}: output tensor name {tensor.name!r} is already "
                    f"produced by op {self._producer[tensor.name]!r}"
                )
            self._tensors[tensor.name] = tensor
            self._producer[tensor.name] = op.name

    def _build_nx(self) -> nx.DiGraph:
        self._index = {name: i for i, name in enumerate(self._ops)}
        g = nx.DiGraph(name=self.name)
        g.add_nodes_from(self._ops)
        for edge in self.edges():
            if g.has_edge(edge.src, edge.dst):
                data = g.edges[edge.src, edge.dst]
                data["tensors"].append(edge.tensor.name)
                data["bytes"] += edge.tensor.nbytes
            else:
                g.add_edge(edge.src, edge.dst, tensors=[edge.tensor.name],
                           bytes=edge.tensor.nbytes)
        return g

    def _check_acyclic(self) -> None:
        if nx.is_directed_acyclic_graph(self._nx):
            return
        cycle = [u for u, _ in nx.find_cycle(self._nx)]
        raise GraphError(
            f"graph {self.name!r}: ops must form a DAG, got a cycle through "
            f"{' -> '.join(repr(c) for c in cycle + cycle[:1])}"
        )

    # -- queries ------------------------------------------------------------------------

    @property
    def ops(self) -> tuple[Op, ...]:
        return tuple(self._ops.values())

    def __len__(self) -> int:
        return len(self._ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self._ops.values())

    def __contains__(self, name: object) -> bool:
        return name in self._ops

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return (self.name == other.name and self.ops == other.ops
                and self.outputs == other.outputs)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, ops={len(self)})"

    def op(self, name: str) -> Op:
        try:
            return self._ops[name]
        except KeyError:
            raise GraphError(f"graph {self.name!r}: no op named {name!r}") from None

    def tensor(self, name: str) -> Tensor:
        try:
            return self._tensors[name]
        except KeyError:
            raise GraphError(f"graph {self.name!r}: no tensor named {name!r}") from None

    def producer(self, tensor: str) -> str:
        """Name of the op that produces ``tensor``."""
        return self._producer[tensor]

    def producers(self) -> Mapping[str, str]:
        """Tensor name -> producing op name, for every tensor (a read-only view)."""
        return MappingProxyType(self._producer)

    def consumers(self, tensor: str) -> tuple[str, ...]:
        """Names of the ops that read ``tensor``, in graph order."""
        return tuple(self._consumers[tensor])

    def edges(self) -> Iterator[Edge]:
        """Every (producer, consumer, tensor) triple, in graph order."""
        for op in self._ops.values():
            seen: set[str] = set()
            for name in op.inputs:
                if name not in seen:
                    seen.add(name)
                    yield Edge(self._producer[name], op.name, self._tensors[name])

    def predecessors(self, name: str) -> tuple[str, ...]:
        return tuple(sorted(self._nx.predecessors(name), key=self._index.__getitem__))

    def successors(self, name: str) -> tuple[str, ...]:
        return tuple(sorted(self._nx.successors(name), key=self._index.__getitem__))

    def topological_order(self) -> tuple[str, ...]:
        """Op names in a dependency-respecting order; ties keep the graph's op order."""
        return self._topo

    @cached_property
    def arrays(self) -> GraphArrays:
        """The graph as integer arrays (ops in topological order), built on first use."""
        return GraphArrays.from_graph(self)

    def to_networkx(self) -> nx.DiGraph:
        """A copy of the op DAG; edges carry ``tensors`` (names) and ``bytes``."""
        return self._nx.copy()

    def to_networkx_view(self) -> nx.DiGraph:
        """The op DAG itself, read-only (no copy: for algorithms that only look)."""
        return self._nx.copy(as_view=True)

    # -- totals -------------------------------------------------------------------------

    @property
    def flops(self) -> int:
        return sum(op.flops for op in self._ops.values())

    @property
    def params(self) -> int:
        return sum(op.params for op in self._ops.values())

    @property
    def param_bytes(self) -> int:
        """Resident state: the ops' own (parameters, buffers, optimizer state) and the
        weights ``parameter`` ops hold."""
        return sum(op.param_bytes for op in self._ops.values()) + self._weight_bytes

    @property
    def _weight_bytes(self) -> int:
        return sum(op.output.nbytes for op in self._ops.values() if op.kind == "parameter")

    @property
    def activation_bytes(self) -> int:
        """Bytes of every tensor produced but weights, as if none were ever freed."""
        return sum(t.nbytes for t in self._tensors.values()) - self._weight_bytes

    @cached_property
    def groups(self) -> dict[str, tuple[str, ...]]:
        """Co-placement groups (ops naming the same ``attrs["colocate"]`` must share a
        device): group -> its ops in topological order.

        >>> from workloads import build_model, training_graph
        >>> training_graph(build_model("mlp"), colocate="weights").groups["fc2"]
        ('fc2.weights', 'fc2', 'fc2.update')
        """
        out: dict[str, list[str]] = {}
        for name in self._topo:
            group = self._ops[name].attrs.get("colocate")
            if group is not None:
                if not isinstance(group, str) or not group:
                    raise GraphError(f"op {name!r}: attrs.colocate must be a non-empty "
                                     f"string naming a group, got {group!r}")
                out.setdefault(group, []).append(name)
        return {g: tuple(ops) for g, ops in out.items()}

    @property
    def bytes(self) -> int:
        """Bytes read and written by all ops."""
        return sum(op.bytes_read + op.bytes_written for op in self._ops.values())

    def summary(self) -> dict[str, Any]:
        """The figures ``placelab model show`` prints."""
        return {
            "name": self.name, "ops": len(self), "params": self.params,
            "flops": self.flops, "bytes": self.bytes,
            "param_bytes": self.param_bytes, "activation_bytes": self.activation_bytes,
        }

    # -- serialisation ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "name": self.name,
                "ops": [op.to_dict() for op in self._ops.values()],
                "outputs": list(self._outputs)}

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "graph") -> Graph:
        """A graph from its parsed JSON form, checked against the graph schema; an error is
        one line naming ``source``, the path inside it, the expectation and the value."""
        from workloads.formats import GraphDocument
        from workloads.schema import validate

        doc = validate(GraphDocument, data, source=source, error=GraphError)
        ops = []
        for i, o in enumerate(doc.ops):
            try:
                ops.append(Op(
                    name=o.name, kind=o.kind, op_class=o.op_class, inputs=tuple(o.inputs),
                    outputs=tuple(Tensor(t.name, tuple(t.shape), t.dtype) for t in o.outputs),
                    attrs=o.attrs, flops=o.flops, bytes_read=o.bytes_read,
                    bytes_written=o.bytes_written, params=o.params, param_bytes=o.param_bytes,
                    workspace_bytes=o.workspace_bytes))
            except GraphError as err:
                raise GraphError(f"{source}: ops[{i}]: {err}") from None
        try:
            return cls(doc.name, ops, doc.outputs)
        except GraphError as err:
            raise GraphError(f"{source}: {err}") from None

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str | builtins.bytes, *, source: str = "graph") -> Graph:
        from workloads.schema import load_json

        return cls.from_dict(load_json(text, source=source, error=GraphError), source=source)

    @classmethod
    def load(cls, path: str | Path) -> Graph:
        """Read a graph JSON file (:meth:`to_json`'s output)."""
        from workloads.io import read_text

        return cls.from_json(read_text(path, GraphError, "graph file"), source=str(path))
