"""The commands that measure this machine: ``placelab calibrate`` and ``placelab validate``."""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from experiments.commands import emit, make_engine, split
from workloads.errors import PlacelabError

if TYPE_CHECKING:
    import pandas as pd

    from runtime.calibrate import Fit, KindFit
    from runtime.microbench import Sample
    from workloads.graph import Graph

__all__ = ["cmd_calibrate", "cmd_validate", "validation_graphs"]


def _progress(args: argparse.Namespace, what: str) -> Any:
    """A tqdm bar with ETA on stderr; off under ``--json`` and when stderr is no terminal."""
    from tqdm import tqdm

    def bar(items: Iterable[Any]) -> Iterable[Any]:
        items = list(items)
        return tqdm(items, desc=what, file=sys.stderr, leave=False,
                    disable=args.json or not sys.stderr.isatty())
    return bar


def cmd_calibrate(args: argparse.Namespace) -> None:
    from runtime.calibrate import (
        dispatch_seconds,
        fit_kinds,
        fit_link,
        fit_samples,
        last_level_cache_bytes,
        shape_table,
        write_calibration,
    )
    from runtime.hosts import median_slowdown, slowdown_of
    from runtime.microbench import (
        benchmark_cases,
        calibration_graphs,
        reference_seconds,
        time_copies,
        time_graphs,
        time_ops,
    )

    engine = make_engine(args.engine, args.devices)
    repeats = 3 if args.quick else 7
    cache = last_level_cache_bytes()
    samples = time_ops(engine, benchmark_cases(args.quick, cache), repeats=repeats,
                       progress=_progress(args, "timing ops"), cache_bytes=cache)
    copies = time_copies(engine, quick=args.quick, repeats=repeats)
    in_graphs, starts = time_graphs(engine, calibration_graphs(args.quick),
                                    repeats=3 if args.quick else 5,
                                    progress=_progress(args, "running models"),
                                    cache_bytes=cache)
    # hand-offs again, minutes later: a shared machine's wake-ups vary from one to the next
    copies += time_copies(engine, quick=args.quick, repeats=repeats)
    side_by_side = slowdown_of(engine, repeats=3 if args.quick else 5)
    slowdown = median_slowdown(side_by_side)
    shapes = shape_table(in_graphs)
    start = statistics.median(starts) if starts else 0.0
    reference = reference_seconds(engine)
    # the roofline fits ops as measured alone; weights evicted are the per-kind models'
    fit = fit_samples([s for s in samples if not s.features or not s.features[-1]],
                      buckets=3 if args.quick else 4)
    link = fit_link(copies)
    # per-kind models learn from ops alone and from ops inside whole models
    kinds = fit_kinds(samples + [s.sample for s in in_graphs if s.sample], cache_bytes=cache)
    dispatch = dispatch_seconds(samples)
    spec = engine.cluster().devices[0]
    path = write_calibration(args.out, engine_name=engine.name, model=spec.model,
                             devices=engine.devices, memory_bytes=spec.memory_bytes,
                             threads=getattr(engine, "threads", 1), fit=fit, link=link,
                             samples=len(samples) + len(copies), kinds=kinds,
                             link_dispatch_s=dispatch, shapes=shapes, start_s=start,
                             reference_s=reference,
                             host_slowdown=slowdown)
    if args.plot:
        _plot_fit(samples, fit, kinds, args.plot)
    data = {"out": str(path), "plot": args.plot, "samples": len(samples) + len(copies),
            "launch_overhead_us": fit.launch_s * 1e6, "dispatch_us": dispatch * 1e6,
            "peak_gflops": fit.peak_flops / 1e9,
            "memory_bandwidth_gbps": fit.bandwidth / 1e9, "fit": fit.quality,
            "not_fitted_within_10pct": fit.poorly_fitted,
            "kinds": {k: v.quality for k, v in kinds.items()},
            "signatures": len(shapes), "run_start_us": start * 1e6,
            "reference_ms": reference * 1e3, "side_by_side": side_by_side,
            "host_slowdown": slowdown,
            "link": None if link is None else {"bandwidth_gbps": link.bandwidth / 1e9,
                                               "latency_us": link.latency_s * 1e6,
                                               "fit": link.quality}}
    emit(args, data, _calibration_text(data))


def _calibration_text(d: dict[str, Any]) -> str:
    lines = [f"calibrated {d['samples']} measurements -> {d['out']}",
             f"  peak {d['peak_gflops']:.1f} GFLOP/s, memory {d['memory_bandwidth_gbps']:.1f} "
             f"GB/s, launch {d['launch_overhead_us']:.2f} us per op, executor dispatch "
             f"{d['dispatch_us']:.2f} us per op",
             "  fit error per op class (relative): median / 90th percentile"]
    for c, q in d["fit"].items():
        lines.append(f"    {c:<14} {q['median']:6.1%} / {q['p90']:6.1%}  ({q['samples']} ops)")
    if d["link"]:
        k = d["link"]
        lines.append(f"  link {k['bandwidth_gbps']:.1f} GB/s + {k['latency_us']:.1f} us "
                     f"(median error {k['fit']['median']:.1%})")
    if d["not_fitted_within_10pct"]:
        lines.append("  the roofline does not fit within 10%: "
                     + ", ".join(d["not_fitted_within_10pct"])
                     + "; per-kind models (FLOPs, bytes, windows, batched products, weights "
                       "from memory) instead:")
        for k, q in d["kinds"].items():
            lines.append(f"    {k:<26} {q['median']:6.1%} / {q['p90']:6.1%}  "
                         f"({q['samples']} ops)")
    lines.append(f"  {d['signatures']} op signatures timed inside whole zoo models at two "
                 f"batch sizes (interpolated in batch for ops of the same signature); "
                 f"{d['run_start_us']:.1f} us before a run's first op; reference graph "
                 f"(ResNet-50, batch 1) {d['reference_ms']:.1f} ms")
    if d["side_by_side"]:
        each = ", ".join(f"{m} {r:.2f}x" for m, r in d["side_by_side"].items())
        lines.append(f"  two devices computing at once: each {d['host_slowdown']:.2f}x as "
                     f"slow (the median of {each}: two copies side by side against one)")
    if d["plot"]:
        lines.append(f"  plot {d['plot']}")
    return "\n".join(lines)


