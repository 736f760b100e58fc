from __future__ import annotations

import json
import re
import subprocess
import sys

import pandas as pd
import pytest

from experiments.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("argv", "bad", "valid"), [
    (["simulate", "--model", "resnet5", "--cluster", "workstation", "--policy", "heft"],
     "model 'resnet5'", "resnet50"),
    (["simulate", "--model", "mlp", "--cluster", "dgx-9", "--policy", "heft"],
     "cluster 'dgx-9'", "workstation"),
    (["simulate", "--model", "mlp", "--cluster", "workstation", "--policy", "hefty"],
     "policy 'hefty'", "round_robin"),
    (["compare", "--model", "mlp", "--cluster", "workstation", "--policies", "heft,nope"],
     "policy 'nope'", "single_device"),
    (["compare", "--model", "nope", "--cluster", "workstation", "--policies", "heft"],
     "model 'nope'", "resnet50"),
    (["compare", "--model", "mlp", "--cluster", "workstation", "--policies", "heft",
      "--cost", "nope"], "cost model 'nope'", "roofline"),
    (["compare", "--model", "mlp", "--cluster", "workstation", "--policies", "heft",
      "--cost", "table"], "cost model table: needs a table file", "got none"),
])
def test_unknown_names_exit_2_with_one_line(capsys, argv, bad, valid) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert bad in err and valid in err and "Traceback" not in err


