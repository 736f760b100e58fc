"""The ``placelab`` commands: each takes the parsed arguments, does its work and prints one
result (one JSON object with ``--json``). Each imports what it needs when it runs, so that
``--help`` and ``list`` stay fast.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workloads.errors import PlacelabError
from workloads.io import STDOUT

if TYPE_CHECKING:
    from workloads.graph import Graph

__all__ = ["FORMATS", "check_outputs", "dumps_json"]


def emit(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    print(dumps_json(data) if args.json else text)


def dumps_json(data: Any) -> str:
    """Strict JSON: numpy scalars as numbers, NaN and infinity as null (every row that
    lacks a number says why in its ``reason``)."""
    return json.dumps(finite(data), allow_nan=False)


def finite(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def split(value: str, what: str = "value", parts: list[str] | None = None) -> list[str]:
    """A comma-separated list of names (or ``parts`` already cut from ``value``): none
    empty, none twice."""
    names = [v.strip() for v in (value.split(",") if parts is None else parts)]
    if not value.strip() or any(not n for n in names):
        raise PlacelabError(f"--{what}: expected comma-separated names, got {value!r}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise PlacelabError(f"--{what}: expected each name once, got {twice[0]!r} twice")
    return names


def pass_specs(value: str) -> list[str]:
    """``--passes cse,train:optimizer=adam,colocate=ops`` as one spec per pass."""
    from workloads.params import split_specs

    return split(value, "passes", split_specs(value))


FIGURE = (".png", ".svg", ".pdf")
#: Output files by command and option, checked before any work starts.
FORMATS: dict[str, dict[str, tuple[str, ...]]] = {
    "compare": {"plot": FIGURE, "out": (".parquet", ".csv")},
    "simulate": {"gantt": FIGURE, "trace": (".json",)},
    "run": {"trace": (".json",)},
    "calibrate": {"out": (".toml",), "plot": FIGURE},
    "validate": {"out": (".parquet", ".csv"), "ops": (".parquet", ".csv"), "plot": FIGURE},
    "model": {"save": (".json",)},
}


def check_outputs(args: argparse.Namespace) -> None:
    taken = "json" if args.json else ""  # what standard output carries already
    for option, suffixes in FORMATS.get(args.command, {}).items():
        path = getattr(args, option, None)
        if not path or (path == STDOUT and option in ("trace", "save")):
            continue
        if path == STDOUT and taken:
            raise PlacelabError(f"--{option} -: standard output already carries --{taken}")
        if path == STDOUT:
            taken = option
        if path != STDOUT and Path(path).suffix.lower() not in suffixes:
            raise PlacelabError(f"--{option} {path}: expected a file ending in "
                                f"{', '.join(suffixes)}, got {Path(path).suffix or 'none'!r}")


# -- commands -------------------------------------------------------------------------------


def _registries() -> dict[str, Any]:
    """The plug-in registries ``placelab list`` shows, with their parameters on request."""
    from hwmodels.cost import COST_MODELS
    from policies.base import POLICIES
    from runtime.engine import ENGINES
    from sim.options import LINK_REGISTRY, ORDER_REGISTRY
    from sim.sharing import SHARING
    from workloads.passes import PASSES

    return {"policies": POLICIES, "sharing": SHARING, "passes": PASSES, "engines": ENGINES,
            "link-models": LINK_REGISTRY, "issue-orders": ORDER_REGISTRY,
            "cost-models": COST_MODELS}


def cmd_list(args: argparse.Namespace) -> None:
    from hwmodels.registry import list_clusters, list_devices
    from workloads.zoo import list_models

    registries = _registries()
    listing: dict[str, Callable[[], list[str]]] = {
        "models": list_models, "devices": list_devices, "clusters": list_clusters,
        **{what: registry.names for what, registry in registries.items()},
    }
    if args.params and args.what not in registries:
        raise PlacelabError(f"list {args.what}: --params lists the parameters of "
                            f"{', '.join(registries)}; {args.what} have none")
    items = listing[args.what]()
    if args.what in registries and args.params:
        params = _plugin_params(registries[args.what], items)
        emit(args, {args.what: items, "params": params}, "\n".join(_param_lines(params)))
        return
    emit(args, {args.what: items}, "\n".join(items))


def _plugin_params(registry: Any, names: list[str]) -> dict[str, list[dict[str, Any]]]:
    return {name: [{"name": p.name, "kind": p.kind, "default": p.default,
                    "valid": p.describe(), "doc": p.doc}
                   for p in registry.get(name).params] for name in names}


def _param_lines(params: dict[str, list[dict[str, Any]]]) -> list[str]:
    lines = []
    for name, declared in params.items():
        lines.append(name)
        lines += [f"  {p['name']} = {p['default']!r}: {p['valid']}"
                  + (f" ({p['doc']})" if p["doc"] else "") for p in declared]
    return lines


def load_graph(args: argparse.Namespace) -> Graph:
    from workloads.graph import Graph
    from workloads.passes import PassManager
    from workloads.training import training_graph
    from workloads.zoo import build_model

    if getattr(args, "graph", None):
        graph = Graph.load(args.graph)
    else:
        graph = build_model(args.model, batch=args.batch, seq_len=args.seq_len)
    if args.train:
        graph = training_graph(graph, args.optimizer, colocate=args.colocate)
    if getattr(args, "passes", None):
        graph, _ = PassManager(pass_specs(args.passes)).run(graph)
    return graph


def cmd_model_show(args: argparse.Namespace) -> None:
    graph = load_graph(argparse.Namespace(**{**vars(args), "model": args.name, "graph": None}))
    summary = graph.summary()
    step = str(graph.meta.get("step", "forward"))  # the graph says what it is
    summary.update(batch=graph.meta.get("batch", args.batch), train=step != "forward",
                   optimizer=step.partition(".")[2] or None)
    text = "\n".join(f"{k:>17}: {v:,}" if type(v) is int else f"{k:>17}: {v}"
                     for k, v in summary.items())
    emit(args, summary, text)


def _dims(items: list[str]) -> dict[str, int]:
    """``--dim name=N`` options as a mapping (N an integer >= 1)."""
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name or not value.isdigit() or int(value) < 1:
            raise PlacelabError(f"model import: --dim must be NAME=N with N an integer >= 1, "
                                f"got {item!r}")
        out[name] = int(value)
    return out


def cmd_model_import(args: argparse.Namespace) -> None:
    from workloads.importers import import_onnx
    from workloads.io import write_text_atomic

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graph = import_onnx(args.file, batch=args.batch, dims=_dims(args.dim),
                            strict=args.strict)
    notes = [str(w.message) for w in caught]
    for note in notes:
        sys.stderr.write(f"placelab: warning: {note}\n")
    summary = {**graph.summary(), "batch": args.batch, "warnings": notes}
    if args.save:
        write_text_atomic(args.save, graph.to_json())
        summary["saved"] = args.save
    text = "\n".join(f"{k:>17}: {v:,}" if type(v) is int else f"{k:>17}: {v}"
                     for k, v in summary.items() if k != "warnings")
    emit(args, summary, text)


def cmd_hw_list(args: argparse.Namespace) -> None:
    from hwmodels.registry import get_cluster, get_device, list_clusters, list_devices, source_of

    rows = [{"type": "device", "name": n, "kind": get_device(n).kind,
             "source": source_of("device", n)} for n in list_devices()]
    rows += [{"type": "cluster", "name": n, "kind": f"{len(get_cluster(n).devices)} devices",
              "source": source_of("cluster", n)} for n in list_clusters()]
    text = "\n".join(f"{r['type']:<8} {r['name']:<22} {r['kind']:<11} {r['source']}"
                     for r in rows)
    emit(args, {"hardware": rows}, text)


def cmd_hw_show(args: argparse.Namespace) -> None:
    from hwmodels.registry import get_cluster, get_device, list_devices, source_of
    from hwmodels.toml_io import cluster_table, device_table, dumps

    if args.name in list_devices():
        from hwmodels.gpucheck import uncertainty

        device = get_device(args.name)
        data = {"type": "device", **device_table(device)}
        text = dumps(devices=[device])
        if device.gpu is not None:
            u = uncertainty(device)
            data["uncertainty"] = {"basis": u.basis, "median": u.median, "p90": u.p90,
                                   "fitted_on_it": u.fitted_on_it} if u else None
            text += f"# {_uncertainty_line(u)}\n"
    else:
        cluster = get_cluster(args.name)
        data = {"type": "cluster", **cluster_table(cluster)}
        text = dumps(clusters=[cluster])
    data["source"] = source_of(data["type"], args.name)
    emit(args, data, text.rstrip())


def cmd_hw_check(args: argparse.Namespace) -> None:
    from dataclasses import asdict

    from hwmodels.gpucheck import check_device
    from hwmodels.registry import get_device

    report = check_device(get_device(args.name))
    lines = [f"{report['device']} ({report['role']}; GPU model fitted on "
             f"NeuSight's training GPUs only)"]
    kernels, labels, u = report["kernels"], report["labels"], report["uncertainty"]
    if kernels:
        lines += ["kernels (NeuSight), |error| median / p90:",
                  f"  {'family':<12} {'n':>5}  {'roofline':>15}  {'GPU model':>15}"]
        lines += [f"  {k.family:<12} {k.samples:>5}  {100 * k.roofline_median:6.1f}% / "
                  f"{100 * k.roofline_p90:5.1f}%  {100 * k.model_median:6.1f}% / "
                  f"{100 * k.model_p90:5.1f}%" for k in kernels]  # type: ignore[attr-defined]
    if labels:
        lines += ["end to end (NeuSight labels), predicted vs measured:"]
        lines += [f"  {x.model:<11} {x.mode:<5} batch {x.batch:<3} {1e3 * x.measured_s:9.1f} ms "
                  f"{1e3 * x.predicted_s:9.1f} ms {100 * x.error:+6.1f}%"
                  for x in labels]  # type: ignore[attr-defined]
    lines.append(_uncertainty_line(u))
    data = {**{k: v for k, v in report.items() if k not in ("kernels", "labels", "uncertainty")},
            "kernels": [asdict(k) for k in kernels],  # type: ignore[attr-defined]
            "labels": [{**asdict(x), "error": x.error} for x in labels],  # type: ignore[attr-defined]
            "uncertainty": asdict(u) if u is not None else None}  # type: ignore[call-overload]
    emit(args, data, "\n".join(lines))


def _uncertainty_line(u: Any) -> str:
    if u is None:
        return ("stated uncertainty: none measured (no gpu table: priced by the roofline, "
                "which no published measurement checks)")
    where = ("on itself, a GPU the model was fitted on" if u.fitted_on_it else
             f"on {u.basis}, a GPU the model never saw")
    return (f"stated uncertainty of its kernel times: {100 * u.median:.1f}% median, "
            f"{100 * u.p90:.1f}% p90 (measured {where})")


def cmd_hw_register(args: argparse.Namespace) -> None:
    from hwmodels.registry import list_clusters, list_devices, register_file

    before_d, before_c = set(list_devices()), set(list_clusters())
    stored = register_file(args.file)
    devices = sorted(set(list_devices()) - before_d)
    clusters = sorted(set(list_clusters()) - before_c)
    text = (f"registered devices: {', '.join(devices) or '-'}; clusters: "
            f"{', '.join(clusters) or '-'}\nstored in {stored}")
    emit(args, {"devices": devices, "clusters": clusters, "stored": str(stored)}, text)


def cmd_hw_remove(args: argparse.Namespace) -> None:
    from hwmodels.registry import remove

    path, devices, clusters = remove(args.name)
    text = (f"removed devices: {', '.join(devices) or '-'}; clusters: "
            f"{', '.join(clusters) or '-'}\ndeleted {path}")
    emit(args, {"devices": devices, "clusters": clusters, "removed": str(path)}, text)


def cmd_simulate(args: argparse.Namespace) -> None:
    from hwmodels.cost import make_cost_model
    from hwmodels.registry import get_cluster

    if not args.model and not args.graph:
        raise PlacelabError("simulate: expected --model NAME or --graph FILE, got neither")
    parallel = [flag for flag, value in (("--dp", args.dp), ("--pp", args.pp),
                                         ("--tp", args.tp)) if value is not None]
    if bool(args.policy) == bool(parallel):
        raise PlacelabError("simulate: expected --policy NAME or the parallel transforms "
                            "(--dp N, --pp S, --tp T), got "
                            + (" and ".join(["--policy"] * bool(args.policy) + parallel)
                               or "none"))
    if args.pp is None and (args.microbatches or args.schedule != "1f1b"):
        raise PlacelabError("simulate: --microbatches and --schedule need --pp S, got no --pp")
    if not (math.isfinite(args.bucket_mb) and args.bucket_mb > 0):
        raise PlacelabError(f"simulate: --bucket-mb must be a finite number > 0, got "
                            f"{args.bucket_mb}")
    cluster = get_cluster(args.cluster)
    cost = make_cost_model(args.cost, cluster, args.cost_file)
    how = _parallel if parallel else _placed
    graph, p, result, rounds, order, bound = how(args, cluster, cost)
    policy = args.policy or p.policy
    if args.trace:
        result.write_chrome_trace(args.trace)
    if args.gantt:
        result.write_gantt(args.gantt, title=f"{graph.name} on {cluster.name}, {policy}")
    data = {"model": graph.name, "batch": args.batch if not args.graph else None,
            "cluster": cluster.name, "policy": policy, "cost_model": args.cost,
            "order": order, "links": args.links, "placement_s": p.placement_s,
            **({k: p.info.get(k, 1) for k in ("dp", "pp", "tp")} if parallel else {}),
            "lower_bound_s": bound,
            "makespan_over_bound": result.makespan_s / bound if bound > 0 else None,
            **result.summary(), "repair_rounds": rounds,
            **({"search": {k: p.info[k] for k in _SEARCH_INFO}} if "score_s" in p.info
               else {})}
    lines = [f"{graph.name} on {cluster.name} with {policy}:",
             f"  makespan     {result.makespan_s * 1e3:.3f} ms"
             + (f"  ({result.makespan_s / bound:.2f}x the lower bound "
                f"{bound * 1e3:.3f} ms)" if bound > 0 else ""),
             f"  feasible     {result.feasible}" + (f" ({result.reason})" if result.reason
                                                     else ""),
             f"  transfers    {result.transfer_bytes / 1e6:.1f} MB"
             + (f" ({result.collective_bytes / 1e6:.1f} MB in collectives)"
                if result.collective_bytes else ""),
             f"  placement    {p.placement_s * 1e3:.1f} ms of policy time",
             *_search_line(p.info),
             "  op times     " + ", ".join(
                 f"{share['share']:.0%} from the {name} ({share['ops']:.0f} ops)"
                 for name, share in result.cost_sources.items())]
    for d in cluster.device_names:
        lines.append(f"  {d:<12} util {result.utilization[d]:6.1%}   peak memory "
                     f"{result.peak_memory_bytes[d] / 1e9:7.3f} GB")
    lines += [f"  repair {r['round']}     " + (f"refused: {r['refused']}" if "refused" in r
                                                 else f"over by {r['over_bytes'] or 'nothing'}")
              for r in rounds]
    lines += [f"  {what:<12} {path}" for what, path in (("trace", args.trace),
                                                         ("gantt", args.gantt)) if path]
    emit(args, data, "\n".join(lines))


def _placed(args: argparse.Namespace, cluster: Any, cost: Any) -> tuple[Any, ...]:
    """The graph placed by ``--policy`` and simulated: the run a sweep's cell is
    (:func:`experiments.runspec.simulate_spec`), or with ``--repair`` rounds; and the
    lower bound of its step."""
    from policies.base import make_policy
    from policies.bounds import lower_bound

    order = args.order or "plan"
    make_policy(args.policy)
    if args.repair:
        from sim.repair import repair

        graph = load_graph(args)
        repaired = repair(graph, cluster, args.policy, cost, rounds=args.repair,
                          links=args.links, order=order)
        return (graph, repaired.plan, repaired.result, repaired.rounds, order,
                lower_bound(graph, cluster, cost))
    from experiments.runspec import RunSpec, simulate_spec

    spec = RunSpec.make(args.graph or args.model, cluster, args.policy,
                        graph_file=args.graph, cost_file=args.cost_file, batch=args.batch,
                        seq_len=args.seq_len, train=args.train, optimizer=args.optimizer,
                        colocate=args.colocate,
                        passes=tuple(pass_specs(args.passes)) if args.passes else (),
                        cost=args.cost, links=args.links, order=order)
    done = simulate_spec(spec)
    return done.graph, done.plan, done.result, [], order, done.lower_bound_s


#: What a search policy reports of its run (``policies.search``).
_SEARCH_INFO = ("start", "start_score_s", "score_s", "evals", "best_eval", "keyed_evals",
                "keyed_score_s", "accepted", "kicks", "stopped_by", "moves")


def _search_line(info: dict[str, Any]) -> list[str]:
    """A search's run in one line: from its start's score to its own."""
    if "score_s" not in info:
        return []
    found = info.get("keyed_score_s")
    keyed = "" if found is None else f" ({info['keyed_evals']} on HEFT's priorities, " + (
        f"best {found * 1e3:.3f} ms)" if math.isfinite(found) else "none that fits)")
    return [f"  search       {info['start_score_s'] * 1e3:.3f} ms (from {info['start']}) -> "
            f"{info['score_s'] * 1e3:.3f} ms in {info['evals']} evaluations{keyed}, "
            f"best at evaluation {info['best_eval']}, "
            f"{info['accepted']} chain moves accepted, {info['kicks']} kicked "
            f"restart{'' if info['kicks'] == 1 else 's'} (stopped by {info['stopped_by']})",
            *_moves_line(info.get("moves", {}))]


def _moves_line(moves: dict[str, dict[str, int]]) -> list[str]:
    """The chain's moves of each kind it proposed: how many were faster than its current
    plan, how many it accepted, of how many (none where the chain proposed none)."""
    done = [f"{kind} {n['faster']}/{n['accepted']}/{n['proposed']}"
            for kind, n in moves.items() if n["proposed"]]
    return [f"  moves        faster/accepted/proposed: {', '.join(done)}"] if done else []


def _zoo_forward(args: argparse.Namespace, flag: str) -> Any:
    """The zoo model's forward graph a parallel transform starts from."""
    from workloads.zoo import build_model

    if args.graph or args.passes or args.repair:
        raise PlacelabError(f"simulate {flag}: expected a zoo --model (the transform builds "
                            f"its training step), got --graph, --passes or --repair")
    return build_model(args.model, batch=args.batch, seq_len=args.seq_len)


