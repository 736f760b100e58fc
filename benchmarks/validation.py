"""How far to trust the simulator on this machine: calibrate the NumPy engine (two logical
devices), then run a validation set calibration never timed — zoo models at other batch
sizes, two training steps, an imported ONNX model and a graph built with the public builder
API — under three plans each (one device, HEFT's split, round robin's bad split), for real
and simulated, with the calibrated model and with the uncalibrated catalog CPU.

    python benchmarks/validation.py [--quick] [--repeats 7] [--min-seconds 0.5] [--rounds 3]
                                    [--out F]
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx
from machine import describe, record

from hwmodels import Cluster, Device, RooflineCost
from hwmodels.cost import CalibratedCost
from runtime import NumpyEngine
from runtime.validate import validate
from workloads import Graph, GraphBuilder, build_model, training_graph
from workloads.importers import import_onnx

POLICIES = ("single_device", "heft", "round_robin")


class CatalogCost(RooflineCost):
    """The uncalibrated model of the same cluster: every device the catalog Xeon's share of
    cores (what ``NumpyEngine`` assumes without a calibration), links 10 GB/s and 5 us."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(cluster)
        self.catalog = NumpyEngine(devices=len(cluster.devices)).cluster().devices[0]

    def spec(self, device: str) -> Device:
        return self.catalog

    def transfer_time(self, nbytes: int, src: str, dst: str) -> float:
        return 0.0 if src == dst else 5e-6 + nbytes / 10e9


def builder_graph() -> Graph:
    """A network of the user's own: built with GraphBuilder, shapes nothing else uses."""
    b = GraphBuilder("custom_cnn")
    x = b.relu(b.batchnorm(b.conv2d(b.input((4, 3, 40, 40)), 24, 5, padding=2)))
    x = b.max_pool2d(x, 2)
    y = b.relu(b.conv2d(x, 24, 3, padding=1))
    x = b.avg_pool2d(b.add(x, y), 2)
    x = b.relu(b.linear(b.flatten(x), 200))
    b.softmax(b.linear(x, 7))
    return b.build()


def validation_set(quick: bool) -> dict[str, Graph]:
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    graphs = {
        "mlp b8": build_model("mlp", batch=8),
        "lenet5 b16": build_model("lenet5", batch=16),
        "alexnet b2": build_model("alexnet", batch=2),
        "resnet50 b2": build_model("resnet50", batch=2),
        "stacked_autoencoder b8": build_model("stacked_autoencoder", batch=8),
        "bert_base b2 s32": build_model("bert_base", batch=2, seq_len=32),
        "mlp b8 train": training_graph(build_model("mlp", batch=8)),
        "lenet5 b16 train": training_graph(build_model("lenet5", batch=16)),
        "squeezenet (onnx)": import_onnx(light / "light_squeezenet.onnx"),
        "custom_cnn (builder)": builder_graph(),
    }
    if not quick:
        graphs["inception_v3 b2"] = build_model("inception_v3", batch=2)
        graphs["vgg16 b2"] = build_model("vgg16", batch=2)
    return graphs


def coverage(graphs: dict[str, Graph], cost: CalibratedCost, device: str) -> dict[str, float]:
    """Per graph, the share of its ops timed from ops of the same signature measured
    inside calibration's models at other batch sizes."""
    from hwmodels.cost import op_batch

    out = {}
    for name, g in graphs.items():
        ops = [op for op in g if op.op_class != "source"]
        tabled = sum(cost.source(op, device, op_batch(op, g)) == "shape table" for op in ops)
        out[name] = tabled / len(ops)
    return out


def summary(df, label: str, prefix: str = "") -> list[str]:
    """One line: the error of the ``<prefix>s`` predictions against the measured runs."""
    from runtime.validate import order_kept

    errors = (df[f"{prefix}s"] / df["measured_s"] - 1).abs()
    by_graph = df.groupby("graph", sort=False)
    ranked = sum(1 for _, g in by_graph if order_kept(
        list(g[f"{prefix}s"]), list(g["measured_min_s"]), list(g["measured_max_s"])))
    ops = f"{df['op_error_median'].median():.1%}" if prefix == "predicted_" else "-"
    return [f"| {label} | {len(df)} | {errors.median():.1%} | {errors.quantile(0.9):.1%} | "
            f"{errors.max():.1%} | {ranked} of {by_graph.ngroups} | {ops} |"]


