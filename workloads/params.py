"""What a plug-in's parameters are: :class:`Param` declares one (type, default, valid
values), so that the CLI, a sweep and the plug-in itself (a placement policy, a sharing
policy, a pass) read and check it the same way; :func:`parse_spec` reads
``name:key=value,...`` against the declarations.

A parameter's valid values are a pydantic type (:func:`param_type`: its kind with its bound,
choices and None), validated by a ``TypeAdapter`` made on first use and shared by every
parameter with the same declaration."""

from __future__ import annotations

import numbers
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np

from workloads.errors import PlacelabError, PlacementError

if TYPE_CHECKING:
    from pydantic import TypeAdapter

__all__ = ["Param", "param_type", "parse_spec", "split_specs"]

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
        try:
            valid = _adapter(self.kind, self.minimum, self.choices,
                             self.optional).validate_python(value)
        except ValueError:  # a pydantic ValidationError: its words are describe()'s
            raise error(f"{what} {policy!r}: {self.name} must be {self.describe()}, "
                        f"got {value!r}") from None
        return value if self.kind == "float" else valid  # a number stays as it was given

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


def param_type(kind: str, minimum: float | None = None, choices: tuple[str, ...] = (),
               optional: bool = False) -> Any:
    """The pydantic type of a parameter's valid values (checked strictly: no ``"5"`` for
    5, no ``True`` for 1, no NaN or infinity); numpy's integers count as ints.

    >>> from pydantic import TypeAdapter
    >>> TypeAdapter(param_type("int", minimum=1)).validate_python(np.int64(3))
    3
    """
    from pydantic import BeforeValidator, Field, InstanceOf, Strict

    as_int = BeforeValidator(_as_int)
    base: Any
    if kind == "seed":
        base = (Annotated[int, Field(ge=0), Strict(), as_int]
                | InstanceOf[np.random.Generator])
    elif kind == "int":
        base = Annotated[int, Field(ge=minimum), Strict(), as_int]
    elif kind == "float":
        base = Annotated[float, Field(gt=minimum, allow_inf_nan=False), Strict(),
                         BeforeValidator(_not_bool)]
    elif kind == "str" and choices:
        base = Literal[choices]  # type: ignore[valid-type]
    else:
        base = Annotated[{"str": str, "bool": bool}[kind], Strict()]
    if optional or kind == "seed":
        base = base | None
    return base


def _as_int(value: Any) -> Any:
    # numpy's integers are ints to a parameter (a sweep's grid gives them); a bool is not
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return operator.index(value)
    return value


def _not_bool(value: Any) -> Any:
    # pydantic takes numpy's bool for a float (it has __float__); a parameter does not
    if isinstance(value, np.bool_):
        raise ValueError("a bool is not a number")
    return value


@cache
def _adapter(kind: str, minimum: float | None, choices: tuple[str, ...],
             optional: bool) -> TypeAdapter[Any]:
    from pydantic import TypeAdapter

    return TypeAdapter(param_type(kind, minimum, choices, optional))


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
