"""One test per way bad input used to go wrong: the catalog broken by a registration, numbers
silently wrong, tracebacks, outputs that replaced what was at their path."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.cli import main
from hwmodels import Cluster, Device, Link, RooflineCost, TableCost, get_cluster
from policies import Plan, plan
from policies.optimal import Optimal
from sim import simulate
from tests.helpers import reload_catalog
from workloads import (
    Graph,
    GraphBuilder,
    GraphError,
    HardwareSpecError,
    PlacementError,
    build_model,
)
from workloads.io import write_text_atomic

ROOT = Path(__file__).resolve().parents[1]

DEVICE = """
[[device]]
name = "z-npu"
kind = "npu"
memory_gib = 16
memory_bandwidth_gbps = 800
peak_tflops = { bf16 = 200 }
"""
CLUSTER = """
[[cluster]]
name = "a-box"
device = [{ name = "n0", model = "z-npu" }, { name = "n1", model = "z-npu" }]
link = [{ a = "n0", b = "n1", bandwidth_gbps = 100 }]
"""


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- 1. the user catalog ------------------------------------------------------------------


def test_registration_order_cannot_break_the_catalog(home, tmp_path, capsys) -> None:
    # The cluster's file sorts before its device's file ("a-box" < "z-npu"): the catalog
    # still loads, because every device is registered before any cluster.
    reload_catalog()
    (tmp_path / "z-npu.toml").write_text(DEVICE)
    (tmp_path / "a-box.toml").write_text(CLUSTER)
    assert _cli(capsys, "hw", "register", str(tmp_path / "z-npu.toml"))[0] == 0
    assert _cli(capsys, "hw", "register", str(tmp_path / "a-box.toml"))[0] == 0
    reload_catalog()
    code, out, err = _cli(capsys, "hw", "list", "--json")
    assert code == 0 and err == ""
    names = {row["name"] for row in json.loads(out)["hardware"]}
    assert {"z-npu", "a-box"} <= names


def test_a_cluster_whose_device_is_missing_is_refused_before_storing(home, tmp_path,
                                                                     capsys) -> None:
    reload_catalog()
    (tmp_path / "a-box.toml").write_text(CLUSTER)
    code, _, err = _cli(capsys, "hw", "register", str(tmp_path / "a-box.toml"))
    assert code == 2 and "unknown device 'z-npu'" in err
    assert not (home / "hardware").exists() or not list((home / "hardware").iterdir())


def test_a_corrupt_stored_file_is_skipped_with_a_warning(home, capsys) -> None:
    reload_catalog()
    (home / "hardware").mkdir(parents=True)
    (home / "hardware" / "broken.toml").write_bytes(b"[[device]]\nname = \xff")
    (home / "hardware" / "z-npu.toml").write_text(DEVICE)
    code, out, err = _cli(capsys, "hw", "list")
    assert code == 0 and "z-npu" in out
    assert err.count("\n") == 1 and "broken.toml is skipped: " in err
    assert "expected UTF-8 text" in err
    code, _, _ = _cli(capsys, "simulate", "--model", "mlp", "--cluster", "workstation",
                      "--policy", "heft")
    assert code == 0


def test_a_file_without_the_toml_suffix_is_stored_under_a_toml_name(home, tmp_path,
                                                                    capsys) -> None:
    reload_catalog()
    (tmp_path / "npu.hw").write_text(DEVICE)
    code, out, _ = _cli(capsys, "hw", "register", str(tmp_path / "npu.hw"), "--json")
    assert code == 0 and json.loads(out)["stored"].endswith("npu.hw.toml")
    reload_catalog()
    assert "z-npu" in _cli(capsys, "list", "devices")[1].split()


def test_hw_remove_undoes_a_registration_and_refuses_what_others_use(home, tmp_path,
                                                                    capsys) -> None:
    reload_catalog()
    (tmp_path / "z-npu.toml").write_text(DEVICE)
    (tmp_path / "a-box.toml").write_text(CLUSTER)
    _cli(capsys, "hw", "register", str(tmp_path / "z-npu.toml"))
    _cli(capsys, "hw", "register", str(tmp_path / "a-box.toml"))
    code, _, err = _cli(capsys, "hw", "remove", "z-npu")
    assert code == 2 and "cluster 'a-box'" in err and "uses device 'z-npu'" in err
    assert _cli(capsys, "hw", "remove", "a-box")[0] == 0
    assert _cli(capsys, "hw", "remove", "z-npu")[0] == 0
    assert not list((home / "hardware").glob("*.toml"))
    code, _, err = _cli(capsys, "hw", "remove", "l4")
    assert code == 2 and "expected one registered from a file in the user catalog" in err


# -- 2. numbers that were silently wrong --------------------------------------------------


def test_nan_costs_in_a_graph_file_are_refused() -> None:
    data = build_model("mlp").to_dict()
    data["ops"][1]["flops"] = float("nan")
    with pytest.raises(GraphError, match=r"g.json: expected finite numbers, got NaN"):
        Graph.from_json(json.dumps(data), source="g.json")
    data["ops"][1]["flops"] = 10
    data["ops"][1]["bytes_read"] = 1e400  # JSON's Infinity spelled as a number
    with pytest.raises(GraphError, match=r"g.json: ops\[1\].bytes_read: expected an integer"):
        Graph.from_json(json.dumps(data).replace("Infinity", "1e400"), source="g.json")


def test_nan_and_infinite_cost_tables_are_refused(tmp_path) -> None:
    cluster = get_cluster("workstation")
    path = tmp_path / "t.toml"
    path.write_text("[op_time_s]\nfc1 = { cpu0 = nan, gpu0 = 0.5 }\n")
    with pytest.raises(Exception, match=r"t.toml: op_time_s.fc1.cpu0: expected a finite "
                                        r"number, got nan"):
        TableCost.create(cluster, path)
    with pytest.raises(Exception, match=r"op_time_s.fc1.cpu0 must be a finite number"):
        TableCost(cluster, {"fc1": {"cpu0": math.inf}})


@pytest.mark.parametrize(("field", "value", "message"), [
    ("memory_bandwidth_gbps", "inf", "expected a finite number, got inf"),
    ("launch_overhead_us", "inf", "expected a finite number, got inf"),
    ("compute_streams", "100000000", "expected a number <= 1024, got 100000000"),
    ("copy_engines", "0", "expected a number >= 1, got 0"),
    ("memory_gib", "1e30", "expected a number <= 4294967296, got 1e+30"),
])
def test_infinite_and_absurd_hardware_figures_are_refused(field, value, message) -> None:
    from hwmodels import loads

    text = DEVICE.replace('kind = "npu"', f'kind = "npu"\n{field} = {value}') \
        if field not in DEVICE else DEVICE.replace(f"{field} = ", f"{field} = {value} #")
    with pytest.raises(Exception, match=re.escape(f"x.toml: device[0].{field}: {message}")):
        loads(text, source="x.toml")


def test_a_cost_model_of_another_cluster_is_refused() -> None:
    graph = build_model("mlp")
    ws = get_cluster("workstation")
    faster = Cluster("workstation", tuple(
        Device(d.name, d.kind, {k: 10 * v for k, v in d.peak.items()}, d.memory_bytes,
               d.memory_bandwidth) for d in ws.devices), ws.links)
    p = plan(graph, ws, "heft")
    with pytest.raises(HardwareSpecError, match=r"simulate: cost model is bound to cluster "
                                             r"'workstation', expected one bound to "
                                             r"'workstation'"):
        simulate(p, ws, RooflineCost(faster))
    with pytest.raises(PlacementError, match=r"plan: made for cluster 'workstation' "
                                             r"\(definition [0-9a-f]{12}\), expected one for "
                                             r"cluster 'workstation'"):
        simulate(p, faster, RooflineCost(faster))
    assert Plan.from_json(p.to_json()).cluster_hash == ws.definition_hash


def test_compare_refuses_a_name_listed_twice() -> None:
    from experiments import compare

    with pytest.raises(PlacementError, match=r"compare: policies must name each once, got "
                                             r"'heft' twice"):
        compare(["mlp"], "workstation", ["heft", "heft"])
    with pytest.raises(PlacementError, match=r"compare: models must name at least one"):
        compare([], "workstation", ["heft"])


def test_json_output_never_holds_nan(capsys) -> None:
    # A policy that cannot place the graph gives a row without a makespan: null, with a
    # reason, never NaN (which is not JSON).
    code, out, _ = _cli(capsys, "compare", "--model", "resnet50", "--cluster", "workstation",
                        "--policies", "single_device,optimal", "--json")
    assert code == 0
    rows = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))["rows"]
    refused = next(r for r in rows if r["policy"] == "optimal")  # 177 ops: over max_ops
    assert refused["makespan_s"] is None and "max_ops=30" in refused["reason"]


def test_optimal_gives_the_same_plan_under_any_load() -> None:
    # The MILP stops on branch-and-bound nodes, not seconds: a busy machine gives the same.
    from policies.testing import random_dag

    graph, cluster = random_dag(14, seed=4), get_cluster("hetero-box")
    quiet = plan(graph, cluster, Optimal(node_limit=200))
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = plan(graph, cluster, Optimal(node_limit=200))
    finally:
        burner.kill()
    assert quiet.placement == busy.placement and quiet.order == busy.order
    assert quiet.info == busy.info


# -- 3. tracebacks ------------------------------------------------------------------------


def test_stone_mincut_on_an_empty_graph_is_a_clear_error() -> None:
    with pytest.raises(PlacementError, match=r"plan: graph 'empty': expected at least one op"):
        plan(Graph("empty", []), get_cluster("workstation"), "stone_mincut")


def test_a_gantt_of_a_graph_named_like_mathtext(tmp_path) -> None:
    b = GraphBuilder("$x^$")
    b.relu(b.input((4, 4)))
    cluster = get_cluster("workstation")
    result = simulate(plan(b.build(), cluster, "heft"), cluster, RooflineCost(cluster))
    path = result.write_gantt(tmp_path / "g.png", title="$x^$ on workstation")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_ctrl_c_ends_with_one_line_and_status_130(tmp_path) -> None:
    # A child started in the background inherits SIGINT ignored: restore Ctrl-C's default
    # so the test sees what a terminal user does.
    script = ("import signal, time, experiments.cli as c\n"
              "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
              "c.cmd_list = lambda a: time.sleep(30)\n"
              "raise SystemExit(c.main(['list', 'models']))\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stderr=subprocess.PIPE,
                            text=True)
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and err == "placelab: interrupted\n"


# -- 4. outputs ---------------------------------------------------------------------------


def test_outputs_keep_the_mode_of_the_file_they_replace(tmp_path) -> None:
    path = tmp_path / "r.json"
    path.write_text("old")
    path.chmod(0o600)
    write_text_atomic(path, "new")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == "new"


def test_outputs_write_through_symlinks_and_fifos(tmp_path) -> None:
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_text_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    write_text_atomic(fifo, "through the pipe")
    assert reader.communicate(timeout=10)[0] == b"through the pipe"
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_an_output_of_dash_is_standard_output(capsys) -> None:
    code, out, _ = _cli(capsys, "simulate", "--model", "mlp", "--cluster", "workstation",
                        "--policy", "heft", "--trace", "-")
    assert code == 0 and '"traceEvents"' in out


def test_stale_temporary_files_of_an_output_are_cleaned(tmp_path) -> None:
    path = tmp_path / "r.json"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    stale = tmp_path / f".r.json.{dead}.abc.tmp"
    stale.write_text("left by an interrupted run")
    live = tmp_path / f".r.json.{os.getpid()}.def.tmp"
    live.write_text("being written right now")
    write_text_atomic(path, "done")
    assert not stale.exists() and live.exists()


def test_a_non_utf8_graph_file_is_one_line(tmp_path, capsys) -> None:
    path = tmp_path / "g.json"
    data = b'{"format": "placelab.graph", "name": "\xff"}'
    offset = data.index(b"\xff")
    path.write_bytes(data)
    code, _, err = _cli(capsys, "simulate", "--graph", str(path), "--cluster", "workstation",
                        "--policy", "heft")
    assert code == 2 and err == (f"placelab: error: {path}: expected UTF-8 text, got a byte "
                                 f"0xff at offset {offset}\n")


def test_links_and_devices_of_python_specs_must_be_finite() -> None:
    with pytest.raises(Exception, match=r"link 'l': latency_s must be a finite number >= 0, "
                                        r"got inf"):
        Link("a", "b", 1e9, math.inf, name="l")
