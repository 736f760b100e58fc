"""Every built-in cost model through the cost-model conformance suite."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from hwmodels import CalibratedCost, Cluster, CostModel, RooflineCost, TableCost, dumps
from hwmodels.spec import Device
from hwmodels.testing import ConformanceError, check_cost_model, parametrize_with_checks
from workloads.errors import UnsupportedOp


def table(cluster: Cluster) -> CostModel:
    """A table with one time per (op, device), none for the fp64 op on the accelerators."""
    ops = ("linear0", "relu1", "softmax2", "transpose3", "conv2d4", "x")
    rows = {op: {d: 1e-4 * (i + 1) for d in cluster.device_names}
            for i, op in enumerate(ops)}
    rows["wide"] = {"c0": 1e-3}
    return TableCost(cluster, rows)


def calibrated(cluster: Cluster) -> CostModel:
    spec = Device("n0", "npu", {"fp32": 5e13}, 2**34, 5e11, launch_overhead_s=3e-6)
    path = Path(tempfile.mkdtemp()) / "n0.toml"
    path.write_text(dumps(devices=[spec]))
    return CalibratedCost(cluster, path)


@parametrize_with_checks(["roofline", table, calibrated])
def test_cost_conformance(cost, check) -> None:
    check(cost)


def test_a_broken_cost_model_fails_the_suite() -> None:
    class Careless(RooflineCost):
        """Costs ops it cannot run and charges for local copies."""

        def op_time(self, op, device):
            try:
                return super().op_time(op, device)
            except UnsupportedOp:
                return 0.0

        def transfer_time(self, nbytes, src, dst):
            return 1e-6 + nbytes / 1e9

    with pytest.raises(ConformanceError, match=r"\[unsupported_dtype\] Careless: an fp64 op "
                                               r".*\[transfers\] Careless: a transfer within "
                                               r"one device is not free"):
        check_cost_model(Careless)


@pytest.mark.parametrize(("op_times", "transfers", "message"), [
    ({"a": 5}, None, "table: op_time_s.a must be a mapping of device to seconds, got 5"),
    ([("a", {})], None, "table: op_time_s must be a mapping, got list"),
    ({"a": {"p1": True}}, None, "table: op_time_s.a.p1 must be a finite number >= 0, got True"),
    ({"a": {"p1": float("nan")}}, None,
     "table: op_time_s.a.p1 must be a finite number >= 0, got nan"),
    ({}, {"t": -1.0}, "table: transfer_time_s.t must be a finite number >= 0, got -1.0"),
    ({}, [1.0], "table: transfer_time_s must be a mapping, got list"),
])
def test_a_malformed_table_is_refused_naming_the_entry(op_times, transfers, message) -> None:
    from hwmodels import Link
    from workloads.errors import HardwareSpecError

    d = tuple(Device(n, "cpu", {"fp32": 1e9}, 2**30, 1e9) for n in ("p1", "p2"))
    with pytest.raises(HardwareSpecError, match=f"^{message}$".replace(".", r"\.")):
        TableCost(Cluster("c", d, (Link("p1", "p2", 1e9),)), op_times, transfers)
