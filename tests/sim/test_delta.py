"""Delta simulation (sim.delta): nothing a move changes happens before the time
``divergence`` names (checked on full simulations of both plans), and the evaluator that
restores a snapshot from before that time gives every plan the full simulation's makespan."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import Cluster, Device, Link, RooflineCost, get_cluster
from policies import Plan, order_by_priority, plan
from sim import evaluator, simulate
from sim.delta import DeltaEvaluator, divergence, search_evaluator
from tests.helpers import FixedCost, op, toy_cluster
from tests.sim.test_compiled import with_memory
from tests.sim.test_flows import instances
from workloads import Graph, build_model, training_graph
from workloads.errors import PlacementError, UnsupportedOp
from workloads.synthetic import layered_dag


def moved(p: Plan, rng: np.random.Generator, devices: tuple[str, ...]) -> Plan:
    """``p`` with two neighbours in one device's order that do not feed each other swapped
    (where such a swap keeps the devices from waiting on each other), or else one op on
    another device or two ops' devices swapped, each device's order drawn again from the
    graph's priorities."""
    draw = rng.random()
    swapped = reordered(p, rng) if draw < 0.3 else None
    if swapped is not None:
        return swapped
    names = list(p.graph.names)
    placement = dict(p.placement)
    a = names[int(rng.integers(len(names)))]
    if draw < 0.5:
        b = names[int(rng.integers(len(names)))]
        placement[a], placement[b] = placement[b], placement[a]
    else:
        placement[a] = devices[int(rng.integers(len(devices)))]
    return Plan(p.graph, placement, order_by_priority(p.graph, placement))


def reordered(p: Plan, rng: np.random.Generator) -> Plan | None:
    """``p`` with two neighbours swapped in one device's order; None where the draw finds no
    such swap that keeps the plan valid."""
    busy = [d for d, ops in p.order.items() if len(ops) > 1]
    if not busy:
        return None
    device = busy[int(rng.integers(len(busy)))]
    ops = list(p.order[device])
    i = int(rng.integers(len(ops) - 1))
    if ops[i] in p.graph.predecessors(ops[i + 1]):
        return None
    ops[i], ops[i + 1] = ops[i + 1], ops[i]
    try:
        return Plan(p.graph, dict(p.placement), {**p.order, device: ops})
    except PlacementError:  # the swap makes devices wait on each other
        return None


def walk(evaluate: DeltaEvaluator, p: Plan, cluster: Cluster, cost: object, links: str,
         rng: np.random.Generator, *, steps: int, back: float) -> None:
    """Score ``steps`` plans as a search would, each the full simulation's score: a move
    from the last, or (with probability ``back``) a return to one scored before."""
    seen = [p]
    for _ in range(steps):
        assert evaluate(p) == score(p, cluster, cost, links)
        p = (seen[int(rng.integers(len(seen)))] if rng.random() < back
             else moved(p, rng, cluster.device_names))
        seen.append(p)


def score(p: Plan, cluster: Cluster, cost: object, links: str) -> float:
    result = simulate(p, cluster, cost, links=links)  # type: ignore[arg-type]
    return result.makespan_s if result.feasible else math.inf


@settings(max_examples=80, deadline=None)
@given(instances(), st.sampled_from(["fcfs", "fair", "none"]), st.integers(0, 2**32 - 1))
def test_nothing_differs_before_the_divergence(instance, links: str, seed: int) -> None:  # type: ignore[no-untyped-def]
    p, cluster, cost = instance
    q = moved(p, np.random.default_rng(seed), cluster.device_names)
    old, new = (simulate(x, cluster, cost, links=links).columns for x in (p, q))
    assert old is not None and new is not None
    when = divergence(p, q, old.op_start, old.op_end)
    # Every event before ``when`` happened in both runs alike: what started before it started
    # at the same time, what ended before it ended at the same time (a flow that started
    # before it may end later at another rate, as flows that start later share its links).
    for a, b in ((old, new), (new, old)):
        early = a.op_start < when
        assert np.array_equal(b.op_start[early], a.op_start[early])
        done = a.op_end < when
        assert np.array_equal(b.op_end[done], a.op_end[done])
        times = dict(zip(b.transfer_names, zip(b.transfer_start.tolist(),
                                               b.transfer_end.tolist(), strict=True),
                         strict=True))
        for name, start, end in zip(a.transfer_names, a.transfer_start.tolist(),
                                    a.transfer_end.tolist(), strict=True):
            if start < when:
                assert times[name][0] == start, name
            if end < when:
                assert times[name][1] == end, name


