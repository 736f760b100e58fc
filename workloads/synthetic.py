"""Synthetic graphs for benchmarks and property tests, reproducible from a seed."""

from __future__ import annotations

import numpy as np

from workloads.collect import gc_paused
from workloads.graph import Graph
from workloads.op import Op, Tensor

__all__ = ["layered_dag"]


def layered_dag(n_ops: int, *, width: int = 1000, window: int = 8, seed: int | None = 0,
                dtype: str = "fp32") -> Graph:
    """Layers of ``width`` ops; each op reads op ``j`` and one op within ``window`` columns
    of ``j`` in the layer before (two edges per op, local as in a model-parallel split).

    Op FLOPs are drawn uniformly from [1e6, 1e9]; every output is 64 KiB.

    >>> g = layered_dag(3000, width=1000, seed=1)
    >>> len(g), sum(1 for _ in g.edges())
    (3000, 4000)
    """
    rng = np.random.default_rng(seed)
    width = max(1, min(width, n_ops))
    elements = 64 * 1024 // 4
    shifts = rng.integers(1, window, size=n_ops, endpoint=True).tolist()
    all_flops = rng.integers(10**6, 10**9, size=n_ops, endpoint=True).tolist()
    names = [f"n{i}" for i in range(n_ops)]
    shape = (elements,)
    ops = []
    with gc_paused():
        for i, name in enumerate(names):
            layer, j = divmod(i, width)
            inputs: tuple[str, ...] = ()
            if layer:
                first, second = names[i - width], names[i - j - width + (j + shifts[i]) % width]
                inputs = (first,) if first == second else (first, second)
            ops.append(Op(name, "synthetic", "matmul", inputs=inputs,
                          outputs=(Tensor(name, shape, dtype),), flops=all_flops[i],
                          bytes_read=len(inputs) * 4 * elements, bytes_written=4 * elements))
    return Graph(f"layered{n_ops}", ops)
