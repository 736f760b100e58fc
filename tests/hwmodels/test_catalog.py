"""The shipped catalog: what it holds, that its numbers cite sources, the user catalog."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from hwmodels import (
    CalibratedCost,
    TableCost,
    dumps,
    find_devices,
    get_cluster,
    get_device,
    list_clusters,
    list_devices,
    make_cost_model,
)
from workloads import HardwareSpecError, UnsupportedOp, build_model

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "experiments" / "hardware" / "whatif-npu.toml"


def test_catalog_holds_the_promised_hardware() -> None:
    assert {"xeon-8380", "epyc-7763", "v100-sxm2-32gb", "a100-sxm4-80gb", "h100-sxm5-80gb",
            "h200-sxm-141gb", "mi300x", "l4", "tpu-v4", "gaudi2", "alveo-u280"} <= set(
        list_devices())
    assert {"dgx1-v100", "dgx-a100", "dgx-h100", "dgx-h100-x2-ib", "workstation", "cpu-host",
            "hetero-box"} <= set(list_clusters())
    kinds = {get_device(n).kind for n in list_devices()}
    assert {"cpu", "gpu", "tpu", "npu", "fpga"} <= kinds


def test_every_catalog_figure_has_a_comment_before_it() -> None:
    text = (resources.files("hwmodels") / "catalog" / "devices.toml").read_text()
    for block in text.split("[[device]]")[1:]:
        found = re.search(r'name = "([^"]+)"', block)
        assert found is not None, block[:80]
        name = found.group(1)
        lines = block.splitlines()
        for key in ("peak_tflops", "memory_gib", "memory_bandwidth_gbps",
                    "launch_overhead_us", "efficiency"):
            at = next(i for i, line in enumerate(lines) if line.startswith(key))
            assert any(line.startswith("#") for line in lines[:at]), (name, key)


def test_dgx1_hybrid_cube_mesh_uses_six_bricks_per_gpu() -> None:
    c = get_cluster("dgx1-v100")
    for d in c.device_names:
        total = sum(link.bandwidth for link in c.links if d in (link.a, link.b))
        assert total == pytest.approx(6 * 25e9)


def test_two_node_routes_cross_infiniband_only_between_nodes() -> None:
    c = get_cluster("dgx-h100-x2-ib")
    assert [h.link.name for h in c.route("n0.gpu0", "n0.gpu5")] == ["n0.nvlink0",
                                                                     "n0.nvlink5"]
    assert [h.link.name for h in c.route("n0.gpu0", "n1.gpu3")] == ["n0.ib0", "n1.ib3"]
    assert c.bandwidth("n0.gpu0", "n1.gpu3") == 50e9


def test_capability_queries() -> None:
    assert [d.name for d in find_devices(kind="fpga")] == ["alveo-u280"]
    assert "tpu-v4" not in [d.name for d in find_devices(dtype="fp32")]
    box = get_cluster("hetero-box")
    assert [d.name for d in box.devices_with(dtype="bf16")] == ["gpu0", "gpu1", "npu0"]
    assert [d.name for d in box.devices_with(min_memory_bytes=100 * 2**30)] == ["cpu0"]


def test_unknown_dtype_on_a_device_is_named() -> None:
    with pytest.raises(UnsupportedOp, match=r"device 'tpu-v4': has no peak rate for "
                                                r"dtype 'fp32'; it has bf16, int8"):
        get_device("tpu-v4").peak_flops("fp32")


def _cli(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PLACELAB_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "experiments.cli", *argv], env=env,
                          capture_output=True, text=True, check=False, cwd=ROOT)


def test_hw_register_is_seen_by_later_commands(tmp_path: Path) -> None:
    done = _cli(tmp_path, "hw", "register", str(EXAMPLE), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["devices"] == ["whatif-npu"]
    shown = _cli(tmp_path, "hw", "show", "whatif-npu", "--json")
    assert json.loads(shown.stdout)["memory_gib"] == 64
    sim = _cli(tmp_path, "simulate", "--model", "mlp", "--cluster", "whatif-box",
               "--policy", "heft", "--json")
    assert sim.returncode == 0 and json.loads(sim.stdout)["feasible"]
    again = _cli(tmp_path, "hw", "register", str(EXAMPLE))
    assert again.returncode == 2 and "already registered" in again.stderr


@pytest.mark.parametrize(("edit", "message"), [
    (("memory_gib = 64", "memory_gib = -4"),
     "device[0].memory_gib: expected a number greater than 0, got -4"),
    (("bandwidth_gbps = 200, latency_us = 0.5", "bandwidth_gbps = 0, latency_us = 0.5"),
     "cluster[0].link[2].bandwidth_gbps: expected a number greater than 0, got 0"),
    (('b = "npu1", bandwidth', 'b = "npu9", bandwidth'), "joins 'npu9', which is not"),
    (("bf16 = 300", "bf17 = 300"), "peak dtype must be one of"),
    (('kind = "npu"\n', ""), "device[0].kind: expected a value (the field is required), got "
                             "nothing"),
    (('model = "epyc-7763"', 'model = "epyc-9999"'), "unknown device 'epyc-9999'"),
    (("x-npu", "workstation"), "device 'workstation' names a cluster already (from builtin)"),
    (('name = "x-box"', 'name = "l4"'), "cluster 'l4' names a device already (from builtin)"),
    (('name = "x-box"', 'name = "x-npu"'), "cluster 'x-npu': expected a name no device has, "
                                          "got the name of a device of the same file"),
    (('name = "x-npu"', 'name = "x\\tnpu"'), "name must be a non-empty string of printable "
                                             "characters, got 'x\\tnpu'"),
])
def test_hw_register_refuses_bad_files_and_stores_nothing(tmp_path: Path, edit,
                                                          message: str) -> None:
    text = EXAMPLE.read_text().replace("whatif-npu", "x-npu").replace("whatif-box", "x-box")
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace(*edit))
    home = tmp_path / "home"
    done = _cli(home, "hw", "register", str(bad))
    assert done.returncode == 2
    assert done.stderr.startswith(f"placelab: error: {bad}: ")
    assert message in done.stderr and len(done.stderr.splitlines()) == 1
    assert not (home / "hardware").exists() or not list((home / "hardware").iterdir())


def test_calibrated_cost_uses_the_calibrated_spec(tmp_path: Path) -> None:
    cluster = get_cluster("workstation")
    l4 = get_device("l4")
    slow = l4.__class__(**{**l4.__dict__, "launch_overhead_s": 1e-3, "efficiency": {}})
    path = tmp_path / "l4-calibrated.toml"
    path.write_text(dumps([slow]))
    cost = make_cost_model("calibrated", cluster, path)
    assert isinstance(cost, CalibratedCost)
    relu = build_model("mlp").op("relu1")
    base = make_cost_model("roofline", cluster)
    moved = relu.bytes_read + relu.bytes_written
    assert cost.op_time(relu, "gpu0") == 1e-3 + moved / l4.memory_bandwidth  # efficiency 1
    assert cost.op_time(relu, "cpu0") == base.op_time(relu, "cpu0")
    with pytest.raises(HardwareSpecError, match="needs a calibration file, got none"):
        make_cost_model("calibrated", cluster)


def test_table_cost_from_file_and_errors(tmp_path: Path) -> None:
    cluster = get_cluster("workstation")
    path = tmp_path / "t.toml"
    path.write_text('[op_time_s]\ninput = { cpu0 = 0, gpu0 = 0 }\n'
                    'fc1 = { cpu0 = 2.5, gpu0 = 0.5 }\n[transfer_time_s]\ninput = 7\n')
    cost = make_cost_model("table", cluster, path)
    assert isinstance(cost, TableCost)
    g = build_model("mlp")
    assert cost.op_time(g.op("fc1"), "cpu0") == 2.5
    assert cost.tensor_transfer_time("input", 1, "cpu0", "gpu0") == 7.0
    with pytest.raises(UnsupportedOp, match="no time for op 'relu1' on device 'gpu0'"):
        cost.op_time(g.op("relu1"), "gpu0")
    with pytest.raises(HardwareSpecError, match="takes no file"):
        make_cost_model("roofline", cluster, path)
