"""How far to trust the simulator on this machine, on graphs calibration never ran.

For each engine (two logical devices unless ``--devices`` says otherwise; one GPU: one
device): calibrate it (``runtime.calibrate``, full and quick, or quick alone with
``--quick-only``), draw ``--unseen N`` graphs no zoo model resembles (``runtime.unseen``: random
CNNs, perceptrons, transformer blocks and recurrent nets, forward passes and SGD/Adam
steps, every free dimension on validation's side of the held-out split, and no op sharing
a signature with what the full calibration fitted), profile each of them on one device,
then run every graph under ``single_device``, ``heft`` and ``round_robin`` for real and
simulate the same plans, predicted

(a) by the calibration alone (the headline: nothing of these graphs was measured),
(b) after ``placelab profile`` of each graph on one device (the two-device plans are then
    predictions of runs never made), and
(q) by the quick calibration alone, on the same runs.

``--zoo`` adds, as a separate table, the zoo models at batch sizes between those
calibration ran them at (their ops' signatures were measured in context: not unseen).

    python -m benchmarks.validation [--engines cpu,torch] [--unseen 24] [--seed 1]
        [--repeats 5] [--min-seconds 0.3] [--rounds 3] [--devices 2] [--quick-only] [--zoo]
        [--out F]
"""

from __future__ import annotations

import argparse
import datetime
import tempfile
import time
from pathlib import Path

import pandas as pd

from benchmarks.machine import describe, record
from hwmodels.calibrated import CalibratedCost
from hwmodels.profiles import ProfileStore
from runtime.calibrate import Calibration, calibrate
from runtime.engine import make_engine
from runtime.microbench import reference_seconds
from runtime.profile import profile_graph
from runtime.unseen import signatures, unseen_graphs, zoo_signatures
from runtime.validate import order_kept, validate
from workloads import Graph, build_model, training_graph

POLICIES = ("single_device", "heft", "round_robin")
DEVICES = {1: "one", 2: "two", 3: "three", 4: "four"}


def policies(devices: int) -> tuple[str, ...]:
    """The plans validated: on one device every policy makes the same plan."""
    return POLICIES if devices > 1 else POLICIES[:1]


def summary(df: pd.DataFrame, label: str, column: str) -> str:
    """One table row: the error of the ``column`` predictions against the measured runs."""
    if df.empty:
        return f"| {label} | 0 | - | - | - | - |"
    errors = (df[column] / df["measured_s"] - 1).abs()
    several = [g for _, g in df.groupby("graph", sort=False) if len(g) > 1]
    ordered = sum(1 for g in several if order_kept(
        list(g[column]), list(g["measured_min_s"]), list(g["measured_max_s"])))
    # a graph of one plan has no order to keep
    kept = f"{ordered} of {len(several)}" if several else "-"
    return (f"| {label} | {len(df)} | {errors.median():.1%} | {errors.quantile(0.9):.1%} | "
            f"{errors.max():.1%} | {kept} |")


