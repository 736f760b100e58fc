"""The standard passes: dead-code elimination, common-subexpression elimination and
elementwise fusion."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from workloads.errors import GraphError
from workloads.graph import Graph, Op
from workloads.params import Param
from workloads.passes.base import Pass, register_pass
from workloads.training import COLOCATE, OPTIMIZERS, training_graph

__all__ = ["CommonSubexpressionElimination", "DeadCodeElimination", "ElementwiseFusion"]


def _rebuild(graph: Graph, ops: Iterable[Op], rename: Mapping[str, str] | None = None) -> Graph:
    """A graph of ``ops`` with tensor references renamed, keeping name and outputs."""
    rename = dict(rename or {})
    if rename:
        ops = [replace(op, inputs=tuple(rename.get(t, t) for t in op.inputs)) for op in ops]
    outputs = list(dict.fromkeys(rename.get(t, t) for t in graph.outputs))
    return graph.derive(ops, outputs)


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

    The fused op keeps what running it needs: ``attrs["fused_ops"]`` lists each folded
    stage (kind, attributes, inputs, the tensor it reads from the stage before, parameter
    count) and ``attrs["fused_head_inputs"]`` how many of its inputs the first op read.
    """

    name = "fuse_elementwise"

    def call(self, graph: Graph) -> tuple[Graph, bool]:
        state = _FusionState(graph)
        modified = False
        # One sweep folds every chain; a fusion can free another (the fused op may become an
        # input's only reader), so sweep until one changes nothing. Each sweep is linear.
        while state.sweep():
            modified = True
        if not modified:
            return graph, False
        return graph.derive(list(state.ops.values())), True


_FUSION_KEYS = ("fused", "fused_head_inputs", "fused_ops")


def _stage(consumer: Op, chain: str) -> dict[str, Any]:
    """What executing ``consumer`` inside a fused op needs: its kind, attributes, own inputs
    (``chain`` is the one the previous stage computes) and parameter count."""
    own = consumer.attrs.get("fused_head_inputs", len(consumer.inputs))
    chained = sum(s["params"] for s in consumer.attrs.get("fused_ops", ()))
    return {"name": consumer.name, "kind": consumer.kind,
            "attrs": {k: v for k, v in consumer.attrs.items() if k not in _FUSION_KEYS},
            "inputs": consumer.inputs[:own], "chain": chain,
            "params": consumer.params - chained}


class _FusionState:
    """The graph being fused: ops by name (in graph order), each tensor's current producer
    and readers."""

    def __init__(self, graph: Graph) -> None:
        self.order = graph.topological_order()
        self.ops: dict[str, Op] = {op.name: op for op in graph}
        self.producer: dict[str, str] = dict(graph.producers())
        self.readers: dict[str, list[str]] = {t: list(graph.consumers(t))
                                              for t in self.producer}
        self.outputs = set(graph.outputs)

    def sweep(self) -> bool:
        changed = False
        for name in self.order:
            consumer = self.ops.get(name)
            if consumer is None or consumer.op_class != "elementwise" \
                    or len(consumer.outputs) != 1:
                continue
            for tensor in dict.fromkeys(consumer.inputs):
                if self._fusable(tensor, consumer):
                    self._fuse(self.ops[self.producer[tensor]], consumer)
                    changed = True
                    break
        return changed

    def _fusable(self, tensor: str, consumer: Op) -> bool:
        producer = self.ops[self.producer[tensor]]
        return (len(producer.outputs) == 1 and producer.op_class != "source"
                and producer.bytes_written > 0 and tensor not in self.outputs
                and self.readers[tensor] == [consumer.name])

    def _fuse(self, producer: Op, consumer: Op) -> None:
        middle = producer.outputs[0]
        inputs = producer.inputs + tuple(t for t in consumer.inputs if t != middle.name
                                         and t not in producer.inputs)
        self.ops[producer.name] = replace(
            producer, inputs=inputs, outputs=consumer.outputs,
            attrs={**producer.attrs,
                   "fused": (*producer.attrs.get("fused", ()), consumer.name,
                             *consumer.attrs.get("fused", ())),
                   "fused_head_inputs": producer.attrs.get("fused_head_inputs",
                                                           len(producer.inputs)),
                   "fused_ops": (*producer.attrs.get("fused_ops", ()),
                                 _stage(consumer, middle.name),
                                 *consumer.attrs.get("fused_ops", ()))},
            flops=producer.flops + consumer.flops,
            bytes_read=producer.bytes_read + consumer.bytes_read - middle.nbytes,
            bytes_written=producer.bytes_written - middle.nbytes + consumer.bytes_written,
            params=producer.params + consumer.params,
            param_bytes=producer.param_bytes + consumer.param_bytes,
            workspace_bytes=max(producer.workspace_bytes, consumer.workspace_bytes),
        )
        del self.ops[consumer.name]
        del self.readers[middle.name]
        for out in consumer.outputs:
            self.producer[out.name] = producer.name
        for tensor in dict.fromkeys(consumer.inputs):
            readers = self.readers.get(tensor)
            if readers is None:
                continue
            readers.remove(consumer.name)
            if producer.name not in readers:
                readers.append(producer.name)


@register_pass
class TrainingStep(Pass):
    """The training step of a forward graph (:func:`workloads.training.training_graph`):
    forward, loss, backward and the optimizer's update, as a pass, so that it composes
    with the others (``--passes fuse_elementwise,train:optimizer=adam``)."""

    name = "train"
    idempotent = False
    keeps_outputs = False
    params = (Param("optimizer", "str", "sgd", choices=tuple(sorted(OPTIMIZERS)),
                    doc="the optimizer whose update ends the step"),
              Param("colocate", "str", "ops", choices=COLOCATE,
                    doc="ops that must share a device (see workloads.training)"))

    def __init__(self, optimizer: str = "sgd", colocate: str = "ops") -> None:
        self.optimizer = self.checked("optimizer", optimizer)
        self.colocate = self.checked("colocate", colocate)

    def requires(self, graph: Graph) -> None:
        step = graph.meta.get("step", "forward")
        if step != "forward":
            raise GraphError(f"pass 'train': graph {graph.name!r} is already a {step} "
                             f"step; expected a forward graph")

    def call(self, graph: Graph) -> tuple[Graph, bool]:
        return training_graph(graph, self.optimizer, colocate=self.colocate), True
