from __future__ import annotations

import dataclasses

import pytest

from hwmodels import Cluster, RooflineCost, get_cluster
from policies import plan
from sim import simulate
from sim.repair import repair
from workloads import build_model
from workloads.errors import PlacelabError
from workloads.training import training_graph


def _capped(fraction: float) -> Cluster:
    c = get_cluster("quad-v100-nvlink")
    return Cluster(f"quad-{fraction}", tuple(
        dataclasses.replace(d, memory_bytes=int(d.memory_bytes * fraction))
        for d in c.devices), c.links)


def test_a_plan_that_fits_needs_one_round() -> None:
    c = get_cluster("quad-v100-nvlink")
    r = repair(build_model("resnet50", batch=8), c, "m_etf", RooflineCost(c))
    assert r.result.feasible
    assert r.rounds == [{"round": 0, "over_bytes": {}, "held_bytes": {}}]


def test_each_round_holds_back_what_the_simulator_saw_overflow() -> None:
    # GPT-2 small's Adam step (batch 4) at 15% of a V100: m_etf's schedule budget fits,
    # the simulator (which frees at op ends) overflows; holding that back, it fits.
    cluster = _capped(0.15)
    cost = RooflineCost(cluster)
    step = training_graph(build_model("gpt2_small", batch=4), "adam")
    first = simulate(plan(step, cluster, "m_etf", cost), cluster, cost)
    over = {d: p - first.memory_capacity_bytes[d] for d, p in first.peak_memory_bytes.items()
            if p > first.memory_capacity_bytes[d]}
    assert over  # the instance overflows in the simulator
    r = repair(step, cluster, "m_etf", cost, rounds=3)
    assert r.rounds[0] == {"round": 0, "over_bytes": over, "held_bytes": {}}
    assert r.rounds[1]["held_bytes"] == over
    assert r.result.feasible and r.rounds[-1]["over_bytes"] == {}
    assert all(peak <= r.result.memory_capacity_bytes[d]
               for d, peak in r.result.peak_memory_bytes.items())


def test_rounds_zero_is_one_placement_and_bad_policies_are_named() -> None:
    c = get_cluster("quad-v100-nvlink")
    g = build_model("mlp")
    assert len(repair(g, c, "m_sct", RooflineCost(c), rounds=0).rounds) == 1
    with pytest.raises(PlacelabError, match="repair: policy 'heft': expected a memory-aware "
                                            "policy that takes a load"):
        repair(g, c, "heft", RooflineCost(c))
    with pytest.raises(PlacelabError, match="repair: rounds must be >= 0, got -1"):
        repair(g, c, "m_etf", RooflineCost(c), rounds=-1)
