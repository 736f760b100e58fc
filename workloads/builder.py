"""Build graphs layer by layer with shapes, FLOPs, bytes and parameters inferred.

Conventions: FLOPs count a multiply-add as two; images are NCHW; ``bytes_read`` is the
inputs plus resident state, ``bytes_written`` the outputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from workloads.dtypes import DTYPE_BYTES
from workloads.errors import GraphError
from workloads.graph import Graph, Op, Tensor

__all__ = ["GraphBuilder"]


def _pair(value: int | Sequence[int], what: str) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or any(not isinstance(v, int) or v < 0 for v in pair):
        raise GraphError(f"{what} must be an int >= 0 or a pair of them, got {value!r}")
    return pair  # type: ignore[return-value]


class GraphBuilder:
    """Appends ops to a graph under construction; each method returns its output's name.

    >>> b = GraphBuilder("tiny")
    >>> x = b.input((8, 784))
    >>> y = b.relu(b.linear(x, 10))
    >>> g = b.build()
    >>> g.params, g.op(y).output.shape
    (7850, (8, 10))
    """

    def __init__(self, name: str, dtype: str = "fp32") -> None:
        if dtype not in DTYPE_BYTES:
            raise GraphError(f"graph {name!r}: dtype must be one of "
                             f"{', '.join(DTYPE_BYTES)}, got {dtype!r}")
        self.name = name
        self.dtype = dtype
        self._ops: list[Op] = []
        self._tensors: dict[str, Tensor] = {}
        self._counts: dict[str, int] = {}

    # -- plumbing -----------------------------------------------------------------------

    def shape(self, tensor: str) -> tuple[int, ...]:
        return self._get(tensor).shape

    def nbytes(self, tensor: str) -> int:
        return self._get(tensor).nbytes

    def _get(self, tensor: str) -> Tensor:
        try:
            return self._tensors[tensor]
        except KeyError:
            raise GraphError(f"graph {self.name!r}: no tensor named {tensor!r}") from None

    def _name(self, kind: str, name: str | None) -> str:
        if name is not None:
            return name
        self._counts[kind] = self._counts.get(kind, 0) + 1
        return f"{kind}{self._counts[kind]}"

    def add_op(
        self, kind: str, op_class: str, inputs: Sequence[str], shape: Sequence[int], *,
        name: str | None = None, flops: int = 0, params: int = 0, buffers: int = 0,
        workspace_bytes: int = 0, view: bool = False, bytes_read: int | None = None,
        dtype: str | None = None, attrs: dict[str, Any] | None = None,
    ) -> str:
        """Append one single-output op and return its output tensor's name.

        ``view`` marks an op that only reinterprets its input (no bytes move);
        ``bytes_read`` overrides the default (all inputs plus resident state).
        """
        return self.add_multi(kind, op_class, inputs, [shape], name=name, flops=flops,
                              params=params, buffers=buffers,
                              workspace_bytes=workspace_bytes, view=view,
                              bytes_read=bytes_read, dtype=dtype, attrs=attrs)[0]

    def add_multi(
        self, kind: str, op_class: str, inputs: Sequence[str],
        shapes: Sequence[Sequence[int]], *, name: str | None = None, flops: int = 0,
        params: int = 0, buffers: int = 0, workspace_bytes: int = 0, view: bool = False,
        bytes_read: int | None = None, dtype: str | None = None,
        attrs: dict[str, Any] | None = None,
    ) -> list[str]:
        """Append an op with one output per shape (named ``op``, or ``op:i`` for several)."""
        op_name = self._name(kind, name)
        for tensor in inputs:
            self._get(tensor)
        dtype = dtype or self.dtype
        names = [op_name] if len(shapes) == 1 else [f"{op_name}:{i}" for i in range(len(shapes))]
        outs = [Tensor(n, tuple(int(d) for d in shape), dtype)
                for n, shape in zip(names, shapes, strict=True)]
        param_bytes = (params + buffers) * DTYPE_BYTES[self.dtype]
        if bytes_read is None:
            bytes_read = sum(self._tensors[t].nbytes for t in dict.fromkeys(inputs)) + param_bytes
        moved = 0 if view else 1
        op = Op(
            name=op_name, kind=kind, op_class=op_class, inputs=tuple(inputs),
            outputs=tuple(outs), attrs=attrs or {}, flops=int(flops), params=int(params),
            param_bytes=param_bytes, bytes_read=moved * int(bytes_read),
            bytes_written=moved * sum(t.nbytes for t in outs),
            workspace_bytes=workspace_bytes,
        )
        self._ops.append(op)
        for out in outs:
            self._tensors[out.name] = out
        return names

    def build(self) -> Graph:
        """The validated graph."""
        return Graph(self.name, self._ops)

    # -- layers -------------------------------------------------------------------------

    def input(self, shape: Sequence[int], name: str = "input", dtype: str | None = None) -> str:
        """A graph input (data already resident on its device)."""
        return self.add_op("input", "source", (), shape, name=name, view=True, dtype=dtype)

    def linear(self, x: str, out_features: int, *, bias: bool = True,
               name: str | None = None, parallel: str | None = None) -> str:
        """``x @ W + b`` over the last dimension. ``parallel`` marks one shard of a
        tensor-parallel layer (Megatron's ``"column"`` or ``"row"`` split)."""
        if parallel not in (None, "column", "row"):
            raise GraphError(f"op {name or 'linear'!r}: parallel must be 'column', 'row' or "
                             f"None, got {parallel!r}")
        *lead, in_features = self.shape(x)
        rows = math.prod(lead)
        flops = 2 * rows * in_features * out_features + (rows * out_features if bias else 0)
        params = in_features * out_features + (out_features if bias else 0)
        return self.add_op("linear", "matmul", (x,), (*lead, out_features), name=name,
                           flops=flops, params=params,
                           attrs={"in_features": in_features, "out_features": out_features,
                                  "bias": bias, **({"parallel": parallel} if parallel else {})})

    def matmul(self, a: str, b: str, *, name: str | None = None) -> str:
        """Batched ``a @ b``: ``(..., m, k) @ (..., k, n)``; leading dims must match."""
        sa, sb = self.shape(a), self.shape(b)
        if len(sa) < 2 or len(sb) < 2 or sa[-1] != sb[-2] or sa[:-2] != sb[:-2]:
            raise GraphError(f"op {name or 'matmul'!r}: shapes must be "
                             f"(..., m, k) @ (..., k, n), got {sa} @ {sb}")
        batch = math.prod(sa[:-2])
        flops = 2 * batch * sa[-2] * sa[-1] * sb[-1]
        return self.add_op("matmul", "matmul", (a, b), (*sa[:-1], sb[-1]), name=name,
                           flops=flops)

    def conv2d(self, x: str, out_channels: int, kernel: int | Sequence[int], *,
               stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
               groups: int = 1, bias: bool = False, name: str | None = None) -> str:
        """2-D convolution of an NCHW tensor."""
        n, c, h, w = self._nchw(x, "conv2d")
        (kh, kw), (sh, sw), (ph, pw) = (_pair(kernel, "kernel"), _pair(stride, "stride"),
                                        _pair(padding, "padding"))
        if c % groups or out_channels % groups:
            raise GraphError(f"conv2d on {x!r}: channels {c} and {out_channels} must be "
                             f"divisible by groups, got groups={groups}")
        ho, wo = self._window(x, h, w, kh, kw, sh, sw, ph, pw)
        macs_per_out = (c // groups) * kh * kw
        outs = n * out_channels * ho * wo
        params = out_channels * macs_per_out + (out_channels if bias else 0)
        return self.add_op(
            "conv2d", "conv", (x,), (n, out_channels, ho, wo), name=name,
            flops=2 * outs * macs_per_out + (outs if bias else 0), params=params,
            attrs={"kernel": (kh, kw), "stride": (sh, sw), "padding": (ph, pw),
                   "groups": groups, "bias": bias},
        )

    def _pool(self, kind: str, x: str, kernel: int | Sequence[int],
              stride: int | Sequence[int] | None, padding: int | Sequence[int],
              name: str | None, count_include_pad: bool = True) -> str:
        n, c, h, w = self._nchw(x, kind)
        kh, kw = _pair(kernel, "kernel")
        sh, sw = _pair(stride if stride is not None else kernel, "stride")
        ph, pw = _pair(padding, "padding")
        ho, wo = self._window(x, h, w, kh, kw, sh, sw, ph, pw)
        attrs: dict[str, Any] = {"kernel": (kh, kw), "stride": (sh, sw), "padding": (ph, pw)}
        if kind == "avg_pool2d":
            attrs["count_include_pad"] = count_include_pad
        return self.add_op(kind, "reduction", (x,), (n, c, ho, wo), name=name,
                           flops=n * c * ho * wo * kh * kw, attrs=attrs)

    def max_pool2d(self, x: str, kernel: int | Sequence[int], *,
                   stride: int | Sequence[int] | None = None,
                   padding: int | Sequence[int] = 0, name: str | None = None) -> str:
        return self._pool("max_pool2d", x, kernel, stride, padding, name)

    def avg_pool2d(self, x: str, kernel: int | Sequence[int], *,
                   stride: int | Sequence[int] | None = None,
                   padding: int | Sequence[int] = 0, count_include_pad: bool = True,
                   name: str | None = None) -> str:
        """Window averages; ``count_include_pad`` (PyTorch's default) divides by the whole
        window, padding included, else by the cells inside the input."""
        return self._pool("avg_pool2d", x, kernel, stride, padding, name, count_include_pad)

    def global_avg_pool(self, x: str, *, name: str | None = None) -> str:
        """Average over H and W: ``(N, C, H, W) -> (N, C, 1, 1)``."""
        n, c, h, w = self._nchw(x, "global_avg_pool")
        return self.add_op("global_avg_pool", "reduction", (x,), (n, c, 1, 1), name=name,
                           flops=n * c * h * w)

    def unary(self, kind: str, x: str, *, flops_per_element: int = 1,
              name: str | None = None) -> str:
        """An elementwise op of one input (relu, tanh, gelu, ...)."""
        shape = self.shape(x)
        return self.add_op(kind, "elementwise", (x,), shape, name=name,
                           flops=flops_per_element * math.prod(shape))

    def relu(self, x: str, *, name: str | None = None) -> str:
        return self.unary("relu", x, name=name)

    def gelu(self, x: str, *, name: str | None = None) -> str:
        """GELU, tanh approximation (about eight FLOPs per element)."""
        shape = self.shape(x)
        return self.add_op("gelu", "elementwise", (x,), shape, name=name,
                           flops=8 * math.prod(shape), attrs={"approximate": "tanh"})

    def sigmoid(self, x: str, *, name: str | None = None) -> str:
        return self.unary("sigmoid", x, flops_per_element=4, name=name)

    def scale(self, x: str, factor: float, *, name: str | None = None) -> str:
        """``x * factor`` for a constant ``factor`` (kept in ``attrs["scalar"]``)."""
        shape = self.shape(x)
        return self.add_op("mul", "elementwise", (x,), shape, name=name,
                           flops=math.prod(shape), attrs={"scalar": float(factor)})

    def split(self, x: str, sizes: Sequence[int], *, axis: int, squeeze: bool = False,
              name: str | None = None) -> list[str]:
        """Consecutive pieces of ``x`` along ``axis`` (of ``sizes``, from the start; what
        the sizes do not cover is dropped); ``squeeze`` drops the axis (pieces of size 1)."""
        shape = list(self.shape(x))
        axis = axis % len(shape)
        if sum(sizes) > shape[axis] or any(s < 1 for s in sizes) or (
                squeeze and any(s != 1 for s in sizes)):
            raise GraphError(f"split of {x!r}: sizes {list(sizes)} do not fit axis {axis} "
                             f"of {tuple(shape)}" + (" as pieces of 1" if squeeze else ""))
        shapes = [shape[:axis] + ([] if squeeze else [s]) + shape[axis + 1:] for s in sizes]
        moved = sum(math.prod(s) for s in shapes) * DTYPE_BYTES[self.dtype]
        return self.add_multi("split", "data_movement", (x,), shapes, name=name,
                              bytes_read=moved,
                              attrs={"axis": axis, "sizes": tuple(sizes), "squeeze": squeeze})

    def mul(self, a: str, b: str, *, name: str | None = None) -> str:
        """Elementwise product of two tensors of the same shape."""
        return self._binary("mul", a, b, name)

    def concat(self, xs: Sequence[str], *, axis: int = 1, name: str | None = None) -> str:
        """Join tensors along ``axis``; the other dimensions must match."""
        shapes = [self.shape(x) for x in xs]
        ref = list(shapes[0])
        for shape in shapes[1:]:
            if len(shape) != len(ref) or any(a != b for i, (a, b) in
                                               enumerate(zip(shape, ref, strict=True))
                                               if i != axis % len(ref)):
                raise GraphError(f"op {name or 'concat'!r}: shapes must match except on "
                                 f"axis {axis}, got {shapes}")
        ref[axis] = sum(s[axis] for s in shapes)
        return self.add_op("concat", "data_movement", tuple(xs), ref, name=name,
                           attrs={"axis": axis})

    def reshape(self, x: str, shape: Sequence[int], *, name: str | None = None) -> str:
        """Reinterpret ``x`` with a new shape of the same size (a view)."""
        if math.prod(shape) != math.prod(self.shape(x)):
            raise GraphError(f"op {name or 'reshape'!r}: cannot reshape {self.shape(x)} to "
                             f"{tuple(shape)}")
        return self.add_op("reshape", "data_movement", (x,), shape, name=name, view=True)

    def transpose(self, x: str, perm: Sequence[int], *, name: str | None = None) -> str:
        """Permute dimensions, materialised (a copy, as before a matmul)."""
        shape = self.shape(x)
        if sorted(perm) != list(range(len(shape))):
            raise GraphError(f"op {name or 'transpose'!r}: perm must permute "
                             f"{list(range(len(shape)))}, got {list(perm)}")
        return self.add_op("transpose", "data_movement", (x,), [shape[p] for p in perm],
                           name=name, attrs={"perm": tuple(perm)})

    def embedding(self, ids: str, vocab: int, dim: int, *, name: str | None = None) -> str:
        """Look rows of a ``vocab x dim`` table up by integer ids (reads only those rows)."""
        shape = self.shape(ids)
        rows = math.prod(shape) * dim * DTYPE_BYTES[self.dtype]
        return self.add_op("embedding", "data_movement", (ids,), (*shape, dim), name=name,
                           params=vocab * dim, bytes_read=self._get(ids).nbytes + rows,
                           attrs={"vocab": vocab, "dim": dim})

    def layernorm(self, x: str, *, eps: float = 1e-5, name: str | None = None) -> str:
        """Layer norm over the last dimension, with scale and shift."""
        shape = self.shape(x)
        return self.add_op("layernorm", "reduction", (x,), shape, name=name,
                           flops=8 * math.prod(shape), params=2 * shape[-1],
                           attrs={"eps": eps})

    def adaptive_avg_pool2d(self, x: str, out: int, *, name: str | None = None) -> str:
        """Average over windows that tile the input into ``out x out`` cells."""
        n, c, h, w = self._nchw(x, "adaptive_avg_pool2d")
        return self.add_op("avg_pool2d", "reduction", (x,), (n, c, out, out), name=name,
                           flops=n * c * h * w, attrs={"output_size": out})

    def tanh(self, x: str, *, name: str | None = None) -> str:
        return self.unary("tanh", x, flops_per_element=4, name=name)

    def add(self, a: str, b: str, *, name: str | None = None) -> str:
        """Elementwise sum of two tensors of the same shape."""
        return self._binary("add", a, b, name)

    def _binary(self, kind: str, a: str, b: str, name: str | None) -> str:
        sa, sb = self.shape(a), self.shape(b)
        if sa != sb:
            raise GraphError(f"op {name or kind!r}: input shapes must match, "
                             f"got {sa} and {sb}")
        return self.add_op(kind, "elementwise", (a, b), sa, name=name, flops=math.prod(sa))

    def flatten(self, x: str, *, start_dim: int = 1, name: str | None = None) -> str:
        """Collapse dimensions from ``start_dim`` on (a view: no data moves)."""
        shape = self.shape(x)
        if not 0 <= start_dim < len(shape):
            raise GraphError(f"flatten of {x!r}: start_dim must be in [0, {len(shape)}), "
                             f"got {start_dim}")
        out = (*shape[:start_dim], math.prod(shape[start_dim:]))
        return self.add_op("flatten", "data_movement", (x,), out, name=name, view=True,
                           attrs={"start_dim": start_dim})

    def softmax(self, x: str, *, name: str | None = None) -> str:
        """Softmax over the last dimension (max, subtract, exp, sum, divide)."""
        shape = self.shape(x)
        return self.add_op("softmax", "reduction", (x,), shape, name=name,
                           flops=5 * math.prod(shape))

    def batchnorm(self, x: str, *, name: str | None = None) -> str:
        """Batch norm over channel dim 1, inference form (scale and shift)."""
        shape = self.shape(x)
        if len(shape) < 2:
            raise GraphError(f"batchnorm of {x!r}: expected at least 2 dims, got {shape}")
        c = shape[1]
        return self.add_op("batchnorm", "elementwise", (x,), shape, name=name,
                           flops=2 * math.prod(shape), params=2 * c, buffers=2 * c,
                           attrs={"eps": 1e-5})

    # -- helpers ------------------------------------------------------------------------

    def _nchw(self, x: str, kind: str) -> tuple[int, int, int, int]:
        shape = self.shape(x)
        if len(shape) != 4:
            raise GraphError(f"{kind} of {x!r}: expected an NCHW tensor, got shape {shape}")
        return shape  # type: ignore[return-value]

    @staticmethod
    def _window(x: str, h: int, w: int, kh: int, kw: int, sh: int, sw: int, ph: int,
                pw: int) -> tuple[int, int]:
        if sh < 1 or sw < 1:
            raise GraphError(f"window on {x!r}: stride must be >= 1, got {(sh, sw)}")
        ho, wo = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
        if ho < 1 or wo < 1:
            raise GraphError(f"window on {x!r}: kernel {(kh, kw)} does not fit input "
                             f"{(h, w)} with padding {(ph, pw)}")
        return ho, wo
