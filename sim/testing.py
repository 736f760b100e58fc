"""The conformance suites every link model, issue order and sharing policy must pass,
built-in or third-party.

A part is given by its registered name or spec (``"fair"``, ``"fair:scan_up_to=8"``); each
property is a named :class:`~workloads.conformance.Check`, and :func:`parametrize_with_checks`
makes one pytest item per (part, check), so a third-party package that registers a link
model tests it with::

    from sim.testing import LINK_CHECKS, parametrize_with_checks

    @parametrize_with_checks(["my_links"], LINK_CHECKS)
    def test_conformance(part, check):
        check(part)

Link models: a transfer alone takes exactly the cost model's contention-free time from
the moment its tensor is ready; no transfer starts before its tensor is made or ends
sooner than its contention-free time after it starts; no op starts before the transfers
it reads have arrived; every op runs; the same plan gives the same trace; the part is made
from its spec and rebuilt by ``clone`` with the same parameters. Issue orders: every op
runs once, on its device, after its inputs are there, and no more ops run at once on a
device than it has streams; the same plan gives the same trace; made and cloned as above.
Sharing policies (two jobs on a switch, the second arriving later): every job finishes; a
job alone runs in its time alone; each job's ops start after their inputs are there; no
more ops at once on a device than it has streams (on a partition's slice, per job); the
same jobs give the same trace; made and cloned as above.

>>> check_part("fcfs", LINK_CHECKS)  # raises ConformanceError naming every failed check
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from hwmodels.cost import RooflineCost
from hwmodels.spec import Cluster, Device, Link
from policies.base import plan
from policies.plans import Plan
from sim.engine import simulate
from sim.options import LINK_REGISTRY, ORDER_REGISTRY
from workloads.conformance import (
    Check,
    ConformanceError,
    parametrize,
    require_plugin_contract,
    run_checks,
)
from workloads.conformance import require as _require
from workloads.graph import Graph
from workloads.op import Op, Tensor
from workloads.synthetic import layered_dag

if TYPE_CHECKING:
    from _pytest.mark import MarkDecorator

__all__ = ["LINK_CHECKS", "ORDER_CHECKS", "SHARING_CHECKS", "Check", "ConformanceError",
           "check_part", "parametrize_with_checks"]


def _device(name: str, streams: int = 1, engines: int = 1) -> Device:
    return Device(name, "gpu", {"fp32": 10e12}, 2**36, 500e9, compute_streams=streams,
                  copy_engines=engines)


@functools.cache
def _cases() -> tuple[tuple[str, Plan, Cluster], ...]:
    """The plans every check runs: one transfer alone; a layered DAG over a switch whose
    links are slow enough for transfers to contend; a chain of half- and full-duplex
    links with two streams and two copy engines a device; a grouped training step."""
    pair = Cluster("pair", (_device("a"), _device("b")), (Link("a", "b", 10e9, 2e-6),))
    ops = (Op("x", "synthetic", "matmul", flops=10**9, outputs=(Tensor("x", (1 << 20,)),)),
           Op("y", "synthetic", "matmul", inputs=("x",), flops=10**9,
              outputs=(Tensor("y", (16,)),)))
    lone = Plan(Graph("lone", ops), {"x": "a", "y": "b"}, {"a": ["x"], "b": ["y"]},
                priority={"x": 2.0, "y": 1.0})
    star = Cluster("star", tuple(_device(f"s{i}") for i in range(4)),
                   tuple(Link(f"s{i}", "sw", 2e9, 1e-6) for i in range(4)),
                   switches=("sw",))
    chain = Cluster("chain", tuple(_device(f"c{i}", 2, 2) for i in range(3)),
                    (Link("c0", "c1", 4e9, 1e-6, "half"), Link("c1", "c2", 8e9, 0.0)))
    from workloads.training import training_graph
    from workloads.zoo import build_model

    step = training_graph(build_model("mlp", batch=8), "adam")
    return (("one transfer", lone, pair),
            ("layered DAG over a switch",
             plan(layered_dag(120, width=12, seed=3), star, "heft", RooflineCost(star)), star),
            ("layered DAG on a chain",
             plan(layered_dag(80, width=8, seed=4), chain, "heft", RooflineCost(chain)), chain),
            ("training step", plan(step, star, "heft", RooflineCost(star)), star))


def _run(source: str, p: Plan, cluster: Cluster, family: str) -> Any:
    option = {"links": source} if family == "link model" else {"links": "fcfs",
                                                                 "order": source}
    return simulate(p, cluster, RooflineCost(cluster), **option)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15)


def _each(family: str) -> Callable[[Callable[[str, str, Plan, Cluster, Any], None]],
                                   Callable[[str], None]]:
    """A check that runs on every case's simulation."""
    def wrap(body: Callable[[str, str, Plan, Cluster, Any], None]) -> Callable[[str], None]:
        def check(source: str) -> None:
            for case, p, cluster in _cases():
                body(source, case, p, cluster, _run(source, p, cluster, family))
        return check
    return wrap


