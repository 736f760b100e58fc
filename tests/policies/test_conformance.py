"""Every registered policy through the conformance suite, plus what needs the simulator."""

from __future__ import annotations

from typing import Any

import pytest

from hwmodels import RooflineCost, get_cluster
from policies import POLICIES, PlacementPolicy, plan
from policies.bounds import lower_bound
from policies.optimal import Optimal
from policies.search import MCMC
from policies.testing import (
    CASES,
    ConformanceError,
    check_policy,
    parametrize_with_checks,
    plan_memory,
    random_dag,
)
from sim import simulate
from workloads import (
    Graph,
    Op,
    OutOfMemory,
    PlacementError,
    Tensor,
    build_model,
    training_graph,
)

ALL = POLICIES.names()
# The MILP gets a small node limit here, the search a small budget: the suite checks their
# contract, not their optimality.
FACTORIES = {name: name for name in ALL} | {"optimal": lambda: Optimal(node_limit=50),
                                            "mcmc": lambda: MCMC(evals=60)}


@parametrize_with_checks([FACTORIES[name] for name in ALL])
def test_conformance(policy, check) -> None:
    check(policy)


def test_mcmc_conforms_with_its_priority_search_on_graphs_of_any_size(monkeypatch) -> None:
    # the suite's graphs are small, where the search over priorities does not run
    monkeypatch.setattr("policies.search.KEYED_FROM", 0)
    check_policy(lambda: MCMC(evals=60))


@pytest.mark.parametrize("name", ALL)
def test_simulated_makespan_respects_the_lower_bound(name: str) -> None:
    for _, make_graph, make_cluster in CASES[:3]:
        graph, cluster = make_graph(), make_cluster()
        cost = RooflineCost(cluster)
        policy = FACTORIES[name]
        chosen = policy() if callable(policy) else policy
        result = simulate(plan(graph, cluster, chosen, cost), cluster, cost)
        assert result.makespan_s >= lower_bound(graph, cluster, cost) * (1 - 1e-9)


@pytest.mark.parametrize("name", [n for n in ALL if POLICIES.get(n).memory_aware])
def test_memory_aware_policies_never_run_out_in_the_simulator(name: str) -> None:
    # A training step of GPT-2 small on four 32 GiB V100s: one device cannot hold it.
    step = training_graph(build_model("gpt2_small", batch=12, seq_len=1024), "adam")
    cluster = get_cluster("quad-v100-nvlink")
    cost = RooflineCost(cluster)
    single = simulate(plan(step, cluster, "single_device", cost), cluster, cost)
    assert not single.feasible  # the instance needs a memory-aware split
    try:
        p = plan(step, cluster, name, cost)
    except OutOfMemory:
        # Refusing is within the contract; Baechi's three must find the plan that exists.
        assert name not in ("m_etf", "m_sct", "m_topo")
        return
    result = simulate(p, cluster, cost)
    assert result.feasible, result.reason
    budget = p.info.get("budget_peak_bytes") if p.info.get("budget") == "schedule" else \
        plan_memory(p, cluster)
    assert budget is not None
    assert max(budget.values()) <= 32 * 2**30
    assert max(result.peak_memory_bytes.values()) <= 32 * 2**30


@pytest.mark.parametrize("name", ["m_etf", "m_sct", "m_topo"])
def test_memory_aware_failure_message_is_pinned(name: str) -> None:
    huge = Op("huge", "synthetic", "matmul", outputs=(Tensor("huge", (300 * 2**28,)),),
              flops=10**9)  # 300 GiB: more than any device of the workstation has
    graph = Graph("big", [*random_dag(3, seed=0).ops, huge])
    with pytest.raises(PlacementError, match=rf"policy '{name}': op 'huge' needs "
                                             rf"{300 * 2**30} bytes and fits on no device "
                                             r"\(bytes free: cpu0 \d+, gpu0 \d+\)"):
        plan(graph, get_cluster("workstation"), name)


