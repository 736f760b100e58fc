"""Pass speed: each standard pass against rebuilding the same graph, at growing sizes.

A pass must at least build its result once, so the baseline, timed in the same run, is
``Graph(name, ops)`` of the input's ops. A near-linear pass keeps a constant ratio to it as
graphs grow; ``fuse_elementwise`` rebuilt the graph after every rewrite before (751 ops:
8.9 s, 3,001 ops: 210 s), a ratio that grew with the size.

Graphs: chains of ``linear -> relu -> add`` blocks (every relu fuses; the add reads a skip
connection, so it fuses only after the relu has), and zoo training graphs.

    python -m benchmarks.pass_speed [--sizes 1000,3000,10000,30000] [--out F]
"""

from __future__ import annotations

import argparse
import datetime
import gc
import time
from collections.abc import Callable

from benchmarks.machine import describe, record
from workloads import GraphBuilder, build_model, training_graph
from workloads.graph import Graph
from workloads.passes import make_pass

PASSES = ("dce", "cse", "fuse_elementwise")


def blocks(n_ops: int) -> Graph:
    """About ``n_ops`` ops: residual blocks ``y = x + relu(linear(x))``."""
    b = GraphBuilder(f"blocks{n_ops}")
    x = b.input((8, 64))
    for _ in range(max(1, (n_ops - 1) // 3)):
        x = b.add(x, b.relu(b.linear(x, 64)))
    return b.build()


def best_of(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,3000,10000,30000")
    parser.add_argument("--out", help="also write the markdown table here")
    args = parser.parse_args(argv)
    graphs = [blocks(int(s)) for s in args.sizes.split(",")]
    graphs += [training_graph(build_model(m), "adam") for m in ("resnet50", "bert_base")]
    lines = [describe(), f"date: {datetime.date.today().isoformat()}",
             f"command: python -m benchmarks.pass_speed --sizes {args.sizes}", "",
             "| graph | ops | rebuild s | " + " | ".join(f"{p} s (x rebuild)" for p in PASSES)
             + " | ops after fusion |",
             "|---|---:|---:|" + "---:|" * len(PASSES) + "---:|"]
    print("\n".join(lines), flush=True)
    for graph in graphs:
        repeats = 3 if len(graph) <= 10_000 else 1
        ops = graph.ops
        base = best_of(lambda: Graph(graph.name, ops), repeats)  # noqa: B023
        cells = []
        for name in PASSES:
            seconds = best_of(lambda: make_pass(name)(graph), repeats)  # noqa: B023
            cells.append(f"{seconds:.3f} ({seconds / base:.1f})")
        fused, _ = make_pass("fuse_elementwise")(graph)
        row = (f"| {graph.name} | {len(graph):,} | {base:.3f} | " + " | ".join(cells)
               + f" | {len(fused):,} |")
        lines.append(row)
        print(row, flush=True)
    return record(lines, args.out)


if __name__ == "__main__":
    main()