def _parallel(args: argparse.Namespace, cluster: Any, cost: Any) -> tuple[Any, ...]:
    """The zoo model's training step under ``--dp``, ``--pp`` and ``--tp``, simulated (with
    communication first, ``order="priority"``, unless pipelined or ``--order`` given); and
    the lower bound of the step."""
    from policies.bounds import lower_bound
    from policies.tensor_parallel import parallelize
    from sim.engine import simulate

    flags = "/".join(f for f, v in (("--dp", args.dp), ("--pp", args.pp), ("--tp", args.tp))
                     if v)
    pp = args.pp or 1
    p = parallelize(_zoo_forward(args, flags), cluster, cost, dp=args.dp or 1, pp=pp,
                    tp=args.tp or 1, microbatches=args.microbatches or (4 * pp if pp > 1
                                                                          else 1),
                    schedule=args.schedule, bucket_bytes=max(1, int(args.bucket_mb * 2**20)),
                    algorithm=args.algorithm, optimizer=args.optimizer)
    order = args.order or ("plan" if pp > 1 else "priority")
    return (p.graph, p, simulate(p, cluster, cost, order=order, links=args.links), [], order,
            lower_bound(p.graph, cluster, cost))


def make_engine(kind: str, devices: int, calibration: str | None = None) -> Any:
    from runtime.engine import make_engine as make

    return make(kind, devices, calibration)


