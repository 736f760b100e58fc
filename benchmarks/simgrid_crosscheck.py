"""placelab's link models against SimGrid (the most trusted simulator of distributed
platforms) on the same plans.

Each plan is run by ``sim.simulate`` (``links="fair"`` and ``"fcfs"``) and by SimGrid's s4u
engine: a host per device and a link per catalog link (split-duplex for full-duplex links),
routes as placelab routes, an actor per device executing its ops in plan order for their
cost-model times, an actor per transfer sending its bytes host to host (``Comm.sendto``)
once its producer has ended. SimGrid's CM02 network model, with latency and bandwidth
factors of 1 and no cross traffic, shares bandwidth max-min; its flows are weighted by
route latency, so the comparison is exact where routes of concurrent flows have equal
latency. Copy engines are set unlimited on the placelab side: SimGrid has none.

SimGrid comes from Debian (``apt-get install python3-simgrid``) and runs under the system
Python; this script adds the project and its virtual environment to that Python's path:

    /usr/bin/python3 -m benchmarks.simgrid_crosscheck [--plans 200] [--out F]
"""

from __future__ import annotations

import argparse
import datetime
import glob
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), *glob.glob(str(ROOT / ".venv/lib/python3.11/site-packages"))]

import simgrid  # noqa: E402

from benchmarks.machine import describe, record  # noqa: E402
from benchmarks.sim_speed import round_robin, slow_switch, unlimited_copies  # noqa: E402
from hwmodels import Cluster, RooflineCost, get_cluster  # noqa: E402
from policies import plan as make_plan  # noqa: E402
from sim import simulate  # noqa: E402
from workloads import build_model, training_graph  # noqa: E402

CONFIG = ["network/model:CM02", "network/latency-factor:1", "network/bandwidth-factor:1",
          "network/crosstraffic:0", "network/TCP-gamma:1e18", "contexts/factory:thread"]


def simgrid_makespan(p, cluster: Cluster, cost) -> float:
    """The plan's makespan in SimGrid (a fresh engine per plan, in a subprocess)."""
    engine = simgrid.Engine(["crosscheck", *(f"--cfg={c}" for c in CONFIG),
                             "--log=root.thres:critical"])
    zone = simgrid.NetZone.create_full_zone("cluster")
    hosts = {d: zone.create_host(d, 1.0) for d in cluster.device_names}
    links = {}
    for link in cluster.links:
        if link.duplex == "full":
            made = zone.create_split_duplex_link(link.name, link.bandwidth)
        else:
            made = zone.create_link(link.name, link.bandwidth)
        made.set_latency(link.latency_s)
        links[link.name] = (made.seal(), link)
    for a in cluster.device_names:
        for b in cluster.device_names:
            if a == b:
                continue
            route = []
            for hop in cluster.route(a, b):
                made, spec = links[hop.link.name]
                direction = (simgrid.LinkInRoute.Direction.UP if hop.src == spec.a
                             else simgrid.LinkInRoute.Direction.DOWN)
                route.append(simgrid.LinkInRoute(made, direction)
                             if spec.duplex == "full" else simgrid.LinkInRoute(made))
            zone.add_route(hosts[a].netpoint, hosts[b].netpoint, None, None, route, False)
    zone.seal()
    graph = p.graph
    readers: dict[tuple[str, str], int] = {}
    for op in graph:
        for t in dict.fromkeys(op.inputs):
            key = (t, p.placement[op.name])
            readers[key] = readers.get(key, 0) + 1
    sends: dict[str, list] = {}
    for tr in p.transfers:
        sends.setdefault(tr.producer, []).append(tr)
    # a tensor's arrival on a device (tensor, device), and a transfer's start (tensor, src, "send")
    ready: dict[tuple[str, ...], Any] = {key: simgrid.Semaphore(0) for key in readers}
    ready |= {(tr.tensor, tr.src, "send"): simgrid.Semaphore(0) for tr in p.transfers}
    ends: list[float] = [0.0]

    def device(name: str) -> None:
        for op_name in p.order.get(name, ()):
            op = graph.op(op_name)
            for t in dict.fromkeys(op.inputs):
                ready[(t, name)].acquire()
            seconds = cost.op_time(op, name)
            if seconds > 0:
                simgrid.this_actor.execute(seconds)
            ends.append(simgrid.Engine.clock)
            for t in op.outputs:
                for _ in range(readers.get((t.name, name), 0)):
                    ready[(t.name, name)].release()
            for tr in sends.get(op_name, ()):
                ready[(tr.tensor, tr.src, "send")].release()

    def transfer(tr) -> None:
        ready[(tr.tensor, tr.src, "send")].acquire()
        simgrid.Comm.sendto(hosts[tr.src], hosts[tr.dst], tr.nbytes)
        ends.append(simgrid.Engine.clock)
        for _ in range(readers.get((tr.tensor, tr.dst), 0)):
            ready[(tr.tensor, tr.dst)].release()

    for name in cluster.device_names:
        simgrid.Actor.create(name, hosts[name], device, name)
    for tr in p.transfers:
        simgrid.Actor.create(tr.name, hosts[tr.src], transfer, tr)
    engine.run()
    return max(ends)