@settings(max_examples=40, deadline=None)
@given(instances(), st.sampled_from(["fcfs", "fair", "none"]), st.integers(0, 2**32 - 1),
       st.booleans())
def test_every_move_scores_as_the_full_simulation(instance, links: str, seed: int,  # type: ignore[no-untyped-def]
                                                  resume: bool) -> None:
    p, cluster, cost = instance
    rng = np.random.default_rng(seed)
    evaluate = DeltaEvaluator(cluster, cost, links=links, snapshots=8, keep=2, resume=resume)
    for _ in range(12):
        assert evaluate(p) == score(p, cluster, cost, links)
        p = moved(p, rng, cluster.device_names)


@settings(max_examples=60, deadline=None)
@given(instances(), st.sampled_from(["fcfs", "fair", "none"]),
       st.sampled_from([1.0, 0.97, 0.8]), st.integers(0, 2**32 - 1))
def test_every_move_scores_as_the_full_simulation_near_the_memory_limit(  # type: ignore[no-untyped-def]
        instance, links: str, share: float, seed: int) -> None:
    """The compiled runs' snapshots carry memory in use, its peaks and what holds each copy
    from plan to plan: devices that hold about what the first plan needs at its peak,
    where moves make plans fit and not."""
    p, cluster, cost = instance
    peak = max(simulate(p, cluster, cost, links=links).peak_memory_bytes.values())
    cluster = with_memory(cluster, int(share * peak))
    cost = FixedCost(cluster, cost.times, cost.default)
    rng = np.random.default_rng(seed)
    evaluate = DeltaEvaluator(cluster, cost, links=links, snapshots=8, keep=2)
    for _ in range(12):
        assert evaluate(p) == score(p, cluster, cost, links)
        full = simulate(p, cluster, cost, links=links)
        assert evaluate.last_memory["peak_bytes"] == full.peak_memory_bytes
        # every copy is freed once its last holder is done: the parameters are left
        assert evaluate.last_memory["held_at_end_bytes"] == full.resident_bytes
        p = moved(p, rng, cluster.device_names)


@settings(max_examples=100, deadline=None)
@given(instances(), st.sampled_from(["fcfs", "fair", "none"]), st.integers(0, 2**32 - 1),
       st.booleans())
def test_a_chain_that_returns_to_earlier_plans_scores_as_the_full_simulation(  # type: ignore[no-untyped-def]
        instance, links: str, seed: int, renumber: bool) -> None:
    """A search comes back to plans it left (a rejected move, a restart): the run a restore
    uses moves to the back of those kept. With ``renumber``, the transfer numbers start
    again whenever more than three have been met (as a long search on a large cluster
    does), the kept runs with them."""
    p, cluster, cost = instance
    rng = np.random.default_rng(seed)
    evaluate = DeltaEvaluator(cluster, cost, links=links, snapshots=4, keep=2)
    if renumber:  # whenever a plan brings a transfer the first plan did not make
        evaluate.renumber_slack = len(p.transfers) - 2 * len(p.graph.arrays.edge_src)
    walk(evaluate, p, cluster, cost, links, rng, steps=16, back=0.3)


