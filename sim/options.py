"""The simulator's run options, importable without the simulator (the CLI lists them)."""

from __future__ import annotations

__all__ = ["LINK_MODELS", "ORDERS"]

#: How a device picks its next op: the plan's order, or the ready op of highest priority.
ORDERS: tuple[str, ...] = ("plan", "priority")

#: How transfers share copy engines and links: one at a time, first come first served
#: (``fcfs``), max-min fair bandwidth with latency as pure delay (``fair``), or not at all
#: (``none``: every transfer starts when its tensor is ready, as a list scheduler's own
#: model assumes).
LINK_MODELS: tuple[str, ...] = ("fcfs", "fair", "none")
