"""The IR's vocabulary: element types and the op classes a cost model distinguishes.

A leaf module (it imports nothing of placelab but the errors), so that every other module
can use the vocabulary without importing the graph.
"""

from __future__ import annotations

from workloads.errors import GraphError

__all__ = ["DTYPE_BYTES", "OP_CLASSES", "dtype_bytes"]

#: Size of one element of each supported dtype, in bytes.
DTYPE_BYTES: dict[str, int] = {
    "fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1,
    "int64": 8, "int32": 4, "int8": 1, "bool": 1,
}

#: Op classes a cost model distinguishes. ``source`` ops (graph inputs) do no work.
OP_CLASSES: tuple[str, ...] = (
    "source", "matmul", "conv", "elementwise", "reduction", "data_movement",
)


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of ``dtype``.

    >>> dtype_bytes("bf16")
    2
    """
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise GraphError(
            f"dtype must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}"
        ) from None
