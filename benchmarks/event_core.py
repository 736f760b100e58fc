"""The simulator's event core and its distance from the limit of a Python event loop.

Two tables, every figure measured in this run:

1. **Dispatch**: seconds per event of three event cores running the same chain of
   300,000 callbacks (64 in flight): ``sim.events.EventQueue`` (placelab's own heap of
   time, sequence, callback, value), simpy through its public API (``env.timeout`` and a
   callback) and simpy through the private attributes the simulator used before
   (``Event._ok``, ``_value``, ``env.schedule``).
2. **Limit**: ``sim.simulate`` (plan order, ``fcfs`` links) on a layered DAG placed in
   column blocks over H100s behind a switch (``benchmarks/sim_speed.py``'s plans) against a
   *heapq limit*: one function over local lists, a ``heapq`` of (time, sequence, op,
   transfer), the same issue rule and first come first served copy engines and channels,
   giving the same makespan, and nothing else (no memory accounting, no trace). The limit
   is given the simulator's own wiring of the plan (``sim.wiring.wire``: per-op pending
   counts, readers and transfers, built in bulk by numpy); the table shows it timed with and
   without building that wiring. Best of several alternating runs.

    python -m benchmarks.event_core [--sizes 10000,100000] [--devices 64] [--out F]
"""

from __future__ import annotations

import argparse
import datetime
import heapq
from typing import Any

import simpy
from simpy.events import NORMAL, Event

from benchmarks.machine import describe, record
from benchmarks.sim_speed import block_plan, switch_cluster, timed
from hwmodels import Cluster, RooflineCost
from policies.collectives import lower
from sim import simulate
from sim.events import EventQueue
from sim.wiring import Wiring, wire
from workloads.synthetic import layered_dag

EVENTS, IN_FLIGHT = 300_000, 64


def chain_ours() -> None:
    queue, left = EventQueue(), [EVENTS]

    def fire(value: int) -> None:
        left[0] -= 1
        if left[0] > 0:
            queue.schedule(1.0, fire, value)

    for i in range(IN_FLIGHT):
        queue.schedule(1.0, fire, i)
    queue.run()


def chain_simpy_public() -> None:
    env, left = simpy.Environment(), [EVENTS]

    def fire(event: simpy.Event) -> None:
        left[0] -= 1
        if left[0] > 0:
            env.timeout(1.0, event.value).callbacks.append(fire)

    for i in range(IN_FLIGHT):
        env.timeout(1.0, i).callbacks.append(fire)
    env.run()


def chain_simpy_private() -> None:
    env, left = simpy.Environment(), [EVENTS]

    def schedule(value: int) -> None:
        event = Event(env)
        event._ok, event._value = True, value
        event.callbacks.append(fire)
        env.schedule(event, NORMAL, 1.0)

    def fire(event: simpy.Event) -> None:
        left[0] -= 1
        if left[0] > 0:
            schedule(event._value)

    for i in range(IN_FLIGHT):
        schedule(i)
    env.run()


def heapq_limit(w: Wiring, streams: list[int], engines: list[int]) -> float:
    """The plan's makespan by the tightest loop of the same semantics (timing only)."""
    op_time, op_dev = w.op_time.tolist(), w.op_dev.tolist()
    order, pending = [o.tolist() for o in w.order], w.pending.tolist()
    wake, wake_off = w.wake.tolist(), w.wake_off.tolist()
    send, send_off = w.send.tolist(), w.send_off.tolist()
    t_dst, t_src, t_time = w.t_dst.tolist(), w.t_src.tolist(), w.t_duration.tolist()
    readers, readers_off, t_channels = w.t_readers.tolist(), w.t_readers_off.tolist(), \
        w.t_channels
    free, nxt = list(streams), [0] * len(order)
    copy_free = [[0.0] * e for e in engines]
    link_free: dict[str, float] = {}
    start, t_end = [0.0] * len(op_time), [0.0] * len(t_src)
    heap: list[tuple[float, int, int, int]] = []
    push, pop, seq, now = heapq.heappush, heapq.heappop, 0, 0.0

    def issue(d: int) -> None:
        nonlocal seq
        ops, i = order[d], nxt[d]
        while free[d] and i < len(ops) and pending[ops[i]] == 0:
            op = ops[i]
            i, free[d], start[op], seq = i + 1, free[d] - 1, now, seq + 1
            push(heap, (now + op_time[op], seq, op, -1))
        nxt[d] = i

    for d in range(len(order)):
        issue(d)
    while heap:
        now, _, op, k = pop(heap)
        if k >= 0:  # a transfer has arrived
            for r in readers[readers_off[k]:readers_off[k + 1]]:
                pending[r] -= 1
            issue(t_dst[k])
            continue
        d = op_dev[op]
        free[d] += 1
        for r in wake[wake_off[op]:wake_off[op + 1]]:
            pending[r] -= 1
        for k in send[send_off[op]:send_off[op + 1]]:
            engine = copy_free[t_src[k]]
            begin = min(engine)
            slot = engine.index(begin)
            for channel in t_channels[k]:
                begin = max(begin, link_free.get(channel, 0.0))
            end = max(begin, now) + t_time[k]
            engine[slot] = end
            for channel in t_channels[k]:
                link_free[channel] = end
            t_end[k], seq = end, seq + 1
            push(heap, (end, seq, -1, k))
        issue(d)
    return max(max((s + t for s, t in zip(start, op_time, strict=True)), default=0.0),
               max(t_end, default=0.0))


