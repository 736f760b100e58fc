"""Lazy package namespaces (PEP 562): a package names its public objects and the submodule
each lives in, and each is imported on first use.

This keeps every contract importable without the implementations beside it: ``import sim``
loads no policy, ``placelab --help`` no pandas.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["attach"]


def attach(package: str, where: Mapping[str, str]
           ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: name -> submodule (relative).

    >>> getattr_, dir_ = attach("json", {"JSONDecoder": "decoder"})
    >>> getattr_("JSONDecoder").__name__
    'JSONDecoder'
    """

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__
