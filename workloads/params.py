"""What a plug-in's parameters are: :class:`Param` declares one (type, default, valid
values), so that the CLI, a sweep and the plug-in itself (a placement policy, a sharing
policy, a pass) read and check it the same way; :func:`parse_spec` reads
``name:key=value,...`` against the declarations."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workloads.errors import PlacelabError, PlacementError

__all__ = ["Param", "parse_spec", "split_specs"]

_KINDS = ("int", "float", "str", "bool", "seed")


@dataclass(frozen=True)
class Param:
    """One keyword parameter of a policy's constructor.

    ``kind`` is ``int``, ``float``, ``str``, ``bool`` or ``seed`` (an integer >= 0, a
    ``numpy.random.Generator`` or None); ``minimum`` bounds a number (inclusive for an int,
    exclusive for a float); ``choices`` lists a string's values; ``optional`` admits None.

    >>> Param("max_blocks", "int", 2000, minimum=1).parse("optimal", "8")
    8
    >>> Param("replicas", "int", 2, minimum=1).check("dp", 0, what="pass")
    Traceback (most recent call last):
    ...
    workloads.errors.PlacementError: pass 'dp': replicas must be an int >= 1, got 0
    >>> Param("ties", "str", "level", choices=("level", "topo")).describe()
    'one of level, topo'
    """

    name: str
    kind: str
    default: Any
    minimum: float | None = None
    choices: tuple[str, ...] = ()
    optional: bool = False
    doc: str = ""

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise PlacementError(f"parameter {self.name!r}: kind must be one of "
                                 f"{', '.join(_KINDS)}, got {self.kind!r}")

    def describe(self) -> str:
        """The valid values, in words."""
        if self.kind == "seed":
            return "an integer >= 0, a numpy.random.Generator or None"
        if self.choices:
            text = "one of " + ", ".join(self.choices)
        elif self.kind == "int":
            text = "an int" + (f" >= {self.minimum:g}" if self.minimum is not None else "")
        elif self.kind == "float":
            text = "a finite number" + (f" > {self.minimum:g}" if self.minimum is not None
                                        else "")
        else:
            text = {"bool": "true or false", "str": "a string"}[self.kind]
        return text + (" or None" if self.optional else "")

    def check(self, policy: str, value: Any, *, what: str = "policy",
              error: type[PlacelabError] = PlacementError) -> Any:
        """``value`` if valid (an integer as ``int``), else a one-line ``error`` naming
        the plug-in (``what`` and its name ``policy``), the parameter and the value."""
        if value is None and (self.optional or self.kind == "seed"):
            return None
        if self._valid(value):
            if self.kind == "seed" and isinstance(value, np.random.Generator):
                return value
            return int(value) if self.kind in ("int", "seed") else value
        raise error(f"{what} {policy!r}: {self.name} must be {self.describe()}, "
                    f"got {value!r}")

    def _valid(self, value: Any) -> bool:
        if self.kind == "seed":
            return isinstance(value, np.random.Generator) or (
                isinstance(value, numbers.Integral) and not isinstance(value, bool)
                and int(value) >= 0)
        if self.kind == "bool":
            return isinstance(value, bool)
        if self.kind == "str":
            return isinstance(value, str) and (not self.choices or value in self.choices)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        number = float(value)
        if self.kind == "int":
            return isinstance(value, numbers.Integral) and (
                self.minimum is None or number >= self.minimum)
        return math.isfinite(number) and (self.minimum is None or number > self.minimum)

    def parse(self, policy: str, text: str, *, what: str = "policy",
              error: type[PlacelabError] = PlacementError) -> Any:
        """``text`` (from ``name:key=value``) as this parameter's value, checked."""
        if text.lower() == "none" and (self.optional or self.kind == "seed"):
            return None
        try:
            value: Any = {"int": int, "seed": int, "float": float, "str": str}[self.kind](
                text) if self.kind != "bool" else {"true": True, "false": False}[text.lower()]
        except (ValueError, KeyError):
            raise error(f"{what} {policy!r}: {self.name} must be {self.describe()}, "
                        f"got {text!r}") from None
        return self.check(policy, value, what=what, error=error)


def parse_spec(spec: str, params: Sequence[Param], *, what: str,
               error: type[PlacelabError]) -> tuple[str, dict[str, Any]]:
    """``name:key=value,...`` as the name and its keyword arguments, each read and checked
    as its declaration says.

    >>> parse_spec("dp:replicas=4", [Param("replicas", "int", 2, minimum=1)], what="pass",
    ...            error=PlacelabError)
    ('dp', {'replicas': 4})
    """
    name, _, given = spec.partition(":")
    declared = {p.name: p for p in params}
    kwargs: dict[str, Any] = {}
    for item in filter(None, given.split(",")):
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or key not in declared:
            raise error(f"{what} {name!r}: expected parameters key=value with keys among "
                        f"{', '.join(declared) or 'none'}, got {item!r}")
        if key in kwargs:
            raise error(f"{what} {name!r}: expected each parameter once, got {key} twice")
        kwargs[key] = declared[key].parse(name, text.strip(), what=what, error=error)
    return name, kwargs


def split_specs(text: str) -> list[str]:
    """``"heft,optimal:node_limit=50,max_ops=12"`` -> ``["heft", "optimal:node_limit=50,
    max_ops=12"]``: a comma followed by ``key=value`` continues the spec before it.

    >>> split_specs("cse,dp:replicas=4,bucket_mb=25,dce")
    ['cse', 'dp:replicas=4,bucket_mb=25', 'dce']
    """
    specs: list[str] = []
    for token in text.split(","):
        if "=" in token and ":" not in token and specs:
            specs[-1] += "," + token
        else:
            specs.append(token)
    return specs