def dispatch_table(repeats: int) -> list[str]:
    lines = ["", "| event core | us per event | x placelab's |", "|---|---:|---:|"]
    times = {name: timed(fn, repeats)[0] / EVENTS * 1e6 for name, fn in (
        ("sim.events.EventQueue", chain_ours), ("simpy, public API", chain_simpy_public),
        ("simpy, private attributes", chain_simpy_private))}
    ours = times["sim.events.EventQueue"]
    lines += [f"| {name} | {t:.2f} | {t / ours:.2f} |" for name, t in times.items()]
    return lines


def limit_table(sizes: list[int], device_counts: list[int], repeats: int) -> list[str]:
    lines = ["", "| ops | devices | simulate s | ops/s | limit s | limit ops/s | ratio "
             "| wire + limit s | ratio | makespans equal |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    for n in sizes:
        graph = layered_dag(n, width=max(1, min(1000, n // 10)), seed=0)
        graph.arrays  # noqa: B018  (per-graph preparation, shared by both)
        for d in device_counts:
            lines.append(limit_row(graph, switch_cluster(d), repeats))
            print(lines[-1], flush=True)
    return lines


def limit_row(graph: Any, cluster: Cluster, repeats: int) -> str:
    n, cost = len(graph), RooflineCost(cluster)
    plan = block_plan(graph, cluster, max(1, min(1000, n // 10)))
    plan.device_codes(cluster.device_names)
    streams = [cluster.device(x).compute_streams for x in cluster.device_names]
    engines = [cluster.device(x).copy_engines for x in cluster.device_names]
    wiring = wire(lower(plan, cluster), cluster, cost)

    def ours() -> float:
        return simulate(plan, cluster, cost).makespan_s

    def limit() -> float:
        return heapq_limit(wiring, streams, engines)

    def wired_limit() -> float:
        return heapq_limit(wire(lower(plan, cluster), cluster, cost), streams, engines)

    times = {fn: float("inf") for fn in (ours, limit, wired_limit)}
    values = {}
    for _ in range(repeats):  # alternating, so that a burst of noise hits all three
        for fn in times:
            t, values[fn] = timed(fn, 1)
            times[fn] = min(times[fn], t)
    t_ours, t_limit, t_both = times.values()
    same = values[ours] == values[limit] == values[wired_limit]
    return (f"| {n:,} | {len(cluster.devices)} | {t_ours:.3f} | {n / t_ours:,.0f} "
            f"| {t_limit:.3f} | {n / t_limit:,.0f} | 1 : {t_ours / t_limit:.2f} "
            f"| {t_both:.3f} | 1 : {t_ours / t_both:.2f} | {'yes' if same else 'NO'} |")


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--devices", default="64")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", help="also write the markdown tables here")
    args = parser.parse_args(argv)
    lines = [f"{describe()}, simpy {simpy.__version__}",
             f"date: {datetime.date.today().isoformat()}",
             f"command: python -m benchmarks.event_core --sizes {args.sizes} "
             f"--devices {args.devices} --repeats {args.repeats}"]
    print("\n".join(lines), flush=True)
    lines += dispatch_table(args.repeats)
    print("\n".join(lines[-5:]), flush=True)
    lines += limit_table([int(s) for s in args.sizes.split(",")],
                         [int(s) for s in args.devices.split(",")], args.repeats)
    return record(lines, args.out)


if __name__ == "__main__":
    print(main())