@pytest.mark.parametrize(("name", "kwargs", "message"), [
    ("random", {"seed": "x"}, "policy 'random': seed must be an integer >= 0, a "
                              "numpy.random.Generator or None, got 'x'"),
    ("metis", {"seed": 1.5}, "policy 'metis': seed must be an integer >= 0, a "
                             "numpy.random.Generator or None, got 1.5"),
    ("optimal", {"time_limit_s": 0},
     "policy 'optimal': time_limit_s must be a finite number > 0 or None, got 0"),
    ("optimal", {"time_limit_s": float("nan")},
     "policy 'optimal': time_limit_s must be a finite number > 0 or None, got nan"),
    ("optimal", {"max_ops": 0}, "policy 'optimal': max_ops must be an int >= 1, got 0"),
    ("pipeline", {"max_blocks": -1},
     "policy 'pipeline': max_blocks must be an int >= 1, got -1"),
])
def test_bad_policy_arguments_are_named(name: str, kwargs: dict, message: str) -> None:
    with pytest.raises(PlacementError, match=message.replace("(", r"\(").replace(")", r"\)")):
        POLICIES.get(name)(**kwargs)


def test_optimal_refuses_large_graphs() -> None:
    with pytest.raises(PlacementError, match=r"has 177 ops; the MILP is limited to "
                                             r"max_ops=30"):
        plan(build_model("resnet50"), get_cluster("workstation"), "optimal")


@pytest.mark.parametrize("name", ["spectral", "metis", "kernighan_lin", "m_sct", "random"])
def test_large_graphs_place_deterministically(name: str) -> None:
    # Beyond the conformance cases' sizes the solvers change (sparse eigensolver, LP).
    from workloads.synthetic import layered_dag

    graph = layered_dag(1200, width=60, seed=3)
    cluster = get_cluster("dgx1-v100")
    cost = RooflineCost(cluster)
    assert plan(graph, cluster, name, cost).placement == plan(graph, cluster, name,
                                                              cost).placement


def test_a_third_party_policy_runs_the_suite_and_a_broken_one_fails_it() -> None:
    from policies import Placement

    class FirstDevice(PlacementPolicy):
        name = "first_device"

        def place(self, graph, cluster, cost) -> Placement:
            first = cluster.device_names[0]
            return Placement(dict.fromkeys((op.name for op in graph), first))

    class Greedy(FirstDevice):
        """Claims memory awareness but ignores it."""

        name = "greedy"
        memory_aware = True

    class Flaky(FirstDevice):
        """Different plan every time it is built."""

        name = "flaky"
        calls = 0

        def place(self, graph, cluster, cost) -> Placement:
            Flaky.calls += 1
            names = cluster.device_names
            return Placement(dict.fromkeys((op.name for op in graph),
                                           names[Flaky.calls % len(names)]))

    check_policy(FirstDevice)  # plan() refuses its fp64 ops on bf16-only devices for it
    graph = random_dag(3, seed=5, dtype="fp64")
    with pytest.raises(PlacementError, match=r"policy 'first_device' placed op 'o0' on device "
                                             r"'b0', which cannot run it: device 'b0': has no "
                                             r"peak rate for dtype 'fp64'"):
        from hwmodels import Cluster, Device, Link

        bf16 = tuple(Device(n, "npu", {"bf16": 1e12}, 2**30, 1e11) for n in ("b0", "b1"))
        c = Cluster("bf16", bf16, (Link("b0", "b1", 1e10),))
        plan(graph, c, FirstDevice(), RooflineCost(c))
    with pytest.raises(ConformanceError, match=r"\[deterministic\] flaky on one op: "
                                               r"the same seed gave a different plan"):
        check_policy(Flaky)
    with pytest.raises(ConformanceError, match=r"\[honours_memory\] greedy: claims to honour "
                                               r"memory.*\[refuses_when_nothing_fits\] "
                                               r"greedy: placed a graph that fits in no"):
        check_policy(Greedy)


def test_integer_seeds_of_any_kind_and_generators_are_accepted() -> None:
    import numpy as np

    graph, cluster = random_dag(20, seed=4), get_cluster("hetero-box")
    by_int = plan(graph, cluster, _seeded("random", 7)).placement
    by_numpy = plan(graph, cluster, _seeded("random", np.int64(7))).placement
    by_generator = plan(graph, cluster,
                        _seeded("random", np.random.default_rng(7))).placement
    assert by_int == by_numpy == by_generator


