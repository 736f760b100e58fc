from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import RooflineCost, get_cluster
from policies import Plan, order_by_priority, plan
from sim import TRACE_COLUMNS, SimResult, simulate
from tests.helpers import FixedCost, chain, op, toy_cluster
from workloads import Graph, build_model


def _one_device(g: Graph, device: str = "d0") -> Plan:
    return Plan(g, {o.name: device for o in g}, {device: g.topological_order()})


def test_chain_on_one_device_takes_the_sum_of_op_times() -> None:
    c = toy_cluster(1)
    times = {f"op{i}": 0.1 * (i + 1) for i in range(5)}
    r = simulate(_one_device(chain(5)), c, FixedCost(c, times))
    assert r.makespan_s == pytest.approx(sum(times.values()), abs=0)  # 1.5 s exactly-ish
    assert r.makespan_s == sum(0.1 * (i + 1) for i in range(5))


def test_chain_under_roofline_is_the_sum_of_roofline_times() -> None:
    c = get_cluster("quad-v100-nvlink")
    g = build_model("resnet50", batch=4)
    cost = RooflineCost(c)
    r = simulate(_one_device(g, "gpu2"), c, cost)
    assert r.makespan_s == pytest.approx(sum(cost.op_time(o, "gpu2") for o in g), rel=1e-12)
    assert r.utilization["gpu2"] == pytest.approx(1.0)


def test_independent_ops_on_two_devices_take_the_max() -> None:
    g = Graph("ind", [op("a"), op("b")])
    c = toy_cluster(2)
    p = Plan(g, {"a": "d0", "b": "d1"}, {"d0": ["a"], "d1": ["b"]})
    r = simulate(p, c, FixedCost(c, {"a": 3.0, "b": 5.0}))
    assert r.makespan_s == 5.0
    assert r.busy_s == {"d0": 3.0, "d1": 5.0}
    assert r.transfer_bytes == 0


def test_one_transfer_takes_latency_plus_bytes_over_bandwidth() -> None:
    g = Graph("t", [op("a", nbytes=4000), op("b", ("a",))])
    c = toy_cluster(2, bandwidth=1e6, latency_s=2e-3)
    p = Plan(g, {"a": "d0", "b": "d1"}, {"d0": ["a"], "d1": ["b"]})
    r = simulate(p, c, FixedCost(c, default=0.0))
    row = r.trace[r.trace["kind"] == "transfer"].iloc[0]
    assert row["end_s"] - row["start_s"] == pytest.approx(2e-3 + 4000 / 1e6)
    assert (row["src"], row["dst"], row["bytes"]) == ("d0", "d1", 4000)
    assert r.makespan_s == pytest.approx(2e-3 + 4000 / 1e6)


def test_two_transfers_over_one_link_serialise() -> None:
    g = Graph("t2", [op("a", nbytes=4000), op("b", nbytes=4000),
                     op("c", ("a",)), op("d", ("b",))])
    c = toy_cluster(2, bandwidth=1e6, latency_s=0.0)
    p = Plan(g, {"a": "d0", "b": "d0", "c": "d1", "d": "d1"},
             {"d0": ["a", "b"], "d1": ["c", "d"]})
    r = simulate(p, c, FixedCost(c, default=0.0))
    xfers = r.trace[r.trace["kind"] == "transfer"].sort_values("start_s")
    assert list(xfers["start_s"]) == pytest.approx([0.0, 4e-3])
    assert list(xfers["end_s"]) == pytest.approx([4e-3, 8e-3])


def test_full_duplex_carries_both_directions_at_once_half_duplex_does_not() -> None:
    g = Graph("x", [op("a", nbytes=4000), op("b", nbytes=4000), op("c", ("a",)),
                    op("d", ("b",))])
    placement = {"a": "d0", "b": "d1", "c": "d1", "d": "d0"}
    order = {"d0": ["a", "d"], "d1": ["b", "c"]}
    for duplex, expected in (("full", 4e-3), ("half", 8e-3)):
        c = toy_cluster(2, bandwidth=1e6, latency_s=0.0, duplex=duplex)
        r = simulate(Plan(g, placement, order), c, FixedCost(c, default=0.0))
        assert r.makespan_s == pytest.approx(expected)


def test_peak_memory_of_a_chain_is_two_live_tensors_plus_params() -> None:
    # Each op's output (400 B) lives until its single reader ends; params stay resident.
    g = Graph("m", [op("op0", nbytes=400, param_bytes=1000)] + [
        op(f"op{i}", (f"op{i - 1}",), nbytes=400, workspace_bytes=100) for i in range(1, 4)])
    c = toy_cluster(1)
    r = simulate(_one_device(g), c, FixedCost(c))
    assert r.peak_memory_bytes["d0"] == 1000 + 400 + 400 + 100
    mem = r.memory_frame()
    assert mem["bytes"].iloc[-1] == 1000  # back to the resident total
    assert (mem["bytes"] >= 0).all()


