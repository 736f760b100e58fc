"""Random op configurations for calibration: each op kind's configuration space sampled at
random, beyond the zoo's shapes, and the held-out split that keeps validation honest.

A *family* draws a configuration (sizes, kernels, strides, ...) and builds a small graph
around the op it samples: alone (a forward case), or inside a training step (an op before
it, so that its backward op computes the input's gradient too, a softmax and the loss
after it, a random optimizer's updates), so that backward ops, losses and updates are
sampled as well. Sizes are log-uniform: odd and prime sizes, channel counts off the SIMD
width, batch 1-64, working sets from a few KiB past the last-level cache; a draw whose op
would take too long (FLOPs or bytes over a budget) is drawn again.

**The held-out split.** Every free dimension calibration draws avoids ``d % 7 == 3``
(:func:`is_held_out`); :mod:`runtime.unseen` builds its validation graphs from such
dimensions only, so no op of theirs has a signature calibration measured (tested). A
configuration that predicts badly is sampled again nearby (:func:`perturb`), as nn-Meter's
adaptive sampling does.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> config = draw("conv2d", rng)
>>> graph = build(config)
>>> any(op.kind == "conv2d" for op in graph)
True
>>> all(not is_held_out(config[k]) for k in FAMILIES["conv2d"].free)
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from workloads.builder import GraphBuilder
from workloads.graph import Graph

__all__ = ["FAMILIES", "TRAINED", "Family", "build", "draw", "draw_dim", "is_held_out", "perturb"]

Config = dict[str, Any]
#: The residue of the held-out split: dimensions ``d`` with ``d % MODULUS == RESIDUE``
#: belong to validation graphs, never to calibration.
MODULUS, RESIDUE = 7, 3
#: A sampled op's budget: at most this many FLOPs and bytes moved (a draw over either is
#: drawn again), so that one case takes milliseconds; a ``large`` draw (one in
#: ``LARGE_SHARE``) may take ten times as much, so the fit sees the sizes big models run.
MAX_FLOPS, MAX_BYTES = 2e9, 96 * 2**20
LARGE_FLOPS, LARGE_BYTES, LARGE_SHARE = 2e10, 512 * 2**20, 0.15
#: Families whose op has weights, and how many copies of it (each with weights of its own,
#: reading the same input) a forward case may run: in a model an op's weights are evicted
#: by the other layers' between one step and the next, and the copies hold that much.
WEIGHTED = ("linear", "linear:gemv", "conv2d", "embedding")
COPIES = (1, 1, 2, 4, 8)
#: Families whose op's backward costs as much as the op or more (the products, the
#: convolution) and dominates a training step: a calibration draws as many training-step
#: cases of them again, so their backward kinds are sampled as densely as forward ones.
TRAINED = ("linear", "conv2d", "matmul")


def is_held_out(d: int) -> bool:
    """Whether dimension ``d`` is reserved for validation graphs.

    >>> [d for d in range(1, 30) if is_held_out(d)]
    [3, 10, 17, 24]
    """
    return d % MODULUS == RESIDUE


def draw_dim(rng: np.random.Generator, low: int, high: int, *, held_out: bool = False
             ) -> int:
    """A log-uniform integer in ``[low, high]`` on calibration's side of the split (or
    on validation's, ``held_out=True``).

    >>> rng = np.random.default_rng(1)
    >>> all(is_held_out(draw_dim(rng, 2, 500, held_out=True)) for _ in range(20))
    True
    """
    for _ in range(1000):
        d = min(max(math.floor(math.exp(rng.uniform(math.log(low), math.log(high + 1)))),
                    low), high)
        if is_held_out(d) == held_out:
            return d
    raise ValueError(f"no dimension in [{low}, {high}] with held_out={held_out}")


@dataclass(frozen=True)
class Family:
    """How to draw one op kind's configurations and build the graph that samples it."""

    name: str
    #: Ranges of the free dimensions (the held-out split applies to them).
    ranges: Mapping[str, tuple[int, int]]
    #: Categorical choices: key -> options.
    choices: Mapping[str, tuple[Any, ...]]
    forward: Callable[[GraphBuilder, str, Config], str]
    #: The input's shape from a configuration.
    shape: Callable[[Config], tuple[int, ...]]

    @property
    def free(self) -> tuple[str, ...]:
        return tuple(self.ranges)


