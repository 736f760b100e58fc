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

__all__ = ["Check", "ConformanceError", "parametrize", "require", "run_checks"]

S = TypeVar("S")


class ConformanceError(AssertionError):
    """A plug-in broke a property of its suite (the message names plug-in, check, case)."""


def require(condition: bool, message: str) -> None:
    """Fail the check with ``message`` (not an ``assert``: it must hold under ``-O`` too)."""
    if not condition:
        raise ConformanceError(message)


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


def parametrize(argnames: tuple[str, str], pairs: Sequence[tuple[S, str, Check[S]]]
                ) -> MarkDecorator:
    """A ``pytest.mark.parametrize`` over (plug-in, check) pairs, each item named
    ``<label>-<check>``."""
    import pytest

    params = [pytest.param(source, check, id=f"{label}-{check.name}")
              for source, label, check in pairs]
    return pytest.mark.parametrize(argnames, params)
