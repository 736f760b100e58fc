"""``placelab sweep``: run a sweep spec file into a folder, resumably, or rerun a folder."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from experiments.commands import emit
from workloads.errors import PlacelabError

__all__ = ["TABLE_ROWS", "add_sweep_command", "cmd_sweep"]

#: A sweep of at most this many cells prints its whole table (with every infeasible
#: cell's reason); a larger one prints its infeasible cells counted by reason.
TABLE_ROWS = 100


def add_sweep_command(sub: Any) -> None:
    p = sub.add_parser("sweep", help="run a grid of simulated experiments from a TOML spec, "
                       "on local processes or a Dask cluster, resumably")
    p.add_argument("spec", nargs="?", help="the sweep spec (TOML)")
    p.add_argument("--out", help="results folder (required with a spec; default with "
                   "--rerun: the folder's name + '-rerun')")
    p.add_argument("--rerun", metavar="DIR", help="run again the sweep stored in DIR")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, default=None,
                       help="local worker processes (default: every core; 1: this process)")
    where.add_argument("--dask", metavar="ADDRESS", help="run on this Dask scheduler")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(args: argparse.Namespace) -> None:
    from experiments.results import format_table
    from experiments.sweep import Experiment, SweepError, environment, load_sweep, specs_from
    from workloads.io import write_text_atomic

    source, out = _source_and_out(args)
    doc, text = load_sweep(source)
    specs = specs_from(doc, where=str(source))
    if args.workers is not None and args.workers < 1:
        raise SweepError(f"--workers: expected an integer >= 1, got {args.workers}")
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "spec.toml", text)
    write_text_atomic(out / "environment.json", json.dumps(environment(specs), indent=1))
    experiment = Experiment(specs, out=out)
    resumed = len(experiment.stored())
    progress = None if not args.json else False
    if args.dask:
        df = _on_dask(experiment, args.dask, progress)
    else:
        df = experiment.run(workers=args.workers, progress=progress)
    failed = df[df["error"].fillna("") != ""]
    data = {"out": str(out), "results": str(out / "results.parquet"), "cells": len(df),
            "resumed": resumed, "feasible": int(df["feasible"].fillna(False).sum()),
            "errors": len(failed)}
    lines = [format_table(df)] if len(df) <= TABLE_ROWS else [_reasons(df)]
    lines += [f"{len(df)} cells ({resumed} from an earlier run), {data['feasible']} "
              f"feasible, {len(failed)} failed", f"results: {data['results']}"]
    lines += [f"  failed: {r.model} {r.step} on {r.cluster}, {r.policy}: {r.error}"
              for r in failed.itertuples()]
    emit(args, data, "\n".join(lines))


def _reasons(df: Any) -> str:
    """Why cells are infeasible, most common reason first (a table too long to print)."""
    bad = df[~df["feasible"].fillna(False).astype(bool)]
    if bad.empty:
        return "every cell feasible"
    # The same reason on different ops, devices and sizes counts once: names and numbers
    # are masked.
    masked = bad["reason"].fillna("").str.replace(r"'[^']*'", "'…'", regex=True).str.replace(
        r"\d+(\.\d+)?", "N", regex=True)
    counts = masked.value_counts()
    return "infeasible cells by reason:\n" + "\n".join(
        f"  {n:5d}  {reason}" for reason, n in counts.items())


def _source_and_out(args: argparse.Namespace) -> tuple[Path, Path]:
    if args.rerun:
        if args.spec:
            raise PlacelabError("sweep: expected a spec file or --rerun DIR, got both")
        folder = Path(args.rerun)
        if not (folder / "spec.toml").is_file():
            raise PlacelabError(f"sweep --rerun: {str(folder)!r}: expected a sweep folder "
                                f"with spec.toml, got none")
        out = Path(args.out) if args.out else folder.with_name(folder.name + "-rerun")
        return folder / "spec.toml", out
    if not args.spec:
        raise PlacelabError("sweep: expected a spec file (or --rerun DIR), got none")
    if not args.out:
        raise PlacelabError("sweep: --out: expected a results folder, got none")
    return Path(args.spec), Path(args.out)


def _on_dask(experiment: Any, address: str, progress: bool | None) -> Any:
    try:
        from distributed import Client
    except ImportError:
        raise PlacelabError("sweep --dask: expected Dask distributed to be installed "
                            "(pip install 'placelab[dask]'), got none") from None
    try:
        client = Client(address, timeout=10)
    except OSError as err:
        raise PlacelabError(f"sweep --dask: expected a Dask scheduler at {address!r}, got "
                            f"{err}") from None
    with client:
        return experiment.run(client.get_executor(), progress=progress)
