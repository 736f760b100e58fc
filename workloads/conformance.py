"""What the conformance suites of policies, cost models and passes share: named checks,
one error type, a runner that reports every failure, and pytest parametrisation.

A suite is a tuple of :class:`Check`; a plug-in's tests run it as one pytest item per
(plug-in, check), in the manner of scikit-learn's ``parametrize_with_checks``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from _pytest.mark import MarkDecorator

__all__ = ["Check", "ConformanceError", "parametrize", "require", "require_plugin_contract",
           "run_checks"]

S = TypeVar("S")


class ConformanceError(AssertionError):
    """A plug-in broke a property of its suite (the message names plug-in, check, case)."""


def require(condition: bool, message: str) -> None:
    """Fail the check with ``message`` (not an ``assert``: it must hold under ``-O`` too)."""
    if not condition:
        raise ConformanceError(message)


def require_plugin_contract(member: Any, label: str) -> None:
    """What every family's ``declares_parameters`` check shares for a built member
    (:class:`workloads.plugin.Plugin`): ``get_params`` shows exactly the declared
    parameters, ``clone`` is a new member of the same class with the same ones, and ``repr``
    names the class. ``label`` names the member in the message."""
    params = member.get_params()
    declared = {p.name for p in member.params}
    require(set(params) == declared, f"{label}: get_params gave {sorted(params)}, it declares "
                                     f"{sorted(declared)}")
    twin = member.clone()
    require(type(twin) is type(member) and twin is not member and twin.get_params() == params,
            f"{label}: clone gave {twin!r} for {member!r}")
    require(repr(member).startswith(type(member).__name__ + "("),
            f"{label}: repr {member!r} does not name its class")


def _always(_: Any) -> bool:
    return True


@dataclass(frozen=True)
class Check(Generic[S]):
    """One named property; ``applies`` says which plug-ins (built) it concerns."""

    name: str
    run: Callable[[S], None]
    applies: Callable[[Any], bool] = _always

    def __call__(self, source: S) -> None:
        self.run(source)

    def __repr__(self) -> str:
        return self.name


def run_checks(checks: Sequence[Check[S]], source: S) -> None:
    """Run every check; raise one :class:`ConformanceError` that lists every failure."""
    failures = []
    for check in checks:
        try:
            check(source)
        except ConformanceError as err:
            failures.append(f"[{check.name}] {err}")
    if failures:
        raise ConformanceError("; ".join(failures))


def parametrize(argnames: tuple[str, str], pairs: Sequence[tuple[S, str, Check[S]]], *,
                skip: Callable[[S, Check[S]], str] | None = None) -> MarkDecorator:
    """A ``pytest.mark.parametrize`` over (plug-in, check) pairs, each item named
    ``<label>-<check>``; ``skip(source, check)``, where given, says why this machine cannot
    run an item ("" where it can), and the item skips with that reason."""
    import pytest

    params = []
    for source, label, check in pairs:
        reason = skip(source, check) if skip else ""
        params.append(pytest.param(source, check, id=f"{label}-{check.name}",
                                   marks=(pytest.mark.skip(reason=reason),) if reason else ()))
    return pytest.mark.parametrize(argnames, params)
