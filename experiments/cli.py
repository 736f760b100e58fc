"""The ``placelab`` command line. Every command with ``--json`` prints one JSON object.

Bad input (an unknown name, a malformed file, a bad flag) prints one line on stderr and exits
with status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from sim.options import ORDERS
from workloads.errors import PlacelabError
from workloads.io import STDOUT
from workloads.training import OPTIMIZERS

if TYPE_CHECKING:
    from workloads.graph import Graph

# Each command imports what it needs when it runs, so that ``--help`` and ``list`` stay fast.

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """argparse that reports misuse in one line and exits 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"placelab: error: {message} (see --help)\n")
        raise SystemExit(2)


def _emit(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    print(dumps_json(data) if args.json else text)


def dumps_json(data: Any) -> str:
    """Strict JSON: numpy scalars as numbers, NaN and infinity as null (every row that
    lacks a number says why in its ``reason``)."""
    return json.dumps(_finite(data), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _split(value: str, what: str = "value") -> list[str]:
    """A comma-separated list of names: none empty, none twice."""
    names = [v.strip() for v in value.split(",")]
    if not value.strip() or any(not n for n in names):
        raise PlacelabError(f"--{what}: expected comma-separated names, got {value!r}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise PlacelabError(f"--{what}: expected each name once, got {twice[0]!r} twice")
    return names


_FIGURE = (".png", ".svg", ".pdf")
#: Output files by command and option, checked before any work starts.
_FORMATS: dict[str, dict[str, tuple[str, ...]]] = {
    "compare": {"plot": _FIGURE, "out": (".parquet", ".csv")},
    "simulate": {"gantt": _FIGURE, "trace": (".json",)},
    "run": {"trace": (".json",)},
    "model": {"save": (".json",)},
}


def _check_outputs(args: argparse.Namespace) -> None:
    for option, suffixes in _FORMATS.get(args.command, {}).items():
        path = getattr(args, option, None)
        if not path or (path == STDOUT and option in ("trace", "save")):
            continue
        if path == STDOUT and args.json:
            raise PlacelabError(f"--{option} -: standard output already carries --json")
        if path != STDOUT and Path(path).suffix.lower() not in suffixes:
            raise PlacelabError(f"--{option} {path}: expected a file ending in "
                                f"{', '.join(suffixes)}, got {Path(path).suffix or 'none'!r}")


# -- commands -------------------------------------------------------------------------------


def _cmd_list(args: argparse.Namespace) -> None:
    from hwmodels.registry import list_clusters, list_devices
    from policies.base import POLICIES
    from workloads.zoo import list_models

    listing: dict[str, Callable[[], list[str]]] = {
        "models": list_models, "devices": list_devices, "clusters": list_clusters,
        "policies": POLICIES.names,
    }
    items = listing[args.what]()
    _emit(args, {args.what: items}, "\n".join(items))


def _load_graph(args: argparse.Namespace) -> Graph:
    from workloads.graph import Graph
    from workloads.passes import PassManager
    from workloads.training import training_graph
    from workloads.zoo import build_model

    if getattr(args, "graph", None):
        graph = Graph.load(args.graph)
    else:
        graph = build_model(args.model, batch=args.batch, seq_len=args.seq_len)
    if args.train:
        graph = training_graph(graph, args.optimizer)
    if getattr(args, "passes", None):
        graph, _ = PassManager(_split(args.passes, "passes")).run(graph)
    return graph


def _cmd_model_show(args: argparse.Namespace) -> None:
    args.model, args.graph = args.name, None
    summary = _load_graph(args).summary()
    summary.update(batch=args.batch, train=args.train,
                   optimizer=args.optimizer if args.train else None)
    text = "\n".join(f"{k:>17}: {v:,}" if type(v) is int else f"{k:>17}: {v}"
                     for k, v in summary.items())
    _emit(args, summary, text)


def _cmd_model_import(args: argparse.Namespace) -> None:
    from workloads.importers import import_onnx
    from workloads.io import write_text_atomic

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graph = import_onnx(args.file, batch=args.batch)
    notes = [str(w.message) for w in caught]
    for note in notes:
        sys.stderr.write(f"placelab: warning: {note}\n")
    summary = {**graph.summary(), "batch": args.batch, "warnings": notes}
    if args.save:
        write_text_atomic(args.save, graph.to_json())
        summary["saved"] = args.save
    text = "\n".join(f"{k:>17}: {v:,}" if type(v) is int else f"{k:>17}: {v}"
                     for k, v in summary.items() if k != "warnings")
    _emit(args, summary, text)


def _cmd_hw_list(args: argparse.Namespace) -> None:
    from hwmodels.registry import get_cluster, get_device, list_clusters, list_devices, source_of

    rows = [{"type": "device", "name": n, "kind": get_device(n).kind,
             "source": source_of("device", n)} for n in list_devices()]
    rows += [{"type": "cluster", "name": n, "kind": f"{len(get_cluster(n).devices)} devices",
              "source": source_of("cluster", n)} for n in list_clusters()]
    text = "\n".join(f"{r['type']:<8} {r['name']:<22} {r['kind']:<11} {r['source']}"
                     for r in rows)
    _emit(args, {"hardware": rows}, text)


def _cmd_hw_show(args: argparse.Namespace) -> None:
    from hwmodels.registry import get_cluster, get_device, list_devices, source_of
    from hwmodels.toml_io import cluster_table, device_table, dumps

    if args.name in list_devices():
        device = get_device(args.name)
        data = {"type": "device", **device_table(device)}
        text = dumps(devices=[device])
    else:
        cluster = get_cluster(args.name)
        data = {"type": "cluster", **cluster_table(cluster)}
        text = dumps(clusters=[cluster])
    data["source"] = source_of(data["type"], args.name)
    _emit(args, data, text.rstrip())


def _cmd_hw_register(args: argparse.Namespace) -> None:
    from hwmodels.registry import list_clusters, list_devices, register_file

    before_d, before_c = set(list_devices()), set(list_clusters())
    stored = register_file(args.file)
    devices = sorted(set(list_devices()) - before_d)
    clusters = sorted(set(list_clusters()) - before_c)
    text = (f"registered devices: {', '.join(devices) or '-'}; clusters: "
            f"{', '.join(clusters) or '-'}\nstored in {stored}")
    _emit(args, {"devices": devices, "clusters": clusters, "stored": str(stored)}, text)


def _cmd_hw_remove(args: argparse.Namespace) -> None:
    from hwmodels.registry import remove

    path, devices, clusters = remove(args.name)
    text = (f"removed devices: {', '.join(devices) or '-'}; clusters: "
            f"{', '.join(clusters) or '-'}\ndeleted {path}")
    _emit(args, {"devices": devices, "clusters": clusters, "removed": str(path)}, text)


def _cmd_simulate(args: argparse.Namespace) -> None:
    from hwmodels.cost import make_cost_model
    from hwmodels.registry import get_cluster
    from policies.base import POLICIES, plan
    from policies.bounds import lower_bound
    from sim.engine import simulate

    if not args.model and not args.graph:
        raise PlacelabError("simulate: expected --model NAME or --graph FILE, got neither")
    graph = _load_graph(args)
    cluster = get_cluster(args.cluster)
    POLICIES.get(args.policy)
    cost = make_cost_model(args.cost, cluster, args.cost_file)
    p = plan(graph, cluster, args.policy, cost)
    result = simulate(p, cluster, cost, order=args.order)
    if args.trace:
        result.write_chrome_trace(args.trace)
    if args.gantt:
        result.write_gantt(args.gantt, title=f"{graph.name} on {cluster.name}, {args.policy}")
    bound = lower_bound(graph, cluster, cost)
    data = {"model": graph.name, "batch": args.batch if not args.graph else None,
            "cluster": cluster.name, "policy": args.policy, "cost_model": args.cost,
            "order": args.order, "placement_s": p.placement_s, "lower_bound_s": bound,
            "makespan_over_bound": result.makespan_s / bound if bound > 0 else None,
            **result.summary()}
    lines = [f"{graph.name} on {cluster.name} with {args.policy}:",
             f"  makespan     {result.makespan_s * 1e3:.3f} ms"
             + (f"  ({result.makespan_s / bound:.2f}x the lower bound "
                f"{bound * 1e3:.3f} ms)" if bound > 0 else ""),
             f"  feasible     {result.feasible}" + (f" ({result.reason})" if result.reason
                                                     else ""),
             f"  transfers    {result.transfer_bytes / 1e6:.1f} MB",
             f"  placement    {p.placement_s * 1e3:.1f} ms of policy time"]
    for d in cluster.device_names:
        lines.append(f"  {d:<12} util {result.utilization[d]:6.1%}   peak memory "
                     f"{result.peak_memory_bytes[d] / 1e9:7.3f} GB")
    lines += [f"  {what:<12} {path}" for what, path in (("trace", args.trace),
                                                         ("gantt", args.gantt)) if path]
    _emit(args, data, "\n".join(lines))


def _engine(kind: str, devices: int) -> Any:
    from runtime.cupy_engine import CupyEngine
    from runtime.engine import NumpyEngine

    return NumpyEngine(devices=devices) if kind == "cpu" else CupyEngine(devices=devices)


def _cmd_run(args: argparse.Namespace) -> None:
    from hwmodels.cost import RooflineCost
    from policies.base import POLICIES, plan
    from runtime.executor import execute
    from sim.engine import simulate

    if not args.model and not args.graph:
        raise PlacelabError("run: expected --model NAME or --graph FILE, got neither")
    if args.train:
        raise PlacelabError("run: --train needs backward kernels, which the runtime does "
                            "not have yet; expected a forward graph")
    graph = _load_graph(args)
    POLICIES.get(args.policy)
    engine = _engine(args.engine, args.devices)
    cluster = engine.cluster()
    cost = RooflineCost(cluster)
    p = plan(graph, cluster, args.policy, cost)
    measured = execute(p, engine, warmup=args.warmup, repeats=args.repeats, seed=args.seed)
    predicted = simulate(p, cluster, cost)
    if args.trace:
        measured.write_chrome_trace(args.trace)
    low, high = measured.spread_s
    data = {"model": graph.name, "batch": args.batch if not args.graph else None,
            "engine": args.engine, "devices": list(engine.devices), "policy": args.policy,
            "makespan_s": measured.makespan_s, "makespan_min_s": low, "makespan_max_s": high,
            "repeats": args.repeats, "peak_memory_bytes": measured.peak_memory_bytes,
            "predicted_makespan_s": predicted.makespan_s,
            "predicted_peak_memory_bytes": predicted.peak_memory_bytes,
            "cost_model": "roofline (uncalibrated)", "transfer_bytes": p.transfer_bytes}
    lines = [f"{graph.name} on {engine.name} x{len(engine.devices)} with {args.policy} "
             f"({args.repeats} repeats):",
             f"  measured     {measured.makespan_s * 1e3:.3f} ms  (spread {low * 1e3:.3f} - "
             f"{high * 1e3:.3f} ms)",
             f"  predicted    {predicted.makespan_s * 1e3:.3f} ms  (uncalibrated roofline; "
             f"placelab calibrate measures this machine)",
             f"  transfers    {p.transfer_bytes / 1e6:.1f} MB"]
    for d in engine.devices:
        lines.append(f"  {d:<12} peak memory measured {measured.peak_memory_bytes[d] / 1e6:9.1f}"
                     f" MB, simulated {predicted.peak_memory_bytes[d] / 1e6:9.1f} MB")
    if args.trace:
        lines.append(f"  trace        {args.trace}")
    _emit(args, data, "\n".join(lines))


def _cmd_compare(args: argparse.Namespace) -> None:
    from experiments.comparison import compare
    from experiments.results import format_table, plot_compare, write_results

    policies = "all" if args.policies == "all" else _split(args.policies, "policies")
    df = compare(_split(args.model, "model"), _split(args.cluster, "cluster"), policies,
                 batch=args.batch, cost=args.cost, train=args.train, optimizer=args.optimizer,
                 passes=_split(args.passes, "passes") if args.passes else ())
    if args.out:
        write_results(df, args.out)
    if args.plot:
        plot_compare(df, args.plot)
    data = {"rows": df.to_dict(orient="records"), "out": args.out, "plot": args.plot}
    text = format_table(df) + "".join(
        f"\n{what}: {path}" for what, path in (("results", args.out), ("plot", args.plot))
        if path)
    _emit(args, data, text)


def _cmd_demo(args: argparse.Namespace) -> None:
    from experiments.demo import run_demo

    report = run_demo(Path(args.out), echo=None if args.json else print)
    if args.json:
        print(dumps_json(report))


# -- parser ---------------------------------------------------------------------------------


def _add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _add_workload(p: argparse.ArgumentParser, *, seq_len: bool = True) -> None:
    p.add_argument("--batch", type=_positive_int, default=1)
    if seq_len:
        p.add_argument("--seq-len", type=_positive_int, default=None,
                       help="tokens per sequence (sequence models)")
    p.add_argument("--train", action="store_true",
                   help="a whole training step: forward, loss, backward, weight update")
    p.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="sgd",
                   help="optimizer of the training step (default: sgd)")
    p.add_argument("--passes", help="optimizer passes to run first, comma-separated "
                   "(cse, dce, fuse_elementwise)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="placelab", description="Place deep-learning graphs on hardware, "
                     "simulate the plans, compare the policies.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("list", help="list models, devices, clusters or policies")
    p.add_argument("what", choices=("models", "devices", "clusters", "policies"))
    _add_json(p)
    p.set_defaults(func=_cmd_list)

    _add_model_commands(sub)
    _add_hw_commands(sub)
    _add_run_commands(sub)
    return parser


def _add_model_commands(sub: Any) -> None:
    model = sub.add_parser("model", help="inspect zoo models")
    msub = model.add_subparsers(dest="model_command", required=True, parser_class=_Parser)
    p = msub.add_parser("show", help="ops, parameters, FLOPs and bytes of a zoo model")
    p.add_argument("name")
    _add_workload(p)
    _add_json(p)
    p.set_defaults(func=_cmd_model_show)

    p = msub.add_parser("import", help="the same summary for an ONNX model")
    p.add_argument("file")
    p.add_argument("--batch", type=_positive_int, default=1,
                   help="value of symbolic (batch) dimensions")
    p.add_argument("--save", help="also write the imported graph as JSON (for --graph)")
    _add_json(p)
    p.set_defaults(func=_cmd_model_import)


def _add_hw_commands(sub: Any) -> None:
    hw = sub.add_parser("hw", help="the hardware catalog: list, show, register")
    hsub = hw.add_subparsers(dest="hw_command", required=True, parser_class=_Parser)
    p = hsub.add_parser("list", help="every registered device and cluster, with its source")
    _add_json(p)
    p.set_defaults(func=_cmd_hw_list)
    p = hsub.add_parser("show", help="one device or cluster, in the TOML format")
    p.add_argument("name")
    _add_json(p)
    p.set_defaults(func=_cmd_hw_show)
    p = hsub.add_parser("register", help="validate a hardware TOML file and store it in "
                        "the user catalog ($PLACELAB_HOME/hardware)")
    p.add_argument("file")
    _add_json(p)
    p.set_defaults(func=_cmd_hw_register)
    p = hsub.add_parser("remove", help="undo a registration: delete the user file that "
                        "defines a device or cluster")
    p.add_argument("name")
    _add_json(p)
    p.set_defaults(func=_cmd_hw_remove)


def _add_run_commands(sub: Any) -> None:
    p = sub.add_parser("simulate", help="place one graph with one policy and simulate it")
    p.add_argument("--model", help="zoo model name")
    p.add_argument("--graph", help="graph JSON file (Graph.to_json)")
    p.add_argument("--cluster", required=True)
    p.add_argument("--policy", required=True)
    p.add_argument("--cost", default="roofline",
                   help="cost model: roofline (default), table, calibrated")
    p.add_argument("--cost-file", help="the table or calibration file the cost model reads")
    _add_workload(p)
    p.add_argument("--order", choices=ORDERS, default="plan",
                   help="plan: devices follow the plan's order; priority: each device "
                        "starts its highest-priority ready op")
    p.add_argument("--trace", help="write a Chrome-trace JSON here")
    p.add_argument("--gantt", help="write a Gantt chart (.png or .svg) here")
    _add_json(p)
    p.set_defaults(func=_cmd_simulate)

    p = sub.add_parser("run", help="run a plan for real and print it beside the simulator's "
                       "prediction")
    p.add_argument("--model", help="zoo model name")
    p.add_argument("--graph", help="graph JSON file (Graph.to_json)")
    p.add_argument("--policy", required=True)
    p.add_argument("--devices", type=_positive_int, default=1,
                   help="logical devices (cpu: shares of this machine's cores; gpu: GPUs)")
    p.add_argument("--engine", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--repeats", type=_positive_int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and inputs")
    _add_workload(p)
    p.add_argument("--trace", help="write the measured Chrome-trace JSON here")
    _add_json(p)
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("compare", help="compare policies on models and clusters")
    p.add_argument("--model", required=True, help="zoo model name(s), comma-separated")
    p.add_argument("--cluster", required=True, help="cluster name(s), comma-separated")
    p.add_argument("--policies", default="all", help="comma-separated names, or all")
    p.add_argument("--cost", default="roofline")
    _add_workload(p, seq_len=False)
    p.add_argument("--out", help="results table (.parquet, or .csv)")
    p.add_argument("--plot", help="bar chart (.png or .svg)")
    _add_json(p)
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser("demo", help="the main job: a placement study with table and plot")
    p.add_argument("--out", default="placelab-demo", help="output folder")
    _add_json(p)
    p.set_defaults(func=_cmd_demo)


def _one_line_warning(message: Warning | str, category: type[Warning], filename: str,
                      lineno: int, file: Any = None, line: str | None = None) -> None:
    sys.stderr.write(f"placelab: warning: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``placelab`` console script."""
    warnings.showwarning = _one_line_warning
    try:
        args = build_parser().parse_args(argv)
        _check_outputs(args)
        args.func(args)
    except KeyboardInterrupt:
        sys.stderr.write("placelab: interrupted\n")
        return 130
    except PlacelabError as err:
        sys.stderr.write(f"placelab: error: {' '.join(str(err).splitlines())}\n")
        return 2
    except OSError as err:
        where = f" {err.filename!r}" if err.filename else ""
        sys.stderr.write(f"placelab: error: cannot write or read{where}: {err.strerror}\n")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
