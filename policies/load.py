"""What other jobs hold of a cluster when a new job is placed: tenant-aware placement.

A policy that declares ``load_aware`` is handed a :class:`ClusterLoad` by
:func:`policies.plan` (``plan(..., load=...)``) and places the new job around it; any
other policy places as if the cluster were empty (the Plan's ``info["load_aware"]`` says
which happened).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from hwmodels.spec import Cluster
from workloads.errors import PlacementError

__all__ = ["ClusterLoad"]


@dataclass(frozen=True)
class ClusterLoad:
    """Per device: ``busy_s``, the seconds of other jobs' work still queued there;
    ``memory_bytes``, the memory they hold. Devices not named carry nothing.

    >>> ClusterLoad({"gpu0": 0.5}).busy("gpu0"), ClusterLoad().busy("gpu1")
    (0.5, 0.0)
    """

    busy_s: Mapping[str, float] = field(default_factory=dict)
    memory_bytes: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for what, values in (("busy_s", self.busy_s), ("memory_bytes", self.memory_bytes)):
            for device, value in values.items():
                if not (isinstance(value, int | float) and math.isfinite(value)
                        and value >= 0):
                    raise PlacementError(f"cluster load: {what}[{device!r}] must be a "
                                         f"finite number >= 0, got {value!r}")

    def busy(self, device: str) -> float:
        return float(self.busy_s.get(device, 0.0))

    def held(self, device: str) -> int:
        return int(self.memory_bytes.get(device, 0))

    def check(self, cluster: Cluster) -> ClusterLoad:
        """The load, its devices checked against ``cluster``'s."""
        names = set(cluster.device_names)
        for device in (*self.busy_s, *self.memory_bytes):
            if device not in names:
                raise PlacementError(f"cluster load: device {device!r} is not in cluster "
                                     f"{cluster.name!r}")
        return self
