"""Baechi's algorithms as Baechi measured them: step times, memory caps, a large model.

Three parts, every plan simulated with ``links="fair"``:

1. An Inception-v3 training step (SGD, batch 64 and 32) on four V100s joined pairwise by
   links with Baechi's measured transfer cost, 5.7 GB/s plus 134 µs a transfer (Jeon et
   al., SoCC 2020, its communication profile of the GPUs it used): step time of each
   policy over one GPU's, and for the list schedulers their own estimate over the
   simulated time (Baechi's transfer model, ``transfers=channel``, against every transfer
   at once, ``transfers=free``).
2. GPT-2 small's Adam step (batch 12 x 1024) on ``quad-v100-nvlink``: each memory-aware
   policy's simulated step over the lower bound, and whether it fits.
3. Inception-v3's training step (batch 32) with every V100's memory capped at a fraction:
   which policies find a plan that runs without running out of memory.
4. ``sim.repair`` on the instances where m-ETF's or m-SCT's first plan overflows in the
   simulator.
5. Placement time of m-ETF and m-SCT with Baechi's rules against the same policies under
   the model they had before (every transfer at once, the conservative budget, m-SCT's
   favourite children pinned and matched), timed alternately in the same run.

    python -m benchmarks.baechi [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import itertools

from benchmarks.machine import describe
from hwmodels import Cluster, Link, RooflineCost, get_cluster, get_device
from policies import plan
from policies.bounds import lower_bound
from sim import simulate
from workloads import build_model
from workloads.errors import OutOfMemory
from workloads.training import training_graph

POLICIES = ("m_topo", "m_etf", "m_sct", "heft", "metis")
#: Baechi's profile of a transfer between its GPUs (SoCC 2020): bandwidth and latency.
BAECHI_BANDWIDTH, BAECHI_LATENCY_S = 5.7e9, 134e-6


def baechi_cluster() -> Cluster:
    v100 = get_device("v100-sxm2-32gb")
    devices = tuple(v100.instance(f"gpu{i}") for i in range(4))
    links = tuple(Link(f"gpu{a}", f"gpu{b}", BAECHI_BANDWIDTH, BAECHI_LATENCY_S,
                       name=f"pcie{a}{b}") for a, b in itertools.combinations(range(4), 2))
    return Cluster("baechi-4gpu", devices, links)


def part_ratios(batches: tuple[int, ...]) -> list[str]:
    cluster = baechi_cluster()
    cost = RooflineCost(cluster)
    rows = ["| batch | policy | step ms | / one GPU | estimate / simulated | placement s |",
            "|---:|---|---:|---:|---:|---:|"]
    for batch in batches:
        step = training_graph(build_model("inception_v3", batch=batch), "sgd")
        one = simulate(plan(step, cluster, "single_device", cost), cluster, cost,
                       links="fair").makespan_s
        specs = [*POLICIES, "m_etf:transfers=free", "m_sct:transfers=free"]
        for spec in specs:
            p = plan(step, cluster, spec, cost)
            r = simulate(p, cluster, cost, links="fair")
            estimate = (f"{p.estimated_makespan_s / r.makespan_s:.2f}"
                        if p.estimated_makespan_s else "-")
            rows.append(f"| {batch} | {spec} | {r.makespan_s * 1e3:.1f} | "
                        f"{r.makespan_s / one:.2f} | {estimate} | {p.placement_s:.2f} |")
        rows.append(f"| {batch} | single_device | {one * 1e3:.1f} | 1.00 | - | - |")
    return rows


def part_gpt2(batch: int, seq_len: int) -> list[str]:
    cluster = get_cluster("quad-v100-nvlink")
    cost = RooflineCost(cluster)
    step = training_graph(build_model("gpt2_small", batch=batch, seq_len=seq_len), "adam")
    bound = lower_bound(step, cluster, cost)
    rows = [f"lower bound {bound * 1e3:.1f} ms", "",
            "| policy | step ms | / bound | feasible | peak GiB per device |",
            "|---|---:|---:|:---:|---|"]
    for spec in ("m_topo", "m_etf", "m_sct", "m_etf:budget=conservative", "metis"):
        try:
            p = plan(step, cluster, spec, cost)
        except OutOfMemory as err:
            rows.append(f"| {spec} | - | - | refused | {err} |")
            continue
        r = simulate(p, cluster, cost, links="fair")
        peaks = ", ".join(f"{v / 2**30:.1f}" for v in r.peak_memory_bytes.values())
        rows.append(f"| {spec} | {r.makespan_s * 1e3:.1f} | {r.makespan_s / bound:.3f} | "
                    f"{r.feasible} | {peaks} |")
    return rows


def capped(fraction: float) -> Cluster:
    c = get_cluster("quad-v100-nvlink")
    return Cluster(f"quad-v100-{fraction}", tuple(
        dataclasses.replace(d, memory_bytes=int(d.memory_bytes * fraction))
        for d in c.devices), c.links)


def part_caps(fractions: tuple[float, ...]) -> list[str]:
    step = training_graph(build_model("inception_v3", batch=32), "sgd")
    specs = ("m_topo", "m_etf", "m_sct", "m_etf:budget=conservative", "metis", "heft")
    rows = ["| cap (of 32 GiB) | " + " | ".join(specs) + " |",
            "|---:|" + "---|" * len(specs)]
    for fraction in fractions:
        cluster = capped(fraction)
        cost = RooflineCost(cluster)
        cells = []
        for spec in specs:
            try:
                r = simulate(plan(step, cluster, spec, cost), cluster, cost, links="fair")
                cells.append(f"fits, {r.makespan_s * 1e3:.0f} ms" if r.feasible else "OOM")
            except OutOfMemory:
                cells.append("refused")
        rows.append(f"| {fraction} | " + " | ".join(cells) + " |")
    return rows


#: Instances whose first m-ETF or m-SCT plan overflows in the simulator (found by trying
#: the zoo's training steps under caps), for ``sim.repair``.
REPAIRS = (("gpt2_small", 4, "adam", 0.15, "m_etf"), ("resnet50", 16, "sgd", 0.06, "m_etf"),
           ("resnet50", 32, "adam", 0.12, "m_etf"), ("resnet50", 32, "adam", 0.09, "m_sct"),
           ("bert_base", 16, "adam", 0.08, "m_etf"))


def part_repair() -> list[str]:
    from sim.repair import repair

    rows = ["| step | cap | policy | first plan over by | rounds | result |",
            "|---|---:|---|---|---:|---|"]
    for model, batch, optimizer, fraction, policy in REPAIRS:
        step = training_graph(build_model(model, batch=batch), optimizer)
        cluster = capped(fraction)
        r = repair(step, cluster, policy, RooflineCost(cluster), rounds=4)
        first = ", ".join(f"{d} {b / 2**20:.0f} MiB" for d, b in
                          r.rounds[0].get("over_bytes", {}).items()) or "nothing"
        last = r.rounds[-1]
        outcome = ("fits" if r.result.feasible else
                   "refused: " + last["refused"].split(":")[1].strip()[:60] if "refused" in last
                   else "still over")
        rows.append(f"| {model} b{batch} {optimizer} | {fraction} | {policy} | {first} | "
                    f"{len(r.rounds) - 1} | {outcome} |")
    return rows


#: Each policy as Baechi's rules make it, and as it was before them (the same code).
EARLIER = {"m_etf": "m_etf:transfers=free,budget=conservative",
           "m_sct": "m_sct:transfers=free,budget=conservative,favourites=pin,"
                    "rounding=matching"}


def part_placement_time() -> list[str]:
    """Placement time of zoo training steps on eight V100s, best of three, the two
    models timed alternately."""
    import time

    cluster = get_cluster("dgx1-v100")
    cost = RooflineCost(cluster)
    rows = ["| step | ops | policy | Baechi's rules s | earlier model s | ratio |",
            "|---|---:|---|---:|---:|---:|"]
    for model, batch in (("inception_v3", 32), ("resnet50", 32), ("bert_base", 8),
                         ("gpt2_small", 4)):
        step = training_graph(build_model(model, batch=batch), "adam")
        for name, earlier in EARLIER.items():
            best = {name: float("inf"), earlier: float("inf")}
            for _ in range(3):
                for spec in (name, earlier):
                    start = time.perf_counter()
                    plan(step, cluster, spec, cost)
                    best[spec] = min(best[spec], time.perf_counter() - start)
            rows.append(f"| {model} b{batch} adam | {len(step)} | {name} | {best[name]:.3f} | "
                        f"{best[earlier]:.3f} | {best[name] / best[earlier]:.2f} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller instances")
    args = parser.parse_args()
    batches = (8,) if args.quick else (64, 32)
    lines = [describe(), f"date: {datetime.date.today()}",
             "command: python -m benchmarks.baechi" + (" --quick" if args.quick else ""),
             "", "Inception-v3 training on four GPUs with Baechi's links:", ""]
    lines += part_ratios(batches)
    lines += ["", "GPT-2 small Adam step on quad-v100-nvlink:", ""]
    lines += part_gpt2(2, 128) if args.quick else part_gpt2(12, 1024)
    lines += ["", "Inception-v3 training (batch 32) under memory caps:", ""]
    lines += part_caps((0.3, 0.1) if args.quick else (0.3, 0.2, 0.15, 0.1, 0.08, 0.06, 0.05, 0.04))
    if not args.quick:
        lines += ["", "sim.repair where the first plan overflows in the simulator:", ""]
        lines += part_repair()
        lines += ["", "Placement time on dgx1-v100 (eight V100s):", ""]
        lines += part_placement_time()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