def _ready_at(result: Any) -> dict[str, float]:
    """Each tensor's producer's end, by transfer name."""
    c = result.columns
    end = dict(zip(c.names, c.op_end.tolist(), strict=True))
    plan_ = result.plan
    return {t.name: end[t.producer] for t in plan_.transfers}


# -- link models ---------------------------------------------------------------------------------

def check_lone_transfer(source: str) -> None:
    case, p, cluster = _cases()[0]
    r = _run(source, p, cluster, "link model")
    c = r.columns
    (k,) = range(len(c.transfer_names))
    t = p.transfers[0]
    expected = RooflineCost(cluster).transfer_time(t.nbytes, t.src, t.dst)
    took = float(c.transfer_end[k]) - _ready_at(r)[t.name]
    _require(_close(took, expected), f"link model {source!r}, {case}: the transfer took "
             f"{took!r} s from its tensor's end, its contention-free time is {expected!r} s")


@_each("link model")
def check_transfers_follow_their_tensor(source: str, case: str, p: Plan, cluster: Cluster,
                                        r: Any) -> None:
    c, ready = r.columns, _ready_at(r)
    cost = RooflineCost(cluster)
    for t, start, end in zip(p.transfers, c.transfer_start.tolist(), c.transfer_end.tolist(),
                             strict=True):
        _require(start >= ready[t.name] or _close(start, ready[t.name]),
                 f"link model {source!r}, {case}: transfer {t.name!r} starts at {start!r} s, "
                 f"before its tensor is made at {ready[t.name]!r} s")
        least = cost.transfer_time(t.nbytes, t.src, t.dst)
        _require(end - start >= least or _close(end - start, least),
                 f"link model {source!r}, {case}: transfer {t.name!r} takes {end - start!r} s, "
                 f"less than its contention-free {least!r} s")


@_each("link model")
def check_readers_follow_arrivals(source: str, case: str, p: Plan, cluster: Cluster,
                                  r: Any) -> None:
    c = r.columns
    start = dict(zip(c.names, c.op_start.tolist(), strict=True))
    for t, end in zip(p.transfers, c.transfer_end.tolist(), strict=True):
        for reader in t.consumers:
            _require(start[reader] >= end or _close(start[reader], end),
                     f"{source!r}, {case}: op {reader!r} starts at {start[reader]!r} s, "
                     f"before transfer {t.name!r} arrives at {end!r} s")


@_each("link model")
def check_every_op_runs(source: str, case: str, p: Plan, cluster: Cluster, r: Any) -> None:
    _require(r.feasible and np.isfinite(r.makespan_s),
             f"{source!r}, {case}: the run did not finish ({r.reason or 'no makespan'})")


def check_deterministic(source: str, family: str = "link model") -> None:
    for case, p, cluster in _cases():
        first, again = (_run(source, p, cluster, family).trace for _ in range(2))
        _require(first.equals(again), f"{family} {source!r}, {case}: the same plan gave two "
                                      f"traces")


def check_declares_parameters(source: str, family: str = "link model") -> None:
    registry = LINK_REGISTRY if family == "link model" else ORDER_REGISTRY
    require_plugin_contract(registry.make(source), f"{family} {source!r}")


# -- issue orders ----------------------------------------------------------------------------------

@_each("issue order")
def check_ops_follow_their_inputs(source: str, case: str, p: Plan, cluster: Cluster,
                                          r: Any) -> None:
    c = r.columns
    _require(r.feasible, f"issue order {source!r}, {case}: {r.reason}")
    end = dict(zip(c.names, c.op_end.tolist(), strict=True))
    arrive = dict(zip(c.transfer_names, c.transfer_end.tolist(), strict=True))
    via = {(t.tensor, consumer): t.name for t in p.transfers for consumer in t.consumers}
    graph = p.graph
    for name, start in zip(c.names, c.op_start.tolist(), strict=True):
        for tensor in graph.op(name).inputs:
            ready = arrive[via[(tensor, name)]] if (tensor, name) in via else end[
                graph.producer(tensor)]
            _require(start >= ready or _close(start, ready),
                     f"issue order {source!r}, {case}: op {name!r} starts at {start!r} s, "
                     f"before its input {tensor!r} is there at {ready!r} s")


@_each("issue order")
def check_streams_honoured(source: str, case: str, p: Plan, cluster: Cluster, r: Any) -> None:
    c = r.columns
    for d, device in enumerate(c.devices):
        on = c.op_device == d
        events = sorted([(s, 1) for s in c.op_start[on].tolist()]
                        + [(e, -1) for e in c.op_end[on].tolist()])
        busy = most = 0
        for _, step in events:  # an end before a start at the same time
            busy += step
            most = max(most, busy)
        streams = cluster.device(device).compute_streams
        _require(most <= streams, f"issue order {source!r}, {case}: {most} ops ran at once "
                                  f"on {device!r}, which has {streams} streams")


# -- sharing policies ----------------------------------------------------------------------------

