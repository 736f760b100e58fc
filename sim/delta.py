"""Delta simulation: a search's evaluator that simulates a candidate only from the first
event its difference from a plan it simulated before can change.

A search scores plans that differ from one another by a move or two. :class:`DeltaEvaluator`
keeps, for the last few plans it simulated, snapshots of the run's state taken every so many
events. For a new plan it finds, against each kept plan, the earliest time the difference can
change anything (:func:`divergence`), restores the latest snapshot taken before that time
onto the new plan's wiring, and simulates from there. Every makespan equals a full
simulation's to the bit (``tests/sim/test_delta.py`` checks random moves under every link
model); the saving is the share of the run before the first change, which under ``mcmc``'s
moves is modest (``benchmarks/delta_bound.py`` measures its ceiling).

A snapshot is the state the simulation changes as it goes: the event queue, each device's
position in its order and free streams and copy engines, each op's inputs still awaited and
start, each tensor copy's readers still to come, each transfer's start and end, memory in
use and its peak, and the link model's own state. Transfers are numbered by (tensor,
destination) once and for all, so that a transfer keeps its number in every plan and a
snapshot's state means the same in each. What a plan fixes from the start (its resident
parameters, each copy's readers) is carried over as a difference: a restored run's value is
the snapshot's less what the snapshot's plan started with plus what the new plan starts with.

Runs that this does not cover are simulated in full, with the same result: the ``priority``
issue order, clusters whose devices share a host, plans with collectives, and link models
other than ``fcfs``, ``fair`` and ``none``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.plans import Plan
from sim.engine import PlanOrder, Simulation, evaluator, simulate
from sim.hosts import shared_hosts
from sim.links import FairSharing, FirstComeFirstServed, NoContention
from sim.options import LINK_MODELS, LINK_REGISTRY, ORDER_REGISTRY, ORDERS, require
from sim.wiring import Wiring, wire
from workloads.collect import gc_paused
from workloads.errors import PlacementError
from workloads.graph import Graph

__all__ = ["DELTA_FROM", "DeltaEvaluator", "divergence", "search_evaluator"]

#: The link models whose state a snapshot knows how to carry.
_LINKS = (FirstComeFirstServed, FairSharing, NoContention)
#: Graphs of at least this many ops are searched with delta simulation: it saved
#: 1.06-1.09x at 1k ops and 1.17-1.25x at 10k, and was slower at 694
#: (``benchmarks/delta_bound.py``, RESULTS.md).
DELTA_FROM = 1000


def search_evaluator(graph: Graph, cluster: Cluster, cost: CostModel, *, links: str = "fcfs",
                     order: str = "plan") -> Callable[[Plan], float]:
    """The simulator as a search's evaluator for ``graph``: a :class:`DeltaEvaluator` on
    graphs of :data:`DELTA_FROM` ops or more, the full simulation (:func:`sim.evaluator`)
    below; either scores every plan alike, to the bit.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from workloads import build_model
    >>> from workloads.synthetic import layered_dag
    >>> c = get_cluster("quad-v100-nvlink")
    >>> cost = RooflineCost(c)
    >>> type(search_evaluator(layered_dag(1000, width=50, seed=0), c, cost)).__name__
    'DeltaEvaluator'
    >>> search_evaluator(build_model("mlp"), c, cost).__name__
    'evaluate'
    """
    if len(graph) >= DELTA_FROM:
        return DeltaEvaluator(cluster, cost, links=links, order=order)
    return evaluator(cluster, cost, links=links, order=order)


def divergence(old: Plan, new: Plan, start: np.ndarray, end: np.ndarray) -> float:
    """The earliest simulated time at which ``new`` can run differently from ``old``, given
    ``old``'s op start and end times (by the graph's op positions), both in plan order.

    * On a device whose order changed, nothing differs before the op before the first
      changed position starts (0 when it is the first), nor before either the old op there
      starts or the new op there can be ready (its producers have ended).
    * An op that moved differs from its start; the transfers of its inputs from their
      producers' ends.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from policies import plan
    >>> from sim import simulate
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> p = plan(build_model("mlp", batch=8), c, "single_device")
    >>> r = simulate(p, c, RooflineCost(c)).columns
    >>> divergence(p, p, r.op_start, r.op_end)  # nothing differs
    inf
    """
    graph = old.graph
    a = graph.arrays
    position = a.position

    def ready(name: str) -> float:
        return max((float(end[position[u]]) for u in graph.predecessors(name)), default=0.0)

    earliest = math.inf
    for device in set(old.order) | set(new.order):
        x = tuple(old.order.get(device, ()))
        y = tuple(new.order.get(device, ()))
        if x == y:
            continue
        n = min(len(x), len(y))
        differ = np.flatnonzero(np.fromiter(map(position.__getitem__, x[:n]), np.int64, n)
                                != np.fromiter(map(position.__getitem__, y[:n]), np.int64, n))
        first = int(differ[0]) if len(differ) else n
        reached = float(start[position[x[first - 1]]]) if first else 0.0
        then = min(float(start[position[x[first]]]) if first < len(x) else math.inf,
                   ready(y[first]) if first < len(y) else math.inf)
        earliest = min(earliest, max(reached, then))
    devices = tuple(sorted(set(old.placement.values()) | set(new.placement.values())))
    moved = old.device_codes(devices) != new.device_codes(devices)
    if moved.any():
        feeds = moved[a.edge_dst]  # the edges into a moved op: their producers' ends
        earliest = min(earliest, float(start[moved].min()),
                       float(end[a.edge_src[feeds]].min()) if feeds.any() else math.inf)
    return earliest


@dataclass(frozen=True)
class _Snapshot:
    """A run's state after ``events`` events, the last at ``now``; ``refs0`` and
    ``resident0`` are what its plan started with."""

    events: int
    now: float
    heap: list[tuple[float, int, str, str, Any]]
    following: int
    lists: dict[str, list[Any]]
    refs: list[int]
    nested: dict[str, list[list[Any]]]
    used: list[int]
    peak: list[int]
    links: Any
    refs0: np.ndarray
    resident0: np.ndarray


@dataclass
class _Kept:
    """A plan simulated, with its op times and snapshots."""

    plan: Plan
    start: np.ndarray
    end: np.ndarray
    snapshots: list[_Snapshot]


class DeltaEvaluator:
    """The simulator as a search's evaluator (as :func:`sim.evaluator`: a plan's makespan,
    infinity where it does not fit), simulating each plan only from the first event that
    its difference from a plan simulated before can change (see the module).

    ``snapshots`` is how many a full run takes (spread evenly over its events); ``keep``
    how many plans' snapshots are kept. ``stats`` counts the events simulated and those a
    restore saved.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from policies import plan
    >>> from sim import simulate
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> cost = RooflineCost(c)
    >>> evaluate = DeltaEvaluator(c, cost, links="fair")
    >>> p = plan(build_model("resnet50", batch=8), c, "heft")
    >>> q = plan(build_model("resnet50", batch=8), c, "mcmc:evals=30", cost,
    ...          evaluate=evaluate)
    >>> q.info["score_s"] == simulate(q, c, cost, links="fair").makespan_s
    True
    >>> evaluate.stats["events_saved"] > 0
    True
    """

    def __init__(self, cluster: Cluster, cost: CostModel, *, links: str = "fcfs",
                 order: str = "plan", snapshots: int = 16, keep: int = 4) -> None:
        require(order, ORDER_REGISTRY, ORDERS, "evaluator", "order")
        require(links, LINK_REGISTRY, LINK_MODELS, "evaluator", "links")
        for name, value in (("snapshots", snapshots), ("keep", keep)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise PlacementError(f"evaluator: {name} must be an int >= 1, got {value!r}")
        cost.check_cluster(cluster, "evaluator")
        self.cluster, self.cost, self.links, self.order = cluster, cost, links, order
        self.n_snapshots, self.keep = snapshots, keep
        self.devices = tuple(cluster.device_names)
        self.part = LINK_REGISTRY.make(links)  # checked now; each run gets a clone
        self.delta = (order == "plan" and type(self.part) in _LINKS
                      and shared_hosts(cluster) is None)
        # every (tensor, device) transfer seen, sorted, and its slot
        self.known = np.zeros(0, np.int64)
        self.known_slot = np.zeros(0, np.int64)
        self.kept: list[_Kept] = []
        self.graph: Any = None
        self.stats = {"evaluations": 0, "restored": 0, "events_run": 0, "events_saved": 0}

    def __call__(self, plan: Plan) -> float:
        self.stats["evaluations"] += 1
        if not self.delta or plan.device_groups:
            result = simulate(plan, self.cluster, self.cost, links=self.links,
                              order=self.order)
            return result.makespan_s if result.feasible else math.inf
        plan.validate(self.cluster)
        if plan.graph is not self.graph:  # another graph: nothing kept applies
            self.graph, self.kept = plan.graph, []
            self.known, self.known_slot = np.zeros(0, np.int64), np.zeros(0, np.int64)
        with gc_paused():
            return self._evaluate(plan)

    # -- one evaluation ---------------------------------------------------------------------

    def _evaluate(self, plan: Plan) -> float:
        w, tie = self._wiring(plan)
        base = self._latest_before(plan)
        run = Simulation(w, self.cluster, self.devices, plan)
        run.t_tie = tie
        run.compose(PlanOrder, self.part.clone())
        snapshots: list[_Snapshot] = []
        if base is None:
            run.begin()
            done = 0
        else:
            snapshots = base[0].snapshots[:base[1] + 1]
            snapshot = snapshots[-1]
            self.stats["restored"] += 1
            if not self._restore(run, w, snapshot):
                return math.inf  # over memory already (its parameters moved)
            done = snapshot.events
            self.stats["events_saved"] += done
        expected = (self.kept[-1].snapshots[-1].events if self.kept and
                    self.kept[-1].snapshots else 2 * (len(w.names) + len(plan.transfers)))
        every = max(1, expected // self.n_snapshots)
        ran = self._run(run, w, every, done, snapshots)
        self.stats["events_run"] += ran - done
        return self._result(run, plan, snapshots)

    def _run(self, run: Simulation, w: Wiring, every: int, done: int,
             snapshots: list[_Snapshot]) -> int:
        """Run to the end, snapshotting every ``every`` events; the events run in all."""
        env = run.env
        while True:
            done += env.run_some(every)
            if not len(env):
                return done
            snapshots.append(self._snapshot(run, w, done))

    def _result(self, run: Simulation, plan: Plan, snapshots: list[_Snapshot]) -> float:
        start = np.asarray(run.start, dtype=float)
        end = start + np.asarray(run.op_time, dtype=float)
        self.kept = [*self.kept, _Kept(plan, start, end, snapshots)][-self.keep:]
        if sum(run.next) < len(run.names) or any(
                p > c for p, c in zip(run.peak, run.capacity, strict=True)):
            return math.inf
        return max(float(end.max()) if len(end) else 0.0, max(run.t_end, default=0.0))

    def _latest_before(self, plan: Plan) -> tuple[_Kept, int] | None:
        """The kept plan and snapshot that let the most of ``plan``'s run be skipped."""
        best: tuple[_Kept, int] | None = None
        for kept in self.kept:
            when = divergence(kept.plan, plan, kept.start, kept.end)
            at = -1
            for i, s in enumerate(kept.snapshots):
                if s.now >= when:
                    break
                at = i
            if at >= 0 and (best is None or
                            kept.snapshots[at].events > best[0].snapshots[best[1]].events):
                best = (kept, at)
        return best

    # -- wiring with stable transfer numbers ------------------------------------------------

    def _wiring(self, plan: Plan) -> tuple[Wiring, np.ndarray]:
        """``plan``'s wiring with each transfer numbered by its (tensor, destination) slot,
        and each slot's place in the plan's order of transfers (ties end in that order)."""
        w = wire(plan, self.cluster, self.cost)
        key = w.t_key * len(self.devices) + w.t_dst  # one transfer per (tensor, device)
        found = np.searchsorted(self.known, key)
        seen = found < len(self.known)
        seen[seen] = self.known[found[seen]] == key[seen]
        new = ~seen
        if new.any():  # slots for transfers no plan had: numbered after every other
            fresh = np.unique(key[new])
            self.known_slot = np.concatenate((self.known_slot,
                                              np.arange(len(fresh)) + len(self.known)))
            self.known = np.concatenate((self.known, fresh))
            order = np.argsort(self.known, kind="stable")
            self.known, self.known_slot = self.known[order], self.known_slot[order]
            found = np.searchsorted(self.known, key)
        slot = self.known_slot[found]
        return _restack(w, slot, len(self.known))

    # -- snapshots --------------------------------------------------------------------------

    _LISTS = ("next", "start", "stream", "pending", "t_start", "t_end", "t_engine")

    def _snapshot(self, run: Simulation, w: Wiring, events: int) -> _Snapshot:
        heap, following = run.env.pending()
        links = run.links
        owners = {id(run): "run", id(links): "links"}
        return _Snapshot(
            events=events, now=run.env.now,
            heap=[(t, s, owners[id(cb.__self__)], cb.__func__.__name__, v)  # type: ignore[attr-defined]
                  for t, s, cb, v in heap],
            following=following,
            lists={name: list(getattr(run, name)) for name in self._LISTS},
            refs=list(run.refs),
            nested={name: [list(x) for x in getattr(run, name)]
                    for name in ("free_streams", "copy_free")},
            used=list(run.used), peak=list(run.peak), links=_link_state(links),
            refs0=w.refs, resident0=w.resident)

    def _restore(self, run: Simulation, w: Wiring, s: _Snapshot) -> bool:
        """Put ``s`` onto ``run`` (built for another plan); False if that plan is over
        memory before the snapshot's time."""
        owners = {"run": run, "links": run.links}
        run.env.resume(s.now, [(t, q, getattr(owners[o], name), v)
                               for t, q, o, name, v in s.heap], s.following)
        for name, values in s.lists.items():
            mine = getattr(run, name)
            mine[:len(values)] = values
        refs = w.refs.astype(np.int64)  # this plan's start, less what the run took
        refs[:len(s.refs)] += np.asarray(s.refs, dtype=np.int64) - s.refs0
        run.refs[:] = refs.tolist()
        for name, values in s.nested.items():
            for mine, theirs in zip(getattr(run, name), values, strict=True):
                mine[:] = theirs
        moved = (w.resident - s.resident0).tolist()
        run.used[:] = [u + d for u, d in zip(s.used, moved, strict=True)]
        run.peak[:] = [p + d for p, d in zip(s.peak, moved, strict=True)]
        run.timeline.clear()  # a search needs no memory series
        _restore_links(run.links, s.links)
        return all(p <= c for p, c in zip(run.peak, run.capacity, strict=True))


