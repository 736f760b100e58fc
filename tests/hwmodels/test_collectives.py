"""Collective costs against the alpha-beta closed forms."""

from __future__ import annotations

import pytest

from hwmodels import (
    HardwareFile,
    RooflineCost,
    all_gather_time,
    get_cluster,
    loads,
    reduce_scatter_time,
    ring_allreduce_time,
    tree_allreduce_time,
)
from tests.helpers import toy_cluster
from workloads import HardwareSpecError

N = 800_000_000


def test_ring_allreduce_on_uniform_links() -> None:
    # 2 (p - 1) steps of (alpha + n / (p * beta)): DGX A100, alpha = 2 us (two hops via the
    # switch), beta = 300 GB/s.
    c = get_cluster("dgx-a100")
    cost, p = RooflineCost(c), 8
    step = 2e-6 + (N / p) / 300e9
    assert ring_allreduce_time(cost, c.device_names, N) == pytest.approx(2 * (p - 1) * step)
    assert reduce_scatter_time(cost, c.device_names, N) == pytest.approx((p - 1) * step)
    assert all_gather_time(cost, c.device_names, N) == pytest.approx((p - 1) * step)


def test_ring_is_as_slow_as_its_slowest_hop() -> None:
    # A chain d0-d1-d2-d3 used as a ring: the d3 -> d0 step crosses three links.
    c = toy_cluster(4, bandwidth=1e9, latency_s=1e-6)
    step = 3e-6 + (N / 4) / 1e9
    assert ring_allreduce_time(RooflineCost(c), c.device_names, N) == pytest.approx(6 * step)


def test_tree_allreduce_levels() -> None:
    # p = 8: three levels up and three down, each one hop of the whole buffer.
    c = get_cluster("dgx-h100")
    hop = 2e-6 + N / 450e9
    assert tree_allreduce_time(RooflineCost(c), c.device_names, N) == pytest.approx(6 * hop)
    assert tree_allreduce_time(RooflineCost(c), c.device_names[:1], N) == 0.0


def test_collective_bad_input() -> None:
    c = get_cluster("dgx-h100")
    with pytest.raises(HardwareSpecError, match="devices must be distinct"):
        ring_allreduce_time(RooflineCost(c), ["gpu0", "gpu0"], N)


def test_duplicate_and_disconnected_in_a_file() -> None:
    dev = ('[[device]]\nname = "x"\nkind = "gpu"\nmemory_gib = 1\n'
           'memory_bandwidth_gbps = 1\npeak_tflops = { fp32 = 1 }\n')
    with pytest.raises(HardwareSpecError, match=r"^f.toml: device\[1\].name: expected a name "
                                                r"not used before in the file, got 'x' again$"):
        loads(dev + dev, source="f.toml")
    two = dev + ('[[cluster]]\nname = "split"\ndevice = [{ name = "a", model = "x" }, '
                 '{ name = "b", model = "x" }]\n')
    with pytest.raises(HardwareSpecError,
                       match=r"^f.toml: cluster\[0\] \('split'\): cluster 'split': must be "
                             r"connected, got separate"):
        loads(two, source="f.toml")
    assert isinstance(loads(dev), HardwareFile)