def cmd_run(args: argparse.Namespace) -> None:
    from hwmodels.cost import RooflineCost
    from policies.base import make_policy, plan
    from runtime.executor import execute
    from sim.delta import search_evaluator
    from sim.engine import simulate

    if not args.model and not args.graph:
        raise PlacelabError("run: expected --model NAME or --graph FILE, got neither")
    graph = load_graph(args)
    make_policy(args.policy)
    engine = make_engine(args.engine, args.devices)
    cluster = engine.cluster()
    cost = RooflineCost(cluster)
    p = plan(graph, cluster, args.policy, cost, evaluate=search_evaluator(graph, cluster, cost))
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
    emit(args, data, "\n".join(lines))


def cmd_compare(args: argparse.Namespace) -> None:
    from experiments.comparison import compare
    from experiments.results import format_table, plot_compare, write_results
    from policies.base import split_policies

    policies = "all" if args.policies == "all" else split(
        args.policies, "policies", split_policies(args.policies))
    df = compare(split(args.model, "model"), split(args.cluster, "cluster"), policies,
                 batch=args.batch, cost=args.cost, train=args.train, optimizer=args.optimizer,
                 colocate=args.colocate, passes=pass_specs(args.passes) if args.passes else (),
                 links=args.links, workers=args.workers)
    if args.out:
        write_results(df, args.out)
    if args.plot:
        plot_compare(df, args.plot)
    data = {"rows": df.to_dict(orient="records"), "out": args.out, "plot": args.plot}
    text = format_table(df) + "".join(
        f"\n{what}: {path}" for what, path in (("results", args.out), ("plot", args.plot))
        if path)
    emit(args, data, text)


def cmd_demo(args: argparse.Namespace) -> None:
    from experiments.demo import run_demo

    report = run_demo(Path(args.out), echo=None if args.json else print)
    if args.json:
        print(dumps_json(report))
