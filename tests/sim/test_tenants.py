from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import Cluster, RooflineCost, get_cluster
from policies import Plan, plan
from sim import SHARING, Job, jain_index, make_sharing, simulate, simulate_jobs
from tests.helpers import FixedCost, chain, op, toy_cluster, toy_device
from workloads import Graph, build_model
from workloads.errors import PlacelabError
from workloads.synthetic import layered_dag

TIME_SHARING = ("fifo", "exclusive", "weighted_fair", "priority", "priority:preempt=false")
EVERY = (*TIME_SHARING, "partition", "partition:memory=false")


def _on(g: Graph, device: str = "d0") -> Plan:
    return Plan(g, {o.name: device for o in g}, {device: g.topological_order()})


def _one_box(streams: int = 1, memory_bytes: int = 2**34) -> Cluster:
    return Cluster("box", (toy_device("d0", streams=streams, memory_bytes=memory_bytes),), ())


def _busy_in(trace: pd.DataFrame, job: str, until: float) -> float:
    rows = trace[(trace["job"] == job) & (trace["kind"] == "compute")]
    return float((rows["end_s"].clip(upper=until) - rows["start_s"].clip(upper=until)).sum())


@settings(max_examples=12, deadline=None)
@given(n=st.integers(5, 60), seed=st.integers(0, 99), links=st.sampled_from(["fcfs", "fair"]),
       sharing=st.sampled_from(EVERY))
def test_one_job_under_any_sharing_policy_is_simulate(n: int, seed: int, links: str,
                                                      sharing: str) -> None:
    c = toy_cluster(3, bandwidth=1e8)
    g = layered_dag(n, width=4, seed=seed)
    p = plan(g, c, f"random:seed={seed}")
    cost = RooflineCost(c)
    alone = simulate(p, c, cost, links=links)
    shared = simulate_jobs([p], c, cost, sharing=sharing, links=links)
    key = ["kind", "name"]
    a = alone.trace.sort_values(key, ignore_index=True)
    b = shared.trace.sort_values(key, ignore_index=True)
    assert shared.makespan_s == alone.makespan_s
    np.testing.assert_array_equal(a["start_s"], b["start_s"])
    np.testing.assert_array_equal(a["end_s"], b["end_s"])
    assert shared.peak_memory_bytes == alone.peak_memory_bytes
    assert shared.jobs["slowdown"].tolist() == [1.0]


def test_fifo_serves_two_identical_jobs_one_after_the_other() -> None:
    c = _one_box()
    cost = FixedCost(c, default=1.0)
    r = simulate_jobs([Job(_on(chain(3)), "a"), Job(_on(chain(3)), "b", arrival_s=0.5)],
                      c, cost, sharing="fifo")
    # a's ops are queued first each time a stream frees: ops alternate once b is queued
    assert r.makespan_s == 6.0
    assert r.jobs.set_index("job")["end_s"].to_dict() == {"a": 5.0, "b": 6.0}
    assert r.jobs.set_index("job")["slowdown"].to_dict() == {"a": 5 / 3, "b": 5.5 / 3}
    assert r.utilization == {"d0": 1.0}


def test_weighted_fair_with_equal_weights_gives_identical_jobs_equal_slowdowns() -> None:
    c = _one_box()
    g = chain(40)
    times = {f"op{i}": 0.5 + (i % 7) / 10 for i in range(40)}
    r = simulate_jobs([Job(_on(g), "a"), Job(_on(g), "b")], c, FixedCost(c, times),
                      sharing="weighted_fair")
    ends = r.jobs["end_s"].to_numpy()
    assert abs(ends[0] - ends[1]) <= max(times.values())
    assert r.fairness == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("links", ["fcfs", "fair"])
