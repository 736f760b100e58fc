"""The standard passes: dead-code elimination, common-subexpression elimination and
elementwise fusion."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from workloads.graph import Graph, Op
from workloads.passes.base import Pass, register_pass

__all__ = ["CommonSubexpressionElimination", "DeadCodeElimination", "ElementwiseFusion"]


def _rebuild(graph: Graph, ops: Iterable[Op], rename: Mapping[str, str] | None = None) -> Graph:
    """A graph of ``ops`` with tensor references renamed, keeping name and outputs."""
    rename = dict(rename or {})
    if rename:
        ops = [replace(op, inputs=tuple(rename.get(t, t) for t in op.inputs)) for op in ops]
    outputs = list(dict.fromkeys(rename.get(t, t) for t in graph.outputs))
    return Graph(graph.name, ops, outputs)


@register_pass
class DeadCodeElimination(Pass):
    """Drops every op that contributes to no graph output and has no effect of its own
    (ops without outputs, such as weight updates, are effects and stay).

    >>> from workloads import build_model
    >>> g = build_model("inception_v3")
    >>> main = Graph(g.name, g.ops, ["softmax"])  # the main head only
    >>> pruned, changed = DeadCodeElimination()(main)
    >>> changed, any(op.name.startswith("AuxLogits") for op in pruned)
    (True, False)
    """

    name = "dce"

    def call(self, graph: Graph) -> tuple[Graph, bool]:
        live: set[str] = set()
        stack = [graph.producer(t) for t in graph.outputs]
        stack += [op.name for op in graph if not op.outputs]
        while stack:
            name = stack.pop()
            if name not in live:
                live.add(name)
                stack.extend(graph.predecessors(name))
        if len(live) == len(graph):
            return graph, False
        return _rebuild(graph, [op for op in graph if op.name in live]), True


def _signature(op: Op) -> tuple[Any, ...] | None:
    """What makes two ops compute the same thing; None for ops never merged (own weights,
    graph inputs, effects)."""
    if op.params or op.param_bytes or op.op_class == "source" or not op.outputs:
        return None
    attrs = tuple(sorted((k, repr(v)) for k, v in op.attrs.items()))
    outs = tuple((t.shape, t.dtype) for t in op.outputs)
    return (op.kind, op.op_class, op.inputs, attrs, outs, op.flops, op.bytes_read,
            op.bytes_written, op.workspace_bytes)


@register_pass
class CommonSubexpressionElimination(Pass):
    """Merges ops that compute the same function of the same inputs: the later one goes
    and its readers read the earlier one's outputs."""

    name = "cse"

    def call(self, graph: Graph) -> tuple[Graph, bool]:
        seen: dict[tuple[Any, ...], Op] = {}
        rename: dict[str, str] = {}
        kept: list[Op] = []
        for name in graph.topological_order():
            op = graph.op(name)
            if rename:
                op = replace(op, inputs=tuple(rename.get(t, t) for t in op.inputs))
            key = _signature(op)
            if key is not None and key in seen:
                for mine, theirs in zip(op.outputs, seen[key].outputs, strict=True):
                    rename[mine.name] = theirs.name
                continue
            if key is not None:
                seen[key] = op
            kept.append(op)
        if not rename:
            return graph, False
        return _rebuild(graph, kept, rename), True


@register_pass
class ElementwiseFusion(Pass):
    """Folds an elementwise op into the op producing its input when that input is read by
    nothing else: one op (the producer's kind and class) computes both, and the intermediate
    tensor is neither written nor read back. Chains fold one link per round until none is
    left. Views (ops that move no bytes) are not fused into.
    """

    name = "fuse_elementwise"

    def call(self, graph: Graph) -> tuple[Graph, bool]:
        modified = False
        while True:
            pair = self._find(graph)
            if pair is None:
                return graph, modified
            graph = self._fuse(graph, *pair)
            modified = True

    @staticmethod
    def _find(graph: Graph) -> tuple[Op, Op] | None:
        outputs = set(graph.outputs)
        for name in graph.topological_order():
            consumer = graph.op(name)
            if consumer.op_class != "elementwise" or len(consumer.outputs) != 1:
                continue
            for tensor in dict.fromkeys(consumer.inputs):
                producer = graph.op(graph.producer(tensor))
                if (len(producer.outputs) == 1 and producer.op_class != "source"
                        and producer.bytes_written > 0 and tensor not in outputs
                        and graph.consumers(tensor) == (consumer.name,)):
                    return producer, consumer
        return None

    @staticmethod
    def _fuse(graph: Graph, producer: Op, consumer: Op) -> Graph:
        middle = producer.outputs[0]
        inputs = producer.inputs + tuple(t for t in consumer.inputs if t != middle.name
                                         and t not in producer.inputs)
        fused = replace(
            producer, inputs=inputs, outputs=consumer.outputs,
            attrs={**producer.attrs,
                   "fused": (*producer.attrs.get("fused", ()), consumer.name)},
            flops=producer.flops + consumer.flops,
            bytes_read=producer.bytes_read + consumer.bytes_read - middle.nbytes,
            bytes_written=producer.bytes_written - middle.nbytes + consumer.bytes_written,
            params=producer.params + consumer.params,
            param_bytes=producer.param_bytes + consumer.param_bytes,
            workspace_bytes=max(producer.workspace_bytes, consumer.workspace_bytes),
        )
        ops = [fused if op.name == producer.name else op for op in graph
               if op.name != consumer.name]
        return Graph(graph.name, ops, graph.outputs)
