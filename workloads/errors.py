"""The exception hierarchy shared by every placelab package.

It lives in the lowest layer so that every package can raise it. A message names the
thing, the field, what was expected and what was got, e.g.
``device 'my-npu': memory_gib must be > 0, got -4``.
"""

from __future__ import annotations

__all__ = [
    "CalibrationError",
    "GraphError",
    "HardwareSpecError",
    "OutOfMemory",
    "PlacelabError",
    "PlacementError",
    "RegistryError",
    "UnsupportedOp",
]


class PlacelabError(Exception):
    """Base of every error placelab raises on bad input or an impossible request."""


class GraphError(PlacelabError):
    """A computation graph is malformed (cycle, shape mismatch, unknown op, bad file)."""


class HardwareSpecError(PlacelabError):
    """A device, link or cluster description is invalid."""


class PlacementError(PlacelabError):
    """A policy cannot place a graph, or a plan is inconsistent with its graph or cluster."""


class OutOfMemory(PlacementError):
    """A plan needs more memory on a device than the device has."""


class CalibrationError(PlacelabError):
    """Measurements cannot be turned into a cost model."""


class RegistryError(PlacelabError):
    """An unknown or duplicate name in one of the plug-in registries."""


class UnsupportedOp(PlacelabError):
    """A device cannot run an op (it lacks the op's dtype, or a cost table has no entry).

    Cost models raise it; planners read it as "not on this device", never as a bad spec.
    """