def test_console_script_prints_no_traceback_on_bad_input() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.cli", "model", "show", "alexnett"],
        capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith("placelab: error: unknown model 'alexnett'; expected one of")
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_bad_flag_value_is_one_line(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["model", "show", "mlp", "--batch", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "expected an integer in 1..16777216, got 0" in err


def test_model_show_json(capsys) -> None:
    code, out, _ = run(capsys, "model", "show", "resnet50", "--json")
    data = json.loads(out)
    assert code == 0
    assert {"name", "ops", "params", "flops", "bytes"} <= set(data)
    assert data["params"] == 25_557_032


def test_simulate_json_keys_and_trace(capsys, tmp_path) -> None:
    trace = tmp_path / "t.json"
    code, out, _ = run(capsys, "simulate", "--model", "resnet50", "--cluster",
                       "quad-v100-nvlink", "--policy", "heft", "--batch", "8", "--json",
                       "--trace", str(trace))
    data = json.loads(out)
    assert code == 0
    assert {"model", "cluster", "policy", "makespan_s", "feasible", "reason", "placement_s",
            "peak_memory_bytes", "utilization", "transfer_bytes"} <= set(data)
    assert data["feasible"] and 1e-3 < data["makespan_s"] < 1.0
    assert set(data["peak_memory_bytes"]) == {"gpu0", "gpu1", "gpu2", "gpu3"}
    assert json.loads(trace.read_text())["traceEvents"]


def test_simulate_gantt_order_and_bound(capsys, tmp_path) -> None:
    gantt = tmp_path / "g.png"
    code, out, _ = run(capsys, "simulate", "--model", "resnet50", "--cluster", "workstation",
                       "--policy", "heft", "--order", "priority", "--gantt", str(gantt),
                       "--json")
    data = json.loads(out)
    assert code == 0 and data["order"] == "priority"
    assert data["makespan_over_bound"] >= 1.0
    assert gantt.read_bytes()[:4] == b"\x89PNG"


def test_simulate_reports_the_bound_of_a_closed_form_instance(capsys) -> None:
    # mlp (batch 1) on the workstation with everything on the CPU: the ops form a chain, so
    # the critical-path bound is the sum of each op's fastest time and single_device on the
    # L4 runs exactly that chain (no transfers, one stream).
    from hwmodels import RooflineCost, get_cluster
    from workloads import build_model

    graph, cluster = build_model("mlp"), get_cluster("workstation")
    cost = RooflineCost(cluster)
    fastest = sum(min(cost.op_time(op, d) for d in cluster.device_names) for op in graph)
    on_best = min(sum(cost.op_time(op, d) for op in graph) for d in cluster.device_names)
    code, out, _ = run(capsys, "simulate", "--model", "mlp", "--cluster", "workstation",
                       "--policy", "single_device", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["lower_bound_s"] == pytest.approx(fastest, rel=1e-12)
    assert data["makespan_s"] == pytest.approx(on_best, rel=1e-12)


def test_simulate_from_a_graph_file(capsys, tmp_path) -> None:
    from workloads import build_model
    path = tmp_path / "g.json"
    path.write_text(build_model("lenet5", batch=4).to_json())
    code, out, _ = run(capsys, "simulate", "--graph", str(path), "--cluster", "workstation",
                       "--policy", "single_device", "--json")
    assert code == 0 and json.loads(out)["model"] == "lenet5"
    path.write_text("{broken")
    code, _, err = run(capsys, "simulate", "--graph", str(path), "--cluster", "workstation",
                       "--policy", "heft")
    assert code == 2 and "g.json: expected JSON, got a parse error" in err


def test_compare_all_writes_parquet_and_png(capsys, tmp_path) -> None:
    out, plot = tmp_path / "r.parquet", tmp_path / "r.png"
    code, text, _ = run(capsys, "compare", "--model", "mlp", "--cluster", "workstation",
                        "--policies", "all", "--out", str(out), "--plot", str(plot))
    assert code == 0 and "single_device" in text
    df = pd.read_parquet(out)
    assert set(df["policy"]) >= {"heft", "round_robin", "single_device"}
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_list_json(capsys) -> None:
    code, out, _ = run(capsys, "list", "policies", "--json")
    assert code == 0 and "heft" in json.loads(out)["policies"]


def test_demo_writes_its_outputs_together_with_a_manifest(capsys, tmp_path,
                                                          monkeypatch) -> None:
    import hashlib

    (tmp_path / "trace-gpt2-train-older.json").write_text("{}")  # an earlier run's
    stale = tmp_path / ".staging-999999999-x"  # of a run killed with kill -9 (no such pid)
    stale.mkdir()
    (stale / "results.parquet").write_text("half")
    code, out, _ = run(capsys, "demo", "--out", str(tmp_path), "--json")
    report = json.loads(out)
    assert code == 0
    assert report["best_policy"] in {r["policy"] for r in report["rows"]}
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    trace = f"trace-gpt2-train-{report['best_policy']}.json"
    assert sorted(manifest["files"]) == sorted(["results.parquet", "compare.png", trace])
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*manifest["files"],
                                                                 "manifest.json"])
    before = (tmp_path / "results.parquet").read_bytes()

    def killed(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt  # a run stopped while it writes its files

    monkeypatch.setattr("experiments.demo.plot_compare", killed)
    assert run(capsys, "demo", "--out", str(tmp_path))[0] == 130
    assert not (tmp_path / "manifest.json").exists()  # nothing claims the files are one run
    assert (tmp_path / "results.parquet").read_bytes() == before  # none half-replaced
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".staging")]


def test_model_import_json_and_bad_file(capsys, tmp_path) -> None:
    onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")
    from pathlib import Path

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    saved = tmp_path / "g.json"
    code, out, _ = run(capsys, "model", "import", str(light / "light_squeezenet.onnx"),
                       "--json", "--save", str(saved))
    data = json.loads(out)
    assert code == 0 and data["params"] == 1_235_496 and data["warnings"] == []
    code, out, _ = run(capsys, "simulate", "--graph", str(saved), "--cluster", "workstation",
                       "--policy", "heft", "--json")
    assert code == 0 and json.loads(out)["model"] == "light_squeezenet"
    bad = tmp_path / "x.onnx"
    bad.write_text("nope")
    code, _, err = run(capsys, "model", "import", str(bad))
    assert code == 2 and "expected a valid ONNX model" in err and len(err.splitlines()) == 1


