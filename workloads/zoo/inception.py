"""Inception v3 (Szegedy et al. 2016) as torchvision builds it, auxiliary head included:
27,161,264 parameters at 299x299."""

from __future__ import annotations

from collections.abc import Sequence

from workloads.builder import GraphBuilder
from workloads.graph import Graph

__all__ = ["inception_v3"]

Pair = int | tuple[int, int]


def _conv(b: GraphBuilder, x: str, out: int, kernel: Pair, name: str, *, stride: int = 1,
          padding: Pair = 0) -> str:
    """BasicConv2d: convolution without bias, batch norm, ReLU."""
    y = b.conv2d(x, out, kernel, stride=stride, padding=padding, name=f"{name}.conv")
    return b.relu(b.batchnorm(y, name=f"{name}.bn"), name=f"{name}.relu")


def _chain(b: GraphBuilder, x: str, name: str,
           layers: Sequence[tuple[int, Pair, Pair]]) -> str:
    for i, (out, kernel, padding) in enumerate(layers, 1):
        x = _conv(b, x, out, kernel, f"{name}_{i}", padding=padding)
    return x


def _pool_branch(b: GraphBuilder, x: str, out: int, name: str) -> str:
    return _conv(b, b.avg_pool2d(x, 3, stride=1, padding=1, name=f"{name}.pool"), out, 1,
                 name)


def _block_a(b: GraphBuilder, x: str, pool: int, n: str) -> str:
    return b.concat([
        _conv(b, x, 64, 1, f"{n}.branch1x1"),
        _chain(b, x, f"{n}.branch5x5", [(48, 1, 0), (64, 5, 2)]),
        _chain(b, x, f"{n}.branch3x3dbl", [(64, 1, 0), (96, 3, 1), (96, 3, 1)]),
        _pool_branch(b, x, pool, f"{n}.branch_pool"),
    ], name=f"{n}.concat")


def _block_b(b: GraphBuilder, x: str, n: str) -> str:
    dbl = _chain(b, x, f"{n}.branch3x3dbl", [(64, 1, 0), (96, 3, 1)])
    return b.concat([
        _conv(b, x, 384, 3, f"{n}.branch3x3", stride=2),
        _conv(b, dbl, 96, 3, f"{n}.branch3x3dbl_3", stride=2),
        b.max_pool2d(x, 3, stride=2, name=f"{n}.branch_pool"),
    ], name=f"{n}.concat")


def _block_c(b: GraphBuilder, x: str, c7: int, n: str) -> str:
    row, col = ((1, 7), (0, 3)), ((7, 1), (3, 0))
    return b.concat([
        _conv(b, x, 192, 1, f"{n}.branch1x1"),
        _chain(b, x, f"{n}.branch7x7", [(c7, 1, 0), (c7, *row), (192, *col)]),
        _chain(b, x, f"{n}.branch7x7dbl",
               [(c7, 1, 0), (c7, *col), (c7, *row), (c7, *col), (192, *row)]),
        _pool_branch(b, x, 192, f"{n}.branch_pool"),
    ], name=f"{n}.concat")


def _block_d(b: GraphBuilder, x: str, n: str) -> str:
    b3 = _conv(b, x, 192, 1, f"{n}.branch3x3_1")
    b7 = _chain(b, x, f"{n}.branch7x7x3", [(192, 1, 0), (192, (1, 7), (0, 3)),
                                           (192, (7, 1), (3, 0))])
    return b.concat([
        _conv(b, b3, 320, 3, f"{n}.branch3x3_2", stride=2),
        _conv(b, b7, 192, 3, f"{n}.branch7x7x3_4", stride=2),
        b.max_pool2d(x, 3, stride=2, name=f"{n}.branch_pool"),
    ], name=f"{n}.concat")


def _split_3x3(b: GraphBuilder, x: str, n: str) -> str:
    return b.concat([_conv(b, x, 384, (1, 3), f"{n}a", padding=(0, 1)),
                     _conv(b, x, 384, (3, 1), f"{n}b", padding=(1, 0))], name=f"{n}.concat")


def _block_e(b: GraphBuilder, x: str, n: str) -> str:
    b3 = _conv(b, x, 384, 1, f"{n}.branch3x3_1")
    dbl = _chain(b, x, f"{n}.branch3x3dbl", [(448, 1, 0), (384, 3, 1)])
    return b.concat([
        _conv(b, x, 320, 1, f"{n}.branch1x1"),
        _split_3x3(b, b3, f"{n}.branch3x3_2"),
        _split_3x3(b, dbl, f"{n}.branch3x3dbl_3"),
        _pool_branch(b, x, 192, f"{n}.branch_pool"),
    ], name=f"{n}.concat")


def _aux(b: GraphBuilder, x: str, classes: int) -> str:
    y = b.avg_pool2d(x, 5, stride=3, name="AuxLogits.pool")
    y = _conv(b, _conv(b, y, 128, 1, "AuxLogits.conv0"), 768, 5, "AuxLogits.conv1")
    y = b.flatten(b.adaptive_avg_pool2d(y, 1, name="AuxLogits.avgpool"),
                  name="AuxLogits.flatten")
    return b.linear(y, classes, name="AuxLogits.fc")


def inception_v3(batch: int = 1, dtype: str = "fp32", classes: int = 1000) -> Graph:
    """Inception v3 at 299x299; the auxiliary classifier is a second output."""
    b = GraphBuilder("inception_v3", dtype)
    x = b.input((batch, 3, 299, 299))
    x = _conv(b, x, 32, 3, "Conv2d_1a_3x3", stride=2)
    x = _conv(b, x, 32, 3, "Conv2d_2a_3x3")
    x = _conv(b, x, 64, 3, "Conv2d_2b_3x3", padding=1)
    x = b.max_pool2d(x, 3, stride=2, name="maxpool1")
    x = _conv(b, x, 80, 1, "Conv2d_3b_1x1")
    x = _conv(b, x, 192, 3, "Conv2d_4a_3x3")
    x = b.max_pool2d(x, 3, stride=2, name="maxpool2")
    for name, pool in (("Mixed_5b", 32), ("Mixed_5c", 64), ("Mixed_5d", 64)):
        x = _block_a(b, x, pool, name)
    x = _block_b(b, x, "Mixed_6a")
    for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160),
                     ("Mixed_6e", 192)):
        x = _block_c(b, x, c7, name)
    _aux(b, x, classes)
    x = _block_d(b, x, "Mixed_7a")
    x = _block_e(b, x, "Mixed_7b")
    x = _block_e(b, x, "Mixed_7c")
    x = b.flatten(b.global_avg_pool(x, name="avgpool"))
    b.softmax(b.linear(x, classes, name="fc"), name="softmax")
    return b.build()