def test_out_of_memory_is_a_result_not_a_crash() -> None:
    g = chain(3, nbytes=4000)
    c = toy_cluster(1, memory_bytes=6000)
    r = simulate(_one_device(g), c, FixedCost(c))
    assert not r.feasible
    assert r.reason.startswith("out of memory on device 'd0' at t=1 s (op 'op1' starts): "
                               "needs 8000 bytes, has 6000")
    assert r.makespan_s == 3.0


def test_trace_schema_and_chrome_export(tmp_path) -> None:
    c = get_cluster("quad-v100-nvlink")
    g = build_model("resnet50", batch=2)
    r = simulate(plan(g, c, "round_robin"), c, RooflineCost(c))
    assert tuple(r.trace.columns) == TRACE_COLUMNS
    assert (r.trace["kind"] == "compute").sum() == len(g)
    out = r.write_chrome_trace(tmp_path / "t.json")
    events = json.loads(out.read_text())["traceEvents"]
    lanes = [s.split(",") for s in r.trace["stream"]]
    assert sum(e["ph"] == "X" for e in events) == sum(len(x) for x in lanes)
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {"gpu0/stream0", "gpu0/copy0", "nvlink01:gpu0->gpu1"} <= names


@st.composite
def placed_dags(draw: st.DrawFn) -> tuple[Plan, object]:
    n_dev = draw(st.integers(1, 4))
    n_ops = draw(st.integers(1, 30))
    ops = []
    for i in range(n_ops):
        preds = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        ops.append(op(f"o{i}", tuple(f"o{p}" for p in preds),
                      nbytes=4 * draw(st.integers(1, 10**6))))
    g = Graph("r", ops)
    placement = {o.name: f"d{draw(st.integers(0, n_dev - 1))}" for o in g}
    order: dict[str, list[str]] = {}
    for name in g.topological_order():
        order.setdefault(placement[name], []).append(name)
    c = toy_cluster(n_dev, bandwidth=1e9, latency_s=1e-6)
    times = {o.name: draw(st.floats(0, 1e-3)) for o in g}
    return Plan(g, placement, order), FixedCost(c, times)


@settings(max_examples=60, deadline=None)
@given(placed_dags())
def test_simulation_properties_on_random_plans(case) -> None:
    p, cost = case
    c = cost.cluster
    r = simulate(p, c, cost)
    compute = r.trace[r.trace["kind"] == "compute"].set_index("name")
    assert sorted(compute.index) == sorted(p.placement)  # every op exactly once
    arrival = {(t, d): e for t, d, e in zip(
        [n.split("->")[0] for n in r.trace[r.trace["kind"] == "transfer"]["name"]],
        r.trace[r.trace["kind"] == "transfer"]["dst"],
        r.trace[r.trace["kind"] == "transfer"]["end_s"], strict=True)}
    for edge in p.graph.edges():
        ready = compute.loc[edge.src, "end_s"]
        if p.placement[edge.src] != p.placement[edge.dst]:
            ready = arrival[(edge.tensor.name, p.placement[edge.dst])]
        assert compute.loc[edge.dst, "start_s"] >= ready - 1e-12
    for _device, rows in compute.groupby("device"):  # one stream: no overlap
        rows = rows.sort_values("start_s")
        assert (rows["start_s"].values[1:] >= rows["end_s"].values[:-1] - 1e-12).all()
    mem = r.memory_frame()
    assert (mem["bytes"] >= 0).all()
    again = simulate(p, c, cost)
    assert again.trace.equals(r.trace)


def test_a_result_does_not_keep_the_simulation_alive() -> None:
    # The result holds compact trace columns, not the executor (its simpy environment,
    # event lists and per-op wiring), so a sweep can keep thousands of results.
    import gc
    import weakref

    from sim import engine

    graph = chain(50)
    cluster = toy_cluster(2)
    plan = Plan(graph, {op.name: f"d{i % 2}" for i, op in enumerate(graph)},
                order_by_priority(graph, {op.name: f"d{i % 2}" for i, op in enumerate(graph)}))
    runs: list[weakref.ref] = []
    original = engine.Simulation.result  # every run's, the compiled one's too

    def spy(self, job: str) -> SimResult:
        runs.append(weakref.ref(self))
        return original(self, job)

    engine.Simulation.result = spy  # type: ignore[method-assign]
    try:
        result = simulate(plan, cluster, FixedCost(cluster))
    finally:
        engine.Simulation.result = original  # type: ignore[method-assign]
    gc.collect()
    assert runs and runs[0]() is None
    assert len(result.trace) == 50 + len(plan.transfers)
