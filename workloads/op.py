"""The IR's values and operations: :class:`Tensor` and :class:`Op`.

Op costs are facts of the op (FLOPs, bytes moved, parameter and workspace bytes), never of a
device: hardware models turn them into times.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from workloads.dtypes import OP_CLASSES, dtype_bytes
from workloads.errors import GraphError
from workloads.kinds import OP_KINDS
from workloads.names import check_name

__all__ = ["Op", "Tensor", "window_work"]

def _freeze(value: Any) -> Any:
    """Lists become tuples so that attrs compare equal after a JSON round trip."""
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, Mapping):
        return {k: _freeze(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Tensor:
    """A value flowing along an edge: its name, shape and element type.

    >>> Tensor("x", (2, 3), "fp16").nbytes
    12
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "fp32"
    nbytes: int = field(init=False, repr=False, compare=False)

    def __init__(self, name: str, shape: Iterable[int], dtype: str = "fp32") -> None:
        shape = shape if type(shape) is tuple else tuple(shape)
        if not all(type(d) is int and d > 0 for d in shape):
            raise GraphError(f"tensor {name!r}: shape must be positive integers, got {shape}")
        nbytes = math.prod(shape) * dtype_bytes(dtype)
        if nbytes > INT64_MAX:
            raise GraphError(f"tensor {name!r}: size must fit in an int64 of bytes, got "
                             f"shape {shape} ({nbytes} bytes)")
        # One write of the instance dict, as in Op: graphs hold a million tensors.
        self.__dict__.update(name=name, shape=shape, dtype=dtype, nbytes=nbytes)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Tensor:
        return cls(data["name"], tuple(data["shape"]), data.get("dtype", "fp32"))


#: The largest integer an int64 holds: a larger size or count can only be a mistake.
INT64_MAX = 2**63 - 1

_COST_FIELDS = ("flops", "bytes_read", "bytes_written", "params", "param_bytes",
                "workspace_bytes")


