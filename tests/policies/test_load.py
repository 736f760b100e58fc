from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import RooflineCost, get_cluster
from policies import plan
from policies.cuts import targets
from policies.load import ClusterLoad
from policies.problem import Problem
from tests.helpers import FixedCost, chain, toy_cluster
from workloads import build_model
from workloads.errors import PlacelabError


def _problem(n_dev: int, busy: dict[str, float], work_s: float) -> Problem:
    c = toy_cluster(n_dev)
    g = chain(4)
    return Problem(g, c, FixedCost(c, default=work_s / 4), ClusterLoad(busy))


def test_targets_let_every_device_finish_together_after_its_queue() -> None:
    # W = 2 s on equal devices, queues (1, 0): T = (2 + 1) / 2 = 1.5, shares 0.5 and 1.5
    assert targets(_problem(2, {"d0": 1.0}, 2.0)).tolist() == [0.25, 0.75]
    # queues (3, 0): d0 busy past T; alone, d1 takes everything
    assert targets(_problem(2, {"d0": 3.0}, 2.0)).tolist() == [0.0, 1.0]
    assert targets(_problem(3, {}, 2.0)).tolist() == pytest.approx([1 / 3] * 3)


@settings(max_examples=30, deadline=None)
@given(busy=st.lists(st.floats(0, 5), min_size=3, max_size=3), work=st.floats(0.1, 10))
def test_water_filling_equalises_finish_times_of_the_devices_it_uses(busy: list[float],
                                                                     work: float) -> None:
    share = targets(_problem(3, {f"d{i}": b for i, b in enumerate(busy)}, work))
    finish = [b + s * work for b, s in zip(busy, share, strict=True)]
    used = [f for f, s in zip(finish, share, strict=True) if s > 0]
    assert sum(share) == pytest.approx(1.0)
    assert max(used) == pytest.approx(min(used), rel=1e-9, abs=1e-9)
    assert all(b >= max(used) - 1e-9 for b, s in zip(busy, share, strict=True) if s == 0)


def test_heft_starts_after_the_queue_of_a_busy_device() -> None:
    c = toy_cluster(2)
    cost = FixedCost(c, default=1.0)
    p = plan(chain(3), c, "heft", cost, load=ClusterLoad({"d0": 10.0, "d1": 0.5}))
    assert set(p.placement.values()) == {"d1"}
    assert p.estimated_makespan_s == 3.5  # 0.5 s queued, then three 1 s ops
    assert p.info["load_aware"] is True


def test_a_policy_that_ignores_load_says_so_and_places_as_before() -> None:
    c = get_cluster("quad-v100-nvlink")
    g = build_model("mlp", batch=32)
    loaded = plan(g, c, "round_robin", load=ClusterLoad({"gpu0": 5.0}))
    assert loaded.info["load_aware"] is False
    assert loaded.placement == plan(g, c, "round_robin").placement


def test_metis_under_load_gives_busy_devices_less() -> None:
    c = get_cluster("quad-v100-nvlink")
    g = build_model("resnet50", batch=32)
    cost = RooflineCost(c)
    p = plan(g, c, "metis", cost, load=ClusterLoad({"gpu0": 1.0, "gpu1": 1.0}))
    assert set(p.placement.values()) <= {"gpu2", "gpu3"}


def test_bad_load_is_one_clear_line() -> None:
    with pytest.raises(PlacelabError, match=r"cluster load: busy_s\['g'\] must be a finite "
                                            r"number >= 0, got nan"):
        ClusterLoad({"g": float("nan")})
    with pytest.raises(PlacelabError, match="cluster load: device 'gpu9' is not in cluster"):
        plan(build_model("mlp"), get_cluster("quad-v100-nvlink"), "heft",
             load=ClusterLoad({"gpu9": 1.0}))