def _plot_fit(samples: list[Sample], fit: Fit, kinds: dict[str, KindFit], path: str) -> None:
    """Measured against the model the cost model uses for each op: its kind's where
    calibration fitted one, the roofline otherwise."""
    from matplotlib.figure import Figure

    from workloads.io import write_figure

    ops = [s for s in samples if s.op_class not in ("copy", "dispatch")]
    fig = Figure(figsize=(6, 5))
    ax = fig.add_subplot()
    for c in sorted({s.op_class for s in ops}):
        mine = [s for s in ops if s.op_class == c]
        model = [kinds[s.kind].predict(s) if s.kind in kinds else fit.predict(s)
                 for s in mine]
        ax.scatter([s.seconds for s in mine], model, s=10, label=c)
    low = min(s.seconds for s in ops)
    high = max(s.seconds for s in ops)
    ax.plot([low, high], [low, high], color="grey", linewidth=0.8)
    ax.set(xscale="log", yscale="log", xlabel="measured (s)", ylabel="fitted model (s)",
           title="calibration: measured vs fitted")
    ax.legend(fontsize=8)
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
    from runtime.engine import NumpyEngine
    from runtime.microbench import reference_seconds
    from runtime.validate import validate

    if args.engine != "cpu":
        make_engine(args.engine, args.devices)  # refuses, saying why, without a GPU
        raise PlacelabError("validate: the gpu engine has no calibration reader yet; "
                            "expected --engine cpu")
    engine = NumpyEngine(devices=args.devices, calibration=args.device)
    graphs = validation_graphs(split(args.models, "models") if args.models else [],
                               args.graph or [], args.batch)
    if not graphs:
        raise PlacelabError("validate: expected --models or --graph, got neither")
    then = _reference_s(args.device)
    df = validate(engine, graphs, split(args.policies, "policies"), repeats=args.repeats,
                  warmup=args.warmup, progress=_progress(args, "running plans"),
                  min_seconds=args.min_seconds, rounds=args.rounds,
                  speed=(lambda: reference_seconds(engine) / then) if then else None)
    if args.out:
        write_results(df, args.out)
    if args.plot:
        _plot_validation(df, args.plot)
    data = {"cluster": engine.cluster().name, "rows": df.to_dict(orient="records"),
            "median_abs_error": float(df["error"].abs().median()),
            "max_abs_error": float(df["error"].abs().max()), "out": args.out,
            "plot": args.plot,
            "machine_slower": None if not then else float(df["slower"].median()),
            "round_spread": float(df["round_spread"].median())}
    emit(args, data, _validation_text(df, data))


def _reference_s(path: str | None) -> float:
    """The reference graph's time recorded at calibration (0 where none was)."""
    if not path:
        return 0.0
    from hwmodels.schema import HardwareDocument
    from workloads.errors import HardwareSpecError
    from workloads.io import read_text
    from workloads.schema import load_toml
    from workloads.schema import validate as check

    doc = check(HardwareDocument, load_toml(read_text(path, HardwareSpecError, "hardware file"),
                                            source=path, error=HardwareSpecError),
                source=path, error=HardwareSpecError)
    return doc.run.reference_ms / 1e3 if doc.run else 0.0


def _validation_text(df: pd.DataFrame, data: dict[str, Any]) -> str:
    lines = [f"validation on {data['cluster']}: median |error| "
             f"{data['median_abs_error']:.1%}, worst {data['max_abs_error']:.1%}"
             + (f" (the machine ran {data['machine_slower']:.2f}x as slowly as at "
                f"calibration)" if data["machine_slower"] else "")
             + f"; a plan's turns differ by {data['round_spread']:.1%} (median)",
             f"  {'graph':<28} {'policy':<14} {'measured ms':>11} {'predicted ms':>12} "
             f"{'error':>7} {'op err':>7} {'mem err':>7} {'tau':>5}"]
    for r in df.itertuples():
        tau = "" if r.rank_tau is None or r.rank_tau != r.rank_tau else f"{r.rank_tau:5.2f}"
        lines.append(f"  {r.graph[-28:]:<28} {r.policy:<14} {r.measured_s * 1e3:11.2f} "
                     f"{r.predicted_s * 1e3:12.2f} {r.error:7.1%} "
                     f"{_pct(r.op_error_median)} {_pct(r.memory_error_max)} {tau}")
    for what in ("out", "plot"):
        if data[what]:
            lines.append(f"{what}: {data[what]}")
    return "\n".join(lines)


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