def test_weighted_fair_shares_a_device_in_proportion_to_weights(links: str) -> None:
    c = _one_box()
    g = chain(60)
    times = {f"op{i}": 0.1 + (i % 5) / 50 for i in range(60)}
    r = simulate_jobs([Job(_on(g), "heavy", weight=2.0), Job(_on(g), "light", weight=1.0)],
                      c, FixedCost(c, times), sharing="weighted_fair", links=links)
    both_backlogged = float(r.jobs["end_s"].min())
    heavy = _busy_in(r.trace, "heavy", both_backlogged)
    light = _busy_in(r.trace, "light", both_backlogged)
    assert heavy / light == pytest.approx(2.0, rel=0.05)


@pytest.mark.parametrize("sharing", TIME_SHARING)
@pytest.mark.parametrize("streams", [1, 2])
def test_no_device_runs_more_ops_at_once_than_it_has_streams(sharing: str,
                                                             streams: int) -> None:
    c = _one_box(streams=streams)
    g = layered_dag(40, width=5, seed=1)
    jobs = [Job(_on(g), f"j{i}", arrival_s=0.1 * i, weight=1 + i, priority=i % 2)
            for i in range(4)]
    r = simulate_jobs(jobs, c, FixedCost(c, default=0.3), sharing=sharing)
    assert r.feasible
    rows = r.trace[r.trace["kind"] == "compute"]
    events = sorted([(s, 1) for s in rows["start_s"]] + [(e, -1) for e in rows["end_s"]],
                    key=lambda x: (x[0], x[1]))
    running = np.cumsum([d for _, d in events])
    assert running.max() == streams


def test_partition_splits_a_device_and_each_slice_is_slower_by_its_share() -> None:
    c = _one_box()
    g = Graph("one", [op("x")])
    r = simulate_jobs([Job(_on(g), "a", weight=3.0), Job(_on(g), "b", weight=1.0)], c,
                      FixedCost(c, default=1.0), sharing="partition")
    ends = r.jobs.set_index("job")["end_s"]
    assert ends["a"] == pytest.approx(1 / 0.75)
    assert ends["b"] == pytest.approx(1 / 0.25)
    assert r.busy_s["d0"] == pytest.approx(2.0)  # device time: each op's own second


def _hungry(name: str, nbytes: int) -> Graph:
    """Two ops; the first holds ``nbytes`` of output until the second reads it."""
    return Graph(name, [op("x", nbytes=nbytes), op("y", ("x",))])


def test_co_located_memory_adds_up_and_the_job_that_overflows_fails_alone() -> None:
    c = _one_box(streams=2, memory_bytes=1000)
    jobs = [Job(_on(_hungry("a", 600)), "a"), Job(_on(_hungry("b", 600)), "b",
                                                  arrival_s=0.1)]
    r = simulate_jobs(jobs, c, FixedCost(c, default=1.0), sharing="fifo")
    outcome = r.jobs.set_index("job")
    assert outcome.loc["a", "feasible"] and outcome.loc["a", "end_s"] == 2.0
    assert not outcome.loc["b", "feasible"]
    assert outcome.loc["b", "reason"] == (
        "out of memory on device 'd0' at t=0.1 s (op 'x' starts): needs 1200 bytes, the "
        "device's capacity is 1000")
    assert r.peak_memory_bytes["d0"] == 1200  # reported, not hidden
    memory = r.memory_log
    assert max(memory[2::3]) == 1200
    # under exclusive the second job waits for the device instead
    r = simulate_jobs(jobs, c, FixedCost(c, default=1.0), sharing="exclusive")
    assert r.feasible and r.peak_memory_bytes["d0"] == 604  # x, then y's output
    assert r.jobs.set_index("job")["start_s"].to_dict() == {"a": 0.0, "b": 2.0}


def test_partition_with_memory_slices_holds_each_job_to_its_share() -> None:
    c = _one_box(memory_bytes=1000)
    jobs = [Job(_on(_hungry("a", 392)), "a"), Job(_on(_hungry("b", 600)), "b")]
    r = simulate_jobs(jobs, c, FixedCost(c, default=1.0), sharing="partition")
    assert r.jobs["feasible"].tolist() == [True, False]
    assert "its slice's capacity is 500" in r.jobs["reason"][1]
    shared = simulate_jobs(jobs, c, FixedCost(c, default=1.0),
                           sharing="partition:memory=false")
    assert shared.feasible and shared.peak_memory_bytes["d0"] == 1000


