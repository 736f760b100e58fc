"""``placelab profile`` and what the calibrated cost model makes of a profile: measured
signatures first, and a simulation that says which source priced how much."""

from __future__ import annotations

import json

import pytest

from experiments.cli import main
from hwmodels.calibrated import CalibratedCost
from hwmodels.profiles import ProfileStore
from policies import plan
from runtime import NumpyEngine
from sim import simulate
from tests.runtime.test_calibrate import _calibration
from workloads import build_model


def test_profile_list_and_clear_from_the_command_line(tmp_path, capsys) -> None:
    db = tmp_path / "p.sqlite"
    assert main(["profile", "--model", "mlp", "--batch", "3", "--engine", "cpu", "--db",
                 str(db), "--min-seconds", "0.01", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert (done["graph"], done["engine"], done["devices"], done["threads"]) == (
        "mlp", "cpu", 2, 1)
    assert done["ops"] == 6 and done["signatures"] == done["stored"] == 5  # two relus alike
    assert main(["profile", "--model", "mlp", "--batch", "3", "--train", "--db", str(db),
                 "--min-seconds", "0.01", "--json"]) == 0
    capsys.readouterr()
    assert main(["profile", "--list", "--db", str(db), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["profiles"]
    assert (row["engine"], row["threads"], row["graphs"]) == ("cpu", 1, 2)
    assert row["entries"] > 6 and row["fingerprint"]["libraries"]["numpy"]
    assert main(["profile", "--clear", "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cleared"] and not db.exists()


def test_a_corrupt_database_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    db = tmp_path / "p.sqlite"
    db.write_bytes(b"\0" * 4096)
    assert main(["profile", "--list", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expected a placelab profile database" in err
    assert main(["profile", "--model", "nope", "--db", str(db)]) == 2
    assert "unknown model 'nope'" in capsys.readouterr().err


def test_measured_signatures_come_first_and_the_simulation_says_so(tmp_path) -> None:
    from runtime.profile import profile_graph

    path = _calibration().write(tmp_path / "cal.toml")
    engine = NumpyEngine(devices=2, calibration=path)
    graph = build_model("mlp", batch=3)
    store = ProfileStore(tmp_path / "p.sqlite")
    # the profile is keyed by the machine the calibration names: profile as that machine
    engine.fingerprint = lambda: {"cpu": "test", "cores": 2,  # type: ignore[method-assign]
                                  "libraries": {"numpy": "x"}}
    profile_graph(engine, graph, store, repeats=2, min_seconds=0.0)
    cluster = engine.cluster()
    before = CalibratedCost(cluster, path, profiles=None)
    after = CalibratedCost(cluster, path, profiles=store.path)
    view = store.view("cpu", engine.fingerprint(), 1)
    fc1 = graph.op("fc1")
    from hwmodels.cost import op_signature

    assert after.source(fc1, "cpu0") == "profile"
    assert after.op_time(fc1, "cpu0") == view.seconds(op_signature(fc1, 3), 3)
    assert before.source(fc1, "cpu0") == "roofline"  # no product was calibrated
    assert before.source(graph.op("relu1"), "cpu0") == "predictor"
    p = plan(graph, cluster, "round_robin", after)
    result = simulate(p, cluster, after)
    shares = result.cost_sources
    assert shares["profile"]["ops"] == 6 and shares["run start"]["ops"] == 1  # the input
    assert sum(s["share"] for s in shares.values()) == pytest.approx(1.0)
    assert sum(s["seconds"] for s in shares.values()) == pytest.approx(
        sum(after.op_times(graph, p.placement)))
    plain = simulate(p, cluster, before).cost_sources  # relus: fitted; products: roofline
    assert (plain["predictor"]["ops"], plain["roofline"]["ops"]) == (2, 4)
