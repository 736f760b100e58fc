"""A named registry for plug-ins, loud on duplicates, fed by code and entry points.

Policies, cost models, passes and zoo models each keep one. Built-in members are declared
by name and ``"module:attribute"`` and imported on their first lookup, so that listing names
or importing a contract never loads every implementation. Third-party packages register
through an entry point group (``placelab.policies``, ``placelab.cost_models``,
``placelab.passes``); those are loaded once, on the first lookup, and one that fails to load
is reported as a warning naming its distribution while every other plug-in still loads.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Iterator, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

from workloads.errors import RegistryError

__all__ = ["PluginWarning", "Registry"]

T = TypeVar("T")


class PluginWarning(UserWarning):
    """A third-party plug-in could not be loaded or registered; the others still are."""


def _target(item: Any) -> str:
    return f"{getattr(item, '__module__', '')}:{getattr(item, '__qualname__', '')}"


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
    >>> lazy: Registry[object] = Registry("function", builtins={"dumps": "json:dumps"})
    >>> lazy.names(), lazy.get("dumps").__name__
    (['dumps'], 'dumps')
    """

    def __init__(self, what: str, group: str | None = None, *,
                 builtins: Mapping[str, str] | None = None) -> None:
        self.what = what
        self.group = group
        self._items: dict[str, T] = {}
        self._lazy: dict[str, str] = dict(builtins or {})
        self._entry_points_read = group is None

    def register(self, name: str, item: T | None = None) -> Any:
        """Add ``item`` as ``name``; a name already taken is an error. Without ``item``, a
        decorator that registers what it decorates (and returns it).

        Registering the very object a built-in entry names (its module being imported)
        resolves that entry instead.
        """
        if item is None:
            def decorate(obj: T) -> T:
                self.register(name, obj)
                return obj
            return decorate
        if not isinstance(name, str) or not name:
            raise RegistryError(f"{self.what} name must be a non-empty string, got {name!r}")
        if name in self._lazy and self._lazy[name] == _target(item):
            del self._lazy[name]
        elif name in self._items or name in self._lazy:
            raise RegistryError(f"{self.what} {name!r} is already registered")
        self._items[name] = item

    def make(self, spec: str) -> Any:
        """A member made from ``name`` or ``name:key=value,...``: a
        :class:`~workloads.plugin.Plugin` class's declared parameters, each value read and
        checked as its :class:`~workloads.params.Param` says (errors of the member's family).

        >>> from workloads.passes import PASSES
        >>> PASSES.make("train:optimizer=adam")
        TrainingStep(optimizer='adam', colocate='ops')
        """
        from workloads.params import parse_spec

        cls: Any = self.get(spec.partition(":")[0])
        _, kwargs = parse_spec(spec, getattr(cls, "params", ()), what=self.what,
                               error=getattr(cls, "error", RegistryError))
        return cls(**kwargs)

    def unregister(self, name: str) -> None:
        """Remove ``name`` (for tests and interactive sessions)."""
        self._read_entry_points()
        if name in self._lazy:
            del self._lazy[name]
        elif name in self._items:
            del self._items[name]
        else:
            raise RegistryError(f"{self.what} {name!r} is not registered")

    def get(self, name: str) -> T:
        self._read_entry_points()
        if name in self._items:
            return self._items[name]
        if name in self._lazy:
            return self._resolve(name)
        raise RegistryError(
            f"unknown {self.what} {name!r}; expected one of: {', '.join(self.names())}")

    def names(self) -> list[str]:
        """Every registered name, sorted (nothing is imported to list them)."""
        self._read_entry_points()
        return sorted({*self._items, *self._lazy})

    def __contains__(self, name: object) -> bool:
        self._read_entry_points()
        return name in self._items or name in self._lazy

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def _resolve(self, name: str) -> T:
        module, _, attribute = self._lazy[name].partition(":")
        item: T = getattr(importlib.import_module(module), attribute)
        # Importing the module may have registered it already (a decorator).
        self._lazy.pop(name, None)
        self._items.setdefault(name, item)
        return self._items[name]

    def _read_entry_points(self) -> None:
        if self._entry_points_read or self.group is None:
            return
        for ep in entry_points(group=self.group):
            self._load_entry_point(ep)
        # Marked only once every plug-in was tried, so a failure cannot hide later ones.
        self._entry_points_read = True

    def _load_entry_point(self, ep: EntryPoint) -> None:
        dist = ep.dist.name if ep.dist is not None else "unknown distribution"
        where = f"{self.what} plug-in {ep.name!r} ({ep.value}) of distribution {dist!r}"
        try:
            item = ep.load()
        # A broken plug-in names itself and spoils nothing else: one that calls sys.exit
        # on import must not end the command that happened to list it.
        except (Exception, SystemExit) as err:
            warnings.warn(f"{where} failed to load and is skipped: "
                          f"{type(err).__name__}: {err}", PluginWarning, stacklevel=4)
            return
        if name_taken := (ep.name in self._items or ep.name in self._lazy):
            warnings.warn(f"{where} is skipped: {self.what} {ep.name!r} is already "
                          f"registered", PluginWarning, stacklevel=4)
        if not name_taken:
            self._items[ep.name] = item
