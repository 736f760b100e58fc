"""One declarative schema per file format, validated by pydantic, with one-line errors.

Every format placelab reads (graph and plan JSON, hardware and cost-table TOML, sweep and
tenant specs) declares its shape once as a :class:`Schema`; :func:`validate` checks a parsed
document against it and turns the first problem into one line that names the file, the path
inside it, what was expected and what was got::

    x.toml: device[0].memory_gib: expected a number greater than 0, got -4

pydantic was chosen because it rejects NaN and infinity with one setting, is strict about
types (no ``"5"`` for 5, no ``true`` for 1), forbids unknown keys, and reports the location
of every error as a path; this module is imported only when a file is read or a spec is
first built.

The specs that code builds directly (``hwmodels.Device`` and the like) are checked by the
same library against rules that carry their own words (``Field(description="must be a
finite number > 0")``); :func:`rule_message` turns a failure into the spec's one line,
``peak.fp32 must be a finite number > 0, got -1``.
"""

from __future__ import annotations

import json
import types
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Tag, ValidationError
from pydantic.fields import FieldInfo
from typing_extensions import get_type_hints, is_typeddict

from workloads.errors import PlacelabError
from workloads.op import INT64_MAX

__all__ = ["INT64_MAX", "MAX_DEPTH", "RULES_CONFIG", "Schema", "check_depth", "describe_path",
           "load_json", "load_toml", "rule_message", "validate"]

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


#: The configuration of the rules a spec is checked against (a ``TypedDict`` of its fields):
#: a schema's, less what only a file needs.
RULES_CONFIG = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


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
    # pydantic names the union member it tried ("int", "list[...]", or a discriminated
    # union's tag, written "<number>" in our rules): not a place in the file
    return isinstance(part, str) and (
        "[" in part or part in ("int", "float", "str") or part.startswith("<"))


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



# -- the one line of a spec that breaks a rule ----------------------------------------------

#: Errors that say a value has the wrong shape (not a number, not a table, a row too long),
#: rather than the right shape and a bad value.
_SHAPE_ERRORS = frozenset({"missing", "too_long", "is_instance_of", "literal_error",
                           "union_tag_invalid", "union_tag_not_found"})


def rule_message(err: ValidationError, rules: Any, data: Any, *, path: str = "") -> str:
    """The first failure of ``data`` against ``rules`` (a described type, or a ``TypedDict``
    whose fields are annotated with described types) as one line: ``path words, got value``,
    the path inside ``data`` coming after ``path``.

    The words are the ``description`` of the innermost described type on the error's path;
    a value of the wrong shape inside one alternative of a union fits none, so it gets the
    words of the union; a validator's ``ValueError`` speaks for itself; a bad key of a
    mapping is named with the mapping's key type's words.

    >>> from typing import Annotated
    >>> from pydantic import Field, TypeAdapter
    >>> Rates = dict[str, Annotated[float, Field(gt=0, description="must be > 0")]]
    >>> try:
    ...     TypeAdapter(Rates).validate_python({"fp32": -1})
    ... except ValidationError as err:
    ...     rule_message(err, Rates, {"fp32": -1}, path="rate")
    'rate.fp32 must be > 0, got -1'
    """
    error = err.errors(include_url=False)[0]
    loc = tuple(error["loc"])
    if loc and loc[-1] == "[key]":
        words = _described(rules, loc)[-1][1]
        return f"{_dotted((path, *loc[:-2]))} {words}, got {loc[-2]!r}"
    found = _described(rules, loc)
    if error["type"] == "value_error":
        depth, words = found[-1][0], str(error["ctx"]["error"])
    elif error["type"].endswith("_type") or error["type"] in _SHAPE_ERRORS:
        depth, words = next(((d, w) for d, w, branch in reversed(found) if not branch),
                            found[-1][:2])
    else:
        depth, words = found[-1][:2]
    value = _at(data, loc[:depth])
    shown = "none" if isinstance(value, Mapping) and not value else repr(value)
    return f"{_dotted((path, *loc[:depth]))} {words}, got {shown}"


def _dotted(loc: Sequence[str | int]) -> str:
    return ".".join(str(p) for p in loc if p != "" and not _is_union_tag(p))


def _at(data: Any, loc: Sequence[str | int]) -> Any:
    """The value at ``loc`` inside ``data`` (union tags skipped)."""
    for part in loc:
        if not _is_union_tag(part):
            data = data[part]
    return data


def _described(rules: Any, loc: Sequence[str | int]) -> list[tuple[int, str, bool]]:
    """``(depth, words, inside a union's alternative)`` of every described type that the
    path ``loc`` passes through, outermost first."""
    found: list[tuple[int, str, bool]] = []
    tp, depth, branch = rules, 0, False
    while True:
        if get_origin(tp) is Annotated:
            tp, *meta = get_args(tp)
            found += [(depth, m.description, branch) for m in meta
                      if isinstance(m, FieldInfo) and m.description]
            continue
        if depth >= len(loc):
            return found
        part, origin, args = loc[depth], get_origin(tp), get_args(tp)
        if is_typeddict(tp):
            tp = get_type_hints(tp, include_extras=True)[str(part)]
        elif origin in (Union, types.UnionType):
            tagged = [a for a in args if part in _tags(a)]
            if not tagged:  # ``T | None``: pydantic names no alternative
                tp = next(a for a in args if a is not type(None))
                continue
            tp, branch = tagged[0], True
        elif origin in (dict, Mapping):
            key = depth + 1 < len(loc) and loc[depth + 1] == "[key]"
            tp = args[0] if key else args[1]
            depth += key
        elif origin is tuple:
            tp = args[0] if args[-1] is Ellipsis else args[int(part)]
        elif origin in (list, Sequence):
            tp = args[0]
        else:
            return found
        depth += 1


def _tags(tp: Any) -> tuple[str, ...]:
    return tuple(m.tag for m in get_args(tp)[1:] if isinstance(m, Tag)) if (
        get_origin(tp) is Annotated) else ()
