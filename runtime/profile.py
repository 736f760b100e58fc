"""``placelab profile``: time every distinct op signature of a graph in context, on one
device of an engine, and keep the times in the profile database
(:mod:`hwmodels.profiles`), where the ``calibrated`` cost model finds them first.

The graph runs whole on the engine's first logical device (with that device's thread
budget: profile with the device count the plans will use), so each op is timed after its
producers, among the graph's own weights; ops of one signature (a transformer's repeated
layers) are kept as the median of their times.

>>> import tempfile, pathlib
>>> from hwmodels.profiles import ProfileStore
>>> from runtime import NumpyEngine
>>> from workloads import build_model
>>> store = ProfileStore(pathlib.Path(tempfile.mkdtemp()) / "p.sqlite")
>>> done = profile_graph(NumpyEngine(devices=2), build_model("mlp", batch=3), store,
...                      repeats=2, min_seconds=0.0)
>>> done.signatures == done.stored, done.ops
(True, 6)
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from hwmodels.cost import op_batch, op_signature
from hwmodels.profiles import Entry, ProfileStore
from runtime.engine import Engine
from runtime.microbench import time_ops
from workloads.graph import Graph

__all__ = ["Profiled", "profile_graph"]


@dataclass(frozen=True)
class Profiled:
    """What one ``profile`` stored: the graph, its ops timed, their distinct signatures,
    the entries written, and the run's median makespan."""

    graph: str
    ops: int
    signatures: int
    stored: int
    makespan_s: float


def profile_graph(engine: Engine, graph: Graph, store: ProfileStore, *, repeats: int = 3,
                  min_seconds: float = 0.5, warmup: int = 1, seed: int = 0) -> Profiled:
    """Run ``graph`` on the engine's first device (at least ``repeats`` runs and
    ``min_seconds`` in all), and store each distinct signature's median time, all in one
    transaction."""
    run, seconds = time_ops(engine, graph, warmup=warmup, repeats=repeats,
                            min_seconds=min_seconds, seed=seed)
    groups: dict[tuple[str, str, int], list[float]] = {}
    kinds: dict[tuple[str, str, int], str] = {}
    for op in graph:
        if op.op_class == "source" or op.name not in seconds or seconds[op.name] <= 0:
            continue
        batch = op_batch(op, graph)
        key = (op.dtype, op_signature(op, batch), batch)
        groups.setdefault(key, []).append(seconds[op.name])
        kinds[key] = op.kind
    runs = len(run.makespans_s)
    entries = [Entry(dtype, signature, batch, statistics.median(times), runs,
                     kinds[(dtype, signature, batch)])
               for (dtype, signature, batch), times in groups.items()]
    stored = store.record(engine.name, engine.fingerprint(), getattr(engine, "threads", 1),
                          entries, graph.name)
    return Profiled(graph.name, sum(len(t) for t in groups.values()), len(groups), stored,
                    run.makespan_s)
