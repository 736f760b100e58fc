"""``placelab tenants``: several jobs on one cluster under a sharing policy."""

from __future__ import annotations

import argparse
import json
from typing import Any

from experiments.commands import dumps_json, emit

__all__ = ["add_tenants_command", "cmd_tenants"]


def add_tenants_command(sub: Any) -> None:
    p = sub.add_parser("tenants", help="simulate several jobs sharing a cluster (a TOML job "
                       "list, a Poisson stream) under a sharing policy")
    p.add_argument("spec", help="the tenant spec (TOML)")
    p.add_argument("--sharing", help="override the spec's sharing policy "
                   "(exclusive, fifo, weighted_fair, priority[:preempt=false], "
                   "partition[:memory=false])")
    aware = p.add_mutually_exclusive_group()
    aware.add_argument("--aware", dest="aware", action="store_true", default=None,
                       help="place each job around the load of the jobs before it")
    aware.add_argument("--no-aware", dest="aware", action="store_false",
                       help="place each job as if the cluster were empty")
    p.add_argument("--save-jobs", metavar="FILE", help="write the job list (the stream "
                   "drawn) as a spec that replays it")
    p.add_argument("--out", metavar="FILE", help="write the per-job table (.parquet or .csv)")
    p.add_argument("--trace", metavar="FILE", help="write the Chrome trace (.json)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_tenants)


def cmd_tenants(args: argparse.Namespace) -> None:
    from experiments.results import write_results
    from experiments.tenants import TenantError, all_jobs, load_tenants, run_tenants, write_jobs
    from sim.result import chrome_trace
    from sim.sharing import make_sharing
    from workloads.io import write_text_atomic

    for flag, value, suffixes in (("--out", args.out, (".parquet", ".csv")),
                                  ("--trace", args.trace, (".json",)),
                                  ("--save-jobs", args.save_jobs, (".toml",))):
        if value and not value.endswith(suffixes):
            raise TenantError(f"{flag}: expected a file ending {' or '.join(suffixes)}, got "
                              f"{value!r}")
    doc = load_tenants(args.spec)
    if args.sharing:
        make_sharing(args.sharing)  # a bad name is one line before any work
    jobs = all_jobs(doc)
    result = run_tenants(doc, sharing=args.sharing, aware=args.aware, jobs=jobs)
    if args.save_jobs:
        write_jobs(args.save_jobs, doc, jobs)
    if args.out:
        write_results(result.jobs, args.out)
    if args.trace:
        write_text_atomic(args.trace, json.dumps(chrome_trace(result.trace)))
    data = {"spec": args.spec, "cluster": doc.cluster, **result.summary()}
    lines = [_table(result.jobs),
             f"sharing {result.sharing}, links {result.links}: makespan "
             f"{result.makespan_s * 1e3:.3f} ms, Jain's index over slowdowns "
             f"{result.fairness:.3f}, {int(result.jobs['feasible'].sum())} of "
             f"{len(result.jobs)} jobs feasible"]
    lines += [f"  {row.job}: {row.reason}" for row in result.jobs.itertuples()
              if row.reason]
    lines.append("utilisation: " + ", ".join(f"{d} {u:.0%}"
                                            for d, u in result.utilization.items()))
    emit(args, json.loads(dumps_json(data)), "\n".join(lines))


def _table(jobs: Any) -> str:
    """The per-job table, times in milliseconds."""
    view = jobs.drop(columns=["reason"]).copy()
    for column in ("arrival_s", "start_s", "end_s", "alone_s"):
        view[column.replace("_s", "_ms")] = (view.pop(column) * 1e3).round(3)
    view["slowdown"] = view["slowdown"].round(3)
    order = ["job", "arrival_ms", "start_ms", "end_ms", "alone_ms", "slowdown", "feasible",
             "weight", "priority", "ops"]
    return str(view[order].to_string(index=False))