def rows(df: pd.DataFrame) -> list[str]:
    out = ["| graph | plan | measured ms (min-max) | turns differ | (a) ms | error | "
           "(b) ms | error | (q) error | op error (a) | memory error | from the predictor |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in df.itertuples():
        out.append(f"| {r.graph} | {r.policy} | {r.measured_s * 1e3:.2f} "
                   f"({r.measured_min_s * 1e3:.2f}-{r.measured_max_s * 1e3:.2f}) | "
                   f"{r.round_spread:.1%} | {r.predicted_s * 1e3:.2f} | {r.error:+.1%} | "
                   f"{r.profiled_s * 1e3:.2f} | {r.profiled_error:+.1%} | "
                   f"{r.quick_error:+.1%} | {r.op_error_median:.1%} | "
                   f"{r.memory_error_max or 0:.1%} | {r.from_predictor:.0%} |")
    return out


def _calibrated(engine_name: str, devices: int, quick: bool, seed: int, folder: Path
                ) -> tuple[Calibration, Path, float]:
    start = time.perf_counter()
    cal = calibrate(make_engine(engine_name, devices), quick=quick, seed=seed)
    path = cal.write(folder / f"{engine_name}{'-quick' if quick else ''}.toml")
    return cal, path, time.perf_counter() - start


def _heldout_line(cal: Calibration, label: str, seconds: float) -> str:
    q = cal.overall
    held = f"median {q.median:.1%}, p90 {q.p90:.1%} on {q.samples} held-out ops" if q else "-"
    return (f"- {label} calibration: {seconds:.0f} s, {len(cal.predictor.models)} models, "
            f"{cal.samples} measurements; error on ops it never fitted: {held}")


def _heading(engine_name: str, devices: int) -> str:
    return f"### {engine_name} engine, {DEVICES.get(devices, devices)} logical device" + (
        "s" if devices > 1 else "")


def unseen_section(engine_name: str, args: argparse.Namespace, folder: Path) -> list[str]:
    devices = args.devices
    if args.quick_only:  # the quick calibration stands in for the full one
        full, full_path, full_s = _calibrated(engine_name, devices, True, args.seed, folder)
        quick, quick_path, quick_s = full, full_path, full_s
        calibrated = [_heldout_line(quick, "quick", quick_s)]
    else:
        full, full_path, full_s = _calibrated(engine_name, devices, False, args.seed, folder)
        quick, quick_path, quick_s = _calibrated(engine_name, devices, True, args.seed, folder)
        calibrated = [_heldout_line(full, "full", full_s),
                      _heldout_line(quick, "quick", quick_s)]
    avoid = zoo_signatures() | full.signatures | quick.signatures
    graphs = unseen_graphs(args.unseen, seed=args.seed, avoid=avoid)
    if not graphs:  # calibrations alone (for --zoo)
        return [_heading(engine_name, devices), "", *calibrated, ""]
    shared = sum(len(signatures(g) & (full.signatures | quick.signatures))
                 for g in graphs.values())
    engine = make_engine(engine_name, devices)
    store = ProfileStore(folder / f"{engine_name}-profiles.sqlite")
    for graph in graphs.values():
        profile_graph(engine, graph, store, repeats=args.repeats,
                      min_seconds=args.min_seconds)
    measured = make_engine(engine_name, devices, full_path)
    cluster = measured.cluster()
    df = validate(measured, graphs, policies(devices), repeats=args.repeats,
                  min_seconds=args.min_seconds, rounds=args.rounds,
                  speed=lambda: reference_seconds(measured) / full.reference_s,
                  cost=CalibratedCost(cluster, full_path, profiles=None),
                  baselines={"profiled": CalibratedCost(cluster, full_path,
                                                        profiles=store.path),
                             "quick": CalibratedCost(cluster, quick_path, profiles=None)})
    split = df[df["devices_used"] > 1]
    steady = df[df["round_spread"] <= 0.05]
    df["at_speed_s"] = df["predicted_s"] * df["slower"]
    ops = sum(1 for g in graphs.values() for op in g if op.op_class != "source")
    return [
        _heading(engine_name, devices), "", *calibrated,
        f"- {len(graphs)} unseen graphs (seed {args.seed}), {ops} ops; ops whose signature "
        f"either calibration fitted: {shared}", "",
        "| predicted by | plans | median abs error | p90 | worst | graphs ordered as "
        "measured |", "|---|---:|---:|---:|---:|---:|",
        summary(df, "(a) calibration alone", "predicted_s"),
        summary(df, "(b) after profile, every plan", "profiled_s"),
        *([summary(split, "(b) after profile, plans over two devices", "profiled_s")]
          if devices > 1 else []),
        *([] if args.quick_only else [summary(df, "(q) quick calibration alone", "quick_s")]),
        summary(steady, "(a) on the plans whose turns agree within 5%", "predicted_s"),
        summary(steady, "(b) on the plans whose turns agree within 5%", "profiled_s"),
        summary(df, "(a) scaled by the machine's speed during validation", "at_speed_s"), "",
        f"the machine ran the speed probe {df['slower'].iloc[0]:.2f}x as slowly during "
        f"validation as during calibration (median over the turns)", "",
        f"peak memory, simulated against measured: worst relative gap "
        f"{df['memory_error_max'].fillna(0).max():.1%} over every device of every run; one "
        f"plan's turns differ by {df['round_spread'].median():.1%} (median), worst "
        f"{df['round_spread'].max():.1%}: the machine's own noise", "", *rows(df), ""]


def zoo_graphs() -> dict[str, Graph]:
    """Zoo models at batches between those calibration runs them at."""
    return {"mlp b8": build_model("mlp", batch=8), "lenet5 b16": build_model("lenet5", batch=16),
            "alexnet b2": build_model("alexnet", batch=2),
            "resnet50 b2": build_model("resnet50", batch=2),
            "bert_base b2 s32": build_model("bert_base", batch=2, seq_len=32),
            "mlp b8 train": training_graph(build_model("mlp", batch=8)),
            "lenet5 b16 train": training_graph(build_model("lenet5", batch=16))}


def zoo_section(engine_name: str, args: argparse.Namespace, folder: Path) -> list[str]:
    path = folder / f"{engine_name}{'-quick' if args.quick_only else ''}.toml"
    measured = make_engine(engine_name, args.devices, path)
    df = validate(measured, zoo_graphs(), policies(args.devices), repeats=args.repeats,
                  min_seconds=args.min_seconds, rounds=args.rounds,
                  cost=CalibratedCost(measured.cluster(), path, profiles=None))
    return [f"### {engine_name} engine: zoo models at other batch sizes (not unseen)", "",
            "| predicted by | plans | median abs error | p90 | worst | graphs ordered as "
            "measured |", "|---|---:|---:|---:|---:|---:|",
            summary(df, "full calibration (shape table where signatures match)",
                    "predicted_s"), ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="cpu,torch")
    parser.add_argument("--unseen", type=int, default=24)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--min-seconds", type=float, default=0.3,
                        help="run a short plan more often, to this much time in all")
    parser.add_argument("--rounds", type=int, default=3,
                        help="run every plan in this many turns over the whole run")
    parser.add_argument("--devices", type=int, default=2,
                        help="logical devices of each engine (one: single_device plans only)")
    parser.add_argument("--quick-only", action="store_true",
                        help="the quick calibration alone, standing in for the full one")
    parser.add_argument("--zoo", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="placelab-validation-"))
    lines = [describe(), f"date: {datetime.date.today().isoformat()}",
             f"command: python -m benchmarks.validation --engines {args.engines} --unseen "
             f"{args.unseen} --seed {args.seed} --repeats {args.repeats} --min-seconds "
             f"{args.min_seconds:g} --rounds {args.rounds}"
             f"{f' --devices {args.devices}' if args.devices != 2 else ''}"
             f"{' --quick-only' if args.quick_only else ''}{' --zoo' if args.zoo else ''}", ""]
    for name in args.engines.split(","):
        lines += unseen_section(name, args, folder)
        if args.zoo:
            lines += zoo_section(name, args, folder)
    print(record(lines, args.out), end="")


if __name__ == "__main__":
    main()
