"""``placelab profile``: time a graph's op signatures in context into the profile database,
list what the database holds, or clear it."""

from __future__ import annotations

import argparse
from typing import Any

from experiments.commands import emit
from workloads.errors import PlacelabError

__all__ = ["add_profile_command", "cmd_profile"]


def add_profile_command(sub: Any, engines: tuple[str, ...], positive: Any) -> None:
    p = sub.add_parser("profile", help="time every distinct op signature of a graph on one "
                       "device of an engine and keep the times in the profile database, "
                       "which the calibrated cost model reads first")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", help="a zoo model")
    what.add_argument("--graph", help="a graph JSON file")
    what.add_argument("--list", action="store_true", help="what the database holds")
    what.add_argument("--clear", action="store_true", help="remove the database")
    p.add_argument("--engine", choices=engines, default="cpu")
    p.add_argument("--devices", type=positive, default=2,
                   help="the engine's logical devices: the profile is taken on the first, "
                        "with its thread budget (default 2, as placelab validate)")
    p.add_argument("--batch", type=positive, default=1)
    p.add_argument("--seq-len", type=positive, default=None)
    p.add_argument("--train", action="store_true", help="the model's training step")
    p.add_argument("--optimizer", choices=("sgd", "momentum", "adam"), default="sgd")
    p.add_argument("--repeats", type=positive, default=3)
    p.add_argument("--min-seconds", type=float, default=0.5,
                   help="run the graph at least this long in all (default 0.5)")
    p.add_argument("--db", help="the database (default: $PLACELAB_HOME/profiles.sqlite)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_profile)


def cmd_profile(args: argparse.Namespace) -> None:
    from hwmodels.profiles import ProfileStore, default_path

    store = ProfileStore(args.db or default_path())
    if args.clear:
        found = store.clear()
        emit(args, {"db": str(store.path), "cleared": found},
             f"{'removed' if found else 'no database at'} {store.path}")
        return
    if args.list:
        rows = store.summary()
        emit(args, {"db": str(store.path), "profiles": rows}, _listing(store, rows))
        return
    _measure(args, store)


def _listing(store: Any, rows: list[dict[str, Any]]) -> str:
    if not rows:
        return f"{store.path}: no profiles"
    lines = [f"{store.path}:", f"  {'engine':<10} {'threads':>7} {'entries':>8} {'graphs':>7} "
             f"{'latest':<26} machine"]
    for r in rows:
        cpu = r["fingerprint"].get("cpu", "?")
        lines.append(f"  {r['engine']:<10} {r['threads']:>7} {r['entries']:>8} "
                     f"{r['graphs']:>7} {r['latest']:<26} {r['machine']} ({cpu})")
    return "\n".join(lines)


def _measure(args: argparse.Namespace, store: Any) -> None:
    from experiments.commands import load_graph, make_engine
    from runtime.profile import profile_graph

    if args.min_seconds < 0:
        raise PlacelabError(f"profile: --min-seconds must be >= 0, got {args.min_seconds}")
    graph = load_graph(argparse.Namespace(**{**vars(args), "colocate": "ops", "passes": None}))
    engine = make_engine(args.engine, args.devices)
    done = profile_graph(engine, graph, store, repeats=args.repeats,
                         min_seconds=args.min_seconds)
    data = {"graph": done.graph, "engine": engine.name, "devices": len(engine.devices),
            "threads": getattr(engine, "threads", 1), "ops": done.ops,
            "signatures": done.signatures, "stored": done.stored,
            "makespan_s": done.makespan_s, "db": str(store.path)}
    emit(args, data, f"profiled {done.graph} on {engine.devices[0]} of {engine.name} "
                     f"x{len(engine.devices)} ({data['threads']} threads): {done.ops} ops, "
                     f"{done.signatures} signatures stored in {store.path} "
                     f"(step {done.makespan_s * 1e3:.2f} ms)")