@dataclass(frozen=True, eq=True)
class Op:
    """One operation: what it consumes and produces and what it costs, device-free.

    ``params`` counts trainable parameters; ``param_bytes`` is all state resident with the
    op (parameters and buffers such as batch-norm running statistics).

    >>> op = Op("relu1", "relu", "elementwise", inputs=("x",),
    ...         outputs=(Tensor("relu1", (4,)),), flops=4, bytes_read=16, bytes_written=16)
    >>> op.output.nbytes
    16
    """

    name: str
    kind: str
    op_class: str
    inputs: tuple[str, ...] = ()
    outputs: tuple[Tensor, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    params: int = 0
    param_bytes: int = 0
    workspace_bytes: int = 0

    __hash__ = None  # type: ignore[assignment]  # attrs is a dict: ops are not hashable

    def __init__(self, name: str, kind: str, op_class: str, inputs: Iterable[str] = (),
                 outputs: Iterable[Tensor] = (), attrs: Mapping[str, Any] | None = None,
                 flops: int = 0, bytes_read: int = 0, bytes_written: int = 0, params: int = 0,
                 param_bytes: int = 0, workspace_bytes: int = 0) -> None:
        # One write of the instance dict instead of twelve frozen-dataclass setattr calls:
        # building ops is most of the time it takes to build a large graph.
        self.__dict__.update(
            name=name, kind=kind, op_class=op_class,
            inputs=inputs if type(inputs) is tuple else tuple(inputs),
            outputs=outputs if type(outputs) is tuple else tuple(outputs),
            attrs=_freeze(dict(attrs)) if attrs else {}, flops=flops, bytes_read=bytes_read,
            bytes_written=bytes_written, params=params, param_bytes=param_bytes,
            workspace_bytes=workspace_bytes)
        self._validate()

    def _validate(self) -> None:
        if type(self.name) is not str or not self.name.isprintable() or not self.name:
            check_name("op", self.name, GraphError)
        if self.kind not in OP_KINDS:
            raise GraphError(f"op {self.name!r}: kind must be a known op kind (see "
                             f"workloads.kinds.OP_KINDS), got {self.kind!r}")
        if self.op_class not in OP_CLASSES:
            raise GraphError(
                f"op {self.name!r}: op_class must be one of {', '.join(OP_CLASSES)}, "
                f"got {self.op_class!r}"
            )
        costs = (self.flops, self.bytes_read, self.bytes_written, self.params,
                 self.param_bytes, self.workspace_bytes)
        if not all(type(v) is int and 0 <= v <= INT64_MAX for v in costs):
            self._check_costs()

    def _check_costs(self) -> None:
        for name in _COST_FIELDS:
            value = getattr(self, name)
            if (not isinstance(value, int | float) or isinstance(value, bool)
                    or not 0 <= value <= INT64_MAX):  # NaN fails the comparison too
                raise GraphError(f"op {self.name!r}: {name} must be a finite number in "
                                 f"[0, 2**63), got {value!r}")
            if not float(value).is_integer():
                raise GraphError(f"op {self.name!r}: {name} must be a whole number (a count "
                                 f"of FLOPs, bytes or parameters), got {value!r}")
            object.__setattr__(self, name, int(value))  # counts: FLOPs and bytes are whole

    @property
    def output(self) -> Tensor:
        """The single output tensor (error if the op has several or none)."""
        if len(self.outputs) != 1:
            raise GraphError(
                f"op {self.name!r}: expected exactly one output, got {len(self.outputs)}"
            )
        return self.outputs[0]

    @property
    def dtype(self) -> str:
        """The compute dtype: that of the first output (fp32 for ops without outputs)."""
        return self.outputs[0].dtype if self.outputs else "fp32"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name, "kind": self.kind, "op_class": self.op_class,
            "inputs": list(self.inputs), "outputs": [t.to_dict() for t in self.outputs],
            "attrs": _jsonable(self.attrs),
        }
        data.update({name: getattr(self, name) for name in _COST_FIELDS})
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Op:
        try:
            return cls(
                name=data["name"], kind=data["kind"], op_class=data["op_class"],
                inputs=tuple(data.get("inputs", ())),
                outputs=tuple(Tensor.from_dict(t) for t in data.get("outputs", ())),
                attrs=data.get("attrs", {}),
                **{name: data.get(name, 0) for name in _COST_FIELDS},
            )
        except KeyError as err:
            raise GraphError(f"op {data.get('name', '?')!r}: missing field {err}") from err


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


#: Windowed kinds whose kernel gathers every kernel position's view of its input.
WINDOWED = ("conv2d", "max_pool2d", "avg_pool2d")


def window_work(op: Op) -> tuple[int, int]:
    """The elements a windowed op's kernel gathers (``n c kh kw ho wo``: every kernel
    position's view of the input) and the batched matrix products it runs (``n groups``
    for a convolution); a backward op carries its forward op's (``attrs``
    ``window_elements`` and ``window_items``); ``(0, 0)`` for other ops.

    >>> conv = Op("c", "conv2d", "conv", outputs=(Tensor("c", (2, 8, 4, 4)),),
    ...           attrs={"kernel": (3, 3)}, flops=2 * 2 * 8 * 16 * 3 * 9)
    >>> window_work(conv)  # 2 images x 3 channels x 9 positions x 16 outputs
    (864, 2)
    """
    if "window_elements" in op.attrs:
        return int(op.attrs["window_elements"]), int(op.attrs.get("window_items", 0))
    kernel = op.attrs.get("kernel")
    if op.kind not in WINDOWED or not kernel or len(op.outputs[0].shape) != 4:
        return 0, 0
    n, channels, ho, wo = op.outputs[0].shape
    if op.kind == "conv2d":  # FLOPs = 2 n cout ho wo (c / g) k^2, plus a bias's adds
        groups = int(op.attrs.get("groups", 1))
        products = op.flops - (n * channels * ho * wo if op.attrs.get("bias") else 0)
        return groups * (products // 2) // channels, n * groups
    return n * channels * ho * wo * kernel[0] * kernel[1], 0

