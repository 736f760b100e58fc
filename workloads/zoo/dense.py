"""Fully connected models: an MLP and the stacked autoencoder."""

from __future__ import annotations

from workloads.builder import GraphBuilder
from workloads.graph import Graph

__all__ = ["mlp", "stacked_autoencoder"]


def mlp(batch: int = 1, dtype: str = "fp32", in_features: int = 784,
        hidden: tuple[int, ...] = (1024, 1024), classes: int = 10) -> Graph:
    """A multi-layer perceptron with ReLU between layers and a softmax head."""
    b = GraphBuilder("mlp", dtype)
    x = b.input((batch, in_features))
    for i, width in enumerate(hidden, 1):
        x = b.relu(b.linear(x, width, name=f"fc{i}"), name=f"relu{i}")
    b.softmax(b.linear(x, classes, name=f"fc{len(hidden) + 1}"), name="softmax")
    return b.build()


def stacked_autoencoder(batch: int = 1, dtype: str = "fp32",
                        sizes: tuple[int, ...] = (784, 1000, 500, 250, 30)) -> Graph:
    """The deep autoencoder of Hinton and Salakhutdinov (Science 2006): an encoder
    784-1000-500-250-30 and its mirror as decoder, logistic units, untied weights
    (2,837,314 parameters)."""
    b = GraphBuilder("stacked_autoencoder", dtype)
    x = b.input((batch, sizes[0]))
    widths = list(sizes[1:]) + list(reversed(sizes[:-1]))
    for i, width in enumerate(widths, 1):
        part = "enc" if i < len(sizes) else "dec"
        y = b.linear(x, width, name=f"{part}{i}")
        # The 30-unit code layer is linear in the paper; every other layer is logistic.
        x = y if i == len(sizes) - 1 else b.sigmoid(y, name=f"{part}{i}.sigmoid")
    return b.build()