def test_repr_shows_parameters() -> None:
    from policies.optimal import Optimal

    assert repr(Optimal(node_limit=50)) == "Optimal(node_limit=50, max_ops=30, time_limit_s=None)"
    assert repr(_seeded("metis", 3)) == "Metis(seed=3)"
    assert repr(POLICIES.get("heft")()) == "HEFT()"


def test_policies_take_parameters_by_name() -> None:
    from policies.base import make_policy, split_policies

    assert repr(make_policy("random:seed=3")) == "RandomPlacement(seed=3)"
    assert make_policy("optimal:node_limit=50,max_ops=12,time_limit_s=2.5").get_params() == {
        "node_limit": 50, "max_ops": 12, "time_limit_s": 2.5}
    assert split_policies("heft,optimal:node_limit=50,max_ops=12,random:seed=3") == [
        "heft", "optimal:node_limit=50,max_ops=12", "random:seed=3"]
    graph, cluster = random_dag(20, seed=4), get_cluster("hetero-box")
    p = plan(graph, cluster, "random:seed=7")
    assert p.info["policy_params"] == {"seed": 7}
    assert repr(p).startswith(f"Plan(graph={graph.name!r}, policy='random(seed=7)'")
    assert p.placement == plan(graph, cluster, _seeded("random", 7)).placement
    with pytest.raises(PlacementError, match=r"policy 'random': expected parameters key=value "
                                             r"with keys among seed, got 'sede=3'"):
        make_policy("random:sede=3")
    with pytest.raises(PlacementError, match=r"^policy 'random': expected each parameter "
                                             r"once, got seed twice$"):
        make_policy("random:seed=1,seed=2")  # not the last one silently
    with pytest.raises(PlacementError, match=r"policy 'optimal': node_limit must be an int "
                                             r">= 1, got '1.5'"):
        make_policy("optimal:node_limit=1.5")
    with pytest.raises(PlacementError, match=r"policy 'pipeline': max_blocks must be an int "
                                             r">= 1, got 0"):
        make_policy("pipeline:max_blocks=0")


_PLANS_DIGEST = """
import hashlib, json
from hwmodels import RooflineCost
from policies import POLICIES, plan
from policies.optimal import Optimal
from policies.search import MCMC
from policies.testing import CASES
from sim import evaluator, simulate

made = {"optimal": lambda: Optimal(node_limit=50), "mcmc": lambda: MCMC(evals=60)}
for name in POLICIES.names():
    for label, make_graph, make_cluster in CASES[2:]:
        graph, cluster = make_graph(), make_cluster()
        cost = RooflineCost(cluster)
        policy = made.get(name, lambda: name)()
        p = plan(graph, cluster, policy, cost,
                 evaluate=evaluator(cluster, cost, links="fair") if name == "mcmc" else None)
        text = json.dumps([p.placement, p.order, p.priority], sort_keys=True)
        seconds = simulate(p, cluster, cost, links="fair").makespan_s
        print(name, label, hashlib.sha256(text.encode()).hexdigest()[:16], repr(seconds))
"""


def test_every_policy_gives_the_same_plans_in_processes_of_other_hash_seeds() -> None:
    # The same plan and simulated makespan on any machine: nothing may hang on the order
    # of a set of strings, which Python shuffles per process unless PYTHONHASHSEED fixes it.
    import os
    import subprocess
    import sys

    children = [subprocess.Popen([sys.executable, "-c", _PLANS_DIGEST], text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=os.environ | {"PYTHONHASHSEED": seed})
                for seed in ("1", "2024", "77")]
    runs = []
    for child in children:
        out, err = child.communicate()
        assert child.returncode == 0, err
        runs.append(out)
    assert runs[0].count("\n") == len(ALL) * len(CASES[2:])
    assert runs[0] == runs[1] == runs[2]


def _seeded(name: str, seed: Any) -> PlacementPolicy:
    """The registered policy ``name`` made with ``seed`` (the registry's classes take their
    own parameters, which the base class does not declare)."""
    return POLICIES.get(name)(seed=seed)  # type: ignore[call-arg]
