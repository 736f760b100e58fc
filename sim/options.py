"""The simulator's run options, importable without the simulator (the CLI lists them)."""

from __future__ import annotations

__all__ = ["ORDERS"]

#: How a device picks its next op: the plan's order, or the ready op of highest priority.
ORDERS: tuple[str, ...] = ("plan", "priority")