@settings(max_examples=15, deadline=None)
@given(sizes=st.lists(st.integers(100, 900), min_size=2, max_size=5),
       sharing=st.sampled_from(EVERY))
def test_memory_never_exceeds_capacity_without_being_reported(sizes: list[int],
                                                              sharing: str) -> None:
    c = _one_box(streams=2, memory_bytes=1500)
    jobs = [Job(_on(_hungry(f"g{i}", s)), f"j{i}", arrival_s=0.2 * i)
            for i, s in enumerate(sizes)]
    r = simulate_jobs(jobs, c, FixedCost(c, default=1.0), sharing=sharing)
    if r.peak_memory_bytes["d0"] > 1500 or max(r.memory_log[2::3]) > 1500:
        assert not r.feasible
        assert r.jobs.loc[~r.jobs["feasible"], "reason"].str.startswith("out of memory").all()


def test_strict_priority_takes_the_device_at_the_next_op_boundary() -> None:
    c = _one_box()
    low, high = _on(chain(5)), _on(chain(2))
    jobs = [Job(low, "low", priority=0), Job(high, "high", arrival_s=1.5, priority=5)]
    r = simulate_jobs(jobs, c, FixedCost(c, default=1.0), sharing="priority")
    ends = r.jobs.set_index("job")["end_s"]
    assert ends["high"] == 4.0  # waits for low's running op (ends at 2), then runs 2 ops
    assert ends["low"] == 7.0
    r = simulate_jobs(jobs, c, FixedCost(c, default=1.0), sharing="priority:preempt=false")
    ends = r.jobs.set_index("job")["end_s"]
    assert (ends["low"], ends["high"]) == (5.0, 7.0)  # low keeps the device to its end


def test_trace_names_each_rows_job_and_jain_index_is_jains() -> None:
    c = get_cluster("quad-v100-nvlink")
    p = plan(build_model("mlp", batch=8), c, "round_robin")
    r = simulate_jobs([Job(p, "x"), Job(p, "y", arrival_s=1e-5)], c, RooflineCost(c))
    assert set(r.trace["job"]) == {"x", "y"}
    assert (r.trace.groupby("job").size() == len(r.trace) // 2).all()
    slowdowns = r.jobs["slowdown"].to_numpy()
    assert r.fairness == pytest.approx(slowdowns.sum() ** 2 / (2 * (slowdowns ** 2).sum()))
    assert jain_index([1.0, 1.0, 1.0]) == 1.0
    assert r.summary()["jobs"][0]["job"] == "x"


def test_sharing_registry_lists_the_built_ins_and_bad_input_is_one_clear_line() -> None:
    assert {"exclusive", "fifo", "weighted_fair", "priority", "partition"} <= set(
        SHARING.names())
    c = _one_box()
    p = _on(chain(2))
    cost = FixedCost(c)
    with pytest.raises(PlacelabError, match="unknown sharing policy 'lottery'; expected"):
        simulate_jobs([p], c, cost, sharing="lottery")
    with pytest.raises(PlacelabError, match="sharing policy 'priority': expected parameters "
                                            "key=value with keys among preempt, got 'x=1'"):
        make_sharing("priority:x=1")
    with pytest.raises(PlacelabError, match=r"job 'a': weight must be a finite number > 0, "
                                            r"got nan"):
        Job(p, "a", weight=float("nan"))
    with pytest.raises(PlacelabError, match="arrival_s must be a finite number >= 0, got -1"):
        Job(p, "a", arrival_s=-1)
    with pytest.raises(PlacelabError, match="job names must be unique, got 'a' twice"):
        simulate_jobs([Job(p, "a"), Job(p, "a")], c, cost)
    with pytest.raises(PlacelabError, match="expected at least one job, got none"):
        simulate_jobs([], c, cost)
