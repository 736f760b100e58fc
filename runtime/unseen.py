"""Graphs calibration never ran: a seeded generator of networks no zoo model resembles, for
measuring how far the calibrated cost model holds on graphs it never saw.

Four families, each with random depth, widths, kernels and activations: convolutional
networks (strided and pooled stages, batch norm, residual adds), perceptrons (layer norms,
mixed activations), transformer blocks (pre- or post-norm, any head count, a feed-forward
width of its own) and recurrent networks (LSTM cells unrolled over time). Every free
dimension — batch, widths, channels, image sides, sequence lengths, vocabularies, classes —
is drawn on validation's side of the held-out split (:func:`runtime.sampling.is_held_out`),
which calibration never draws, so no op of these graphs has a signature calibration timed
(tested against calibration's training set). Half of the convolutional, perceptron and
transformer graphs are SGD or Adam training steps (the runtime has no backward kernel for
the LSTM cell: recurrent graphs are forward passes).

>>> graphs = unseen_graphs(4, seed=0)
>>> len(graphs), sorted({g.meta["family"] for g in graphs.values()})
(4, ['cnn', 'mlp', 'rnn', 'transformer'])
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from runtime.sampling import draw_dim
from workloads.builder import GraphBuilder
from workloads.graph import Graph

__all__ = ["FAMILIES", "signatures", "unseen_graphs", "zoo_signatures"]


def _dim(rng: np.random.Generator, low: int, high: int) -> int:
    return draw_dim(rng, low, high, held_out=True)


def _activation(b: GraphBuilder, x: str, rng: np.random.Generator) -> str:
    kind = ("relu", "relu", "gelu", "tanh", "sigmoid", "silu")[int(rng.integers(6))]
    if kind == "silu":
        return b.unary("silu", x, flops_per_element=5)
    return {"relu": b.relu, "gelu": b.gelu, "tanh": b.tanh, "sigmoid": b.sigmoid}[kind](x)


def cnn(rng: np.random.Generator) -> GraphBuilder:
    """Convolutions in stages of random width, some strided or pooled, batch norm, a
    residual add where shapes allow, a global pool and a classifier."""
    b = GraphBuilder("unseen_cnn")
    side = _dim(rng, 30, 96)
    x = b.input((_dim(rng, 2, 32), 3, side, side))
    for _ in range(int(rng.integers(3, 8))):
        kernel = (1, 3, 3, 5)[int(rng.integers(4))]
        stride = 2 if rng.random() < 0.25 and b.shape(x)[2] > 8 else 1
        y = b.conv2d(x, _dim(rng, 16, 200), kernel, stride=stride, padding=kernel // 2)
        if rng.random() < 0.6:
            y = b.batchnorm(y)
        y = _activation(b, y, rng)
        if b.shape(y) == b.shape(x) and rng.random() < 0.5:
            y = b.add(x, y)
        if rng.random() < 0.3 and b.shape(y)[2] > 6:
            pool = b.max_pool2d if rng.random() < 0.6 else b.avg_pool2d
            y = pool(y, (2, 3)[int(rng.integers(2))], stride=2)
        x = y
    x = b.flatten(b.global_avg_pool(x))
    b.softmax(b.linear(x, _dim(rng, 3, 200)))
    return b


def mlp(rng: np.random.Generator) -> GraphBuilder:
    """Fully connected layers of random widths and activations, some layer norms."""
    b = GraphBuilder("unseen_mlp")
    x = b.input((_dim(rng, 8, 300), _dim(rng, 100, 2500)))
    for _ in range(int(rng.integers(2, 6))):
        x = b.linear(x, _dim(rng, 100, 2500))
        if rng.random() < 0.3:
            x = b.layernorm(x)
        x = _activation(b, x, rng)
    b.softmax(b.linear(x, _dim(rng, 3, 200)))
    return b


def _heads(dim: int, rng: np.random.Generator) -> int:
    divisors = [h for h in range(1, 17) if dim % h == 0 and dim // h >= 4]
    return divisors[int(rng.integers(len(divisors)))] if divisors else 1


def transformer(rng: np.random.Generator) -> GraphBuilder:
    """An embedding, one to three attention blocks (pre- or post-norm, any head count, a
    feed-forward width of its own), a classifier over the vocabulary."""
    b = GraphBuilder("unseen_transformer")
    batch, seq, dim = _dim(rng, 1, 12), _dim(rng, 24, 200), _dim(rng, 96, 512)
    vocab, heads = _dim(rng, 100, 4000), _heads(dim, rng)
    x = b.embedding(b.input((batch, seq), name="tokens", dtype="int64"), vocab, dim)
    pre = bool(rng.random() < 0.5)
    for _ in range(int(rng.integers(1, 4))):
        h = b.layernorm(x) if pre else x
        y = _attention(b, h, heads)
        x = b.add(x, y) if pre else b.layernorm(b.add(x, y))
        h = b.layernorm(x) if pre else x
        y = b.linear(_activation(b, b.linear(h, _dim(rng, 2 * dim, 4 * dim)), rng), dim)
        x = b.add(x, y) if pre else b.layernorm(b.add(x, y))
    b.softmax(b.linear(x, _dim(rng, 3, 400)))
    return b


def _attention(b: GraphBuilder, x: str, heads: int) -> str:
    batch, seq, dim = b.shape(x)
    hd = dim // heads
    q, k, v = (b.linear(x, dim) for _ in range(3))

    def split(t: str, perm: tuple[int, ...]) -> str:
        return b.transpose(b.reshape(t, (batch, seq, heads, hd)), perm)

    scores = b.scale(b.matmul(split(q, (0, 2, 1, 3)), split(k, (0, 2, 3, 1))), hd ** -0.5)
    out = b.matmul(b.softmax(scores), split(v, (0, 2, 1, 3)))
    merged = b.reshape(b.transpose(out, (0, 2, 1, 3)), (batch, seq, dim))
    return b.linear(merged, dim)


def rnn(rng: np.random.Generator) -> GraphBuilder:
    """One or two LSTM layers unrolled over time on random features, a classifier on the
    last step."""
    b = GraphBuilder("unseen_rnn")
    batch, steps, hidden = _dim(rng, 4, 64), _dim(rng, 3, 24), _dim(rng, 64, 700)
    features = _dim(rng, 32, 400)
    xs = [b.input((batch, features), name=f"x{t}") for t in range(steps)]
    for layer in range(int(rng.integers(1, 3))):
        h = b.input((batch, hidden), name=f"h0.{layer}")
        c = b.input((batch, hidden), name=f"c0.{layer}")
        outs = []
        for t, x in enumerate(xs):
            gx = b.linear(x, 4 * hidden, name=f"l{layer}.t{t}.w_ih")
            gh = b.linear(h, 4 * hidden, name=f"l{layer}.t{t}.w_hh")
            h, c = b.add_multi("lstm_cell", "elementwise", (gx, gh, c),
                               [(batch, hidden), (batch, hidden)], name=f"l{layer}.t{t}.cell",
                               flops=30 * batch * hidden)
            outs.append(h)
        xs = outs
    b.softmax(b.linear(xs[-1], _dim(rng, 3, 200)))
    return b


#: The families, in the order :func:`unseen_graphs` cycles through them.
FAMILIES: dict[str, Callable[[np.random.Generator], GraphBuilder]] = {
    "cnn": cnn, "mlp": mlp, "transformer": transformer, "rnn": rnn}


def zoo_signatures() -> frozenset[str]:
    """The signatures of every op of the zoo models calibration runs whole (a held-out
    dimension can occur in the zoo: LeNet-5's ten classes)."""
    from runtime.microbench import calibration_graphs

    return frozenset(s for g in calibration_graphs(quick=False) for s in signatures(g))


def signatures(graph: Graph) -> set[str]:
    """The signatures (:func:`hwmodels.cost.op_signature`) of ``graph``'s ops."""
    from hwmodels.cost import op_batch, op_signature

    return {op_signature(op, op_batch(op, graph)) for op in graph if op.op_class != "source"}


def unseen_graphs(n: int, seed: int = 0, avoid: frozenset[str] | None = None
                  ) -> dict[str, Graph]:
    """``n`` graphs, the families in turn, named by family, index and step (``cnn3.adam``);
    every graph's ``meta`` says its family, batch and step. A graph with an op whose
    signature is in ``avoid`` (by default :func:`zoo_signatures`) is drawn again."""
    rng = np.random.default_rng([seed, 7])
    avoid = zoo_signatures() if avoid is None else avoid
    out: dict[str, Graph] = {}
    names = list(FAMILIES)
    for i in range(n):
        family = names[i % len(names)]
        for _ in range(100):
            name, graph = _one(family, i, rng, seed)
            if not signatures(graph) & avoid:
                break
        out[name] = graph
    return out


def _one(family: str, i: int, rng: np.random.Generator, seed: int) -> tuple[str, Graph]:
    """One graph of ``family``: a forward pass, or half the time (not for recurrent
    networks) an SGD or Adam step."""
    from workloads.training import training_graph

    forward = FAMILIES[family](rng).build()
    step = "forward"
    if family != "rnn" and rng.random() < 0.5:
        step = ("sgd", "adam")[int(rng.integers(2))]
    batch = next(op for op in forward if op.kind == "input").output.shape[0]
    forward = forward.derive(forward.ops, model=f"unseen_{family}", batch=batch,
                             step="forward", family=family, seed=seed)
    graph = forward if step == "forward" else training_graph(forward, step)
    name = f"{family}{i}" + ("" if step == "forward" else f".{step}")
    return name, graph.derive(graph.ops, name=name)
