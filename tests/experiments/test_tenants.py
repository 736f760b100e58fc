from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from scipy import stats

from experiments.cli import main
from experiments.tenants import (
    JobEntry,
    Stream,
    TenantFile,
    Workload,
    all_jobs,
    estimate_load,
    load_tenants,
    run_tenants,
    stream_jobs,
)
from policies import Plan
from sim import simulate
from tests.helpers import FixedCost, chain, toy_cluster

SPEC = """
cluster = "quad-v100-nvlink"
sharing = "fifo"
policy = "heft"

[[jobs]]
name = "a"
model = "mlp"
batch = 64

[stream]
rate_per_s = 20000.0
count = 3
seed = 4
mix = [{model = "mlp", batch = 64}, {model = "lenet5", batch = 16, train = true}]
"""


def test_stream_arrivals_are_poisson_and_seeded() -> None:
    stream = Stream(rate_per_s=50.0, count=3000, seed=7, mix=[Workload(model="mlp"),
                                                               Workload(model="lenet5")])
    jobs = stream_jobs(stream)
    gaps = np.diff([j.arrival_s for j in jobs])
    # exponential gaps of mean 1/rate: Kolmogorov-Smirnov against scipy's distribution
    assert stats.kstest(gaps, stats.expon(scale=1 / 50.0).cdf).pvalue > 0.01
    assert abs(np.mean([j.model == "mlp" for j in jobs]) - 0.5) < 0.05
    assert jobs == stream_jobs(stream) and jobs[0].arrival_s == 0.0
    assert stream_jobs(stream.model_copy(update={"seed": 8})) != jobs


def test_load_estimate_is_the_work_left_and_the_memory_held() -> None:
    c = toy_cluster(2)
    g = chain(3, nbytes=400)
    run = simulate(Plan(g, {o.name: "d0" for o in g}, {"d0": g.topological_order()}), c,
                   FixedCost(c, default=1.0))
    load = estimate_load([(2.0, run)], at_s=3.5)  # arrived at 2: ops at 2-3, 3-4, 4-5
    assert load.busy_s == {"d0": 1.5}
    assert load.memory_bytes == {"d0": run.peak_memory_bytes["d0"], "d1": 0}
    assert estimate_load([(2.0, run)], at_s=5.0).busy_s == {}


def test_tenant_aware_placement_spreads_jobs_and_removes_the_slowdown() -> None:
    doc = TenantFile(cluster="quad-v100-nvlink", policy="heft", sharing="fifo",
                     jobs=[JobEntry(model="resnet50", batch=16, name=n) for n in "ab"])
    blind = run_tenants(doc, aware=False)
    aware = run_tenants(doc, aware=True)
    assert blind.jobs["slowdown"].max() > 1.5  # both on the same devices, one waits
    assert aware.jobs["slowdown"].max() < 1.1
    assert aware.makespan_s < blind.makespan_s


def test_spec_jobs_and_stream_replay_exactly(tmp_path, capsys) -> None:
    spec = tmp_path / "t.toml"
    spec.write_text(SPEC)
    replay = tmp_path / "replay.toml"
    assert main(["tenants", str(spec), "--json", "--save-jobs", str(replay),
                 "--out", str(tmp_path / "jobs.parquet"),
                 "--trace", str(tmp_path / "trace.json")]) == 0
    first = json.loads(capsys.readouterr().out)
    assert [j["job"] for j in first["jobs"]] == ["a", "s0", "s1", "s2"]
    assert {"sharing", "links", "makespan_s", "fairness", "feasible", "utilization",
            "peak_memory_bytes", "jobs"} <= set(first)
    assert {"job", "arrival_s", "start_s", "end_s", "alone_s", "slowdown", "feasible",
            "reason"} <= set(first["jobs"][0])
    assert "[stream]" not in replay.read_text()
    assert main(["tenants", str(replay), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["jobs"] == first["jobs"]
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert {e["args"]["job"] for e in events if e["ph"] == "X"} == {"a", "s0", "s1",
                                                                    "s2"}


def test_sharing_flag_overrides_the_spec(tmp_path, capsys) -> None:
    spec = tmp_path / "t.toml"
    spec.write_text(SPEC)
    assert main(["tenants", str(spec), "--sharing", "exclusive", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["sharing"] == "exclusive"
    ends = sorted((j["start_s"], j["end_s"]) for j in data["jobs"])
    # heft puts these small jobs on the same device: under exclusive they never overlap
    assert all(s >= e - 1e-12 for (_, e), (s, _) in itertools.pairwise(ends))


@pytest.mark.parametrize(("text", "message"), [
    ('sharing = "fifo"\n[[jobs]]\nmodel = "mlp"\n', "cluster: expected a value"),
    ('cluster = "workstation"\n', "jobs: expected at least one job or a stream, got none"),
    ('cluster = "workstation"\nlinks = "slow"\n[[jobs]]\nmodel = "mlp"\n',
     "links: expected one of 'fcfs', 'fair' or 'none'"),
    ('cluster = "workstation"\n[[jobs]]\nbatch = 2\n',
     "jobs[0]: expected one of model or graph, got neither"),
    ('cluster = "workstation"\n[[jobs]]\nmodel = "mlp"\nweight = nan\n',
     "jobs[0].weight: expected a finite number"),
    ('cluster = "workstation"\n[[jobs]]\nmodel = "mlp"\narrival_s = -1.0\n',
     "jobs[0].arrival_s: expected a number >= 0, got -1.0"),
    ('cluster = "workstation"\nsharing = "lottery"\n[[jobs]]\nmodel = "mlp"\n',
     "unknown sharing policy 'lottery'"),
    ('cluster = "workstation"\n[stream]\nrate_per_s = 0.0\ncount = 2\n'
     'mix = [{model = "mlp"}]\n', "stream.rate_per_s: expected a number greater than 0"),
])
def test_bad_tenant_specs_are_one_line_with_exit_2(tmp_path, capsys, text, message) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    out = tmp_path / "jobs.parquet"
    code = main(["tenants", str(path), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_jobs_come_in_arrival_order_named_where_unnamed(tmp_path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(SPEC)
    jobs = all_jobs(load_tenants(path))
    arrivals = [j.arrival_s for j in jobs]
    assert arrivals == sorted(arrivals) and len({j.name for j in jobs}) == 4


def test_numbers_no_table_can_hold_are_refused_in_one_line(tmp_path, capsys) -> None:
    path = tmp_path / "t.toml"
    path.write_text('cluster = "workstation"\n[[jobs]]\nmodel = "mlp"\n'
                    'priority = 1180591620717411303424\n')
    assert main(["tenants", str(path)]) == 2
    assert "jobs[0].priority: expected a number <= 2147483647" in capsys.readouterr().err
