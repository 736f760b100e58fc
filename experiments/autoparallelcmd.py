"""``placelab autoparallel``: the fastest way to train a zoo model on a cluster."""

from __future__ import annotations

import argparse
from typing import Any

from experiments.commands import emit

__all__ = ["add_autoparallel_command", "cmd_autoparallel"]

#: What the table shows, and in what units.
COLUMNS = {"rank": "rank", "strategy": "strategy", "step_s": "step_ms",
           "samples_per_s": "samples/s", "compute_s": "compute_ms", "bubble_s": "bubble_ms",
           "exposed_comm_s": "exposed_comm_ms", "peak_memory_gb": "peak_mem_GB",
           "why": "why"}


def add_autoparallel_command(sub: Any, positive_int: Any, batch: Any, seq_len: Any) -> None:
    p = sub.add_parser("autoparallel", help="rank data x tensor x pipeline strategies (and "
                       "micro-batches, schedules, buckets) for training a zoo model on a "
                       "cluster, each simulated")
    p.add_argument("--model", required=True)
    p.add_argument("--cluster", required=True)
    p.add_argument("--global-batch", type=batch, default=32,
                   help="samples per training step over all replicas (default: 32)")
    p.add_argument("--seq-len", type=seq_len, default=None,
                   help="tokens per sequence (sequence models)")
    p.add_argument("--dtype", choices=("fp32", "fp16", "bf16"), default="fp16")
    p.add_argument("--optimizer", default="adam", help="optimizer of the step (default: adam)")
    p.add_argument("--gpus", help="device counts to try, comma-separated (default: the "
                   "powers of two below the cluster's count, and that count)")
    p.add_argument("--refine", type=positive_int, default=3,
                   help="shapes whose every setting is tried after the first round "
                        "(default: 3)")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="processes (default: every core)")
    p.add_argument("--top", type=positive_int, default=20, help="rows shown (default: 20)")
    p.add_argument("--out", help="write the whole table (.parquet or .csv)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_autoparallel)


def cmd_autoparallel(args: argparse.Namespace) -> None:
    from experiments.autoparallel import autoparallel
    from experiments.results import write_results
    from workloads.errors import PlacelabError
    from workloads.training import OPTIMIZERS

    if args.optimizer not in OPTIMIZERS:
        raise PlacelabError(f"autoparallel: --optimizer must be one of "
                            f"{', '.join(sorted(OPTIMIZERS))}, got {args.optimizer!r}")
    gpus = _counts(args.gpus) if args.gpus else None
    df = autoparallel(args.model, args.cluster, global_batch=args.global_batch,
                      seq_len=args.seq_len, dtype=args.dtype, optimizer=args.optimizer,
                      gpus=gpus, workers=args.workers, refine=args.refine)
    if args.out:
        write_results(df, args.out)
    shown = df[list(COLUMNS)].head(args.top).rename(columns=COLUMNS)
    for column in ("step_ms", "compute_ms", "bubble_ms", "exposed_comm_ms"):
        shown[column] = shown[column] * 1e3
    width = max(shown["why"].map(len).max(), 3)
    text = (f"{args.model} on {args.cluster}, global batch {args.global_batch}, "
            f"{len(df)} strategies ranked:\n"
            + shown.to_string(index=False, float_format=lambda v: f"{v:.3f}",
                              formatters={"why": lambda v: f"{v:<{width}}"})
            + f"\n{df.attrs['untried']}" + (f"\nresults: {args.out}" if args.out else ""))
    emit(args, {"model": args.model, "cluster": args.cluster,
                "global_batch": args.global_batch, "untried": df.attrs["untried"],
                "rows": df.to_dict(orient="records"), "out": args.out}, text)


def _counts(text: str) -> list[int]:
    """``--gpus``: device counts, each once (names' rules), each an integer >= 1."""
    from experiments.commands import split
    from workloads.errors import PlacelabError

    parts = split(text, "gpus")
    if not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise PlacelabError(f"autoparallel: --gpus must be integers >= 1 separated by "
                            f"commas, got {text!r}")
    return [int(p) for p in parts]
