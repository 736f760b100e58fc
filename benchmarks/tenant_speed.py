"""Several tenants: what ``sim.simulate_jobs`` costs against simulating each job alone.

``k`` copies of one plan (a synthetic layered DAG in column blocks over 8 H100s on a
switch, and a ResNet-50 training step placed by HEFT on the catalog's DGX A100) arrive a
little apart and share the cluster under ``fifo`` and ``weighted_fair``. Timed in the same
run: ``k`` calls of ``simulate`` (each job alone: what ``simulate_jobs`` also does, to
compute slowdowns) and ``simulate_jobs``; the shared run's own cost is the difference. Per
op, a shared run should cost about what a single run does: the issue rule looks at one
queue entry per job and device, and memory checks add the jobs' use per device. Best of
3 runs each.

    python -m benchmarks.tenant_speed [--jobs 1,2,4,8] [--ops 10000] [--out F]
"""

from __future__ import annotations

import argparse
import datetime
import time

from benchmarks.machine import describe, record
from benchmarks.sim_speed import block_plan, switch_cluster
from hwmodels import RooflineCost, get_cluster
from policies import Plan, plan
from sim import Job, simulate, simulate_jobs
from workloads import build_model
from workloads.synthetic import layered_dag
from workloads.training import training_graph


def best(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def rows(name: str, p: Plan, cluster, cost, ks: list[int], gap_s: float) -> list[str]:
    n = len(p.graph)
    alone = best(lambda: simulate(p, cluster, cost))
    out = []
    for k in ks:
        jobs = [Job(p, f"j{i}", arrival_s=i * gap_s) for i in range(k)]
        for sharing in ("fifo", "weighted_fair"):
            shared = best(lambda jobs=jobs, sharing=sharing: simulate_jobs(
                jobs, cluster, cost, sharing=sharing))
            own = max(shared - k * alone, 0.0)
            out.append(f"| {name} | {k} | {k * n:,} | {sharing} | {k * alone:.3f} | "
                       f"{shared:.3f} | {own:.3f} | {own / (k * alone):.2f} | "
                       f"{k * n / own if own > 0 else float('inf'):,.0f} |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="1,2,4,8")
    parser.add_argument("--ops", type=int, default=10_000)
    parser.add_argument("--out", help="also write the markdown table here")
    args = parser.parse_args()
    ks = [int(x) for x in args.jobs.split(",")]
    switch = switch_cluster(8)
    dag = block_plan(layered_dag(args.ops, width=1000, seed=0), switch, 1000)
    dgx = get_cluster("dgx-a100")
    step = plan(training_graph(build_model("resnet50", batch=32), "sgd"), dgx, "heft")
    lines = [describe(), f"date: {datetime.date.today()}",
             f"command: python -m benchmarks.tenant_speed --jobs {args.jobs} --ops {args.ops}",
             "", "| plan | jobs | ops | sharing | k x simulate s | simulate_jobs s | "
             "shared run s | shared / alone | shared ops/s |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    cost = RooflineCost(switch)
    lines += rows(f"layered {args.ops:,} ops, 8 H100", dag, switch, cost, ks, 1e-6)
    cost = RooflineCost(dgx)
    lines += rows("ResNet-50 train b32, DGX A100", step, dgx, cost, ks, 1e-3)
    print(record(lines, args.out), end="")


if __name__ == "__main__":
    main()
