"""The graph JSON format, declared once (see :mod:`workloads.schema`).

Imported only when a graph file is read, so that importing the IR does not import pydantic.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from workloads.schema import INT64_MAX, Schema

__all__ = ["Count", "GraphDocument", "OpDocument", "TensorDocument"]

#: A count of FLOPs or bytes: a non-negative integer an int64 holds.
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]
Name = Annotated[str, Field(min_length=1)]


class TensorDocument(Schema):
    name: Name
    shape: list[Annotated[int, Field(ge=1, le=INT64_MAX)]]
    dtype: str = "fp32"


class OpDocument(Schema):
    name: Name
    kind: Name
    op_class: Name
    inputs: list[str] = Field(default_factory=list)
    outputs: list[TensorDocument] = Field(default_factory=list)
    attrs: dict[str, Any] = Field(default_factory=dict)
    flops: Count = 0
    bytes_read: Count = 0
    bytes_written: Count = 0
    params: Count = 0
    param_bytes: Count = 0
    workspace_bytes: Count = 0


class GraphDocument(Schema):
    format: Literal["placelab.graph"]
    version: Literal[1]
    name: str = "graph"
    meta: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    ops: list[OpDocument]
    outputs: list[str] | None = None
