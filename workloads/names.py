"""What a name may be: of ops, devices, clusters and links, as files and messages show it."""

from __future__ import annotations

from workloads.errors import PlacelabError

__all__ = ["check_name", "name_problem"]


def name_problem(value: object) -> str | None:
    """Why ``value`` is not a name (a non-empty string of printable characters: a newline
    or a tab would break the one-line messages and tables that show it), or None.

    >>> name_problem("gpu0"), name_problem("a\\nb"), name_problem(5)
    (None, 'a non-empty string of printable characters', 'a string')
    """
    if not isinstance(value, str):
        return "a string"
    if not value or not value.isprintable():
        return "a non-empty string of printable characters"
    return None


def check_name(owner: str, value: object, error: type[PlacelabError]) -> None:
    """Raise ``error`` (``owner: name must be ..., got ...``) unless ``value`` is a name.

    >>> check_name("device", "", PlacelabError)
    Traceback (most recent call last):
    ...
    workloads.errors.PlacelabError: device: name must be a non-empty string of printable ...
    """
    problem = name_problem(value)
    if problem is not None:
        raise error(f"{owner}: name must be {problem}, got {value!r}")