def _restack(w: Wiring, slot: np.ndarray, size: int) -> tuple[Wiring, np.ndarray]:
    """``w`` with transfer ``k`` renumbered ``slot[k]`` among ``size`` (the others empty:
    no route, no readers, never started), and each slot's place in ``w``'s order."""
    n_tensors = len(w.key_bytes) - len(w.t_src)

    def scatter(column: np.ndarray) -> np.ndarray:
        out = np.zeros(size, dtype=column.dtype)
        out[slot] = column
        return out

    lengths = np.zeros(size, np.int64)
    lengths[slot] = np.diff(w.t_readers_off)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    by_slot = np.argsort(slot, kind="stable")
    counts = np.diff(w.t_readers_off)[by_slot]
    starts = w.t_readers_off[:-1][by_slot]
    total = int(counts.sum())
    take = (np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
            + np.repeat(starts, counts))
    read_ids = w.read_ids.copy()
    far = read_ids >= n_tensors
    read_ids[far] = n_tensors + slot[read_ids[far] - n_tensors]
    refs = np.zeros(n_tensors + size, np.int64)
    refs[:n_tensors] = w.refs[:n_tensors]
    refs[n_tensors + slot] = w.refs[n_tensors:]
    key_bytes = np.zeros(n_tensors + size, w.key_bytes.dtype)
    key_bytes[:n_tensors] = w.key_bytes[:n_tensors]
    key_bytes[n_tensors + slot] = w.key_bytes[n_tensors:]
    channels: list[tuple[str, ...]] = [()] * size
    names = [""] * size
    for k, s in enumerate(slot.tolist()):
        channels[s], names[s] = w.t_channels[k], w.transfer_names[k]
    tie = np.full(size, len(slot), np.int64)
    tie[slot] = np.arange(len(slot))
    return replace(
        w, read_ids=read_ids, refs=refs, key_bytes=key_bytes, send=slot[w.send],
        t_src=scatter(w.t_src), t_dst=scatter(w.t_dst), t_bytes=scatter(w.t_bytes),
        t_key=scatter(w.t_key), t_duration=scatter(w.t_duration), t_channels=tuple(channels),
        t_readers=w.t_readers[take], t_readers_off=offsets,
        transfer_names=tuple(names)), tie


