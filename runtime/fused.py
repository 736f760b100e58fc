"""Fused ops (``fuse_elementwise``'s output) taken apart into the ops they compute, so that
the ordinary kernels and weights serve them: the first op, then each folded stage reading
what the stage before computed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from workloads.errors import GraphError
from workloads.op import Op, Tensor

__all__ = ["is_fused", "stages"]

_KEYS = ("fused", "fused_head_inputs", "fused_ops")


def is_fused(op: Op) -> bool:
    if op.attrs.get("fused") and "fused_ops" not in op.attrs:
        raise GraphError(f"op {op.name!r}: fused without a record of its stages (a graph "
                         f"from an older placelab); fuse it again to run it")
    return "fused_ops" in op.attrs


def stages(op: Op) -> tuple[Op, list[tuple[Op, str]]]:
    """The first op and each folded stage with the tensor it reads from the stage before;
    every stage has the fused op's output shape (the stages are elementwise)."""
    entries: Sequence[Mapping[str, Any]] = op.attrs["fused_ops"]
    out = op.outputs[0]
    head_inputs = op.attrs["fused_head_inputs"]
    first_out = entries[0]["chain"]
    head = replace(op, inputs=op.inputs[:head_inputs],
                   outputs=(Tensor(first_out, out.shape, out.dtype),),
                   attrs={k: v for k, v in op.attrs.items() if k not in _KEYS},
                   params=op.params - sum(e["params"] for e in entries))
    folded = [(Op(e["name"], e["kind"], "elementwise", inputs=tuple(e["inputs"]),
                  outputs=(Tensor(e["name"], out.shape, out.dtype),), attrs=e["attrs"],
                  params=e["params"]), e["chain"]) for e in entries]
    return head, folded