@pytest.mark.parametrize("links", ["fcfs", "none"])
def test_on_many_devices_it_compares_only_the_orders_a_move_changed(links: str) -> None:
    """Past a few dozen devices the orders compared are those a move changed (moves,
    swaps within a device, returns to earlier plans)."""
    cluster = toy_cluster(40)
    cost = FixedCost(cluster, default=1e-3)
    graph = layered_dag(200, width=20, seed=3)
    where = {n: cluster.device_names[i % 40] for i, n in enumerate(graph.names)}
    p = Plan(graph, where, order_by_priority(graph, where))
    rng = np.random.default_rng(7)
    evaluate = DeltaEvaluator(cluster, cost, links=links)
    walk(evaluate, p, cluster, cost, links, rng, steps=40, back=0.2)
    assert evaluate.stats["restored"] > 0


def test_an_evaluation_the_cost_model_refuses_leaves_the_next_ones_right() -> None:
    """A transfer the model refuses to price raises; the plans scored after it get the
    full simulation's makespan (no time left half-updated from the refused plan)."""

    class Picky(FixedCost):
        def transfer_time(self, nbytes: int, src: str, dst: str) -> float:
            if src == "d2":
                raise UnsupportedOp("no copies out of d2")
            return 1.0 + int(src[1:])  # seconds that depend on the source

    cluster = toy_cluster(4)
    cost = Picky(cluster)
    graph = Graph("g", [op("A"), op("C"), op("B", ("A", "C"))])

    def plan_of(where: dict[str, str]) -> Plan:
        return Plan(graph, where, order_by_priority(graph, where))

    evaluate = DeltaEvaluator(cluster, cost)
    first = plan_of({"A": "d0", "C": "d1", "B": "d1"})
    assert evaluate(first) == score(first, cluster, cost, "fcfs") == 3.0
    with pytest.raises(UnsupportedOp, match="no copies out of d2"):
        evaluate(plan_of({"A": "d3", "C": "d2", "B": "d1"}))
    after = plan_of({"A": "d3", "C": "d1", "B": "d1"})
    assert evaluate(after) == score(after, cluster, cost, "fcfs") == 6.0


@pytest.mark.parametrize("links", ["fcfs", "none"])
def test_a_search_with_it_is_the_same_search_and_skips_events(links: str) -> None:
    c = get_cluster("quad-v100-nvlink")
    cost = RooflineCost(c)
    step = training_graph(build_model("resnet50", batch=8), "adam")
    fast = DeltaEvaluator(c, cost, links=links)
    spec = "mcmc:evals=60,start=heft,seed=1"
    ours = plan(step, c, spec, cost, evaluate=fast)
    theirs = plan(step, c, spec, cost, evaluate=evaluator(c, cost, links=links))
    assert ours.placement == theirs.placement and ours.info["score_s"] == theirs.info["score_s"]
    assert fast.stats["restored"] > 0 and fast.stats["events_saved"] > 0


def test_parameters_moved_onto_a_full_device_are_out_of_memory() -> None:
    # Two devices of 10 MB; op "w" holds 6 MB of parameters. Moving it next to the 6 MB of
    # "v" overflows from time 0, which a snapshot taken later must not hide.
    devices = tuple(Device(f"d{i}", "gpu", {"fp32": 1e12}, 10_000_000, 1e11)
                    for i in range(2))
    cluster = Cluster("pair", devices, (Link("d0", "d1", 1e9, 0.0),))
    from workloads import Op, Tensor
    from workloads.graph import Graph

    ops = [Op(f"o{i}", "synthetic", "matmul", inputs=(f"o{i - 1}",) if i else (),
              outputs=(Tensor(f"o{i}", (1000,)),)) for i in range(30)]
    ops.append(Op("v", "synthetic", "matmul", inputs=("o29",), outputs=(Tensor("v", (10,)),),
                  param_bytes=6_000_000))
    ops.append(Op("w", "synthetic", "matmul", inputs=("v",), outputs=(Tensor("w", (10,)),),
                  param_bytes=6_000_000))
    graph = Graph("params", ops)
    cost = FixedCost(cluster, default=1e-3)
    fits = {o.name: "d0" for o in ops} | {"w": "d1"}
    evaluate = DeltaEvaluator(cluster, cost, snapshots=8)
    p = Plan(graph, fits, order_by_priority(graph, fits))
    assert evaluate(p) == score(p, cluster, cost, "fcfs") < math.inf
    over = fits | {"w": "d0"}
    q = Plan(graph, over, order_by_priority(graph, over))
    assert evaluate(q) == math.inf == score(q, cluster, cost, "fcfs")
    assert evaluate.stats["restored"] == 1  # restored, then refused by its memory


