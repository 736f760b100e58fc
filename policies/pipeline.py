"""Pipeline partitioning after PipeDream (Narayanan et al., SOSP 2019): contiguous stages of
a topological order, one per device in cluster order, chosen by dynamic programming to
minimise the slowest stage, a stage's time being its compute plus sending what crosses its
end to the next device. Each stage must fit its device's memory (the conservative model of
:mod:`policies.problem`, plus every tensor crossing into the stage). A co-placement group
is one unit at its lead's position (a layer's backward and update ops join its stage).
"""

from __future__ import annotations

import numpy as np

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.base import Param, PlacementPolicy, register_policy
from policies.plans import Placement
from policies.problem import Problem
from workloads.errors import OutOfMemory
from workloads.graph import Graph

__all__ = ["Pipeline"]


@register_policy
class Pipeline(PlacementPolicy):
    """Stages by dynamic programming; exact over cut points for graphs of up to
    ``max_blocks`` ops, and over cuts between runs of consecutive ops (blocks) beyond."""

    name = "pipeline"
    memory_aware = True

    params = (Param("max_blocks", "int", 2000, minimum=1,
                    doc="blocks of consecutive ops the stages are cut from"),
              Param("microbatches", "int", 1, minimum=1,
                    doc="micro-batches the graph (one of them) runs per step: weights and "
                        "gradients cross a cut once per step, so count 1/microbatches"))

    def __init__(self, max_blocks: int = 2000, microbatches: int = 1) -> None:
        self.max_blocks = self.checked("max_blocks", max_blocks)
        self.microbatches = self.checked("microbatches", microbatches)

    def place(self, graph: Graph, cluster: Cluster, cost: CostModel) -> Placement:
        p = Problem(graph, cluster, cost)
        units = p.units()
        slot = {op: k for k, op in enumerate(units)}
        m = len(units)
        memory_of = np.zeros(p.n)
        np.add.at(memory_of, p.node_of, p.op_memory)
        bounds = np.linspace(0, m, min(m, self.max_blocks) + 1).round().astype(int)
        bounds = np.unique(bounds)
        times = np.vstack([np.zeros(len(p.devices)),
                           np.cumsum(p.node_times[units], axis=0)])[bounds]
        memory = np.concatenate([[0], np.cumsum(memory_of[units])])[bounds]
        crossing = _crossing_bytes(p, slot, _per_step(graph, p, self.microbatches))[bounds]
        cuts = self._solve(p, times, memory, crossing)
        stage = [0] * m
        for k in range(len(p.devices)):
            for u in range(int(bounds[cuts[k]]), int(bounds[cuts[k + 1]])):
                stage[u] = k
        where = [stage[slot[p.node_of[i]]] for i in range(p.n)]
        return Placement({p.names[i]: p.devices[d] for i, d in enumerate(where)})

    def _solve(self, p: Problem, times: np.ndarray, memory: np.ndarray,
               crossing: np.ndarray) -> list[int]:
        """Cut indices (into the block bounds) c_0 = 0 <= ... <= c_D = last."""
        n_dev, m = len(p.devices), len(times) - 1
        best = np.full((n_dev, m + 1), np.inf)
        choice = np.zeros((n_dev, m + 1), dtype=int)
        for k in range(n_dev):
            send = self._send(p, k, crossing)
            for i in range(m + 1):
                js = np.arange(i + 1)
                # inf - inf is nan: a stage with an op the device cannot run is impossible
                with np.errstate(invalid="ignore"):
                    stage = times[i, k] - times[js, k] + (send[i] if i < m else 0.0)
                stage = np.nan_to_num(stage, nan=np.inf)
                stage = np.where(js == i, 0.0, stage)  # an empty stage costs nothing
                fits = memory[i] - memory[js] + crossing[js] <= p.capacity[k]
                fits |= js == i
                before = best[k - 1, js] if k else np.where(js == 0, 0.0, np.inf)
                total = np.where(fits, np.maximum(before, stage), np.inf)
                j = int(np.argmin(total))
                best[k, i], choice[k, i] = total[j], j
        if not np.isfinite(best[-1, m]):
            raise OutOfMemory(
                f"policy 'pipeline': no split of {m} units into {n_dev} stages fits the "
                f"devices' memory (capacities {p.capacity})")
        cuts = [m]
        for k in range(n_dev - 1, -1, -1):
            cuts.append(int(choice[k, cuts[-1]]))
        return cuts[::-1]

    @staticmethod
    def _send(p: Problem, k: int, crossing: np.ndarray) -> np.ndarray:
        """Seconds to send what crosses each cut from device k to device k + 1."""
        if k + 1 >= len(p.devices):
            return np.zeros(len(crossing))
        src, dst = p.devices[k], p.devices[k + 1]
        return np.array([p.cost.transfer_time(int(b), src, dst) if b else 0.0
                         for b in crossing])


def _per_step(graph: Graph, p: Problem, microbatches: int) -> np.ndarray:
    """Each tensor's share of its bytes that crosses a cut per micro-batch: ``1 /
    microbatches`` for weights (a ``parameter`` op's) and what an update reads (gradients),
    which cross once per step; 1 for the rest."""
    share = np.ones(len(p.tensor_bytes))
    if microbatches == 1:
        return share
    index = {name: t for t, name in enumerate(p.tensor_names)}
    for op in graph:
        names = [t.name for t in op.outputs] if op.kind == "parameter" else \
            list(op.inputs) if op.kind.endswith("_update") else []
        for name in names:
            share[index[name]] = 1 / microbatches
    return share


def _crossing_bytes(p: Problem, slot: dict[int, int], share: np.ndarray) -> np.ndarray:
    """``out[k]``: bytes (times their per-micro-batch ``share``) of tensors whose producer
    and readers lie on both sides of the cut before unit ``k`` (an op's unit: its group's
    lead)."""
    m = len(slot)
    delta = np.zeros(m + 2)
    span: dict[int, tuple[int, int]] = {}
    for j in range(p.n):
        for i, t in p.preds[j]:
            a, b = slot[p.node_of[i]], slot[p.node_of[j]]
            lo, hi = span.get(t, (a, a))
            span[t] = (min(lo, a, b), max(hi, a, b))
    for t, (lo, hi) in span.items():
        if lo < hi:
            delta[lo + 1] += p.tensor_bytes[t] * share[t]
            delta[hi + 1] -= p.tensor_bytes[t] * share[t]
    return np.cumsum(delta)[: m + 1]
