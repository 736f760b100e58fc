"""One declarative schema per file format, validated by pydantic, with one-line errors.

Every format placelab reads (graph and plan JSON, hardware and cost-table TOML, sweep and
tenant specs) declares its shape once as a :class:`Schema`; :func:`validate` checks a parsed
document against it and turns the first problem into one line that names the file, the path
inside it, what was expected and what was got::

    x.toml: device[0].memory_gib: expected a number greater than 0, got -4

pydantic was chosen because it rejects NaN and infinity with one setting, is strict about
types (no ``"5"`` for 5, no ``true`` for 1), forbids unknown keys, and reports the location
of every error as a path; this module is imported only when a file is read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from workloads.errors import PlacelabError
from workloads.op import INT64_MAX

__all__ = ["INT64_MAX", "MAX_DEPTH", "Schema", "check_depth", "describe_path", "load_json",
           "load_toml", "validate"]

#: Nesting deeper than this in a data file can only be a mistake (or an attack).
MAX_DEPTH = 64

M = TypeVar("M", bound="BaseModel")

_EXPECT = {
    "greater_than": "a number greater than {gt}",
    "greater_than_equal": "a number >= {ge}",
    "less_than": "a number less than {lt}",
    "less_than_equal": "a number <= {le}",
    "finite_number": "a finite number",
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number",
    "string_type": "a string", "bool_type": "true or false",
    "list_type": "a list", "tuple_type": "a list", "dict_type": "a table",
    "model_type": "a table", "model_attributes_type": "a table",
    "missing": "a value (the field is required)",
    "extra_forbidden": "no such field",
    "literal_error": "one of {expected}",
    "string_too_short": "a non-empty string",
    "too_short": "at least {min_length} items", "too_long": "at most {max_length} items",
}


class Schema(BaseModel):
    """The base of every schema: strict types, no unknown keys, finite numbers only."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


def describe_path(loc: Sequence[str | int]) -> str:
    """``("device", 2, "link", 0, "bandwidth_gbps")`` -> ``device[2].link[0].bandwidth_gbps``.

    >>> describe_path(("device", 2, "link", 0, "bandwidth_gbps"))
    'device[2].link[0].bandwidth_gbps'
    """
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _expectation(error: Mapping[str, Any]) -> str:
    template = _EXPECT.get(error["type"])
    if template is None:
        return str(error["msg"]).replace("Value error, ", "").replace("Input should be ",
                                                                     "expected ")
    ctx = {k: int(v) if isinstance(v, float) and v.is_integer() else v
           for k, v in (error.get("ctx") or {}).items()}
    return "expected " + template.format(**ctx)


def _place(error: Mapping[str, Any]) -> tuple[str | int, ...]:
    return tuple(p for p in error["loc"] if not _is_union_tag(p))


def _most_precise(errors: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The first error, or where it is a union's, the deepest of its alternatives. An
    unknown key comes first: a misspelt key also makes the right one missing."""
    extra = [e for e in errors if e["type"] == "extra_forbidden"]
    if extra:
        return extra[0]
    first = _place(errors[0])
    same = [e for e in errors if _place(e)[:len(first)] == first]
    return max(same, key=lambda e: len(_place(e)))


def validate(schema: type[M], data: Any, *, source: str,
             error: type[PlacelabError] = PlacelabError) -> M:
    """``data`` (parsed JSON or TOML) checked against ``schema``; the first problem is
    raised as ``error`` with one line: ``source: path: expectation, got value``."""
    check_depth(data, source, error)
    try:
        return schema.model_validate(data)
    except ValidationError as err:
        first = _most_precise(err.errors(include_url=False))
        where = describe_path(_place(first))
        got = "nothing" if first["type"] == "missing" else _shown(first.get("input"))
        if first["type"] == "extra_forbidden":
            raise error(f"{source}: {where}: unknown field") from None
        raise error(f"{source}: {where}: {_expectation(first)}, got {got}") from None


def _is_union_tag(part: str | int) -> bool:
    # pydantic names the union member it tried ("int", "list[...]"): not a place in the file
    return isinstance(part, str) and ("[" in part or part in ("int", "float", "str"))


def check_depth(data: Any, source: str, error: type[PlacelabError]) -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH` (iteratively: no recursion limit)."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise error(f"{source}: expected nesting at most {MAX_DEPTH} deep, got deeper")
        if isinstance(value, Mapping):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list | tuple):
            stack.extend((v, depth + 1) for v in value)


def load_json(text: str | bytes, *, source: str, error: type[PlacelabError]) -> Any:
    """Parse JSON, refusing NaN and infinity (Python's parser accepts them) and anything
    that is not UTF-8, with one line naming ``source``."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise error(f"{source}: expected UTF-8 text, got a byte {text[err.start]:#x} "
                        f"at offset {err.start}") from None

    def refuse(token: str) -> float:
        raise error(f"{source}: expected finite numbers, got {token}")

    try:
        return json.loads(text, parse_constant=refuse)
    except json.JSONDecodeError as err:
        raise error(f"{source}: expected JSON, got a parse error: {err}") from None
    except RecursionError:
        raise error(f"{source}: expected nesting at most {MAX_DEPTH} deep, got "
                    f"deeper") from None


def load_toml(text: str, *, source: str, error: type[PlacelabError]) -> dict[str, Any]:
    """Parse TOML with one-line errors naming ``source`` (nesting too deep included:
    the standard parser recurses)."""
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise error(f"{source}: expected TOML, got a parse error: {err}") from None
    except RecursionError:
        raise error(f"{source}: expected nesting at most {MAX_DEPTH} deep, got "
                    f"deeper") from None

