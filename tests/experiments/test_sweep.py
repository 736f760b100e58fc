"""Sweeps: stable spec hashes, rows for every failure, resumption, any executor, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from experiments.cli import main
from experiments.runspec import WALL_COLUMNS, RunSpec, run_one
from experiments.sweep import Experiment, SweepError, load_sweep, specs_from

SPEC = """
models = ["mlp"]
clusters = ["workstation", "quad-v100-nvlink"]
policies = ["heft", "round_robin"]
batch = [8]
train = [false, true]

[[policy_grid]]
name = "random"
params = { seed = [1, 2] }
"""


def grid() -> list[RunSpec]:
    return [RunSpec.make("mlp", c, p, batch=8, train=t)
            for c in ("workstation", "quad-v100-nvlink") for p in ("heft", "random:seed=1")
            for t in (False, True)]


def same_but_wall(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.drop(columns=list(WALL_COLUMNS)),
                                  b.drop(columns=list(WALL_COLUMNS)))


def test_a_spec_hash_is_the_same_in_another_process() -> None:
    spec = RunSpec.make("mlp", "workstation", "random:seed=3", batch=4, train=True)
    code = ("from experiments.runspec import RunSpec; print(RunSpec.make('mlp', "
            "'workstation', 'random:seed=3', batch=4, train=True).key)")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.strip()
    assert other == spec.key


@pytest.mark.parametrize("change", [{"batch": 9}, {"train": True}, {"links": "fair"},
                                    {"seed": 1}, {"passes": ("cse",)}, {"cost": "gpu"}])
def test_every_field_changes_the_hash(change: dict) -> None:
    base = RunSpec.make("mlp", "workstation", "heft")
    assert RunSpec.make("mlp", "workstation", "heft", **change).key != base.key


def test_failures_are_rows_not_exceptions(monkeypatch) -> None:
    oom = run_one(RunSpec.make("gpt2_small", "workstation", "heft", batch=12, train=True,
                               optimizer="adam"))
    assert oom["feasible"] is False and "out of memory" in oom["reason"] and not oom["error"]
    bad = run_one(RunSpec.make("mlp", "workstation", "optimal:max_ops=0"))
    assert bad["reason"] == "policy 'optimal': max_ops must be an int >= 1, got 0"

    def broken(spec):  # type: ignore[no-untyped-def]
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr("experiments.runspec._simulate", broken)
    row = run_one(RunSpec.make("mlp", "workstation", "heft"))
    assert row["feasible"] is False and row["error"] == "ZeroDivisionError: float division by zero"


def test_a_seeded_spec_seeds_a_seeded_policy_only() -> None:
    seeded = run_one(RunSpec.make("mlp", "quad-v100-nvlink", "random", seed=7))
    assert json.loads(seeded["policy_params"]) == {"seed": 7}
    explicit = run_one(RunSpec.make("mlp", "quad-v100-nvlink", "random:seed=2", seed=7))
    assert json.loads(explicit["policy_params"]) == {"seed": 2}
    assert run_one(RunSpec.make("mlp", "workstation", "heft", seed=7))["feasible"]


def test_an_interrupted_sweep_resumes_without_rerunning_finished_cells(tmp_path, monkeypatch):
    first = Experiment(grid(), out=tmp_path).run(workers=1, progress=False)
    cells = sorted((tmp_path / "cells").glob("*.json"))
    assert len(cells) == len(first) == 8
    cells[0].unlink()  # as if the sweep had stopped before this cell
    ran: list[str] = []

    def counting(spec):  # type: ignore[no-untyped-def]
        ran.append(spec.key)
        return run_one(spec)

    monkeypatch.setattr("experiments.sweep.run_one", counting)
    second = Experiment(grid(), out=tmp_path).run(workers=1, progress=False)
    assert ran == [cells[0].stem]
    same_but_wall(first, second)
    same_but_wall(first, pd.read_parquet(tmp_path / "results.parquet"))


def test_a_process_pool_gives_the_serial_table() -> None:
    serial = Experiment(grid()).run(workers=1, progress=False)
    pooled = Experiment(grid()).run(workers=2, progress=False)
    same_but_wall(serial, pooled)
    assert serial["feasible"].all()


def test_a_dask_cluster_gives_the_serial_table() -> None:
    distributed = pytest.importorskip("distributed", reason="Dask distributed not installed")
    serial = Experiment(grid()[:4]).run(workers=1, progress=False)
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2,
                            dashboard_address=None) as client:
        on_dask = Experiment(grid()[:4]).run(client.get_executor(), progress=False)
    same_but_wall(serial, on_dask)


def test_the_spec_file_expands_its_grid(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(SPEC)
    specs = specs_from(load_sweep(path)[0])
    # 1 model x 1 batch x 2 steps x 2 clusters x (2 policies + 2 seeds of random)
    assert len(specs) == 16
    assert {s.policy for s in specs} == {"heft", "round_robin", "random:seed=1",
                                        "random:seed=2"}


def test_a_what_if_varies_one_device_field(tmp_path: Path) -> None:
    path = tmp_path / "w.toml"
    path.write_text('models = ["resnet50"]\nclusters = ["quad-v100-nvlink"]\n'
                    'policies = ["single_device"]\nbatch = [32]\n'
                    '[whatif]\ndevice = "v100-sxm2-32gb"\nfield = "memory_bandwidth_gbps"\n'
                    'values = [450, 900, 1800]\n')
    df = Experiment(specs_from(load_sweep(path)[0])).run(workers=1, progress=False)
    assert list(df["variant"]) == [f"v100-sxm2-32gb.memory_bandwidth_gbps={v}"
                                   for v in (450, 900, 1800)]
    times = list(df["makespan_s"])
    assert times[0] > times[1] > times[2]  # more bandwidth, faster memory-bound ops
    assert df["cluster_hash"].nunique() == 3


@pytest.mark.parametrize(("text", "message"), [
    ('models = ["mlp"]\nclusters = ["workstation"]\npolicies = ["heft"]\nbatchs = [1]\n',
     "batchs: unknown field"),
    ('models = ["mlp"]\nclusters = ["workstation"]\npolicies = ["heft:nope=1"]\n',
     "policy 'heft': expected parameters key=value with keys among none"),
    ('models = ["mlp"]\nclusters = ["workstation"]\npolicies = ["heft"]\n'
     '[whatif]\ndevice = "tpu9"\nfield = "memory_gib"\nvalues = [1]\n',
     "whatif.device: expected a device model of cluster 'workstation'"),
    ('models = ["mlp"]\nclusters = ["workstation"]\npolicies = ["heft"]\n'
     '[whatif]\ndevice = "l4"\nfield = "memory_gib"\nvalues = [-1]\n',
     "memory_gib"),
    ('models = ["mlp"]\nclusters = ["workstation"]\n', "policies: expected at least one"),
])
def test_bad_sweep_specs_are_one_line_with_exit_2(tmp_path, capsys, text, message) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    code = main(["sweep", str(path), "--out", str(tmp_path / "out"), "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "results.parquet").exists()


def test_cli_sweep_then_rerun_gives_the_same_table(tmp_path, capsys) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC)
    out = tmp_path / "run"
    assert main(["sweep", str(spec), "--out", str(out), "--workers", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["cells"] == 16 and data["errors"] == 0
    assert json.loads((out / "environment.json").read_text())["cells"] == 16
    assert main(["sweep", "--rerun", str(out), "--workers", "1", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["out"] == str(tmp_path / "run-rerun")
    same_but_wall(pd.read_parquet(out / "results.parquet"),
                  pd.read_parquet(tmp_path / "run-rerun" / "results.parquet"))


def test_sweep_errors_name_the_problem() -> None:
    with pytest.raises(SweepError, match="cannot read sweep spec"):
        load_sweep("/nonexistent/sweep.toml")


def test_a_sweep_killed_halfway_resumes_with_only_the_missing_cells(tmp_path, monkeypatch):
    import os
    import signal
    import time

    spec = tmp_path / "s.toml"
    spec.write_text('models = ["mlp", "lenet5"]\nclusters = ["workstation", "quad-v100-nvlink",'
                    ' "dgx1-v100", "hetero-box"]\npolicies = ["heft", "m_etf", "m_topo", '
                    '"round_robin", "random"]\ntrain = [false, true]\nseeds = [0, 1, 2]\n')
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "experiments.cli", "sweep", str(spec),
                             "--out", str(out), "--workers", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(list((out / "cells").glob("*.json"))) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    kept = list((out / "cells").glob("*.json"))
    for cell in kept:  # atomic writes: a kill leaves whole cells only
        json.loads(cell.read_text())
    specs = specs_from(load_sweep(spec)[0])
    assert 5 <= len(kept) < len(specs) == 240
    ran: list[str] = []

    def counting(s):  # type: ignore[no-untyped-def]
        ran.append(s.key)
        return run_one(s)

    monkeypatch.setattr("experiments.sweep.run_one", counting)
    df = Experiment(specs, out=out).run(workers=1, progress=False)
    assert sorted(ran) == sorted({s.key for s in specs} - {c.stem for c in kept})
    assert len(df) == 240 and df["feasible"].notna().all() and (df["error"] == "").all()


def test_a_long_sweep_counts_its_infeasible_cells_by_reason() -> None:
    from experiments.sweepcmd import _reasons

    df = pd.DataFrame({"feasible": [False, False, True, False], "reason": [
        "out of memory on device 'gpu0' at t=0.1 s (op 'a' starts): needs 5 bytes, has 4",
        "out of memory on device 'gpu3' at t=2.5 s (op 'b' starts): needs 9 bytes, has 8",
        "", "policy 'optimal': graph 'g' has 40 ops; the MILP is limited to max_ops=30"]})
    assert _reasons(df).splitlines() == [
        "infeasible cells by reason:",
        "      2  out of memory on device '…' at t=N s (op '…' starts): needs N bytes, has N",
        "      1  policy '…': graph '…' has N ops; the MILP is limited to max_ops=N"]


def test_a_short_sweep_prints_its_table_with_every_reason(tmp_path, capsys) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text('models = ["gpt2_small"]\nclusters = ["workstation"]\n'
                    'policies = ["single_device", "optimal"]\nbatch = [12]\ntrain = [true]\n'
                    'optimizer = ["adam"]\n')
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--workers", "1"]) == 0
    text = capsys.readouterr().out
    assert "infeasible:" in text and "out of memory on device" in text
    assert "the MILP is limited to max_ops=30" in text


def test_a_sweep_killed_outright_leaves_no_worker_behind(tmp_path) -> None:
    import signal
    import time

    import psutil

    spec = tmp_path / "s.toml"
    spec.write_text('models = ["mlp", "lenet5"]\nclusters = ["workstation", "dgx1-v100"]\n'
                    'policies = ["heft", "m_etf", "m_topo", "round_robin", "random"]\n'
                    'train = [false, true]\nseeds = [0, 1, 2, 3, 4, 5, 6, 7]\n')
    proc = subprocess.Popen([sys.executable, "-m", "experiments.cli", "sweep", str(spec),
                             "--out", str(tmp_path / "run"), "--workers", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    parent, deadline = psutil.Process(proc.pid), time.monotonic() + 60
    while len(workers := parent.children(recursive=True)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(workers) >= 2
    proc.send_signal(signal.SIGKILL)  # no clean-up runs: the workers must see it themselves
    # not reaped yet (a zombie, as under a driver that never waits): gone all the same
    _, alive = psutil.wait_procs(workers, timeout=30)
    proc.wait()
    for p in alive:
        p.kill()
    assert alive == [], [p.pid for p in alive]
