"""The common IR's graph: the validated DAG :class:`Graph` of :class:`Op` and :class:`Tensor`.

Op costs are facts of the op (FLOPs, bytes moved, parameter and workspace bytes), never of a
device: hardware models turn them into times.
"""

from __future__ import annotations

import builtins
import heapq
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property, partial
from itertools import chain, filterfalse, repeat
from operator import attrgetter
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

import networkx as nx
import numpy as np

from workloads.arrays import GraphArrays
from workloads.collect import gc_paused
from workloads.errors import GraphError
from workloads.op import Op, Tensor

__all__ = ["Edge", "Graph", "Op", "Tensor"]

FORMAT = "placelab.graph"

_name, _inputs, _outputs = attrgetter("name"), attrgetter("inputs"), attrgetter("outputs")
VERSION = 1
#: Peak memory of loading a graph file, per byte of the file: a lower bound from the
#: measurement of a 1M-op ``layered_dag`` (a 285 MiB file peaked at 5.0 GiB, 17.6 bytes per
#: byte); loading is refused only where even this much does not fit.
LOAD_BYTES_PER_FILE_BYTE = 12


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
                 outputs: Iterable[str] | None = None, *,
                 meta: Mapping[str, Any] | None = None) -> None:
        self.name = name
        #: What the graph is of: ``model``, ``batch``, ``seq_len``, ``dtype``, ``step``
        #: (``forward`` or ``train.<optimizer>``) and what transforms record, as given.
        self.meta: Mapping[str, Any] = MappingProxyType(dict(meta or {}))
        # Built with C-level iteration (map, zip, chain) and checked in bulk; a failed check
        # walks the ops again to name the first offender. Graphs reach a million ops.
        with gc_paused():
            ops = list(ops)
            self._ops: dict[str, Op] = dict(zip(map(_name, ops), ops, strict=True))
            tensors = list(chain.from_iterable(map(_outputs, ops)))
            self._tensors: dict[str, Tensor] = dict(zip(map(_name, tensors), tensors,
                                                        strict=True))
            if len(self._ops) < len(ops) or len(self._tensors) < len(tensors):
                self._raise_duplicate(ops)
            self._producer: dict[str, str] = dict(zip(
                self._tensors, chain.from_iterable(
                    repeat(op.name, len(op.outputs)) for op in ops), strict=True))
            self._index = dict(zip(self._ops, range(len(ops)), strict=True))
            self._outputs = self._check_outputs(outputs)
            self._topo: tuple[str, ...] = self._topological_sort()

    def _raise_duplicate(self, ops: list[Op]) -> None:
        names: set[str] = set()
        producer: dict[str, str] = {}
        for op in ops:
            if op.name in names:
                raise GraphError(f"graph {self.name!r}: duplicate op name {op.name!r}")
            names.add(op.name)
            for tensor in op.outputs:
                if tensor.name in producer:
                    raise GraphError(
                        f"op {op.name!r}: output tensor name {tensor.name!r} is already "
                        f"produced by op {producer[tensor.name]!r}")
                producer[tensor.name] = op.name

    def _producer_ranks(self) -> tuple[np.ndarray, np.ndarray]:
        """For every input read (in graph order): the reader's index and the producer's."""
        inputs = list(map(_inputs, self._ops.values()))
        producers = list(map(self._producer.get, chain.from_iterable(inputs)))
        if None in producers:
            for op in self._ops.values():
                for tensor in op.inputs:
                    if tensor not in self._producer:
                        raise GraphError(f"op {op.name!r}: input tensor {tensor!r} is "
                                         f"produced by no op")
        readers = np.repeat(np.arange(len(inputs), dtype=np.int64),
                            np.fromiter(map(len, inputs), np.int64, len(inputs)))
        known = cast(list[str], producers)  # no None left: checked above
        return readers, np.fromiter(map(self._index.__getitem__, known), np.int64, len(known))

    @cached_property
    def _consumers(self) -> dict[str, list[str]]:
        consumers: dict[str, list[str]] = {t: [] for t in self._tensors}
        for op in self._ops.values():
            for tensor in dict.fromkeys(op.inputs):
                consumers[tensor].append(op.name)
        return consumers

    @cached_property
    def _preds(self) -> dict[str, tuple[str, ...]]:
        """Op -> the ops it reads from, first read first."""
        producer = self._producer
        return {op.name: tuple(dict.fromkeys(map(producer.__getitem__, op.inputs)))
                for op in self._ops.values()}

    @cached_property
    def _succs(self) -> dict[str, list[str]]:
        """Op -> the ops reading from it, in graph order."""
        succs: dict[str, list[str]] = {name: [] for name in self._ops}
        for name, preds in self._preds.items():
            for pred in preds:
                succs[pred].append(name)
        return succs

    def _topological_sort(self) -> tuple[str, ...]:
        """Kahn's algorithm taking the earliest op (graph order) among the ready ones; when
        the graph order is already topological (the usual case) it is the answer as is."""
        readers, producers = self._producer_ranks()
        if (producers < readers).all():
            return self.names
        index = self._index
        waiting = {name: len(preds) for name, preds in self._preds.items()}
        ready = [i for i, n in enumerate(waiting.values()) if n == 0]
        names, order = self.names, []
        heapq.heapify(ready)
        while ready:
            name = names[heapq.heappop(ready)]
            order.append(name)
            for succ in self._succs[name]:
                waiting[succ] -= 1
                if waiting[succ] == 0:
                    heapq.heappush(ready, index[succ])
        if len(order) < len(names):
            self._raise_cycle()
        return tuple(order)

    def _check_outputs(self, outputs: Iterable[str] | None) -> tuple[str, ...]:
        if outputs is None:
            read = set(chain.from_iterable(map(_inputs, self._ops.values())))
            return tuple(filterfalse(read.__contains__, self._tensors))
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

    @cached_property
    def _nx(self) -> nx.DiGraph:
        """The op DAG as networkx holds it, built on first use (algorithms, export)."""
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

    def _raise_cycle(self) -> None:
        cycle = [u for u, _ in nx.find_cycle(self._nx)]
        raise GraphError(
            f"graph {self.name!r}: ops must form a DAG, got a cycle through "
            f"{' -> '.join(repr(c) for c in cycle + cycle[:1])}"
        )

    # -- queries ------------------------------------------------------------------------

    @property
    def ops(self) -> tuple[Op, ...]:
        return tuple(self._ops.values())

    def ops_by_name(self) -> Mapping[str, Op]:
        """Op name -> op, in graph order (a read-only view)."""
        return MappingProxyType(self._ops)

    @cached_property
    def names(self) -> tuple[str, ...]:
        """Op names in graph order."""
        return tuple(self._ops)

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
                and self.outputs == other.outputs and dict(self.meta) == dict(other.meta))

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its name, ops, outputs and metadata, rebuilt (and checked) by the
        constructor: ``meta`` is a read-only view, which pickle cannot take, and the arrays
        derived from the ops are made again, read-only, when first asked for.

        >>> import pickle
        >>> from workloads.zoo import build_model
        >>> g = build_model("mlp", batch=8)
        >>> pickle.loads(pickle.dumps(g)) == g
        True
        """
        return (partial(Graph, meta=dict(self.meta)),
                (self.name, self.ops, self._outputs))

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
        """Names of the ops ``name`` reads from, in graph order."""
        return tuple(sorted(self._preds[self.op(name).name], key=self._index.__getitem__))

    def successors(self, name: str) -> tuple[str, ...]:
        """Names of the ops that read from ``name``, in graph order."""
        return tuple(self._succs[self.op(name).name])

    def position(self, name: str) -> int:
        """Where op ``name`` stands in the graph's own op order (0 for the first)."""
        try:
            return self._index[name]
        except KeyError:
            raise GraphError(f"graph {self.name!r}: no op named {name!r}") from None

    def topological_order(self) -> tuple[str, ...]:
        """Op names in a dependency-respecting order; ties keep the graph's op order."""
        return self._topo

    @cached_property
    def arrays(self) -> GraphArrays:
        """The graph as integer arrays (ops in topological order), built on first use."""
        with gc_paused():
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
    def collectives(self) -> tuple[str, ...]:
        """Names of the collective ops (their placement is a device group), graph order.

        >>> from workloads import build_model
        >>> build_model("mlp").collectives
        ()
        """
        from workloads.collectives import COLLECTIVE_KINDS

        return tuple(op.name for op in self._ops.values() if op.kind in COLLECTIVE_KINDS)

    @cached_property
    def groups(self) -> dict[str, tuple[str, ...]]:
        """Co-placement groups (ops naming the same ``attrs["colocate"]`` must share a
        device): group -> its ops in topological order.

        >>> from workloads import build_model, training_graph
        >>> training_graph(build_model("mlp"), colocate="weights").groups["fc2"]
        ('fc2.weights', 'fc2', 'fc2.update')
        """
        out: dict[str, list[str]] = {}
        flagged = [op.name for op in self._ops.values() if op.attrs and "colocate" in op.attrs]
        if not flagged:
            return {}
        for name in self._topo:
            group = self._ops[name].attrs.get("colocate")
            if group is not None:
                if not isinstance(group, str) or not group:
                    raise GraphError(f"op {name!r}: attrs.colocate must be a non-empty "
                                     f"string naming a group, got {group!r}")
                out.setdefault(group, []).append(name)
        return {g: tuple(ops) for g, ops in out.items()}

    @cached_property
    def group_index(self) -> np.ndarray:
        """Each op's co-placement group as an index into :attr:`groups` (-1: none), in
        :attr:`arrays` order (read-only).

        >>> from workloads import build_model, training_graph
        >>> g = training_graph(build_model("mlp"), colocate="weights")
        >>> list(g.groups)[int(g.group_index[g.arrays.position["fc2.update"]])]
        'fc2'
        """
        index = np.full(len(self._ops), -1, np.int64)
        position = self.arrays.position
        for k, ops in enumerate(self.groups.values()):
            index[[position[name] for name in ops]] = k
        index.setflags(write=False)
        return index

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
                **({"meta": dict(self.meta)} if self.meta else {}),
                "ops": [op.to_dict() for op in self._ops.values()],
                "outputs": list(self._outputs)}

    def derive(self, ops: Iterable[Op], outputs: Iterable[str] | None = None, *,
               name: str | None = None, **meta: Any) -> Graph:
        """A new graph of ``ops`` that keeps this one's name and metadata (``meta``
        updates it; ``outputs``: this graph's by default).

        >>> from workloads.zoo import build_model
        >>> g = build_model("mlp", batch=8)
        >>> g.derive(g.ops, step="forward", note="copy").meta["batch"]
        8
        """
        return Graph(self.name if name is None else name, ops,
                     self.outputs if outputs is None else outputs,
                     meta={**self.meta, **meta})

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
        from workloads.shapes import check_edges

        try:
            graph = cls(doc.name, ops, doc.outputs, meta=doc.meta)
            check_edges(graph)  # a file's shapes, unlike a builder's, can contradict
        except GraphError as err:
            raise GraphError(f"{source}: {err}") from None
        return graph

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str | builtins.bytes, *, source: str = "graph") -> Graph:
        from workloads.schema import load_json

        return cls.from_dict(load_json(text, source=source, error=GraphError), source=source)

    @classmethod
    def load(cls, path: str | Path) -> Graph:
        """Read a graph JSON file (:meth:`to_json`'s output)."""
        return cls.from_json(read_graph_text(path), source=str(path))


def read_graph_text(path: str | Path) -> str:
    """The text of graph file ``path``, refused in one line if it cannot be read or if
    loading it would need more memory than is left (see :func:`workloads.io.check_room`)."""
    from workloads.io import check_room, read_text

    check_room(path, LOAD_BYTES_PER_FILE_BYTE, GraphError, "graph file")
    return read_text(path, GraphError, "graph file")
