"""A policy's parameters: :class:`~workloads.params.Param` (declared once for every kind of
plug-in, in the lowest layer), re-exported where policies have always found it."""

from __future__ import annotations

from workloads.params import Param

__all__ = ["Param"]
