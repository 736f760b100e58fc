"""The commands that measure this machine: ``placelab calibrate`` and ``placelab validate``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from experiments.commands import emit, make_engine, split
from workloads.errors import PlacelabError

if TYPE_CHECKING:
    import pandas as pd

    from runtime.calibrate import Calibration
    from workloads.graph import Graph

__all__ = ["cmd_calibrate", "cmd_validate", "validation_graphs"]


def _progress(args: argparse.Namespace, what: str) -> Any:
    """A tqdm bar with ETA on stderr, ``bar(items[, description])``; off under ``--json``
    and when stderr is no terminal."""
    from tqdm import tqdm

    def bar(items: Iterable[Any], description: str = what) -> Iterable[Any]:
        items = list(items)
        return tqdm(items, desc=description, file=sys.stderr, leave=False,
                    disable=args.json or not sys.stderr.isatty())
    return bar


def cmd_calibrate(args: argparse.Namespace) -> None:
    from dataclasses import replace

    from runtime.calibrate import Budget, calibrate

    engine = make_engine(args.engine, args.devices)
    budget = Budget.quick() if args.quick else Budget.full()
    if args.cases is not None:
        budget = replace(budget, cases=args.cases, heldout=max(2, args.cases // 4))
    calibration = calibrate(engine, budget=budget, seed=args.seed,
                            progress=_progress(args, ""))
    path = calibration.write(args.out)
    if args.plot:
        _plot_heldout(calibration, args.plot)
    data = {"out": str(path), "plot": args.plot, **calibration.report()}
    emit(args, data, _calibration_text(data))


def _calibration_text(d: dict[str, Any]) -> str:
    lines = [f"calibrated {d['samples']} measurements -> {d['out']}",
             f"  roofline: peak {d['peak_gflops']:.1f} GFLOP/s, memory "
             f"{d['memory_bandwidth_gbps']:.1f} GB/s, launch {d['launch_overhead_us']:.2f} us "
             f"per op; executor dispatch {d['dispatch_us']:.2f} us per op"]
    if d["link"]:
        k = d["link"]
        lines.append(f"  link {k['bandwidth_gbps']:.1f} GB/s + {k['latency_us']:.1f} us "
                     f"(median error {k['fit']['median']:.1%})")
    overall = d["heldout_overall"]
    if overall:
        lines.append(f"  {d['kinds_fitted']} op-time models; error on {overall['samples']} "
                     f"held-out ops the fit never saw: median {overall['median']:.1%}, "
                     f"90th percentile {overall['p90']:.1%}")
    lines.append(f"    {'kind':<28} {'median':>7} {'p90':>7} {'worst':>7} {'ops':>5}")
    for kind, q in d["heldout"].items():
        lines.append(f"    {kind:<28} {q['median']:7.1%} {q['p90']:7.1%} {q['worst']:7.1%} "
                     f"{q['samples']:5d}")
    lines.append(f"  {d['signatures']} op signatures timed inside whole zoo models "
                 f"(interpolated in batch for ops of the same signature); "
                 f"{d['run_start_us']:.1f} us before a run's first op; reference graph "
                 f"(ResNet-50, batch 1) {d['reference_ms']:.1f} ms")
    if d["side_by_side"]:
        each = ", ".join(f"{m} {r:.2f}x" for m, r in d["side_by_side"].items())
        lines.append(f"  two devices computing at once: each {d['host_slowdown']:.2f}x as "
                     f"slow (the median of {each}: two copies side by side against one)")
    lines.append("  took " + ", ".join(f"{stage} {seconds:.0f} s"
                                        for stage, seconds in d["stages"].items()))
    if d["plot"]:
        lines.append(f"  plot {d['plot']}")
    return "\n".join(lines)


def _plot_heldout(calibration: Calibration, path: str) -> None:
    """Each kind's held-out error: median and 90th percentile, on ops the fit never saw."""
    from matplotlib.figure import Figure

    from workloads.io import write_figure

    kinds = sorted(calibration.heldout, key=lambda k: calibration.heldout[k].median)
    fig = Figure(figsize=(7, max(3.0, 0.18 * len(kinds))))
    ax = fig.add_subplot()
    y = range(len(kinds))
    ax.barh(y, [calibration.heldout[k].p90 * 100 for k in kinds], color="#c7d7ea",
            label="90th percentile")
    ax.barh(y, [calibration.heldout[k].median * 100 for k in kinds], color="#2b6cb0",
            label="median")
    ax.set_yticks(list(y), kinds, fontsize=6)
    ax.set(xlabel="relative error on held-out ops (%)",
           title=f"calibration of {calibration.engine}: error on ops the fit never saw")
    ax.legend(fontsize=7)
    write_figure(fig, path)


