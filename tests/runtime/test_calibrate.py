"""Calibration fits against the closed forms that generated their data, the calibration file
as the hardware catalog and the cost model read it, and validation's statistics."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.cli import main
from hwmodels.calibrated import CalibratedCost, op_contexts
from hwmodels.cost import RooflineCost, kind_key, window_positions
from hwmodels.predictor import OpSample, fit_predictor
from hwmodels.toml_io import load
from runtime import NumpyEngine
from runtime.calibrate import Calibration
from runtime.fitting import fit_link, fit_samples
from runtime.microbench import Sample
from runtime.validate import op_errors, op_table, rank_agreement
from workloads import GraphBuilder, Op, build_model


def _roofline(flops: float, nbytes: float, eff: float) -> float:
    """The generating model: 3 us + max(FLOPs / (100 GFLOP/s eff), bytes / (20 GB/s eff))."""
    return 3e-6 + max(flops / (1e11 * eff), nbytes / (2e10 * eff))


def test_the_roofline_fit_recovers_the_parameters_that_made_the_times() -> None:
    samples = []
    for f in np.geomspace(1e4, 1e10, 16):  # GEMMs: efficiency 0.5 below 1e7 FLOPs, then 1
        samples.append(Sample("mm", "matmul", f, f / 50, _roofline(f, f / 50,
                                                                   0.5 if f < 1e7 else 1.0)))
    for b in np.geomspace(1e3, 1e9, 16):  # streams: 0.25 below 1e6 bytes, then 1
        samples.append(Sample("ew", "elementwise", b / 8, b,
                              _roofline(b / 8, b, 0.25 if b < 1e6 else 1.0)))
    fit = fit_samples(samples, buckets=2)
    assert fit.launch_s == pytest.approx(3e-6, rel=0.02)
    assert fit.peak_flops == pytest.approx(1e11, rel=0.02)
    assert fit.bandwidth == pytest.approx(2e10, rel=0.02)
    assert all(q["median"] < 0.02 for q in fit.quality.values())


def test_the_link_fit_recovers_latency_and_bandwidth() -> None:
    copies = [Sample("copy", "copy", 0.0, n, 2e-6 + n / 8e9) for n in np.geomspace(1e3, 1e8, 8)]
    link = fit_link(copies)
    assert link is not None
    assert (link.latency_s, link.bandwidth) == pytest.approx((2e-6, 8e9), rel=0.01)


def test_kind_keys_and_windows_read_the_op() -> None:
    op = Op("g", "backward", "conv", attrs={"of": "c", "of_kind": "conv2d", "kernel": (3, 5)})
    assert kind_key(op) == "backward:conv2d" and window_positions(op) == 15
    assert kind_key(Op("r", "relu", "elementwise")) == "relu"


def _relu(n: int) -> Op:
    b = GraphBuilder("t")
    y = b.relu(b.input((n,)))
    return b.build().op(y)


def _calibration(shapes: dict | None = None, start_s: float = 0.0) -> Calibration:
    """A calibration of made-up measurements: the closed-form roofline above, relus and
    GEMMs timed by it, copies at 8 GB/s + 2 us."""
    samples = [Sample("mm", "matmul", f, f / 50, _roofline(f, f / 50, 1.0))
               for f in np.geomspace(1e4, 1e10, 8)]
    samples += [Sample("ew", "elementwise", b / 8, b, _roofline(b / 8, b, 1.0))
                for b in np.geomspace(1e3, 1e9, 8)]
    copies = [Sample("copy", "copy", 0.0, n, 2e-6 + n / 8e9) for n in np.geomspace(1e3, 1e8, 8)]
    fit = fit_samples(samples, buckets=1)
    relus = [_relu(int(n)) for n in np.geomspace(256, 2**24, 24)]
    timed = [OpSample.of(op, _roofline(op.flops, op.bytes_read + op.bytes_written, 1.0))
             for op in relus]
    from hwmodels.spec import Device

    roof = Device("host-cpu-roof", "cpu", {"fp32": 1e11}, 2**30, 2e10)
    return Calibration(
        engine="cpu", devices=("cpu0", "cpu1"), model="host-cpu", memory_bytes=2**34,
        threads=1, fit=fit, predictor=fit_predictor(timed, roof, min_samples=4, roof=True),
        link=fit_link(copies), dispatch_s=0.0, shapes=shapes or {}, start_s=start_s,
        reference_s=0.1, side_by_side={}, host_slowdown=1.0, samples=40,
        fingerprint={"cpu": "test", "cores": 2, "libraries": {"numpy": "x"}})


def test_the_calibration_file_is_a_hardware_file_with_its_provenance(tmp_path, capsys,
                                                                   home) -> None:
    path = str(_calibration().write(tmp_path / "device.toml"))
    found = load(path)
    assert found.devices["host-cpu"].peak["fp32"] == pytest.approx(1e11, rel=0.02)
    cluster = found.clusters["cpu-2-calibrated"]
    assert cluster.links[0].bandwidth == pytest.approx(8e9, rel=0.01)
    import tomllib

    with open(path, "rb") as f:
        data = tomllib.load(f)
    prov = data["calibration"]
    assert {"machine", "date", "engine", "fingerprint", "fit", "link_fit"} <= set(prov)
    (predictor,) = data["predictor"]
    assert predictor["model"] == "host-cpu" and predictor["peak_tflops"] == {"fp32": 0.1}
    assert {k["key"] for k in predictor["kind"]} == {"relu", "class:elementwise"}
    assert main(["hw", "register", path]) == 0  # the catalog accepts it as it is
    assert "cpu-2-calibrated" in capsys.readouterr().out


def test_the_calibrated_cost_model_times_ops_by_their_fitted_model(tmp_path) -> None:
    calibration = _calibration()
    path = calibration.write(tmp_path / "device.toml")
    engine = NumpyEngine(devices=2, calibration=path)
    assert engine.cluster().name == "cpu-2-calibrated"
    cost = CalibratedCost(engine.cluster(), path, profiles=None)
    relu = _relu(1000)
    expected = calibration.predictor.time(relu, engine.cluster().devices[0])
    assert cost.op_time(relu, "cpu0") == pytest.approx(expected, rel=1e-9)
    assert cost.source(relu, "cpu0") == "predictor"
    assert calibration.cost_model().op_time(relu, "cpu0") == pytest.approx(expected)
    conv = build_model("lenet5").op("c1")  # no model of its class: the roofline
    assert cost.source(conv, "cpu0") == "roofline"
    assert cost.op_time(conv, "cpu0") == pytest.approx(
        RooflineCost(engine.cluster()).op_time(conv, "cpu0"))
    with pytest.raises(Exception, match="calibrated for 2 devices, expected 1"):
        NumpyEngine(devices=1, calibration=path).cluster()


def test_an_order_is_contradicted_only_beyond_the_measured_spread() -> None:
    from runtime.validate import order_kept

    # b predicted faster than a, but every run of b was slower than every run of a
    assert not order_kept([2.0, 1.0], [1.0, 1.5], [1.2, 1.8])
    assert order_kept([2.0, 1.0], [1.0, 1.1], [1.2, 1.3])  # overlapping runs: noise
    assert order_kept([1.0, 1.0], [5.0, 1.0], [6.0, 2.0])  # a tie contradicts nothing


def test_rank_agreement_is_kendalls_tau() -> None:
    # (1,2,3) against (1,3,2): two concordant pairs, one discordant -> (2 - 1) / 3
    assert rank_agreement([1.0, 2.0, 3.0], [1.0, 3.0, 2.0]) == pytest.approx(1 / 3)
    assert rank_agreement([1.0], [2.0]) is None


def test_op_errors_join_the_busy_times_and_the_trace_on_names() -> None:
    import pandas as pd

    simulated = pd.DataFrame([{"name": n, "kind": "compute", "start_s": 0.0, "end_s": d}
                              for n, d in (("a", 1.5), ("b", 1.0), ("z", 9.0))])
    errors = op_errors({"a": 1.0, "b": 2.0, "c": 1.0}, simulated)
    assert sorted(errors.tolist()) == [0.5, 0.5]


def test_an_op_table_joins_busy_times_the_trace_and_the_sources_on_names() -> None:
    import pandas as pd

    from hwmodels.cost import Placement, TableCost
    from policies.plans import Plan
    from workloads.graph import Graph

    g = build_model("mlp", batch=2)
    names = list(g.arrays.names)
    ran, idle = names[-3:], names[0]  # three ops measured; the first only simulated
    cluster = NumpyEngine(devices=2).cluster()
    devices = cluster.device_names
    placement = {n: devices[i % 2] for i, n in enumerate(names)}
    order = {d: tuple(n for n in names if placement[n] == d) for d in devices}
    p = Plan(g, placement, order)

    class Named(TableCost):  # a source per op, so each row must carry its own op's
        def sources(self, graph: Graph, placement: Placement) -> list[str]:
            return [f"from {n}" for n in graph.arrays.names]

    cost = Named(cluster, {n: {d: 1e-3 for d in devices} for n in names})
    simulated = pd.DataFrame(
        [{"name": n, "kind": "compute", "start_s": 1.0, "end_s": 1.0 + 0.002 * (k + 1)}
         for k, n in enumerate(names)]
        + [{"name": ran[0], "kind": "transfer", "start_s": 0.0, "end_s": 5.0}])
    measured = {ran[0]: 0.004, ran[1]: 0.001, ran[2]: 0.003, "not-an-op": 1.0, idle: 0.0}
    table = op_table(p, measured, simulated, cost)
    assert list(table["op"]) == ran  # graph order, the ops measured and simulated
    assert list(table["device"]) == [placement[n] for n in ran]
    assert list(table["kind"]) == [g.op(n).kind for n in ran]
    k = len(names)
    assert table["predicted_s"].tolist() == pytest.approx([0.002 * (k - 2), 0.002 * (k - 1),
                                                           0.002 * k])
    assert table["error"].tolist() == pytest.approx(
        [0.002 * (k - 2) / 0.004 - 1, 0.002 * (k - 1) / 0.001 - 1, 0.002 * k / 0.003 - 1])
    assert list(table["source"]) == [f"from {n}" for n in ran]  # each op its own
    assert sorted(np.abs(table["error"])) == pytest.approx(
        sorted(op_errors(measured, simulated)))


def test_validate_writes_each_op_against_its_prediction(tmp_path, capsys) -> None:
    import pandas as pd

    ops = tmp_path / "ops.csv"
    assert main(["validate", "--devices", "1", "--models", "mlp", "--policies",
                 "single_device", "--repeats", "1", "--min-seconds", "0", "--rounds", "1",
                 "--ops", str(ops), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    table = pd.read_csv(ops)
    assert list(table.columns) == ["graph", "policy", "op", "kind", "device", "measured_s",
                                   "predicted_s", "error", "source"]
    assert set(table["graph"]) == {"mlp"} and set(table["device"]) == {"cpu0"}
    assert set(table["op"]) <= set(build_model("mlp").arrays.names)
    assert (table["measured_s"] > 0).all() and (table["predicted_s"] > 0).all()
    assert table["error"].to_numpy() == pytest.approx(
        table["predicted_s"] / table["measured_s"] - 1)
    kinds = report["op_kinds"]  # by kind, furthest off first
    assert {k: v["ops"] for k, v in kinds.items()} == table["kind"].value_counts().to_dict()
    medians = [v["median_error"] for v in kinds.values()]
    assert medians == pytest.approx([float(table[table["kind"] == k]["error"].median())
                                     for k in kinds])
    assert [abs(m) for m in medians] == sorted((abs(m) for m in medians), reverse=True)
    assert report["rows"][0]["op_error_median"] == pytest.approx(
        float(table["error"].abs().median()))
    assert main(["validate", "--devices", "1", "--models", "mlp", "--policies",
                 "single_device", "--repeats", "1", "--min-seconds", "0", "--rounds", "1",
                 "--ops", str(ops)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("ops furthest"))
    named = line.removeprefix("ops furthest off (median error by kind): ").split(", ")
    assert len(named) == min(3, len(kinds))
    for text in named:  # "linear +12% (3 ops)", "softmax -4% (1 op)"
        found = re.fullmatch(r"(\S+) [+-]\d+% \((\d+) op(s?)\)", text)
        assert found is not None, text
        kind, count, plural = found.groups()
        assert kinds[kind]["ops"] == int(count) and (plural == "s") == (count != "1")
    assert main(["validate", "--models", "mlp", "--ops", str(tmp_path / "ops.txt")]) == 2
    assert "--ops " in capsys.readouterr().err
    assert not (tmp_path / "ops.txt").exists()
    assert main(["validate", "--models", "mlp", "--out", "-", "--ops", "-"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "--ops -: standard output already carries --out")


def test_calibrate_and_validate_from_the_command_line(tmp_path, capsys) -> None:
    out = tmp_path / "cpu.toml"
    assert main(["calibrate", "--quick", "--cases", "2", "--devices", "2", "--out", str(out),
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["samples"] > 50 and data["peak_gflops"] > 0 and data["link"]
    assert data["signatures"] > 0 and data["reference_ms"] > 0
    assert data["heldout_overall"]["samples"] > 20 and "relu" in data["heldout"]
    assert set(data["side_by_side"]) == {"resnet50 b1", "bert_base b1", "lenet5 b32"}
    assert data["host_slowdown"] == max(sorted(data["side_by_side"].values())[1], 1.0)
    cluster = NumpyEngine(devices=2, calibration=out).cluster()
    assert set(cluster.hosts.values()) == {"localhost"}
    assert cluster.host_slowdown == ({"localhost": pytest.approx(data["host_slowdown"])}
                                     if data["host_slowdown"] > 1 else {})
    assert main(["validate", "--device", str(out), "--models", "mlp", "--repeats", "1",
                 "--min-seconds", "0.2", "--policies", "single_device,round_robin",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in report["rows"]] == ["single_device", "round_robin"]
    assert all(r["measured_s"] > 0 and r["predicted_s"] > 0 for r in report["rows"])
    for r in report["rows"]:  # runs to 200 ms in all; the prediction at the machine's speed
        # more than one repeat within them (an MLP step takes milliseconds, even under load)
        assert r["repeats"] > 1
        assert r["measured_min_s"] <= r["measured_s"] <= r["measured_max_s"]
        assert r["error_at_speed"] == pytest.approx(
            r["predicted_s"] * r["slower"] / r["measured_s"] - 1)
    rows = report["rows"]  # the report's figures are the medians of its rows'

    assert report["machine_slower"] == pytest.approx(statistics.median(r["slower"] for r in rows))
    assert report["round_spread"] == pytest.approx(
        statistics.median(r["round_spread"] for r in rows))
    assert main(["calibrate", "--out", str(tmp_path / "x.txt")]) == 2
    assert "expected a file ending in .toml" in capsys.readouterr().err


def _shaped(tmp_path, shapes: dict, start_s: float = 0.0) -> str:
    """A calibration file with hand-set shape tables."""
    return str(_calibration(shapes, start_s).write(tmp_path / "shaped.toml"))


def test_window_work_counts_what_im2col_gathers() -> None:
    from workloads.op import window_work
    from workloads.training import training_graph

    g = training_graph(build_model("lenet5", batch=16))
    # c1: 16 images x 1 channel x 25 positions x 28 x 28 outputs; 16 batched products
    assert window_work(g.op("c1")) == (16 * 1 * 25 * 28 * 28, 16)
    # s2 (2x2 average pool of 6 x 28 x 28): 16 x 6 x 4 x 14 x 14 elements, no products
    assert window_work(g.op("s2")) == (16 * 6 * 4 * 14 * 14, 0)
    assert window_work(g.op("c3.backward")) == window_work(g.op("c3"))  # carried over
    assert window_work(g.op("f6")) == (0, 0)


@settings(max_examples=20, deadline=None)
@given(small=st.integers(2, 8), large=st.integers(9, 64))  # one row is a gemv
def test_an_op_keeps_its_signature_at_every_batch(small: int, large: int) -> None:
    from hwmodels.cost import op_batch, op_signature
    from workloads.training import training_graph

    a, b = (training_graph(build_model("lenet5", batch=n)) for n in (small, large))
    for op in a:
        other = b.op(op.name)
        assert op_batch(op, a) == small and op_batch(other, b) == large
        assert op_signature(op, small) == op_signature(other, large)
    convs = [op_signature(a.op(n), small) for n in ("c1", "c3", "c5", "f6")]
    assert len(set(convs)) == 4  # different layers never share one
    updates = [op_signature(op, small) for op in a if op.kind == "sgd_update"]
    assert len(updates) == 5 and len(set(updates)) == 5  # nor do their updates


def test_measured_shapes_are_interpolated_in_batch_and_a_run_start_is_charged_once(
        tmp_path) -> None:
    from hwmodels.cost import op_signature

    graphs = {n: build_model("mlp", batch=n) for n in (4, 8, 32, 40)}
    fc1 = {n: g.op("fc1") for n, g in graphs.items()}
    shapes = {("linear", op_signature(fc1[4], 4)): {4: 100e-6, 32: 380e-6},
              ("relu", op_signature(graphs[4].op("relu1"), 4)): {4: 7e-6}}
    path = _shaped(tmp_path, shapes, start_s=50e-6)
    engine = NumpyEngine(devices=2, calibration=path)
    cost = CalibratedCost(engine.cluster(), path, profiles=None)
    times = {n: dict(zip(g.arrays.names, cost.op_times(g, dict.fromkeys(g.names, "cpu0")),
                         strict=True)) for n, g in graphs.items()}
    assert times[8]["fc1"] == pytest.approx(100e-6 + 4 * 280e-6 / 28)  # between 4 and 32
    assert times[40]["fc1"] == pytest.approx(100e-6 + 36 * 10e-6)  # along the last slope
    assert times[4]["relu1"] == pytest.approx(7e-6)  # measured at this batch
    fitted = cost.op_time(graphs[8].op("relu1"), "cpu0")
    assert cost.source(graphs[8].op("relu1"), "cpu0", 8) == "predictor"
    assert times[8]["relu1"] == pytest.approx(fitted)  # one batch says nothing of 8
    assert times[8]["input"] == pytest.approx(50e-6)  # the run's start, once per device
    two = cost.op_times(graphs[8], {n: ("cpu1" if n == "softmax" else "cpu0")
                                    for n in graphs[8].names})
    assert sum(two) == pytest.approx(sum(times[8].values()) - times[8]["softmax"]
                                     + cost.op_time(graphs[8].op("softmax"), "cpu1"))


def test_weights_count_as_read_from_memory_only_where_a_device_holds_more_than_the_cache(
        ) -> None:
    from hwmodels.cost import weight_bytes
    from hwmodels.predictor import Context

    big = build_model("mlp", batch=2)  # 7.5 MB of weights
    b = GraphBuilder("small")
    b.linear(b.input((2, 64)), 64)
    small = b.build()
    for graph, cold in ((big, True), (small, False)):
        ops = list(graph)
        got = op_contexts(graph, ops, ["cpu0"] * len(ops), {"cpu0": 2**20})  # a 1 MiB cache
        held = sum(op.param_bytes for op in graph)
        assert got == [Context(weight_bytes(graph, op) if cold else 0, held) for op in ops]
    where = ["cpu0" if op.name != "fc3" else "cpu1" for op in big]
    two = op_contexts(big, list(big), where, {"cpu0": 2**20, "cpu1": 2**20})
    fc3 = two[[op.name for op in big].index("fc3")]  # its 5 kB alone fit cpu1's cache
    assert fc3 == Context(0, big.op("fc3").param_bytes)


def test_a_shape_table_with_unpaired_times_is_one_clear_line(tmp_path) -> None:
    from workloads.errors import HardwareSpecError

    path = _shaped(tmp_path, {("relu", "s"): {2: 1e-6, 4: 2e-6}})
    text = Path(path).read_text().replace("us = [", "us = [ 9.0,", 1)
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    engine = NumpyEngine(devices=2, calibration=path)
    with pytest.raises(HardwareSpecError, match=r"bad.toml: measured_shape\[0\]: batches and "
                                                r"us must pair up"):
        CalibratedCost(engine.cluster(), bad, profiles=None)


def test_a_calibration_whose_model_is_damaged_is_one_clear_line(tmp_path) -> None:
    from workloads.errors import HardwareSpecError

    path = _calibration().write(tmp_path / "cal.toml")
    text = path.read_text()
    start = text.index('model = "', text.index("[[predictor.kind]]")) + len('model = "')
    bad = tmp_path / "bad.toml"
    bad.write_text(text[:start] + "!!" + text[start + 2:])
    engine = NumpyEngine(devices=2, calibration=path)
    with pytest.raises(HardwareSpecError, match=r"bad.toml: predictor\[0\]\.kind\[0\]\.model: "
                                                r"expected a LightGBM model \(zlib, base64\)"):
        CalibratedCost(engine.cluster(), bad, profiles=None)
    twice = tmp_path / "twice.toml"
    twice.write_text(text.replace('key = "relu"', 'key = "class:elementwise"'))
    with pytest.raises(HardwareSpecError, match=r"predictor\[0\]: kind keys must be unique, "
                                                r"got class:elementwise twice"):
        CalibratedCost(engine.cluster(), twice, profiles=None)


def test_validate_refuses_an_engine_this_machine_cannot_run(capsys) -> None:
    from runtime.cupy_engine import cupy_unavailable

    if cupy_unavailable() is None:
        pytest.skip("CuPy and a GPU are present: the engine runs")
    assert main(["validate", "--engine", "gpu", "--models", "mlp"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "engine 'gpu'" in err
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--cases", "0", "--out", "x.toml"])
    assert exc.value.code == 2
    assert "argument --cases: expected an integer >= 1, got 0" in capsys.readouterr().err


def test_a_machine_of_mixed_devices_is_refused_before_anything_is_timed() -> None:
    from runtime.calibrate import calibrate
    from runtime.engine import gpu_cluster
    from workloads.errors import CalibrationError

    class Mixed(NumpyEngine):
        """Two devices of different kinds, as a machine with an H100 and an A100."""

        def cluster(self):  # type: ignore[no-untyped-def]
            return gpu_cluster("gpu-mixed", "mixed-2", self.devices,
                               [("NVIDIA H100 80GB HBM3", 2**36),
                                ("NVIDIA A100-SXM4-80GB", 2**36)])

        def to_device(self, host, device):  # type: ignore[no-untyped-def]
            raise AssertionError("nothing may run: every timing sends arrays first")

    with pytest.raises(CalibrationError, match=(
            r"^engine 'cpu': its devices differ \(NVIDIA H100 80GB HBM3 \(uncalibrated: "
            r"the figures of h100-sxm5-80gb\); NVIDIA A100-SXM4-80GB \(uncalibrated: the "
            r"figures of a100-sxm4-80gb\)\): a calibration times the first and would price "
            r"every device so; calibrate with --devices 1$")):
        calibrate(Mixed(devices=2), quick=True)
