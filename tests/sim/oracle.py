"""An independent reference for the simulator: the same model written the textbook simpy
way, a generator process per op and per transfer and a ``Resource`` per device's streams,
per device's copy engines and per link channel, all first come first served.

It is slow and obviously right; ``tests/sim/test_oracle.py`` checks the event-callback
simulator against it on random plans, and ``benchmarks/sim_speed.py`` times both.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import simpy

from hwmodels import Cluster, CostModel
from policies import Plan, Transfer

__all__ = ["OracleResult", "naive_simulate"]


@dataclass(frozen=True)
class OracleResult:
    makespan_s: float
    start: dict[str, float]
    end: dict[str, float]


def naive_simulate(plan: Plan, cluster: Cluster, cost: CostModel) -> OracleResult:
    """Run ``plan`` in plan order: an op starts once its inputs are on its device, the op
    before it on the device has started, and a stream is free; a transfer starts once its
    producer ended and it holds a copy engine of its source and every channel of its route
    for ``cost.tensor_transfer_time``."""
    env = simpy.Environment()
    graph = plan.graph
    streams = {d: simpy.Resource(env, cluster.device(d).compute_streams)
               for d in cluster.device_names}
    engines = {d: simpy.Resource(env, cluster.device(d).copy_engines)
               for d in cluster.device_names}
    channels: dict[str, simpy.Resource] = {}
    done = {op.name: env.event() for op in graph}
    started = {op.name: env.event() for op in graph}
    arrived = {(t.tensor, t.dst): env.event() for t in plan.transfers}
    previous = {ops[i]: ops[i - 1] for ops in plan.order.values() for i in range(1, len(ops))}
    start: dict[str, float] = {}
    end: dict[str, float] = {}

    def run_op(name: str) -> Generator[Any, Any, None]:
        d = plan.placement[name]
        waits = [done[graph.producer(t)] if plan.placement[graph.producer(t)] == d
                 else arrived[(t, d)] for t in dict.fromkeys(graph.op(name).inputs)]
        if name in previous:
            waits.append(started[previous[name]])
        yield simpy.AllOf(env, waits)
        with streams[d].request() as req:
            yield req
            start[name] = env.now
            started[name].succeed()
            yield env.timeout(cost.op_time(graph.op(name), d))
            end[name] = env.now
        done[name].succeed()

    def run_transfer(t: Transfer) -> Generator[Any, Any, None]:
        yield done[t.producer]
        held = [engines[t.src]] + [channels.setdefault(h.channel, simpy.Resource(env, 1))
                                   for h in cluster.route(t.src, t.dst)]
        requests = [r.request() for r in held]
        yield simpy.AllOf(env, requests)
        start[t.name] = env.now
        yield env.timeout(cost.tensor_transfer_time(t.tensor, t.nbytes, t.src, t.dst))
        end[t.name] = env.now
        for resource, req in zip(held, requests, strict=True):
            resource.release(req)
        arrived[(t.tensor, t.dst)].succeed()

    for op in graph:
        env.process(run_op(op.name))
    for t in plan.transfers:
        env.process(run_transfer(t))
    env.run()
    return OracleResult(max(end.values(), default=0.0), start, end)
