"""policies: the execution planner: the policy interface, the policies and :func:`plan`.

Importing the package loads no policy: names are imported on first use and policies on
their first lookup in :data:`POLICIES`, so the Plan contract is cheap to import.

>>> from policies import POLICIES
>>> {"heft", "round_robin", "single_device"} <= set(POLICIES.names())
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workloads.lazy import attach

if TYPE_CHECKING:
    from policies.base import POLICIES, PlacementPolicy, make_policy, plan, register_policy
    from policies.plans import Placement, Plan, Transfer, order_by_priority

_WHERE = {"POLICIES": "base", "PlacementPolicy": "base", "make_policy": "base",
          "plan": "base", "register_policy": "base", "Placement": "plans", "Plan": "plans",
          "Transfer": "plans", "order_by_priority": "plans"}

__all__ = ["POLICIES", "Placement", "PlacementPolicy", "Plan", "Transfer", "make_policy",
    "order_by_priority", "plan", "register_policy"]

__getattr__, __dir__ = attach(__name__, _WHERE)
