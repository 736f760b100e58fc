"""Every registered link model and issue order passes its conformance suite
(``sim.testing``), and the suite catches parts that break its properties."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sim.links import FirstComeFirstServed
from sim.options import LINK_REGISTRY, ORDER_REGISTRY
from sim.sharing import SHARING
from sim.testing import (
    LINK_CHECKS,
    ORDER_CHECKS,
    SHARING_CHECKS,
    ConformanceError,
    check_part,
    parametrize_with_checks,
)

# "fair:scan_up_to=1" finds every bottleneck by its heap rather than a scan
LINKS = [*LINK_REGISTRY.names(), "fair:scan_up_to=1"]


@parametrize_with_checks(LINKS, LINK_CHECKS)
def test_link_model_conformance(part: str, check) -> None:  # type: ignore[no-untyped-def]
    check(part)


@parametrize_with_checks(ORDER_REGISTRY.names(), ORDER_CHECKS)
def test_issue_order_conformance(part: str, check) -> None:  # type: ignore[no-untyped-def]
    check(part)


class Hasty(FirstComeFirstServed):
    """Delivers every tensor at half its contention-free time: faster than the links."""

    name = "hasty"

    def start(self, k: int) -> None:
        self.run.t_duration[k] /= 2
        super().start(k)


@pytest.fixture
def hasty() -> Iterator[str]:
    LINK_REGISTRY.register("hasty", Hasty)
    yield "hasty"
    LINK_REGISTRY.unregister("hasty")


def test_the_suite_catches_a_link_model_faster_than_its_links(hasty: str) -> None:
    with pytest.raises(ConformanceError) as caught:
        check_part(hasty, LINK_CHECKS)
    message = str(caught.value)
    assert "[lone_transfer] link model 'hasty', one transfer: the transfer took" in message
    assert "[transfers_follow_their_tensor]" in message
    assert "[deterministic]" not in message


def test_a_bad_parameter_is_one_line() -> None:
    from workloads.errors import PlacementError

    with pytest.raises(PlacementError, match=r"^link model 'fair': scan_up_to must be an int "
                                             r">= 1, got 0$"):
        LINK_REGISTRY.make("fair:scan_up_to=0")


def test_fair_sharing_by_heap_equals_by_scan() -> None:
    from hwmodels import RooflineCost
    from sim import simulate
    from sim.testing import _cases

    _, p, cluster = _cases()[1]  # contended: a switch of slow links
    cost = RooflineCost(cluster)
    by_scan = simulate(p, cluster, cost, links="fair")
    by_heap = simulate(p, cluster, cost, links="fair:scan_up_to=1")
    assert by_scan.trace.equals(by_heap.trace)


@parametrize_with_checks([*SHARING.names(), "priority:preempt=false", "partition:memory=true"],
                         SHARING_CHECKS)
def test_sharing_policy_conformance(part: str, check) -> None:  # type: ignore[no-untyped-def]
    check(part)
