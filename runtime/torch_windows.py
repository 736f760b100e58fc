"""Windows (convolution, pooling) as torch's operators take them: the padding is given to
the operator where it takes it (even, and for pooling at most half the window) and applied
first where it does not (uneven, as Caffe-style ONNX models have it); a window torch's
operators do not tile (an imported ceil-mode window) is left to the array-API kernel.
Forward kernels (:mod:`runtime.torch_kernels`) and backward kernels
(:mod:`runtime.torch_gradients`) see a window the same way.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from workloads.op import Op

__all__ = ["avg_pool", "flat_pads", "pads", "torch_window"]

Tensor = torch.Tensor


def pads(op: Op) -> tuple[int, int, int, int]:
    """``(top, left, bottom, right)`` of a window op's ``padding`` (two or four numbers).

    >>> pads(Op("p", "max_pool2d", "reduction", attrs={"padding": (1, 2)}))
    (1, 2, 1, 2)
    """
    given = tuple(op.attrs.get("padding", (0, 0)))
    return given * 2 if len(given) == 2 else given  # type: ignore[return-value]


def torch_window(op: Op, x: Tensor, fill: float, *, pools: bool = True
                 ) -> tuple[Tensor, tuple[int, int]] | None:
    """``x`` as torch's window operator takes it, and the padding to pass it: even padding
    as it is (for pooling, at most half the window, torch's limit), other padding applied
    first (with ``fill``). None where torch's window would not give the op's output shape
    (an imported ceil-mode window): the array-API kernel runs those.

    >>> from workloads import Tensor
    >>> op = Op("p", "max_pool2d", "reduction", outputs=(Tensor("p", (1, 1, 2, 2)),),
    ...         attrs={"kernel": (2, 2), "stride": (2, 2), "padding": (0, 0, 1, 1)})
    >>> x, padding = torch_window(op, torch.zeros(1, 1, 3, 3), -torch.inf)
    >>> tuple(x.shape), padding
    ((1, 1, 4, 4), (0, 0))
    """
    top, left, bottom, right = pads(op)
    kh, kw = op.attrs["kernel"]
    sh, sw = op.attrs.get("stride", (1, 1))
    h, wd = x.shape[2:]
    out = op.outputs[0].shape[2:]
    if ((h + top + bottom - kh) // sh + 1, (wd + left + right - kw) // sw + 1) != tuple(out):
        return None
    if top == bottom and left == right and (not pools or (2 * top <= kh and 2 * left <= kw)):
        return x, (top, left)
    return F.pad(x, flat_pads(op), value=fill), (0, 0)


def avg_pool(op: Op, x: Tensor) -> Tensor | None:
    """torch's average pooling of ``x`` as ``op`` (an avg_pool2d with a kernel) averages,
    or None where torch's operator cannot (the array-API kernel runs those).

    >>> from workloads import Tensor
    >>> op = Op("a", "avg_pool2d", "reduction", outputs=(Tensor("a", (1, 1, 1, 1)),),
    ...         attrs={"kernel": (2, 2), "stride": (2, 2), "padding": (0, 0, 1, 1),
    ...                "count_include_pad": False})
    >>> avg_pool(op, torch.ones(1, 1, 1, 1)).item()  # one cell inside the input
    1.0
    """
    a = op.attrs
    include = a.get("count_include_pad", True)
    window = torch_window(op, x, 0.0)
    if window is None:
        return None
    padded, padding = window
    kernel, stride = tuple(a["kernel"]), tuple(a.get("stride", (1, 1)))
    if padded is x or include or not any(pads(op)):
        return F.avg_pool2d(padded, kernel, stride, padding, count_include_pad=include)
    # uneven padding, not counted: the window sums over the cells inside the input
    ones = F.pad(torch.ones((1, 1, *x.shape[2:]), dtype=x.dtype, device=x.device),
                 flat_pads(op))
    return F.avg_pool2d(padded, kernel, stride) / F.avg_pool2d(ones, kernel, stride)


def flat_pads(op: Op) -> tuple[int, int, int, int]:
    """A window op's padding as ``F.pad`` takes it: ``(left, right, top, bottom)``.

    >>> flat_pads(Op("p", "max_pool2d", "reduction", attrs={"padding": (0, 1, 2, 3)}))
    (1, 3, 0, 2)
    """
    top, left, bottom, right = pads(op)
    return left, right, top, bottom