def validation_graphs(models: list[str], files: list[str], batch: int) -> dict[str, Graph]:
    """Zoo models (``name`` or ``name:train`` for an SGD step) and graph files (JSON, or
    ONNX by suffix), by the label the report uses."""
    from workloads.graph import Graph
    from workloads.training import training_graph
    from workloads.zoo import build_model

    graphs: dict[str, Graph] = {}
    for spec in models:
        name, _, step = spec.partition(":")
        if step not in ("", "train"):
            raise PlacelabError(f"validate: --models entries are NAME or NAME:train, got "
                                f"{spec!r}")
        graph = build_model(name, batch=batch)
        graphs[spec] = training_graph(graph) if step else graph
    for path in files:
        if path.endswith(".onnx"):
            from workloads.importers import import_onnx

            graphs[path] = import_onnx(path)
        else:
            graphs[path] = Graph.load(path)
    return graphs


def cmd_validate(args: argparse.Namespace) -> None:
    from experiments.results import write_results
    from runtime.microbench import reference_seconds
    from runtime.validate import validate

    doc = _calibration_doc(args.device)
    devices = args.devices or _calibrated_devices(doc) or 2
    engine = make_engine(args.engine, devices, args.device)  # refuses where it cannot run
    graphs = validation_graphs(split(args.models, "models") if args.models else [],
                               args.graph or [], args.batch)
    if not graphs:
        raise PlacelabError("validate: expected --models or --graph, got neither")
    then = doc.run.reference_ms / 1e3 if doc is not None and doc.run else 0.0
    tables: list[pd.DataFrame] = []
    df = validate(engine, graphs, split(args.policies, "policies"), repeats=args.repeats,
                  warmup=args.warmup, progress=_progress(args, "running plans"),
                  min_seconds=args.min_seconds, rounds=args.rounds,
                  speed=(lambda: reference_seconds(engine) / then) if then else None,
                  on_ops=lambda graph, policy, table: tables.append(
                      table.assign(graph=graph, policy=policy)))
    ops = _op_rows(tables)
    if args.out:
        write_results(df, args.out)
    if args.ops:
        write_results(ops, args.ops)
    if args.plot:
        _plot_validation(df, args.plot)
    data = {"cluster": engine.cluster().name, "rows": df.to_dict(orient="records"),
            "median_abs_error": float(df["error"].abs().median()),
            "max_abs_error": float(df["error"].abs().max()), "out": args.out,
            "plot": args.plot,
            "machine_slower": None if not then else float(df["slower"].median()),
            "round_spread": float(df["round_spread"].median()), "ops": args.ops,
            "op_kinds": _op_kinds(ops)}
    emit(args, data, _validation_text(df, data))


