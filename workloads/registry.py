"""A named registry for plug-ins, loud on duplicates, fed by code and entry points.

Policies, cost models and passes each keep one. Third-party packages register through an
entry point group (``placelab.policies``, ``placelab.cost_models``, ``placelab.passes``);
the entry points are read once, on the first lookup.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from workloads.errors import RegistryError

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to plug-ins of one family.

    >>> r: Registry[int] = Registry("number")
    >>> r.register("one", 1)
    >>> r.get("one")
    1
    >>> r.register("one", 2)
    Traceback (most recent call last):
    ...
    workloads.errors.RegistryError: number 'one' is already registered
    """

    def __init__(self, what: str, group: str | None = None) -> None:
        self.what = what
        self.group = group
        self._items: dict[str, T] = {}
        self._loaded_entry_points = group is None

    def register(self, name: str, item: T) -> None:
        if not isinstance(name, str) or not name:
            raise RegistryError(f"{self.what} name must be a non-empty string, got {name!r}")
        if name in self._items:
            raise RegistryError(f"{self.what} {name!r} is already registered")
        self._items[name] = item

    def unregister(self, name: str) -> None:
        """Remove ``name`` (for tests and interactive sessions)."""
        self._load_entry_points()
        if name not in self._items:
            raise RegistryError(f"{self.what} {name!r} is not registered")
        del self._items[name]

    def get(self, name: str) -> T:
        self._load_entry_points()
        try:
            return self._items[name]
        except KeyError:
            raise RegistryError(
                f"unknown {self.what} {name!r}; expected one of: {', '.join(self.names())}"
            ) from None

    def names(self) -> list[str]:
        self._load_entry_points()
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        self._load_entry_points()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def _load_entry_points(self) -> None:
        if self._loaded_entry_points:
            return
        self._loaded_entry_points = True
        for ep in entry_points(group=self.group):
            try:
                item = ep.load()
            except Exception as err:  # a broken plug-in must name itself
                raise RegistryError(
                    f"{self.what} entry point {ep.name!r} ({ep.value}) failed to load: {err}"
                ) from err
            self.register(ep.name, item)
