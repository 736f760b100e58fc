"""policies: the execution planner: the policy interface, the policies and :func:`plan`.

>>> from policies import POLICIES
>>> {"heft", "round_robin", "single_device"} <= set(POLICIES.names())
True
"""

from policies import (  # noqa: F401  (importing them registers the built-in policies)
    baselines,
    cuts,
    listsched,
    memory,
    optimal,
    pipeline,
)
from policies.base import POLICIES, PlacementPolicy, make_policy, plan, register_policy
from policies.plans import Placement, Plan, Transfer, order_by_priority

__all__ = [
    "POLICIES", "Placement", "PlacementPolicy", "Plan", "Transfer", "make_policy",
    "order_by_priority", "plan", "register_policy",
]
