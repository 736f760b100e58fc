"""How much the logical devices of one machine slow each other down, measured.

The NumPy engine's devices are threads on one machine's cores: at once they share caches,
memory bandwidth and the interpreter lock. Calibration measures it on whole zoo models:
two copies of a model run one after the other on one device, then side by side on two;
the side-by-side run takes ``slowdown`` times as long as one copy alone. The median over
a few models of different character (convolutions, attention, small layers) is the host's
slowdown, which the simulator applies while two devices compute at once
(``Cluster.host_slowdown``, :mod:`sim.hosts`).
"""

from __future__ import annotations

import statistics

from runtime.engine import Engine
from workloads.graph import Graph

__all__ = ["SIDE_BY_SIDE_MODELS", "median_slowdown", "side_by_side", "slowdown_of"]

#: (model, batch, sequence length): the models run side by side.
SIDE_BY_SIDE_MODELS: tuple[tuple[str, int, int | None], ...] = (
    ("resnet50", 1, None), ("bert_base", 1, 32), ("lenet5", 32, None))


def _twice(graph: Graph) -> Graph:
    """Two independent copies of ``graph`` (``copy0/...`` and ``copy1/...``)."""
    from policies.parallel import copy_ops

    ops = [op for k in range(2)
           for op in copy_ops(graph, "copy", k, "copy", lambda op, _k: op.params)]
    return Graph(f"{graph.name}x2", ops, meta=dict(graph.meta))


def side_by_side(engine: Engine, graph: Graph, *, repeats: int = 5) -> float:
    """How many times longer two copies of ``graph`` side by side on the engine's first two
    devices take than one copy alone (half their time one after the other on one device):
    1 where devices never meet, 2 where they take turns."""
    from runtime.executor import execute
    from runtime.microbench import pinned

    pair, both = engine.devices[:2], _twice(graph)

    def median_run(where: dict[str, str] | None) -> float:
        plan = pinned(both, engine, where)
        return execute(plan, engine, warmup=1, repeats=repeats).makespan_s

    one = median_run(None)
    apart = median_run({n: pair[n.startswith("copy1/")] for n in both.names})
    return 2 * apart / one


def slowdown_of(engine: Engine, *, repeats: int = 5) -> dict[str, float]:
    """:func:`side_by_side` of each of :data:`SIDE_BY_SIDE_MODELS` (none on an engine of
    one device); the host's slowdown is their median, at least 1."""
    from workloads.zoo import build_model

    if len(engine.devices) < 2:
        return {}
    return {f"{m} b{b}": side_by_side(engine, build_model(m, batch=b, seq_len=s),
                                      repeats=repeats)
            for m, b, s in SIDE_BY_SIDE_MODELS}


def median_slowdown(ratios: dict[str, float]) -> float:
    """The median of measured side-by-side ratios, at least 1 (1 without any).

    >>> median_slowdown({"a": 1.1, "b": 1.3, "c": 0.9})
    1.1
    """
    return max(statistics.median(ratios.values()), 1.0) if ratios else 1.0