def _worker(args) -> tuple[float, float, float]:
    model, batch, train, cluster_name, policy = args
    cluster = unlimited_copies(get_cluster(cluster_name))
    cost = RooflineCost(cluster)
    graph = build_model(model, batch=batch)
    if train:
        graph = training_graph(graph, "sgd")
    p = make_plan(graph, cluster, policy, cost)
    fair = simulate(p, cluster, cost, links="fair").makespan_s
    fcfs = simulate(p, cluster, cost, links="fcfs").makespan_s
    return fair, fcfs, simgrid_makespan(p, cluster, cost)


def main(argv: list[str] | None = None) -> str:
    import multiprocessing

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=200)
    parser.add_argument("--out")
    parser.add_argument("--switched", type=int,
                        help="only time SimGrid on sim_speed.py's round-robin plan of this "
                             "many ops (prints seconds and makespan)")
    parser.add_argument("--width", type=int, default=1000)
    args = parser.parse_args(argv)
    if args.switched:
        return _switched(args.switched, args.width)
    cases = [(m, b, t, c, pol)
             for m, b in (("resnet50", 8), ("inception_v3", 4), ("bert_base", 2), ("lenet5", 32))
             for t in (False, True)
             for c in ("dgx1-v100", "dgx-h100-x2-ib", "quad-v100-nvlink", "hetero-box")
             for pol in ("round_robin", "heft", "metis", "m_topo", "pipeline", "etf", "random")]
    step = max(1, len(cases) // max(args.plans, 1))
    cases = cases[::step][:args.plans]  # spread over every model, step, cluster and policy
    rows = []
    ctx = multiprocessing.get_context("spawn")  # a fresh SimGrid engine per plan
    with ctx.Pool(2, maxtasksperchild=1) as pool:
        for case, result in zip(cases, pool.imap(_safe, cases), strict=True):
            if result is not None:
                rows.append((case, *result))
    lines = [f"{describe()}, SimGrid {simgrid.simgrid_version}",
             f"date: {datetime.date.today().isoformat()}",
             f"command: /usr/bin/python3 -m benchmarks.simgrid_crosscheck --plans {args.plans}",
             "", *_summary(rows)]
    print("\n".join(lines))
    return record(lines, args.out)


def _switched(n: int, width: int) -> str:
    import time

    cluster = unlimited_copies(slow_switch())
    plan = round_robin(n, width, cluster)
    start = time.perf_counter()
    makespan = simgrid_makespan(plan, cluster, RooflineCost(cluster))
    line = f"{time.perf_counter() - start} {makespan}"
    print(line)
    return line


def _safe(case):
    try:
        return _worker(case)
    except Exception as err:  # a plan a policy cannot make is not a data point
        print(f"skipped {case}: {type(err).__name__}: {err}", file=sys.stderr)
        return None


def _summary(rows: list) -> list[str]:
    def share(model: int, tol: float) -> float:
        return sum(abs(r[model] - r[3]) <= tol * r[3] for r in rows) / max(len(rows), 1)

    worst = {i: max((abs(r[i] - r[3]) / r[3] for r in rows), default=0.0) for i in (1, 2)}
    out = [f"plans compared: {len(rows)}", "",
           "| placelab link model | within 1% of SimGrid | within 2% | within 5% | worst |",
           "|---|---:|---:|---:|---:|"]
    for name, i in (("fair", 1), ("fcfs", 2)):
        out.append(f"| {name} | {share(i, 0.01):.0%} | {share(i, 0.02):.0%} | "
                   f"{share(i, 0.05):.0%} | {worst[i]:.1%} |")
    out += ["", "Plans where `fair` is furthest from SimGrid:", "",
            "| model | batch | training | cluster | policy | fair ms | SimGrid ms | fcfs ms |",
            "|---|---:|---|---|---|---:|---:|---:|"]
    for case, fair, fcfs, grid in sorted(rows, key=lambda r: -abs(r[1] - r[3]) / r[3])[:5]:
        model, batch, train, cluster, policy = case
        out.append(f"| {model} | {batch} | {train} | {cluster} | {policy} | "
                   f"{fair * 1e3:.3f} | {grid * 1e3:.3f} | {fcfs * 1e3:.3f} |")
    return out


if __name__ == "__main__":
    main()