def _shared(source: str, jobs: int = 2) -> Any:
    """``jobs`` jobs (a layered DAG and a training step, alternately, the second arriving
    later) on the switch of the cases, fair links."""
    from sim.tenants import Job, simulate_jobs

    _, dag, star = _cases()[1]
    step = _cases()[3][1]
    made = [Job(dag if j % 2 == 0 else step, f"j{j}", arrival_s=1e-4 * j) for j in range(jobs)]
    return simulate_jobs(made, star, RooflineCost(star), sharing=source, links="fair")


def check_jobs_finish(source: str) -> None:
    r = _shared(source)
    rows = r.jobs.to_dict(orient="records")
    for row in rows:
        _require(row["feasible"] and math.isfinite(row["end_s"])
                 and row["end_s"] >= row["arrival_s"],
                 f"sharing policy {source!r}: job {row['job']!r} did not finish "
                 f"({row['reason'] or 'no end'})")


def check_alone_as_alone(source: str) -> None:
    r = _shared(source, jobs=1)
    slowdown = float(r.jobs["slowdown"].iloc[0])
    _require(_close(slowdown, 1.0), f"sharing policy {source!r}: a job alone ran "
                                    f"{slowdown!r} times its time alone")


def check_jobs_follow_their_inputs(source: str) -> None:
    r = _shared(source)
    trace = r.trace
    _, dag, _ = _cases()[1]
    step = _cases()[3][1]
    for j, p in enumerate((dag, step)):
        mine = trace[trace["job"] == f"j{j}"]
        start = dict(zip(mine["name"], mine["start_s"], strict=True))
        end = dict(zip(mine["name"], mine["end_s"], strict=True))
        via = {(t.tensor, c): t.name for t in p.transfers for c in t.consumers}
        for op in p.graph:
            for tensor in op.inputs:
                ready = end[via[(tensor, op.name)]] if (tensor, op.name) in via else end[
                    p.graph.producer(tensor)]
                _require(start[op.name] >= ready or _close(start[op.name], ready),
                         f"sharing policy {source!r}: job j{j}'s op {op.name!r} starts at "
                         f"{start[op.name]!r} s, before its input {tensor!r} is there")


def check_shared_streams(source: str) -> None:
    from sim.sharing import SHARING

    r = _shared(source)
    trace = r.trace
    _, _, star = _cases()[1]
    ops = trace[trace["kind"] == "compute"]
    # a partition's slices each have at least one stream of their own: count per job there
    by = ["device", "job"] if SHARING.make(source).partitioned else ["device"]
    for key, rows in ops.groupby(by):
        device = key[0] if isinstance(key, tuple) else key
        events = sorted([(s, 1) for s in rows["start_s"]] + [(e, -1) for e in rows["end_s"]])
        busy = most = 0
        for _, step in events:
            busy += step
            most = max(most, busy)
        streams = star.device(str(device)).compute_streams
        _require(most <= streams, f"sharing policy {source!r}: {most} ops ran at once on "
                                  f"{device!r}, which has {streams} streams")


def check_sharing_deterministic(source: str) -> None:
    _require(_shared(source).trace.equals(_shared(source).trace),
             f"sharing policy {source!r}: the same jobs gave two traces")


def check_sharing_parameters(source: str) -> None:
    from sim.sharing import SHARING

    require_plugin_contract(SHARING.make(source), f"sharing policy {source!r}")


LINK_CHECKS: tuple[Check[str], ...] = (
    Check("lone_transfer", check_lone_transfer),
    Check("transfers_follow_their_tensor", check_transfers_follow_their_tensor),
    Check("readers_follow_arrivals", check_readers_follow_arrivals),
    Check("every_op_runs", check_every_op_runs),
    Check("deterministic", check_deterministic),
    Check("declares_parameters", check_declares_parameters),
)

ORDER_CHECKS: tuple[Check[str], ...] = (
    Check("every_op_runs_after_its_inputs", check_ops_follow_their_inputs),
    Check("streams_honoured", check_streams_honoured),
    Check("deterministic", lambda s: check_deterministic(s, "issue order")),
    Check("declares_parameters", lambda s: check_declares_parameters(s, "issue order")),
)


SHARING_CHECKS: tuple[Check[str], ...] = (
    Check("jobs_finish", check_jobs_finish),
    Check("alone_as_alone", check_alone_as_alone),
    Check("jobs_follow_their_inputs", check_jobs_follow_their_inputs),
    Check("shared_streams", check_shared_streams),
    Check("deterministic", check_sharing_deterministic),
    Check("declares_parameters", check_sharing_parameters),
)


def check_part(source: str, checks: Sequence[Check[str]]) -> None:
    """Run ``checks`` (:data:`LINK_CHECKS`, :data:`ORDER_CHECKS` or :data:`SHARING_CHECKS`)
    on a registered part's
    name or spec; raise one :class:`ConformanceError` that lists every failure."""
    run_checks(checks, source)


def parametrize_with_checks(sources: Sequence[str], checks: Sequence[Check[str]]
                            ) -> MarkDecorator:
    """A ``pytest.mark.parametrize`` over (part, check): one test item each, named
    ``<part>-<check>``; the test body is ``check(part)``."""
    return parametrize(("part", "check"), [(s, s, c) for s in sources for c in checks])
