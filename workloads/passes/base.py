"""The pass contract (``requires -> call -> ensures``), the pass manager and the registry.

A pass takes a graph and returns ``(graph, modified)``; it never changes its input (graphs
are immutable). The manager runs passes in order and, when one fails, names it and the
passes that ran before it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from workloads.errors import GraphError
from workloads.graph import Graph
from workloads.plugin import Plugin
from workloads.registry import Registry

__all__ = ["PASSES", "Pass", "PassManager", "make_pass", "register_pass"]


class Pass(Plugin, ABC):
    """One graph transformation. Required: :meth:`call`; hooks default to no checks.
    Arguments are keyword parameters of the constructor, declared in :attr:`params` (so
    ``--passes train:optimizer=adam`` and a sweep read and check them) and stored under
    their own names."""

    family = "pass"
    error = GraphError
    #: Applying the pass to its own result changes nothing (the conformance suite checks it).
    idempotent: ClassVar[bool] = True
    #: The result keeps every output of the input (a training step ends elsewhere).
    keeps_outputs: ClassVar[bool] = True

    def requires(self, graph: Graph) -> None:
        """Raise :class:`GraphError` if ``graph`` is not one this pass accepts."""

    def accepts(self, graph: Graph) -> bool:
        """Whether :meth:`requires` lets ``graph`` through."""
        try:
            self.requires(graph)
        except GraphError:
            return False
        return True

    @abstractmethod
    def call(self, graph: Graph) -> tuple[Graph, bool]:
        """The transformed graph and whether anything changed."""

    def ensures(self, before: Graph, after: Graph) -> None:
        """Raise :class:`GraphError` if ``after`` breaks what this pass promises."""
        if not self.keeps_outputs:
            return
        missing = [t for t in before.outputs if t not in after.outputs]
        if missing:
            raise GraphError(f"pass {self.name!r}: lost graph output {missing[0]!r}")

    def __call__(self, graph: Graph) -> tuple[Graph, bool]:
        self.requires(graph)
        result, modified = self.call(graph)
        self.ensures(graph, result)
        return result, modified


#: The standard passes, imported on first lookup.
PASSES: Registry[type[Pass]] = Registry("pass", "placelab.passes", builtins={
    "train": "workloads.passes.standard:TrainingStep",
    "dce": "workloads.passes.standard:DeadCodeElimination",
    "cse": "workloads.passes.standard:CommonSubexpressionElimination",
    "fuse_elementwise": "workloads.passes.standard:ElementwiseFusion",
})


def register_pass(cls: type[Pass]) -> type[Pass]:
    """Class decorator: register ``cls`` under ``cls.name`` (a duplicate is an error)."""
    PASSES.register(cls.name, cls)
    return cls


def make_pass(spec: str) -> Pass:
    """A registered pass from ``name`` or ``name:key=value,...`` (its declared parameters).

    >>> make_pass("train:optimizer=adam")
    TrainingStep(optimizer='adam', colocate='ops')
    """
    made: Pass = PASSES.make(spec)
    return made


class PassManager:
    """Runs passes in order, optionally until nothing changes.

    >>> from workloads import build_model
    >>> g, changed = PassManager(["fuse_elementwise"]).run(build_model("resnet50"))
    >>> changed, len(g) < len(build_model("resnet50"))
    (True, True)
    """

    def __init__(self, passes: Sequence[Pass | str], *, until_fixed_point: bool = False,
                 max_rounds: int = 10) -> None:
        self.passes = [make_pass(p) if isinstance(p, str) else p for p in passes]
        self.until_fixed_point = until_fixed_point
        self.max_rounds = max_rounds

    def run(self, graph: Graph) -> tuple[Graph, bool]:
        modified_any = False
        for _ in range(self.max_rounds if self.until_fixed_point else 1):
            modified_round = False
            ran: list[str] = []
            for p in self.passes:
                try:
                    graph, modified = p(graph)
                except GraphError as err:
                    before = ", ".join(ran) or "none"
                    raise GraphError(f"pass {p.name!r} failed (passes run before it: "
                                     f"{before}): {err}") from err
                ran.append(p.name)
                modified_round |= modified
            modified_any |= modified_round
            if not modified_round:
                break
        return graph, modified_any