def rows(df) -> list[str]:
    out = ["| graph | ops from the shape table | plan | runs | measured ms (min-max) | "
           "turns differ | calibrated ms | error | machine slower | error at its speed | "
           "catalog ms | error | op error (median) | memory error | tau |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in df.itertuples():
        out.append(f"| {r.graph} | {r.tabled:.0%} | {r.policy} | {r.repeats} | "
                   f"{r.measured_s * 1e3:.2f} "
                   f"({r.measured_min_s * 1e3:.2f}-{r.measured_max_s * 1e3:.2f}) | "
                   f"{r.round_spread:.1%} | "
                   f"{r.predicted_s * 1e3:.2f} | {r.error:+.1%} | {r.slower:.2f}x | "
                   f"{r.error_at_speed:+.1%} | "
                   f"{r.catalog_s * 1e3:.2f} | {r.catalog_error:+.1%} | "
                   f"{r.op_error_median:.1%} | {r.memory_error_max or 0:.1%} | "
                   f"{r.rank_tau:.2f} |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--min-seconds", type=float, default=0.5,
                        help="run a short plan more often, to this much time in all")
    parser.add_argument("--rounds", type=int, default=3,
                        help="run every plan in this many turns over the whole run")
    parser.add_argument("--out")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    calibration = folder / "cpu.toml"
    command = [sys.executable, "-m", "experiments.cli", "calibrate", "--devices", "2",
               "--out", str(calibration), *(["--quick"] if args.quick else [])]
    report = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    graphs = validation_set(args.quick)
    engine = NumpyEngine(devices=2, calibration=calibration)
    import tomllib

    from runtime.microbench import reference_seconds

    then = tomllib.loads(calibration.read_text())["run"]["reference_ms"] / 1e3
    calibrated = validate(engine, graphs, POLICIES, repeats=args.repeats,
                          baselines={"catalog": CatalogCost(engine.cluster())},
                          min_seconds=args.min_seconds, rounds=args.rounds,
                          speed=lambda: reference_seconds(engine) / then)
    share = coverage(graphs, CalibratedCost(engine.cluster(), calibration), engine.devices[0])
    calibrated["tabled"] = calibrated["graph"].map(share)
    calibrated["at_speed_s"] = calibrated["predicted_s"] * calibrated["slower"]
    one = calibrated[calibrated["policy"] == "single_device"]
    unseen = calibrated[calibrated["tabled"] == 0]
    steady = calibrated[calibrated["round_spread"] <= 0.05]  # the machine held still
    lines = [describe(), f"date: {datetime.date.today().isoformat()}",
             f"command: python benchmarks/validation.py{' --quick' if args.quick else ''} "
             f"--repeats {args.repeats} --min-seconds {args.min_seconds:g} "
             f"--rounds {args.rounds}", "",
             "calibration (`placelab calibrate --devices 2"
             f"{' --quick' if args.quick else ''}`):", "", "```", report.strip(), "```", "",
             "| model | runs | median abs error | p90 | worst | plans ordered as measured | "
             "op error (median) |", "|---|---:|---:|---:|---:|---:|---:|",
             *summary(calibrated, "calibrated, every plan", "predicted_"),
             *summary(one, "calibrated, one device", "predicted_"),
             *summary(unseen, "calibrated, graphs with no op in the shape table",
                      "predicted_"),
             *summary(calibrated, "calibrated, every plan, scaled by the machine's speed",
                      "at_speed_"),
             *summary(steady, "calibrated, plans whose turns agree within 5%",
                      "predicted_"),
             *summary(calibrated, "catalog CPU, uncalibrated", "catalog_"), "",
             f"the machine ran the reference graph {calibrated['slower'].min():.2f}x to "
             f"{calibrated['slower'].max():.2f}x as slowly as at calibration (median "
             f"{calibrated['slower'].median():.2f}x); the calibrated predictions scaled by "
             f"it: median error {calibrated['error_at_speed'].abs().median():.1%}, worst "
             f"{calibrated['error_at_speed'].abs().max():.1%}", "",
             f"every plan ran in {args.rounds} turns over the whole run; one plan's turns "
             f"differ by {calibrated['round_spread'].median():.1%} (median over plans), "
             f"worst {calibrated['round_spread'].max():.1%}: the machine's own noise", "",
             f"peak memory, simulated against measured: worst relative gap "
             f"{calibrated['memory_error_max'].fillna(0).max():.1%} over every device of "
             f"every run", "", *rows(calibrated)]
    print(record(lines, args.out), end="")


if __name__ == "__main__":
    main()