# -- the link models' own state ---------------------------------------------------------------

def _link_state(links: Any) -> Any:
    if isinstance(links, FirstComeFirstServed):
        return dict(links.link_free)
    if isinstance(links, FairSharing):
        return (links.flows.active_state(), list(links.channels),
                [list(e) for e in links.free_engines], [list(q) for q in links.waiting],
                list(links.booked), links.soonest)
    return None


def _restore_links(links: Any, state: Any) -> None:
    if isinstance(links, FirstComeFirstServed):
        links.link_free = dict(state)
    elif isinstance(links, FairSharing):
        flows, channels, engines, waiting, booked, soonest = state
        # a flow active at the snapshot is a transfer both plans make, on the same route
        index = {name: i for i, name in enumerate(links.channels)}
        here = np.array([index.get(c, -1) for c in channels], dtype=np.int64)
        if any(here[c] < 0 for c in flows.members):
            raise AssertionError("delta simulation: a snapshot's flow crosses a channel the "
                                 "restored run lacks")
        links.flows.restore(flows, here)
        for mine, theirs in zip(links.free_engines, engines, strict=True):
            mine[:] = theirs
        for queue, theirs in zip(links.waiting, waiting, strict=True):
            queue.clear()
            queue.extend(theirs)
        links.booked[:] = booked
        links.soonest = soonest

