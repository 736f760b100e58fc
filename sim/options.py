"""The simulator's run options, importable without the simulator (the CLI lists them).

Issue orders and link models are parts of a run (:class:`sim.engine.Simulation`) chosen by
name from a registry; third-party ones come in through the ``placelab.issue_orders`` and
``placelab.link_models`` entry point groups.
"""

from __future__ import annotations

from typing import Any

from workloads.errors import PlacementError
from workloads.registry import Registry

__all__ = ["LINK_MODELS", "LINK_REGISTRY", "ORDERS", "ORDER_REGISTRY", "choices", "require"]

#: How a device picks its next op: the plan's order, or the ready op of highest priority.
ORDERS: tuple[str, ...] = ("plan", "priority")

#: How transfers share copy engines and links: one at a time, first come first served
#: (``fcfs``), max-min fair bandwidth with latency as pure delay (``fair``), or not at all
#: (``none``: every transfer starts when its tensor is ready, as a list scheduler's own
#: model assumes).
LINK_MODELS: tuple[str, ...] = ("fcfs", "fair", "none")

ORDER_REGISTRY: Registry[Any] = Registry(
    "issue order", "placelab.issue_orders",
    builtins={"plan": "sim.engine:PlanOrder", "priority": "sim.engine:PriorityOrder"})
LINK_REGISTRY: Registry[Any] = Registry(
    "link model", "placelab.link_models",
    builtins={"fcfs": "sim.links:FirstComeFirstServed", "fair": "sim.links:FairSharing",
              "none": "sim.links:NoContention"})


def choices(registry: Registry[Any], builtins: tuple[str, ...]) -> str:
    """The names ``registry`` takes, built-ins first in their documented order.

    >>> choices(LINK_REGISTRY, LINK_MODELS)
    'fcfs, fair, none'
    """
    return ", ".join([*builtins, *(n for n in registry.names() if n not in builtins)])


def require(value: str, registry: Registry[Any], builtins: tuple[str, ...], where: str,
            what: str) -> None:
    """Refuse a name ``registry`` does not hold, listing those it does (``value`` may be a
    spec, ``name:key=value,...``, whose parameters its member checks).

    >>> require("lifo", ORDER_REGISTRY, ORDERS, "simulate", "order")
    Traceback (most recent call last):
    ...
    workloads.errors.PlacementError: simulate: order must be one of plan, priority, got 'lifo'
    """
    if value.partition(":")[0] not in registry:
        raise PlacementError(f"{where}: {what} must be one of {choices(registry, builtins)}, "
                             f"got {value!r}")
