"""Link models against closed forms: max-min fair sharing (equal flows, a parking lot with
an unequal link, a short flow arriving during a long one, latency as pure delay, a flow
alone), and the contention-free replay."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import Cluster, Device, Link, RooflineCost
from policies import Plan
from sim import simulate
from tests.helpers import FixedCost, op
from workloads import Graph, PlacementError

MB = 10**6
W = 1e9  # bytes per second


def device(name: str, engines: int = 4) -> Device:
    return Device(name, "gpu", {"fp32": 1e12}, 2**40, 1e11, copy_engines=engines)


def run(graph: Graph, placement: dict[str, str], cluster: Cluster, links: str,
        times: dict[str, float] | None = None):
    order: dict[str, list[str]] = {}
    for name in graph.topological_order():
        order.setdefault(placement[name], []).append(name)
    plan = Plan(graph, placement, order)
    return simulate(plan, cluster, FixedCost(cluster, times or {}, default=0.0), links=links)


def fan(n: int, nbytes: int) -> tuple[Graph, dict[str, str]]:
    """``n`` tensors made on d0 at time 0, each read on d1."""
    ops = [op(f"p{i}", nbytes=nbytes) for i in range(n)]
    ops += [op(f"c{i}", (f"p{i}",)) for i in range(n)]
    placement = {f"p{i}": "d0" for i in range(n)} | {f"c{i}": "d1" for i in range(n)}
    return Graph("fan", ops), placement


def pair(latency: float = 0.0) -> Cluster:
    return Cluster("pair", (device("d0"), device("d1")), (Link("d0", "d1", W, latency),))


@pytest.mark.parametrize("n", [1, 2, 4])
def test_n_equal_flows_on_one_link_each_get_a_nth(n: int) -> None:
    graph, placement = fan(n, 100 * MB)
    fair = run(graph, placement, pair(), "fair")
    assert fair.makespan_s == pytest.approx(n * 100 * MB / W, rel=1e-9)
    transfers = fair.trace[fair.trace["kind"] == "transfer"]
    assert transfers["end_s"].tolist() == pytest.approx([n * 0.1] * n, rel=1e-9)
    fcfs = run(graph, placement, pair(), "fcfs")  # one after the other, same total
    assert sorted(fcfs.trace[fcfs.trace["kind"] == "transfer"]["end_s"]) == pytest.approx(
        [0.1 * (i + 1) for i in range(n)], rel=1e-9)


def test_parking_lot_with_a_wider_second_link() -> None:
    # d0 -l0- d1 -l1- d2; l0 carries W, l1 carries 2W. Flows: f0 d0->d2, f1 d0->d1,
    # f2 d1->d2, B bytes each. Max-min: l0 is the bottleneck of f0 and f1 (W/2 each); f2
    # takes what is left of l1, 2W - W/2 = 1.5W.
    cluster = Cluster("lot", (device("d0"), device("d1"), device("d2")),
                      (Link("d0", "d1", W, name="l0"), Link("d1", "d2", 2 * W, name="l1")))
    b = 60 * MB
    ops = [op("a", nbytes=b), op("b", nbytes=b), op("c", nbytes=b),
           op("x", ("a",)), op("y", ("b",)), op("z", ("c",))]
    placement = {"a": "d0", "b": "d0", "c": "d1", "x": "d2", "y": "d1", "z": "d2"}
    result = run(Graph("lot", ops), placement, cluster, "fair")
    ends = result.trace.set_index("name")["end_s"]
    assert ends["c->d2"] == pytest.approx(b / (1.5 * W), rel=1e-9)
    assert ends["a->d2"] == pytest.approx(2 * b / W, rel=1e-9)
    assert ends["b->d1"] == pytest.approx(2 * b / W, rel=1e-9)


def test_a_short_flow_arriving_during_a_long_one() -> None:
    # d0 and d2 send to d1 through a switch; the switch->d1 channel is shared. The long
    # flow (B1) starts at 0, the short one (B2) at t1: the short one finishes at
    # t1 + 2 B2 / W and the long one, work-conserving, at (B1 + B2) / W.
    cluster = Cluster("star", (device("d0"), device("d1"), device("d2")),
                      (Link("d0", "sw", W), Link("d1", "sw", W), Link("d2", "sw", W)),
                      switches=("sw",))
    b1, b2, t1 = 400 * MB, 40 * MB, 0.1
    ops = [op("long", nbytes=b1), op("short", nbytes=b2), op("x", ("long",)),
           op("y", ("short",))]
    placement = {"long": "d0", "short": "d2", "x": "d1", "y": "d1"}
    result = run(Graph("mix", ops), placement, cluster, "fair", {"short": t1})
    ends = result.trace.set_index("name")["end_s"]
    assert ends["short->d1"] == pytest.approx(t1 + 2 * b2 / W, rel=1e-9)
    assert ends["long->d1"] == pytest.approx((b1 + b2) / W, rel=1e-9)
    fcfs = run(Graph("mix", ops), placement, cluster, "fcfs", {"short": t1})
    assert fcfs.trace.set_index("name")["end_s"]["short->d1"] == pytest.approx(
        (b1 + b2) / W, rel=1e-9)  # first come first served: it waits for the long one


def test_latency_is_a_pure_delay_that_holds_no_link() -> None:
    latency, nbytes = 5e-3, 1 * MB
    graph, placement = fan(2, nbytes)
    fair = run(graph, placement, pair(latency), "fair")
    assert fair.makespan_s == pytest.approx(latency + 2 * nbytes / W, rel=1e-9)
    fcfs = run(graph, placement, pair(latency), "fcfs")
    assert fcfs.makespan_s == pytest.approx(2 * (latency + nbytes / W), rel=1e-9)


def test_a_flow_alone_takes_the_contention_free_time_over_several_hops() -> None:
    cluster = Cluster("chain", (device("d0"), device("d1"), device("d2")),
                      (Link("d0", "d1", W, 2e-6), Link("d1", "d2", W / 4, 3e-6)))
    graph = Graph("one", [op("a", nbytes=8 * MB), op("b", ("a",))])
    placement = {"a": "d0", "b": "d2"}
    cost = RooflineCost(cluster)
    for links in ("fair", "fcfs", "none"):
        result = run(graph, placement, cluster, links)
        assert result.makespan_s == pytest.approx(
            cost.transfer_time(8 * MB, "d0", "d2"), rel=1e-12), links


def test_copy_engines_still_queue_under_fair_sharing() -> None:
    graph, placement = fan(3, 100 * MB)
    cluster = Cluster("pair", (device("d0", engines=1), device("d1")), (Link("d0", "d1", W),))
    result = run(graph, placement, cluster, "fair")
    ends = sorted(result.trace[result.trace["kind"] == "transfer"]["end_s"])
    assert ends == pytest.approx([0.1, 0.2, 0.3], rel=1e-9)


def test_an_unknown_link_model_is_named() -> None:
    graph, placement = fan(1, MB)
    with pytest.raises(PlacementError, match=r"simulate: links must be one of fcfs, fair, "
                                             r"none, got 'maxmin'"):
        run(graph, placement, pair(), "maxmin")


def test_flows_in_separate_components_keep_their_rates() -> None:
    # d0->d1 carries two flows, d2->d3 one: a flow starting or ending on one pair must not
    # change the other's time (rates are recomputed per component of shared channels).
    devices = tuple(device(f"d{i}") for i in range(4))
    cluster = Cluster("two-pairs", devices, (Link("d0", "d1", W, 0.0), Link("d2", "d3", W, 0.0),
                                             Link("d1", "d2", W, 0.0)))
    ops = [op("a", nbytes=100 * MB), op("b", nbytes=50 * MB), op("c", nbytes=100 * MB),
           op("ra", ("a",)), op("rb", ("b",)), op("rc", ("c",))]
    placement = {"a": "d0", "b": "d0", "c": "d2", "ra": "d1", "rb": "d1", "rc": "d3"}
    result = run(Graph("pairs", ops), placement, cluster, "fair")
    trace = result.trace.set_index("name")
    # On d0->d1: b ends at 100 MB / (W/2) = 0.1 s, then a alone: 0.1 + 50 MB / W = 0.15 s.
    assert trace.loc["b->d1", "end_s"] == pytest.approx(0.1)
    assert trace.loc["a->d1", "end_s"] == pytest.approx(0.15)
    assert trace.loc["c->d3", "end_s"] == pytest.approx(0.1)


def test_a_tick_the_clock_reads_an_ulp_early_does_not_stall_fair_sharing() -> None:
    # Found by test_oracle's property test: the clock reached a tick's time an ulp below
    # it (now + (t - now) need not round to t), the tick took itself for still pending,
    # and no later tick was booked: 11 of 19 ops never ran.
    import json
    from pathlib import Path

    from hwmodels.cost import CostModel

    data = json.loads((Path(__file__).with_name("fair_stall.json")).read_text())
    cluster = Cluster("stall", tuple(
        Device(d["name"], "gpu", {"fp32": 1e12}, 2**40, 1e11,
               compute_streams=d["compute_streams"], copy_engines=d["copy_engines"])
        for d in data["cluster"]["devices"]), tuple(
        Link(k["a"], k["b"], k["bandwidth"], k["latency_s"], k["duplex"])
        for k in data["cluster"]["links"]))

    class Table(CostModel):
        name = "table-of-the-instance"

        def op_time(self, op, device):  # type: ignore[no-untyped-def]
            return data["op_time_s"][f"{op.name}@{device}"]

    plan = Plan.from_dict(data["plan"])
    cost = Table(cluster)
    free = simulate(plan, cluster, cost, links="none")
    fair = simulate(plan, cluster, cost, links="fair")
    assert fair.feasible, fair.reason
    assert fair.makespan_s >= free.makespan_s


def textbook_max_min(routes: dict[int, tuple[str, ...]], capacity: dict[str, float]
                     ) -> dict[int, float]:
    """Progressive filling written the plain way: scan every channel for the smallest fair
    share (the first seen among equals), give it to the channel's flows, repeat."""
    users: dict[str, list[int]] = {}
    for k, route in routes.items():
        for c in route:
            users.setdefault(c, []).append(k)
    left = {c: capacity[c] for c in users}
    count = {c: len(u) for c, u in users.items()}
    rate: dict[int, float] = {}
    while len(rate) < len(routes):
        channel = min((c for c in count if count[c]), key=lambda c: left[c] / count[c])
        share = left[channel] / count[channel]
        for k in users[channel]:
            if k not in rate:
                rate[k] = share
                for c in routes[k]:
                    left[c] -= share
                    count[c] -= 1
    return rate


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fair_shares_equal_textbook_progressive_filling_to_the_bit(data) -> None:  # type: ignore[no-untyped-def]
    from sim.flows import max_min_rates

    channels = [f"c{i}" for i in range(data.draw(st.integers(1, 12)))]
    # capacities from a small set, so that equal shares (ties) are common
    capacity = {c: data.draw(st.sampled_from([1e9, 2e9, 3e9, 4.5e9, 7e9])) for c in channels}
    n = data.draw(st.integers(1, 40))
    routes = {k: tuple(data.draw(st.lists(st.sampled_from(channels), min_size=1, max_size=3,
                                          unique=True))) for k in range(n)}
    index = {c: i for i, c in enumerate(channels)}
    rates = max_min_rates([[index[c] for c in routes[k]] for k in range(n)],
                          [capacity[c] for c in channels])
    assert dict(enumerate(rates)) == textbook_max_min(routes, capacity)


def test_max_min_rates_names_an_empty_route() -> None:
    from sim.flows import max_min_rates

    with pytest.raises(ValueError, match="every route must cross at least one channel, got "
                                         "an empty route at index 1"):
        max_min_rates([[0], []], [1.0])