def test_what_it_does_not_cover_is_simulated_in_full() -> None:
    c = get_cluster("quad-v100-nvlink")
    cost = RooflineCost(c)
    graph = build_model("mlp", batch=8)
    p = plan(graph, c, "heft", cost)
    by_priority = DeltaEvaluator(c, cost, order="priority")
    assert by_priority(p) == simulate(p, c, cost, order="priority").makespan_s
    assert by_priority.stats["restored"] == 0
    fair = DeltaEvaluator(c, cost, links="fair")  # its flow table is laid out per plan:
    for q in (p, plan(graph, c, "round_robin", cost), p):  # compiled, from the start
        assert fair(q) == simulate(q, c, cost, links="fair").makespan_s
    assert fair.stats["restored"] == 0 and fair.stats["events_run"] > 0
    from policies.data_parallel import data_parallel

    dp = data_parallel(graph, c, cost, replicas=4)  # a collective: lowered, in full
    evaluate = DeltaEvaluator(c, cost)
    evaluate(p)
    full = simulate(dp, c, cost)
    assert evaluate(dp) == full.makespan_s
    assert evaluate.last_memory == {"peak_bytes": full.peak_memory_bytes,  # dp's, not p's
                                    "held_at_end_bytes": full.resident_bytes}
    assert not DeltaEvaluator(c, cost, links="fair", resume=True).resume  # never under fair


def test_a_search_resumes_runs_only_on_graphs_above_the_threshold(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sim.delta

    c = get_cluster("quad-v100-nvlink")
    cost = RooflineCost(c)
    graph = build_model("mlp", batch=8)
    small = search_evaluator(graph, c, cost)
    q = plan(graph, c, "mcmc:evals=40", cost, evaluate=small)
    assert isinstance(small, DeltaEvaluator) and not small.resume
    assert small.stats["restored"] == 0 and q.info["score_s"] == simulate(q, c, cost).makespan_s
    # by default on none: resuming paid at no size measured (RESUME_ABOVE)
    step = search_evaluator(training_graph(build_model("gpt2_small", batch=1, seq_len=8),
                                           "adam"), c, cost)
    assert isinstance(step, DeltaEvaluator) and not step.resume
    monkeypatch.setattr(sim.delta, "RESUME_ABOVE", len(graph) - 1)
    large = search_evaluator(graph, c, cost)
    assert isinstance(large, DeltaEvaluator) and large.resume
    assert plan(graph, c, "mcmc:evals=40", cost, evaluate=large).placement == q.placement
    assert large.stats["restored"] > 0


def test_the_resume_threshold_is_chosen_on_graphs_apart_from_the_benchmarks() -> None:
    from benchmarks.delta_bound import REPORTED_DAGS, TUNING_SHAPE, TUNING_SIZES

    width, seed = TUNING_SHAPE
    reported = {layered_dag(n, width=w, seed=s).to_json() for n, w, s in REPORTED_DAGS}
    assert all((w, s) != TUNING_SHAPE for _, w, s in REPORTED_DAGS)
    small = [n for n in TUNING_SIZES if n <= 10_000]  # the larger ones take long to build
    assert not any(layered_dag(n, width=width, seed=seed).to_json() in reported
                   for n in small)
