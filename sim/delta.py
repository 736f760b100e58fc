"""Delta simulation: an evaluator that simulates a candidate only from the first event its
difference from a plan it simulated before can change (or, with ``resume=False``, every
candidate from its start from its arrays, as :func:`search_evaluator` does by default:
under ``mcmc``'s candidates that is the faster, see :data:`RESUME_ABOVE`).

A search scores plans that differ from one another by a move or two. :class:`DeltaEvaluator`
keeps, for the last few plans it simulated, snapshots of the run's state taken every so many
events. For a new plan it finds, against each kept plan, the earliest time the difference can
change anything (:func:`divergence`), restores the latest snapshot taken before that time
onto the new plan's run, and simulates from there. Every makespan equals a full
simulation's to the bit (``tests/sim/test_delta.py`` checks random moves, returns to earlier
plans and, near the memory limit, the peaks and what each run holds at its end).

The runs are the compiled loop's (:mod:`sim.compiled`), whose whole state is arrays: a
plan is laid out from its own arrays by :class:`sim.slots.Slots`, which numbers each
(tensor, destination) transfer once for every plan and re-derives only the edges a move
changed, and a snapshot is a copy of the state arrays. A snapshot also keeps what its plan
started with (held references, resident parameters): a restored run's value is the
snapshot's less that plus what the new plan starts with. The kept run that a restore uses
moves to the back of the kept, so the chain's current plan stays.

Under ``fair`` links a run changes its flow table in place, so it is not resumed: each plan
runs from its start, laid out from its arrays the same way (its flow table by the link
model, for the transfers the arrays number, in ``Plan.transfers`` order) without deriving
``Plan.transfers`` or a result's columns. Runs that this does not cover are simulated in
full (:func:`sim.simulate`), with the same result: the ``priority`` issue order, clusters
whose devices share a host, plans with collectives, and link models other than the
built-in ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.plans import Plan
from sim.engine import compiles, evaluator, fair_inputs, simulate
from sim.hosts import shared_hosts
from sim.links import FairSharing, FirstComeFirstServed, NoContention
from sim.options import LINK_MODELS, LINK_REGISTRY, ORDER_REGISTRY, ORDERS, require
from workloads.arrays import GraphArrays
from workloads.collect import gc_paused
from workloads.errors import PlacementError
from workloads.graph import Graph

if TYPE_CHECKING:
    from sim.compiled import FairInputs, PlanInputs, State
    from sim.slots import Slots

__all__ = ["RESUME_ABOVE", "DeltaEvaluator", "diverge", "divergence", "search_evaluator"]

#: The link models whose runs resume from a snapshot: those whose state is the compiled
#: loop's arrays alone (``fair``'s flow table is laid out per plan).
_LINKS = (FirstComeFirstServed, NoContention)
#: Clusters of more devices than this look for the devices whose order a move changed
#: before comparing orders (comparing every order is the cheaper on the benchmark's four
#: devices and far the dearer on 1,024; 32, between them, is not measured).
_FEW_DEVICES = 32
#: Graphs of more ops than this are searched with runs resumed from snapshots
#: (:func:`search_evaluator`); None: none are. Measured on layered DAGs apart from the
#: benchmark's (width 50, seed 1; the benchmark's are width 100, seed 0) under ``mcmc``'s
#: candidates, a quarter of them whole new plans from its priority search: a fresh compiled
#: run took 0.51, 0.50, 0.58, 0.57 and 0.65 times a resumed one at 3k, 5k, 7k, 10k and 20k
#: ops (``benchmarks/delta_bound.py --tune``, RESULTS.md), so taking snapshots costs more
#: than resuming saves at every size measured.
RESUME_ABOVE: int | None = None
#: A compiled search's transfer numbers start again once more than this beyond twice the
#: graph's edges have been met (see :meth:`sim.slots.Slots.renumber`).
RENUMBER_SLACK = 1024


def search_evaluator(graph: Graph, cluster: Cluster, cost: CostModel, *, links: str = "fcfs",
                     order: str = "plan") -> Callable[[Plan], float]:
    """The simulator as a search's evaluator for ``graph``: a :class:`DeltaEvaluator`
    where it runs plans in the compiled loop from their arrays (plan order, ``fcfs``,
    ``none`` or ``fair`` links, no shared hosts; faster than the full simulation at every
    size measured, 694 ops and up, ``benchmarks/delta_bound.py``), resuming from snapshots
    only on graphs of more than :data:`RESUME_ABOVE` ops (by default on none); else the
    full simulation (:func:`sim.evaluator`). Each scores every plan alike, to the bit.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> cost = RooflineCost(c)
    >>> e = search_evaluator(build_model("mlp"), c, cost, links="fair")
    >>> type(e).__name__, e.resume
    ('DeltaEvaluator', False)
    >>> search_evaluator(build_model("mlp"), c, cost, order="priority").__name__
    'evaluate'
    """
    delta = DeltaEvaluator(cluster, cost, links=links, order=order,
                           resume=RESUME_ABOVE is not None and len(graph) > RESUME_ABOVE)
    return delta if delta.compiled else evaluator(cluster, cost, links=links, order=order)


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
    a = old.graph.arrays
    position = a.position
    devices = tuple(sorted(set(old.order) | set(new.order)))

    def orders(p: Plan) -> tuple[np.ndarray, ...]:
        return tuple(np.fromiter(map(position.__getitem__, p.order.get(d, ())), np.int64)
                     for d in devices)

    return diverge(a, old.device_codes(devices), orders(old), new.device_codes(devices),
                   orders(new), start, end)


def diverge(a: GraphArrays, old_dev: np.ndarray, old_orders: Sequence[np.ndarray],
            new_dev: np.ndarray, new_orders: Sequence[np.ndarray], start: np.ndarray,
            end: np.ndarray) -> float:
    """:func:`divergence` of two plans given as each op's device index and each device's
    order (op positions), both against one device tuple.

    >>> from workloads import build_model
    >>> a = build_model("mlp").arrays
    >>> n = len(a.names)
    >>> dev, order = np.zeros(n, np.int64), [np.arange(n), np.zeros(0, np.int64)]
    >>> t = np.arange(n, dtype=float)
    >>> diverge(a, dev, order, dev, order, t, t + 1)
    inf
    >>> moved = dev.copy(); moved[3] = 1  # op 3 on the other device: from its input's end
    >>> diverge(a, dev, order, moved, [np.delete(np.arange(n), 3), np.array([3])], t, t + 1)
    3.0
    """
    earliest = math.inf
    for x, y in zip(old_orders, new_orders, strict=True):
        n = min(len(x), len(y))
        differ = np.flatnonzero(x[:n] != y[:n])
        first = int(differ[0]) if len(differ) else n
        if first == len(x) == len(y):
            continue  # the same order
        reached = float(start[x[first - 1]]) if first else 0.0
        then = min(float(start[x[first]]) if first < len(x) else math.inf,
                   _ready(a, int(y[first]), end) if first < len(y) else math.inf)
        earliest = min(earliest, max(reached, then))
    moved = np.flatnonzero(old_dev != new_dev)
    if len(moved):
        # the edges into a moved op (grouped by reader, in op order): their producers' ends
        lo = np.searchsorted(a.edge_dst, moved).tolist()
        hi = np.searchsorted(a.edge_dst, moved, side="right").tolist()
        feeds = np.concatenate([a.edge_src[i:j] for i, j in zip(lo, hi, strict=True)])
        earliest = min(earliest, float(start[moved].min()),
                       float(end[feeds].min()) if len(feeds) else math.inf)
    return earliest


def _ready(a: GraphArrays, op: int, end: np.ndarray) -> float:
    """When op ``op``'s producers have all ended (its edges, grouped by reader in op
    order)."""
    producers = a.edge_src[np.searchsorted(a.edge_dst, op):
                           np.searchsorted(a.edge_dst, op, side="right")]
    return float(end[producers].max()) if len(producers) else 0.0


@dataclass(eq=False)
class _Resumable:
    """A compiled run's state after ``events`` events, the last at ``now``: what resuming
    needs (:data:`_CARRIED` and the heap's events), not its results so far; ``refs0`` and
    ``resident0`` are what the plan of the run it was taken from started with."""

    events: int
    now: float
    arrays: dict[str, np.ndarray]
    refs0: np.ndarray
    resident0: np.ndarray


#: What a compiled run's snapshot carries (the rest are results, rewritten as it goes;
#: each device's place in its order is carried as the ops it has started, ``placed``).
_CARRIED = ("clock", "count", "free", "n_free", "copy_free", "link_free", "used",
            "peak", "pending", "refs", "stream", "over", "over_at")


@dataclass(eq=False)
class _KeptColumns:
    """A plan run by the compiled loop: its inputs, what its run started with (references
    per key, bytes per device), its op times and its snapshots."""

    inputs: PlanInputs
    refs0: np.ndarray
    resident0: np.ndarray
    start: np.ndarray
    end: np.ndarray
    snapshots: list[_Resumable]


class DeltaEvaluator:
    """The simulator as a search's evaluator (as :func:`sim.evaluator`: a plan's makespan,
    infinity where it does not fit), simulating each plan only from the first event that
    its difference from a plan simulated before can change (see the module).

    ``snapshots`` is how many a full run takes (spread evenly over its events; by default
    8: a compiled run's events cost so little that more snapshots cost more to take than
    they save, 1.82 ms per evaluation at 8 against 1.92 at 16 and 2.00 at 4 on a 5k-op
    tuning graph apart from the benchmark's);
    ``keep`` how many plans' snapshots are kept. With ``resume=False`` no snapshot is
    taken and every plan runs from its start in the compiled loop (what
    :func:`search_evaluator` takes, unless :data:`RESUME_ABOVE` says otherwise: under
    ``mcmc``'s moves that is the faster at every size measured). ``stats`` counts the
    events simulated and those a restore saved.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from policies import plan
    >>> from sim import simulate
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> cost = RooflineCost(c)
    >>> evaluate = DeltaEvaluator(c, cost)
    >>> q = plan(build_model("resnet50", batch=8), c, "mcmc:evals=30", cost,
    ...          evaluate=evaluate)
    >>> q.info["score_s"] == simulate(q, c, cost).makespan_s
    True
    >>> evaluate.stats["events_saved"] > 0
    True
    """

    def __init__(self, cluster: Cluster, cost: CostModel, *, links: str = "fcfs",
                 order: str = "plan", snapshots: int | None = None, keep: int = 4,
                 resume: bool = True) -> None:
        require(order, ORDER_REGISTRY, ORDERS, "evaluator", "order")
        require(links, LINK_REGISTRY, LINK_MODELS, "evaluator", "links")
        for name, value in (("snapshots", 8 if snapshots is None else snapshots),
                            ("keep", keep)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise PlacementError(f"evaluator: {name} must be an int >= 1, got {value!r}")
        cost.check_cluster(cluster, "evaluator")
        self.cluster, self.cost, self.links, self.order = cluster, cost, links, order
        self.keep = keep
        self.devices = tuple(cluster.device_names)
        self.part = LINK_REGISTRY.make(links)  # checked now: its type says how plans run
        #: Whether plans run in the compiled loop from their arrays (``fair`` links too,
        #: from the start each time); else :func:`sim.simulate` scores them.
        self.compiled = compiles(ORDER_REGISTRY.make(order), self.part, shared_hosts(cluster))
        #: Whether runs resume from snapshots (asked for, and where they can: runs whose
        #: state is the compiled loop's arrays alone, so not under ``fair`` links).
        self.resume = bool(resume) and self.compiled and type(self.part) in _LINKS
        self.n_snapshots = snapshots or 8
        self.renumber_slack = RENUMBER_SLACK
        self.contention = type(self.part) is FirstComeFirstServed
        self.names = frozenset(self.devices)
        self.slots: Slots | None = None
        self.kept_columns: list[_KeptColumns] = []
        self.graph: Any = None
        self.stats = {"evaluations": 0, "restored": 0, "events_run": 0, "events_saved": 0}
        #: The memory of the last plan it simulated, per device: its peak and what it still
        #: held at the end (bytes; a run that frees all it should holds its parameters).
        self.last_memory: dict[str, dict[str, int]] = {}

    def __call__(self, plan: Plan) -> float:
        self.stats["evaluations"] += 1
        if not self.compiled or plan.device_groups:
            result = simulate(plan, self.cluster, self.cost, links=self.links,
                              order=self.order)
            self.last_memory = {"peak_bytes": dict(result.peak_memory_bytes),
                                "held_at_end_bytes": dict(result.resident_bytes)}
            return result.makespan_s if result.feasible else math.inf
        if (plan.cluster_hash and plan.cluster_hash != self.cluster.definition_hash) or \
                not self.names.issuperset(plan.devices):
            plan.validate(self.cluster)  # says what is wrong (every op is in an order)
        if plan.graph is not self.graph:  # another graph: nothing kept applies
            self.graph, self.kept_columns, self.slots = plan.graph, [], None
        with gc_paused():
            return self._evaluate_resumed(plan) if self.resume else self._evaluate_fresh(plan)

    # -- one evaluation -----------------------------------------------------------------------

    def _slots(self, plan: Plan) -> Slots:
        """The graph's arrays, kept from plan to plan."""
        from sim.slots import Slots

        if self.slots is None:
            self.slots = Slots(plan.graph, self.cluster, self.cost)
        if len(self.slots.k_tensor) > 2 * len(self.slots.columns.edge_src) + \
                self.renumber_slack:
            # numbers met over a long search on a large cluster: every run's state grows
            # with them; start again (the kept runs go with them)
            self.slots.renumber()
            self.kept_columns = []
        return self.slots

    def _evaluate_fresh(self, plan: Plan) -> float:
        """``plan`` run in the compiled loop from its start, nothing kept; under ``fair``
        links with the flow table laid out by the link model for this plan's transfers
        (numbered from its arrays, in ``plan.transfers`` order, so ties end as in
        :func:`sim.simulate`)."""
        from sim import compiled

        slots = self._slots(plan)
        p = slots.inputs(plan)
        fair: FairInputs | None = None
        if isinstance(self.part, FairSharing):
            fair = fair_inputs(self.part, self.cluster, p, slots.transfer_numbers(p),
                               plan.graph.arrays.tensor_producer)
        run = slots.state(p, record=False)
        compiled.begin(slots.columns, p, run, self.contention, fair)
        self.stats["events_run"] += compiled.advance(slots.columns, p, run, self.contention,
                                                     2**62, fair)
        return self._score(run, p)

    def _score(self, run: State, p: PlanInputs) -> float:
        """The makespan of a finished run, infinity where it did not fit."""
        assert self.slots is not None
        self._remember(run.peak.tolist(), run.used.tolist())
        ran_all = bool(np.array_equal(run.nxt, p.order_off[1:]))
        if not ran_all or bool((run.peak > self.slots.columns.capacity).any()):
            return math.inf
        return float(run.clock[1])

    def _evaluate_resumed(self, plan: Plan) -> float:
        """``plan`` resumed from the kept run and snapshot that skip the most events (from
        its start where none applies), its own run kept."""
        from sim import compiled  # numba, as the compiled loop's runs do

        g = self._slots(plan).columns
        assert self.slots is not None
        p = self.slots.inputs(plan)
        run = self.slots.state(p, record=False)
        kept = _KeptColumns(p, run.refs.copy(), run.used.copy(), np.zeros(0), np.zeros(0), [])
        found = self._base(p)
        if found is None:
            compiled.begin(g, p, run, self.contention)
        else:
            base, at = found
            kept.snapshots = base.snapshots[:at + 1]
            self.stats["restored"] += 1
            self.stats["events_saved"] += kept.snapshots[-1].events
            _resume(run, kept, base)
        last = self.kept_columns[-1] if self.kept_columns else None
        expected = (last.snapshots[-1].events if last is not None and last.snapshots
                    else 2 * len(p.op_dev))
        every = max(1, expected // self.n_snapshots)
        while True:
            ran = compiled.advance(g, p, run, self.contention, every)
            self.stats["events_run"] += ran
            if not run.count[1]:
                break
            kept.snapshots.append(_Resumable(int(run.count[3]), float(run.clock[0]), {
                name: getattr(run, name).copy() for name in _CARRIED} | {
                name: getattr(run, name)[:run.count[1]].copy()
                for name in ("heap_t", "heap_s", "heap_x")} | {
                "placed": run.nxt - p.order_off[:-1]}, kept.refs0, kept.resident0))
        kept.start, kept.end = run.start, run.start + p.op_time
        self.kept_columns = [*self.kept_columns, kept][-self.keep:]
        return self._score(run, p)

    def _base(self, p: PlanInputs) -> tuple[_KeptColumns, int] | None:
        """The kept run and snapshot that let the most of ``p``'s run be skipped; the run
        chosen moves to the back of the kept (the one a search keeps returning to stays)."""
        a = self.graph.arrays
        every = np.arange(len(self.devices))
        place = _places(p) if len(every) > _FEW_DEVICES else None

        def divergence_of(kept: _KeptColumns) -> float:
            old, devices = kept.inputs, every
            if place is not None:  # many devices: only those whose order differs, those
                # an op left or joined and those where an op that stayed has another place
                moved = old.op_dev != p.op_dev
                devices = np.unique(np.concatenate((
                    p.op_dev[(_places(old) != place) & ~moved], old.op_dev[moved],
                    p.op_dev[moved])))
            return diverge(a, old.op_dev, _orders(old, devices), p.op_dev,
                           _orders(p, devices), kept.start, kept.end)

        best = _latest(self.kept_columns, divergence_of)
        if best is not None:
            self.kept_columns = [k for k in self.kept_columns if k is not best[0]] + [best[0]]
        return best

    def _remember(self, peak: list[int], used: list[int]) -> None:
        self.last_memory = {"peak_bytes": dict(zip(self.devices, peak, strict=True)),
                            "held_at_end_bytes": dict(zip(self.devices, used, strict=True))}


def _latest(kept: Sequence[_KeptColumns], divergence_of: Callable[[_KeptColumns], float]
            ) -> tuple[_KeptColumns, int] | None:
    """Of the ``kept`` runs, the one and its snapshot that skip the most events: for each,
    its last snapshot taken before the time its plan and the new one diverge."""
    best: tuple[_KeptColumns, int] | None = None
    for run in kept:
        when = divergence_of(run)
        at = -1
        for i, snapshot in enumerate(run.snapshots):
            if snapshot.now >= when:
                break
            at = i
        if at >= 0 and (best is None or
                        run.snapshots[at].events > best[0].snapshots[best[1]].events):
            best = (run, at)
    return best


def _orders(p: PlanInputs, devices: np.ndarray) -> list[np.ndarray]:
    """The order of each of ``devices`` in ``p``."""
    return [p.order[p.order_off[d]:p.order_off[d + 1]] for d in devices.tolist()]


def _places(p: PlanInputs) -> np.ndarray:
    """Each op's place in its device's order in ``p``."""
    place = np.empty(len(p.op_dev), np.int64)
    place[p.order] = np.arange(len(p.order)) - np.repeat(p.order_off[:-1],
                                                         np.diff(p.order_off))
    return place


def _resume(run: State, kept: _KeptColumns, base: _KeptColumns) -> None:
    """Put ``kept``'s last snapshot (kept by ``base``) onto ``run`` (the first state of
    ``kept``'s plan): what the plans fix from the start (held references, resident
    parameters) carried over as a difference, the ops started so far at ``base``'s
    times."""
    snapshot = kept.snapshots[-1]
    for name, value in snapshot.arrays.items():
        if name == "placed":
            run.nxt[:] = kept.inputs.order_off[:-1] + value
        elif name == "refs":  # this plan's start, less what the run took
            run.refs[:len(value)] += value - snapshot.refs0
        elif name in ("heap_t", "heap_s", "heap_x", "link_free"):
            getattr(run, name)[:len(value)] = value  # transfers, channels numbered since
        else:
            getattr(run, name)[...] = value
    moved = kept.resident0 - snapshot.resident0
    run.used += moved
    run.peak += moved
    run.start[:] = base.start  # the ops to start yet are given their times as they start
