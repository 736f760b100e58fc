"""The conformance suite every graph pass must pass, built-in or third-party.

Each property is a named :class:`Check`; :func:`parametrize_with_checks` makes one pytest
item per (pass, check)::

    from workloads.passes.testing import parametrize_with_checks

    @parametrize_with_checks([MyPass])
    def test_pass_conformance(pass_, check):
        check(pass_)

A pass is given as a registered name or a zero-argument factory. Properties, on zoo graphs
(forward and training, those the pass accepts): the input graph is not changed; the result
is a valid graph that round-trips through JSON and keeps every output of the input (unless
the pass declares it does not); ``modified=False`` means the very same graph came back; an
``idempotent`` pass changes nothing on its own result.

>>> check_pass("dce")  # raises ConformanceError naming every failed check
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from workloads.conformance import Check, ConformanceError, parametrize, run_checks
from workloads.conformance import require as _require
from workloads.graph import Graph
from workloads.passes.base import PASSES, Pass

if TYPE_CHECKING:
    from _pytest.mark import MarkDecorator

__all__ = ["CHECKS", "Check", "ConformanceError", "check_pass", "parametrize_with_checks"]

PassSource = str | Callable[[], Pass]


def _make(source: PassSource) -> Pass:
    return PASSES.get(source)() if isinstance(source, str) else source()


def _label(source: PassSource) -> str:
    return source if isinstance(source, str) else getattr(source, "name", repr(source))


def _graphs(source: PassSource | None = None) -> list[Graph]:
    """Zoo graphs, forward and training (those the pass accepts, given one)."""
    from workloads.training import training_graph
    from workloads.zoo import build_model

    inception = build_model("inception_v3")
    graphs = [build_model("resnet50"), build_model("bert_base", seq_len=16),
              inception.derive(inception.ops, ["softmax"]),
              training_graph(build_model("lenet5", batch=4), "adam")]
    return graphs if source is None else [g for g in graphs if _make(source).accepts(g)]


def check_input_unchanged(source: PassSource) -> None:
    """The input graph is equal, after the pass, to a copy taken before it."""
    for graph in _graphs(source):
        before = Graph.from_json(graph.to_json())
        _make(source)(graph)
        _require(graph == before, f"{_label(source)} changed its input {graph.name!r}")


def check_valid_result(source: PassSource) -> None:
    """The result round-trips through JSON and keeps every graph output."""
    for graph in _graphs(source):
        result, _ = _make(source)(graph)
        _require(isinstance(result, Graph), f"{_label(source)} returned {type(result)}")
        _require(Graph.from_json(result.to_json()) == result,
                 f"{_label(source)} on {graph.name!r}: the result does not round-trip")
        _require(not _make(source).keeps_outputs or set(graph.outputs) <= set(result.outputs),
                 f"{_label(source)} on {graph.name!r}: lost an output")


def check_modified_is_truthful(source: PassSource) -> None:
    """``modified=False`` comes with an unchanged graph; ``True`` with a changed one."""
    for graph in _graphs(source):
        result, modified = _make(source)(graph)
        _require(modified == (result != graph),
                 f"{_label(source)} on {graph.name!r}: reported modified={modified}")


def check_idempotent(source: PassSource) -> None:
    """Applied to its own result, the pass changes nothing."""
    for graph in _graphs(source):
        once, _ = _make(source)(graph)
        twice, modified = _make(source)(once)
        _require(not modified and twice == once,
                 f"{_label(source)} on {graph.name!r}: a second run changed the graph")


CHECKS: tuple[Check[PassSource], ...] = (
    Check("input_unchanged", check_input_unchanged),
    Check("valid_result", check_valid_result),
    Check("modified_is_truthful", check_modified_is_truthful),
    Check("idempotent", check_idempotent, lambda p: p.idempotent),
)


def _applicable(source: PassSource) -> list[Check[PassSource]]:
    made = _make(source)
    return [check for check in CHECKS if check.applies(made)]


def check_pass(source: PassSource) -> None:
    """Run every check that applies; raise one :class:`ConformanceError` listing every
    failure."""
    run_checks(_applicable(source), source)


def parametrize_with_checks(sources: Sequence[PassSource]) -> MarkDecorator:
    """A ``pytest.mark.parametrize`` over (pass, check), one item each."""
    return parametrize(("pass_", "check"), [(s, _label(s), c) for s in sources
                                            for c in _applicable(s)])