def _op_rows(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Every run's ops measured against their predictions, graph and policy first."""
    import pandas as pd

    from runtime.validate import OP_COLUMNS

    columns = ["graph", "policy", *OP_COLUMNS]
    return pd.concat(tables, ignore_index=True)[columns] if tables else \
        pd.DataFrame(columns=columns)


def _op_kinds(ops: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per op kind, over every run: how many ops were measured and the median of their
    errors (signed), furthest off first."""
    kinds = ops.groupby("kind")["error"].agg(["size", "median"])
    kinds = kinds.reindex(kinds["median"].abs().sort_values(ascending=False,
                                                            kind="stable").index)
    return {str(k): {"ops": int(r["size"]), "median_error": float(r["median"])}
            for k, r in kinds.iterrows()}


def _calibration_doc(path: str | None) -> Any:
    """The calibration file, parsed (None without one)."""
    if not path:
        return None
    from hwmodels.toml_io import parse
    from workloads.errors import HardwareSpecError
    from workloads.io import read_text

    return parse(read_text(path, HardwareSpecError, "hardware file"), source=path)


def _calibrated_devices(doc: Any) -> int | None:
    """How many devices the calibration was made for (its cluster's)."""
    if doc is None or not doc.cluster:
        return None
    return len(doc.cluster[0].device)


def _validation_text(df: pd.DataFrame, data: dict[str, Any]) -> str:
    lines = [f"validation on {data['cluster']}: median |error| "
             f"{data['median_abs_error']:.1%}, worst {data['max_abs_error']:.1%}"
             + (f" (the machine ran {data['machine_slower']:.2f}x as slowly as at "
                f"calibration)" if data["machine_slower"] else "")
             + f"; a plan's turns differ by {data['round_spread']:.1%} (median)",
             f"  {'graph':<28} {'policy':<14} {'measured ms':>11} {'predicted ms':>12} "
             f"{'error':>7} {'op err':>7} {'mem err':>7} {'tau':>5}  predicted time from"]
    for r in df.itertuples():
        tau = "" if r.rank_tau is None or r.rank_tau != r.rank_tau else f"{r.rank_tau:5.2f}"
        lines.append(f"  {r.graph[-28:]:<28} {r.policy:<14} {r.measured_s * 1e3:11.2f} "
                     f"{r.predicted_s * 1e3:12.2f} {r.error:7.1%} "
                     f"{_pct(r.op_error_median)} {_pct(r.memory_error_max)} {tau:>5}  "
                     f"{_sources(r)}")
    kinds = list(data["op_kinds"].items())[:3]
    if kinds:
        lines.append("ops furthest off (median error by kind): " + ", ".join(
            f"{k} {v['median_error']:+.0%} ({v['ops']} op{'s' * (v['ops'] != 1)})"
            for k, v in kinds))
    for what in ("out", "ops", "plot"):
        if data[what]:
            lines.append(f"{what}: {data[what]}")
    return "\n".join(lines)


def _sources(row: Any) -> str:
    """Which sources priced the prediction: ``profile 80%, predictor 20%``."""
    from hwmodels.calibrated import SOURCES

    shares = [(name, getattr(row, f"from_{name.replace(' ', '_')}", 0.0)) for name in SOURCES]
    return ", ".join(f"{name} {share:.0%}" for name, share in shares if share >= 0.005)


def _pct(value: float | None) -> str:
    return f"{'-':>7}" if value is None or value != value else f"{value:7.1%}"


def _plot_validation(df: pd.DataFrame, path: str) -> None:
    from matplotlib.figure import Figure

    from workloads.io import write_figure

    fig = Figure(figsize=(6, 5))
    ax = fig.add_subplot()
    for policy, g in df.groupby("policy"):
        ax.scatter(g["measured_s"], g["predicted_s"], s=14, label=str(policy))
    low, high = df[["measured_s", "predicted_s"]].min().min(), \
        df[["measured_s", "predicted_s"]].max().max()
    ax.plot([low, high], [low, high], color="grey", linewidth=0.8)
    ax.set(xscale="log", yscale="log", xlabel="measured step (s)",
           ylabel="simulated step (s)", title=f"validation on {df['cluster'].iloc[0]}")
    ax.legend(fontsize=8)
    write_figure(fig, path)