def test_model_show_train(capsys) -> None:
    code, out, _ = run(capsys, "model", "show", "lstm", "--seq-len", "4", "--train",
                       "--optimizer", "adam", "--json")
    data = json.loads(out)
    assert code == 0 and data["name"] == "lstm.train.adam" and data["optimizer"] == "adam"


def test_run_prints_measured_beside_simulated(capsys, tmp_path) -> None:
    trace = tmp_path / "run.json"
    code, out, err = run(capsys, "run", "--model", "lenet5", "--batch", "4", "--policy",
                         "round_robin", "--devices", "2", "--repeats", "2", "--trace",
                         str(trace), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["devices"] == ["cpu0", "cpu1"] and data["repeats"] == 2
    assert data["makespan_min_s"] <= data["makespan_s"] <= data["makespan_max_s"]
    assert set(data["peak_memory_bytes"]) == set(data["predicted_peak_memory_bytes"])
    assert data["predicted_makespan_s"] > 0
    assert json.loads(trace.read_text())["traceEvents"]
    code, out, err = run(capsys, "run", "--model", "mlp", "--batch", "8", "--policy", "heft",
                         "--train", "--optimizer", "adam", "--devices", "2", "--repeats",
                         "1", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["model"] == "mlp.train.adam" and data["makespan_s"] > 0
    # the weights and Adam's two moments are on some device, measured and simulated alike
    assert sum(data["peak_memory_bytes"].values()) > 3 * 4 * 1_863_690
    code, _, err = run(capsys, "run", "--model", "lstm", "--seq-len", "2", "--policy", "heft",
                       "--train")
    assert code == 2 and "kind 'lstm_cell' has no backward kernel" in err


def test_simulate_repair_reports_its_rounds(capsys) -> None:
    assert main(["simulate", "--model", "mlp", "--cluster", "quad-v100-nvlink", "--policy",
                 "m_etf", "--repair", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["repair_rounds"] == [{"round": 0, "over_bytes": {}, "held_bytes": {}}]
    assert main(["simulate", "--model", "mlp", "--cluster", "quad-v100-nvlink", "--policy",
                 "heft", "--repair", "1"]) == 2
    err = capsys.readouterr().err
    assert "repair: policy 'heft': expected a memory-aware policy" in err


def test_list_shows_sharing_policies_and_passes_with_their_parameters(capsys) -> None:
    assert main(["list", "sharing", "--params", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"exclusive", "fifo", "weighted_fair", "priority", "partition"} <= set(
        data["sharing"])
    assert data["params"]["priority"][0] == {
        "name": "preempt", "kind": "bool", "default": True, "valid": "true or false",
        "doc": "a higher-priority job takes the device at the next op boundary"}
    assert main(["list", "passes", "--params", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in data["params"]["train"]] == ["optimizer", "colocate"]


def test_list_shows_engines_link_models_issue_orders_and_cost_models(capsys) -> None:
    from hwmodels.cost import COST_MODELS
    from runtime.engine import ENGINES
    from sim.options import LINK_REGISTRY, ORDER_REGISTRY

    expected = {"engines": {"cpu", "gpu", "torch", "torch-cuda"},
                "link-models": {"fcfs", "fair", "none"}, "issue-orders": {"plan", "priority"},
                "cost-models": {"roofline", "table", "gpu", "calibrated"}}
    registries = {"engines": ENGINES, "link-models": LINK_REGISTRY,
                  "issue-orders": ORDER_REGISTRY, "cost-models": COST_MODELS}
    for what, names in expected.items():
        assert main(["list", what, "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)[what]
        assert names <= set(listed) and listed == registries[what].names()
    assert main(["list", "engines", "--params", "--json"]) == 0
    params = json.loads(capsys.readouterr().out)["params"]
    assert [p["name"] for p in params["cpu"]] == ["devices", "calibration", "hugepages"]
    assert main(["list", "link-models", "--params", "--json"]) == 0
    params = json.loads(capsys.readouterr().out)["params"]
    assert params["fcfs"] == [] and params["fair"][0]["name"] == "scan_up_to"
    assert main(["list", "cost-models", "--params", "--json"]) == 0
    params = json.loads(capsys.readouterr().out)["params"]
    assert params["roofline"] == [] and params["table"][0]["name"] == "file"
    assert main(["list", "models", "--params"]) == 2
    assert capsys.readouterr().err.strip() == (
        "placelab: error: list models: --params lists the parameters of policies, sharing, "
        "passes, engines, link-models, issue-orders, cost-models; models have none")


def test_simulate_pipelines_a_training_step(capsys) -> None:
    assert main(["simulate", "--model", "mlp", "--batch", "32", "--cluster",
                 "quad-v100-nvlink", "--pp", "2", "--microbatches", "4", "--schedule",
                 "gpipe", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["policy"] == "pipeline.gpipe" and data["feasible"]
    assert data["model"] == "mlp.train.sgd.pp2x4"
    assert [d for d, u in data["utilization"].items() if u > 0] == ["gpu0", "gpu1"]
    for argv, message in ((["--pp", "2", "--policy", "heft"], "got --policy and --pp"),
                          (["--schedule", "gpipe", "--policy", "heft"], "need --pp S"),
                          (["--pp", "2", "--microbatches", "3"], "multiple of microbatches")):
        assert main(["simulate", "--model", "mlp", "--batch", "32", "--cluster",
                     "quad-v100-nvlink", *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1


def test_simulate_data_parallel_training(capsys) -> None:
    assert main(["simulate", "--model", "mlp", "--batch", "32", "--cluster",
                 "quad-v100-nvlink", "--dp", "4", "--bucket-mb", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["policy"] == "data_parallel" and data["feasible"]
    assert data["model"] == "mlp.train.sgd.dp4" and data["transfer_bytes"] > 0
    for argv, message in ((["--dp", "2", "--policy", "heft"], "got --policy and --dp"),
                          (["--dp", "2", "--bucket-mb", "nan"], "--bucket-mb must be a finite"),
                          (["--dp", "9"], "dp x pp x tp must be between 1 and the cluster's 4"),
                          (["--tp", "2"], "model 'mlp': has no tensor-parallel split (tp)")):
        assert main(["simulate", "--model", "mlp", "--batch", "32", "--cluster",
                     "quad-v100-nvlink", *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1


def test_simulate_hybrid_parallel_training(capsys) -> None:
    assert main(["simulate", "--model", "bert_base", "--batch", "8", "--seq-len", "32",
                 "--cluster", "dgx-h100-x2-ib", "--dp", "2", "--pp", "2", "--tp", "4",
                 "--microbatches", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["dp"], data["pp"], data["tp"]) == (2, 2, 4) and data["feasible"]
    assert data["order"] == "plan" and 0 < data["collective_bytes"] < data["transfer_bytes"]
    assert all(u > 0 for u in data["utilization"].values())  # all 16 GPUs
    assert main(["simulate", "--model", "bert_base", "--batch", "8", "--seq-len", "32",
                 "--cluster", "dgx-h100-x2-ib", "--tp", "5"]) == 2
    err = capsys.readouterr().err
    assert "tp must be >= 1 and divide the heads and widths it splits, got tp=5" in err


def test_hw_check_of_a_held_out_gpu_prints_published_against_predicted(capsys) -> None:
    code, out, _ = run(capsys, "hw", "check", "a100-pcie-80gb", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["role"] == "held out"
    assert {k["family"] for k in data["kernels"]} >= {"bmm", "linear", "elementwise"}
    labels = data["labels"]
    assert labels and all(x["measured_s"] > 0 and x["predicted_s"] > 0 for x in labels)
    first = labels[0]
    assert first["error"] == pytest.approx(first["predicted_s"] / first["measured_s"] - 1)
    assert data["uncertainty"]["basis"] == "a100-pcie-80gb"


def test_hw_check_of_an_unmeasured_gpu_states_the_nearest_held_out_error(capsys) -> None:
    code, out, _ = run(capsys, "hw", "check", "h200-sxm-141gb")
    assert code == 0
    assert "measured on h100-sxm5-80gb, a GPU the model never saw" in out
    code, out, _ = run(capsys, "hw", "show", "h200-sxm-141gb", "--json")
    assert json.loads(out)["uncertainty"]["basis"] == "h100-sxm5-80gb"


def test_hw_check_of_a_cpu_says_no_gpu_model_applies(capsys) -> None:
    code, out, _ = run(capsys, "hw", "check", "xeon-8380")
    assert code == 0
    assert "stated uncertainty: none measured (no gpu table" in out


def test_hw_check_of_an_unknown_device_is_one_line(capsys) -> None:
    code, out, err = run(capsys, "hw", "check", "h1000")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1


def test_a_sweep_over_an_unknown_model_writes_nothing(capsys, tmp_path) -> None:
    spec = tmp_path / "sweep.toml"
    spec.write_text('models = ["nope"]\nclusters = ["workstation"]\npolicies = ["heft"]\n')
    code, out, err = run(capsys, "sweep", str(spec), "--out", str(tmp_path / "out"))
    assert code == 2 and out == "" and "unknown model 'nope'" in err
    assert not (tmp_path / "out").exists()


def test_a_sweep_over_a_batch_past_int64_writes_nothing(capsys, tmp_path) -> None:
    spec = tmp_path / "sweep.toml"
    spec.write_text('models = ["mlp"]\nclusters = ["workstation"]\npolicies = ["heft"]\n'
                    'batch = [100000000000000000000]\n')
    code, out, err = run(capsys, "sweep", str(spec), "--out", str(tmp_path / "out"))
    assert code == 2 and out == ""
    assert err.strip() == ("placelab: error: model 'mlp': batch must be an int in "
                           "1..16777216, got 100000000000000000000")
    assert not (tmp_path / "out").exists()


def _placelab(*argv: str, **kwargs) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
    return subprocess.run([sys.executable, "-m", "experiments.cli", *argv], text=True,
                          stderr=subprocess.PIPE, timeout=120, check=False, **kwargs)


def test_json_output_stays_json_where_metis_prints_a_note() -> None:
    # METIS prints to C's standard output (here a pipe, fully buffered) on 32 GPUs
    proc = _placelab("simulate", "--model", "vgg16", "--batch", "8", "--train", "--cluster",
                     "dgx-h100-x4-ib", "--policy", "metis", "--json", stdout=subprocess.PIPE)
    assert proc.returncode == 0 and json.loads(proc.stdout)["policy"] == "metis"
    assert "Cannot bisect a graph with 0 vertices" in proc.stderr


def test_a_graph_file_too_large_for_the_address_space_is_one_line(tmp_path) -> None:
    import resource

    big = tmp_path / "big.json"
    with big.open("w") as f:  # whitespace: the size is what is judged, before parsing
        f.write("{" + " " * 120 * 2**20 + "}")
    gib = 2**30

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (gib, gib))

    proc = _placelab("simulate", "--graph", str(big), "--cluster", "workstation",
                     "--policy", "round_robin", stdout=subprocess.PIPE, preexec_fn=limit)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"placelab: error: {big}: a 120 MiB graph file needs "
                                  "about 1.4 GiB to load; the address-space limit "
                                  "(ulimit -v) leaves ")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_memory_running_out_mid_command_is_one_line(capsys, monkeypatch) -> None:
    def exhausted(args) -> None:  # type: ignore[no-untyped-def]
        raise MemoryError

    monkeypatch.setattr("experiments.cli.cmd_list", exhausted)
    code, out, err = run(capsys, "list", "models")
    assert code == 2 and out == ""
    assert err == ("placelab: error: out of memory: expected the run to fit in the memory "
                   "this process may use (see ulimit -v), got MemoryError\n")


def test_a_reader_closing_the_pipe_ends_the_command_quietly() -> None:
    import os

    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: every write fails (EPIPE)
    try:
        proc = _placelab("list", "models", stdout=write)
    finally:
        os.close(write)
    assert proc.returncode == 0 and proc.stderr == ""


@pytest.mark.parametrize(("argv", "message"), [
    (["simulate", "--model", "mlp", "--graph", "g.json", "--cluster", "workstation",
      "--policy", "heft"], "argument --graph: not allowed with argument --model"),
    (["compare", "--model", "mlp", "--cluster", "workstation", "--policies", "heft",
      "--out", ""], "--out: expected a value, got ''"),
    (["compare", "--model", "mlp", "--cluster", "workstation", "--policies", "heft",
      "--out="], "--out: expected a value, got ''"),
    (["model", "show", ""], "argument 3: expected a value, got ''"),
])
def test_an_ignored_or_empty_argument_is_refused(capsys, tmp_path, monkeypatch, argv,
                                                 message) -> None:
    monkeypatch.chdir(tmp_path)
    try:
        code, out, err = run(capsys, *argv)
    except SystemExit as stop:  # argparse's own refusals
        code, (out, err) = int(stop.code or 0), capsys.readouterr()
    assert code == 2 and out == "" and message in err
    assert len(err.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []


def test_a_broken_pipe_other_than_standard_output_is_an_error(capsys, monkeypatch) -> None:
    def broken(args) -> None:  # type: ignore[no-untyped-def]
        raise BrokenPipeError(32, "Broken pipe", "trace.fifo")

    monkeypatch.setattr("experiments.cli.cmd_list", broken)
    code, out, err = run(capsys, "list", "models")
    assert code == 2 and out == ""
    assert err == "placelab: error: cannot write or read 'trace.fifo': Broken pipe\n"


def test_simulate_with_a_search_reports_its_run(capsys) -> None:
    code, out, _ = run(capsys, "simulate", "--model", "mlp", "--batch", "16", "--train",
                       "--cluster", "hetero-box", "--policy", "mcmc:evals=25,start=heft+cpop",
                       "--json")
    data = json.loads(out)
    assert code == 0 and data["search"]["evals"] == 25
    assert data["search"]["start"] in ("heft", "cpop")
    # the search scored its plan with the simulator: the score is the simulated makespan
    assert data["search"]["score_s"] == data["makespan_s"]
    assert data["search"]["score_s"] <= data["search"]["start_score_s"]
    assert data["search"]["keyed_evals"] == 0 and data["search"]["keyed_score_s"] is None
    assert 1 <= data["search"]["best_eval"] <= 25
    # after its two starts, each evaluation a move proposed or a chain's kicked start
    proposed = sum(kind["proposed"] for kind in data["search"]["moves"].values())
    assert 0 <= data["search"]["kicks"] <= 3 and proposed + data["search"]["kicks"] == 23


def test_a_search_with_patience_says_what_stopped_it(capsys) -> None:
    code, out, _ = run(capsys, "simulate", "--model", "mlp", "--batch", "16", "--train",
                       "--cluster", "hetero-box", "--policy",
                       "mcmc:evals=5000,patience=3", "--json")
    search = json.loads(out)["search"]
    assert code == 0 and search["stopped_by"] == "patience"
    assert search["evals"] == search["best_eval"] + 3


def test_a_search_on_a_large_graph_reports_its_priority_search(capsys) -> None:
    code, out, _ = run(capsys, "simulate", "--model", "resnet50", "--batch", "8", "--train",
                       "--cluster", "quad-v100-nvlink", "--policy", "mcmc:evals=20,keyed=0.5")
    lines = [line for line in out.splitlines() if line.startswith("  search")]
    # three starts, then half of the 17 left on HEFT's priorities
    assert code == 0 and re.fullmatch(
        r"  search +[\d.]+ ms \(from \w+\) -> [\d.]+ ms in 20 evaluations \(8 on HEFT's "
        r"priorities, best [\d.]+ ms\), best at evaluation \d+, \d+ chain moves accepted, "
        r"(1 kicked restart|[02-9] kicked restarts) \(stopped by evals\)",
        lines[0])
    # the chain's moves by kind: faster/accepted/proposed
    moves = out.splitlines()[out.splitlines().index(lines[0]) + 1]
    found = re.fullmatch(r"  moves +faster/accepted/proposed: (.*)", moves)
    assert found is not None
    counts = [re.fullmatch(r"(neighbour|swap|device|segment|order) (\d+)/(\d+)/(\d+)", part)
              for part in found.group(1).split(", ")]
    assert all(c is not None and int(c[2]) <= int(c[4]) and int(c[3]) <= int(c[4])
               and int(c[4]) > 0 for c in counts)
    # the chain's 9 evaluations: moves proposed, and the first plan of each kicked restart
    kicks = int(re.findall(r"(\d) kicked restart", lines[0])[0])
    assert sum(int(c[4]) for c in counts if c is not None) == 9 - kicks


def test_a_priority_search_from_a_heft_plan_that_does_not_fit_says_so(capsys) -> None:
    # GPT-2's Adam step fits on no single V100, and HEFT puts it all on one
    code, out, _ = run(capsys, "simulate", "--model", "gpt2_small", "--batch", "12", "--train",
                       "--optimizer", "adam", "--cluster", "quad-v100-nvlink", "--policy",
                       "mcmc:evals=8", "--json")
    search = json.loads(out)["search"]
    assert code == 0 and search["keyed_evals"] == 1 and search["keyed_score_s"] is None
    code, out, _ = run(capsys, "simulate", "--model", "gpt2_small", "--batch", "12", "--train",
                       "--optimizer", "adam", "--cluster", "quad-v100-nvlink", "--policy",
                       "mcmc:evals=8")
    assert "in 8 evaluations (1 on HEFT's priorities, none that fits)" in out


def test_a_search_is_scored_by_delta_simulation_alike(capsys, monkeypatch) -> None:
    # the same search, scored by full simulations, then by delta simulation (the default)
    import sim
    import sim.delta

    made = []

    class Counted(sim.delta.DeltaEvaluator):
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*args, **kwargs)
            made.append(self)

    argv = ["simulate", "--model", "mlp", "--batch", "16", "--train", "--cluster",
            "quad-v100-nvlink", "--policy", "mcmc:evals=40,start=heft", "--json"]
    with monkeypatch.context() as patched:
        patched.setattr(sim.delta, "search_evaluator",
                        lambda graph, cluster, cost, **kw: sim.evaluator(cluster, cost, **kw))
        code, full, _ = run(capsys, *argv)
    assert code == 0 and not made
    monkeypatch.setattr(sim.delta, "DeltaEvaluator", Counted)
    monkeypatch.setattr(sim.delta, "RESUME_ABOVE", 0)  # runs resumed on a graph this small
    code, delta, _ = run(capsys, *argv)
    assert code == 0 and len(made) == 1 and made[0].stats["evaluations"] == 40
    assert made[0].stats["restored"] > 0
    assert json.loads(delta)["search"] == json.loads(full)["search"]
    assert json.loads(delta)["makespan_s"] == json.loads(full)["makespan_s"]


@pytest.mark.parametrize("argv", [
    ["simulate", "--model", "mlp", "--cluster", "workstation", "--policy", "heft", "--json"],
    ["simulate", "--model", "mlp", "--batch", "32", "--cluster", "quad-v100-nvlink", "--dp",
     "2", "--json"],
    ["model", "show", "mlp", "--json"]])
def test_a_command_leaves_its_arguments_as_parsed(argv: list[str], capsys) -> None:
    from experiments.cli import build_parser

    args = build_parser().parse_args(argv)
    parsed = dict(vars(args))
    args.func(args)
    capsys.readouterr()
    assert vars(args) == parsed