def _linear(b: GraphBuilder, x: str, c: Config) -> str:
    return b.linear(x, c["n"], bias=c["bias"])


def _matmul(b: GraphBuilder, x: str, c: Config) -> str:
    other = b.input((c["batch"], c["k"], c["n"]), name="other")
    return b.matmul(x, other)


def _conv(b: GraphBuilder, x: str, c: Config) -> str:
    k, groups = c["kernel"], c["cin"] if c["groups"] == "depthwise" else 1
    cout = c["cin"] if groups > 1 else c["cout"]
    return b.conv2d(x, cout, k, stride=c["stride"], padding=k // 2 if c["pad"] else 0,
                    groups=groups, bias=c["bias"])


def _pool(b: GraphBuilder, x: str, c: Config) -> str:
    k, s = c["kernel"], c["stride"] or c["kernel"]
    if c["kind"] == "max_pool2d":
        return b.max_pool2d(x, k, stride=s, padding=k // 2 if c["pad"] else 0)
    if c["kind"] == "avg_pool2d":
        return b.avg_pool2d(x, k, stride=s, padding=k // 2 if c["pad"] else 0)
    if c["kind"] == "adaptive_avg_pool2d":
        return b.adaptive_avg_pool2d(x, max(1, min(c["h"], 7)))
    return b.global_avg_pool(x)


_UNARY: dict[str, Callable[[GraphBuilder, str], str]] = {
    "relu": lambda b, x: b.relu(x), "gelu": lambda b, x: b.gelu(x),
    "tanh": lambda b, x: b.tanh(x), "sigmoid": lambda b, x: b.sigmoid(x),
    "silu": lambda b, x: b.unary("silu", x, flops_per_element=5),
    "relu6": lambda b, x: b.unary("relu6", x, flops_per_element=2),
    "hardswish": lambda b, x: b.unary("hardswish", x, flops_per_element=4),
    "scale": lambda b, x: b.scale(x, 0.5)}


def _unary(b: GraphBuilder, x: str, c: Config) -> str:
    return _UNARY[c["kind"]](b, x)


def _binary(b: GraphBuilder, x: str, c: Config) -> str:
    other = b.input(b.shape(x), name="other")
    return b.add(x, other) if c["kind"] == "add" else b.mul(x, other)


def _rows(b: GraphBuilder, x: str, c: Config) -> str:
    kind = c["kind"]
    if kind == "softmax":
        return b.softmax(x)
    if kind == "layernorm":
        return b.layernorm(x)
    return b.batchnorm(x)


def _layout(b: GraphBuilder, x: str, c: Config) -> str:
    kind, rank = c["kind"], len(b.shape(x))
    if kind == "transpose":
        return b.transpose(x, (0, 2, 1) if rank == 3 else (1, 0))
    if kind == "concat":
        return b.concat([x, b.input(b.shape(x), name="other")], axis=c["axis"] % rank)
    if kind == "split":
        size = b.shape(x)[-1]
        return b.split(x, [max(1, size // 3), max(1, size - size // 3 - 1)][:1 + (size > 2)],
                       axis=-1)[0]
    return b.flatten(x) if rank > 2 else b.reshape(x, b.shape(x)[::-1])


def _embedding(b: GraphBuilder, x: str, c: Config) -> str:
    return b.embedding(x, c["vocab"], c["dim"])


def _lstm_cell(b: GraphBuilder, x: str, c: Config) -> str:
    batch, hidden = c["rows"], c["hidden"]
    gh = b.input((batch, 4 * hidden), name="gh")
    state = b.input((batch, hidden), name="c")
    return b.add_multi("lstm_cell", "elementwise", (x, gh, state),
                       [(batch, hidden), (batch, hidden)], flops=30 * batch * hidden)[0]


def _shape(c: Config) -> tuple[int, ...]:
    """Rows x columns as a tensor of rank ``c["rank"]``: a 4-D one splits the rows into
    batch and channels and the columns into a near-square image (every derived dimension
    kept on calibration's side of the split)."""
    rows, cols, rank = c["rows"], c["cols"], c["rank"]
    if rank == 2:
        return (rows, cols)
    if rank == 3:
        lead = _train_side(max(1, round(rows ** 0.5)))
        return (lead, _train_side(max(1, rows // lead)), cols)
    side = _train_side(max(1, round(cols ** 0.5)))
    lead = _train_side(max(1, round(rows ** 0.25)))
    return (lead, _train_side(max(1, rows // lead)), side,
            _train_side(max(1, cols // side)))


def _train_side(d: int) -> int:
    """``d``, or the next dimension on calibration's side of the split."""
    return d + 1 if is_held_out(d) else d


def _families() -> list[Family]:
    """One family per op kind, so that every kind gets its share of the draws."""
    image = {"n": (1, 48), "c": (1, 384), "h": (2, 112)}
    table = {"rows": (1, 4096), "cols": (1, 8192)}
    out = [
        Family("linear", {"rows": (2, 2048), "k": (1, 4096), "n": (1, 4096), "seq": (2, 96)},
               {"bias": (True, False), "rank": (2, 2, 3)}, _linear,
               lambda c: (c["rows"], c["k"]) if c["rank"] == 2 else
               (max(1, c["rows"] // c["seq"]), c["seq"], c["k"])),
        Family("linear:gemv", {"k": (1, 8192), "n": (1, 8192)}, {"bias": (True, False)},
               _linear, lambda c: (1, c["k"])),
        Family("matmul", {"batch": (1, 64), "m": (1, 768), "k": (1, 768), "n": (1, 768)},
               {}, _matmul, lambda c: (c["batch"], c["m"], c["k"])),
        Family("conv2d", {"n": (1, 48), "cin": (1, 320), "cout": (1, 320), "h": (3, 112)},
               {"kernel": (1, 1, 3, 3, 3, 5, 7), "stride": (1, 1, 1, 2, 2, 4),
                "pad": (True, True, False), "groups": (1, 1, 1, 1, "depthwise"),
                "bias": (False, True), "square": (True, True, False)}, _conv,
               lambda c: (c["n"], c["cin"], c["h"], c["h"] if c["square"] else
                          max(1, c["h"] * 2 // 3))),
        Family("embedding", {"rows": (1, 2048), "vocab": (2, 60000), "dim": (1, 2048)}, {},
               _embedding, lambda c: (c["rows"],)),
        Family("lstm_cell", {"rows": (1, 256), "hidden": (1, 2048)}, {"train": (False,)},
               _lstm_cell, lambda c: (c["rows"], 4 * c["hidden"])),
    ]
    for kind in ("max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "global_avg_pool"):
        out.append(Family(kind, image, {"kind": (kind,), "kernel": (2, 2, 3, 3, 5),
                                        "stride": (0, 1, 2), "pad": (False, True)},
                          _pool, lambda c: (c["n"], c["c"], c["h"], c["h"])))
    for kind in _UNARY:
        out.append(Family(kind, table, {"kind": (kind,), "rank": (2, 4)}, _unary, _shape))
    for kind in ("add", "mul"):
        out.append(Family(kind, table, {"kind": (kind,), "rank": (2, 4)}, _binary, _shape))
    for kind in ("softmax", "layernorm", "batchnorm"):
        out.append(Family(kind, {"rows": (1, 4096), "cols": (2, 4096)},
                          {"kind": (kind,), "rank": (2, 3, 4)}, _rows, _shape))
    for kind in ("transpose", "concat", "split", "reshape"):
        out.append(Family(kind, {"rows": (2, 2048), "cols": (2, 4096)},
                          {"kind": (kind,), "rank": (2, 3), "axis": (0, 1, -1)}, _layout,
                          _shape))
    return out


FAMILIES: dict[str, Family] = {f.name: f for f in _families()}


def draw(family: str, rng: np.random.Generator, *, held_out: bool = False,
         train: bool | None = None) -> Config:
    """A random configuration of ``family`` within the op budget; ``train`` makes it a
    training-step case (True) or a forward one (False), rather than either at random.

    >>> draw("conv2d", np.random.default_rng(0), train=True)["train"]
    True
    """
    fam = FAMILIES[family]
    for _ in range(200):
        config: Config = {"family": family}
        for key, (low, high) in fam.ranges.items():
            config[key] = draw_dim(rng, low, high, held_out=held_out)
        for key, options in fam.choices.items():
            config[key] = options[int(rng.integers(len(options)))]
        config.setdefault("train", bool(rng.random() < 0.5))
        if train is not None and "train" not in fam.choices:
            config["train"] = train
        config["optimizer"] = ("sgd", "momentum", "adam")[int(rng.integers(3))]
        config["pre"] = bool(rng.random() < 0.7)
        config["large"] = bool(rng.random() < LARGE_SHARE)
        weighted = family in WEIGHTED and not config["train"] and not config["large"]
        config["copies"] = COPIES[int(rng.integers(len(COPIES)))] if weighted else 1
        if _within_budget(config):
            return config
    raise ValueError(f"family {family!r}: no configuration within the budget")


def perturb(config: Config, rng: np.random.Generator) -> Config:
    """A configuration near ``config``: each free dimension scaled by a random factor in
    [0.7, 1.4] (kept on calibration's side of the split), categories kept (nn-Meter's
    adaptive sampling draws near the configurations it predicts worst)."""
    fam = FAMILIES[config["family"]]
    for _ in range(200):
        out = dict(config)
        for key, (low, high) in fam.ranges.items():
            d = min(max(round(config[key] * rng.uniform(0.7, 1.4)), low), high)
            while is_held_out(d):
                d = d + 1 if d < high else d - 1
            out[key] = d
        if _within_budget(out):
            return out
    return dict(config)


def _within_budget(config: Config) -> bool:
    """Whether ``config``'s op fits the budget and every tensor of its graph keeps to
    calibration's side of the split."""
    try:
        graph = _forward(config)
    except Exception:  # a kernel that does not fit its input: draw again
        return False
    ops = [o for o in graph if o.op_class != "source"]
    flops = max((o.flops for o in ops), default=0)
    moved = max((o.bytes_read + o.bytes_written for o in ops), default=0)
    # every dimension of every tensor on calibration's side, derived ones too
    split = any(is_held_out(d) for o in graph for t in o.outputs for d in t.shape)
    most = (LARGE_FLOPS, LARGE_BYTES) if config.get("large") else (MAX_FLOPS, MAX_BYTES)
    copies = sum(o.flops for o in ops) <= 2 * MAX_FLOPS  # copies cost twice one op at most
    return bool(ops) and flops <= most[0] and moved <= most[1] and copies and not split


def _input(b: GraphBuilder, config: Config) -> str:
    """The graph's input: integer ids for an embedding, floats otherwise."""
    fam = FAMILIES[config["family"]]
    return b.input(fam.shape(config), dtype="int64" if fam.name == "embedding" else None)


def _forward(config: Config, *, sink: bool = False) -> Graph:
    """The op alone (or ``config["copies"]`` of it side by side); with ``sink``, followed
    by a view of its output, so that its time, as every op's in a graph, runs to the next
    op's start (releasing its inputs, dispatching the next) rather than stopping at its
    kernel's end."""
    b = GraphBuilder(f"sample.{config['family']}")
    x = _input(b, config)
    for _ in range(config.get("copies", 1)):
        y = FAMILIES[config["family"]].forward(b, x, config)
    if sink:
        b.reshape(y, b.shape(y))
    return b.build()


def build(config: Config) -> Graph:
    """The graph that samples ``config``: its op alone (and a view of its output after
    it, as a next op), or (``config["train"]``) a
    training step around it: a ReLU before it (``pre``: its input's gradient is computed),
    a softmax after it (a global average pool and a flatten first for an image), the loss
    and the updates of ``config["optimizer"]``."""
    if not config["train"]:
        return _forward(config, sink=True)
    from workloads.training import training_graph

    fam = FAMILIES[config["family"]]
    b = GraphBuilder(f"sample.{config['family']}.train")
    x = _input(b, config)
    if config["pre"] and fam.name != "embedding":
        x = b.relu(x)
    y = fam.forward(b, x, config)
    if len(b.shape(y)) == 4:
        y = b.flatten(b.global_avg_pool(y))
    b.softmax(y)
    return training_graph(b.build(), config["optimizer"])
