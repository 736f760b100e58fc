"""The plan JSON format, declared once (see :mod:`workloads.schema`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from workloads.formats import Count, GraphDocument
from workloads.schema import Schema

__all__ = ["PlanDocument", "TransferDocument"]


class TransferDocument(Schema):
    name: str
    tensor: str
    nbytes: Count
    src: str
    dst: str
    producer: str
    consumers: list[str]


class PlanDocument(Schema):
    format: Literal["placelab.plan"]
    version: Literal[1]
    policy: str = ""
    cluster: str = ""
    cluster_hash: str = ""
    placement_s: Annotated[float, Field(ge=0)] = 0.0
    estimated_makespan_s: Annotated[float, Field(ge=0)] | None = None
    info: dict[str, Any] = Field(default_factory=dict)
    graph: GraphDocument
    placement: dict[str, str]
    order: dict[str, list[str]]
    priority: dict[str, float] = Field(default_factory=dict)
    device_groups: dict[str, list[str]] = Field(default_factory=dict)
    #: Derived from the graph and placement when read; written for the reader's benefit.
    transfers: list[TransferDocument] = Field(default_factory=list)
