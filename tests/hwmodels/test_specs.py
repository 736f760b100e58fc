from __future__ import annotations

import itertools
from importlib import resources

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import (
    Cluster,
    Device,
    HardwareFile,
    Link,
    RooflineCost,
    dumps,
    get_cluster,
    get_device,
    list_clusters,
    list_devices,
    loads,
    register_device,
)
from tests.helpers import toy_cluster, toy_device
from workloads import HardwareSpecError, Op, Tensor

TOY = """
[[device]]
name = "toy-npu"
kind = "npu"
memory_gib = {memory}
memory_bandwidth_gbps = 800
peak_tflops = {{ bf16 = 200 }}
"""


def test_catalog_has_the_promised_hardware() -> None:
    assert {"xeon-8380", "v100-sxm2-32gb", "a100-sxm4-80gb", "l4"} <= set(list_devices())
    assert {"workstation", "quad-v100-nvlink"} <= set(list_clusters())
    ws = get_cluster("workstation")
    assert [d.kind for d in ws.devices] == ["cpu", "gpu"]
    assert get_device("v100-sxm2-32gb").peak_flops("fp32") == 15.7e12


@pytest.mark.parametrize("name", ["devices.toml", "clusters.toml"])
def test_catalog_files_round_trip(name: str) -> None:
    text = (resources.files("hwmodels") / "catalog" / name).read_text()
    first = loads(text, source=name, known_models=get_device)
    again = loads(dumps(list(first.devices.values()), list(first.clusters.values())),
                  known_models=get_device)
    assert again.devices == first.devices
    assert again.clusters == first.clusters


def test_bad_field_names_file_entry_field_and_value() -> None:
    with pytest.raises(HardwareSpecError,
                       match=r"^my.toml: device\[0\].memory_gib: expected a number greater "
                             r"than 0, got -4$"):
        loads(TOY.format(memory=-4), source="my.toml")
    with pytest.raises(HardwareSpecError, match=r"device\[0\].kind: expected a value \(the "
                                                r"field is required\), got nothing"):
        loads(TOY.format(memory=4).replace('kind = "npu"\n', ""), source="my.toml")
    with pytest.raises(HardwareSpecError, match=r"peak dtype must be one of .* got 'fp9'"):
        loads(TOY.format(memory=4).replace("bf16", "fp9"), source="my.toml")
    with pytest.raises(HardwareSpecError, match=r"device\[0\].memroy_gib: unknown field"):
        loads(TOY.format(memory=4).replace("memory_gib", "memroy_gib"), source="my.toml")


def test_cluster_errors() -> None:
    d = (toy_device("a"), toy_device("b"), toy_device("c"))
    with pytest.raises(HardwareSpecError, match=r"link 'a<->z' joins 'z', which is not"):
        Cluster("c", d, (Link("a", "z", 1e9),))
    with pytest.raises(HardwareSpecError, match=r"must be connected, got separate parts"):
        Cluster("c", d, (Link("a", "b", 1e9),))
    with pytest.raises(HardwareSpecError,
                       match=r"link 'l': bandwidth must be a finite number > 0, got 0"):
        Link("a", "b", 0, name="l")


def test_duplicate_device_registration_is_refused() -> None:
    with pytest.raises(HardwareSpecError, match="device 'l4' is already registered"):
        register_device(get_device("l4"))
    with pytest.raises(HardwareSpecError, match=r"^device 'workstation' names a cluster "
                                                r"already \(from builtin\)$"):
        register_device(get_device("l4").instance("workstation"))


@pytest.mark.parametrize(("field", "value", "message"), [
    ("name", 5, "device: name must be a string, got 5"),
    ("name", "a\nb", "device: name must be a non-empty string of printable characters, got "
                     "'a\\nb'"),
    ("memory_bytes", 1.5, "device 'd': memory_bytes must be a whole number of bytes, got 1.5"),
])
def test_a_device_of_the_wrong_type_is_refused(field: str, value: object,
                                               message: str) -> None:
    args = {"name": "d", "kind": "cpu", "peak": {"fp32": 1e9}, "memory_bytes": 2**30,
            "memory_bandwidth": 1e9, field: value}
    with pytest.raises(HardwareSpecError) as err:
        Device(**args)  # type: ignore[arg-type]
    assert str(err.value) == message


def test_memory_given_as_a_whole_float_is_stored_as_an_int() -> None:
    d = Device("d", "cpu", {"fp32": 1e9}, 16e9, 1e9)  # type: ignore[arg-type]
    assert d.memory_bytes == 16 * 10**9 and type(d.memory_bytes) is int


def test_roofline_closed_form() -> None:
    d = Device("r", "gpu", peak={"fp32": 1e12}, memory_bytes=2**30, memory_bandwidth=1e11,
               launch_overhead_s=1e-6, efficiency={"matmul": 0.5, "elementwise": 0.8})
    cost = RooflineCost(Cluster("one", (d,)))
    mm = Op("mm", "matmul", "matmul", outputs=(Tensor("mm", (4,)),), flops=10**9,
            bytes_read=10**6)
    ew = Op("ew", "relu", "elementwise", outputs=(Tensor("ew", (4,)),), flops=10,
            bytes_read=4 * 10**8, bytes_written=4 * 10**8)
    assert cost.op_time(mm, "r") == pytest.approx(1e-6 + 1e9 / (1e12 * 0.5))
    assert cost.op_time(ew, "r") == pytest.approx(1e-6 + 8e8 / (1e11 * 0.8))


def test_efficiency_table_picks_the_row_for_the_size() -> None:
    d = Device("t", "gpu", peak={"fp32": 1e12}, memory_bytes=1, memory_bandwidth=1,
               efficiency={"matmul": [[0, 0.1], [1e6, 0.5], [1e9, 0.9]]})  # type: ignore[dict-item]
    assert [d.efficiency_for("matmul", s) for s in (0, 5e5, 1e6, 1e12)] == [
        0.1, 0.1, 0.5, 0.9]


def test_transfer_over_two_hops_sums_latency_at_the_bottleneck() -> None:
    devices = tuple(toy_device(n) for n in "abc")
    c = Cluster("c", devices, (Link("a", "b", 4e9, 2e-6), Link("b", "c", 1e9, 3e-6)))
    assert RooflineCost(c).transfer_time(10**9, "a", "c") == pytest.approx(5e-6 + 1.0)
    slowest = c.slowest_link("a", "c")
    assert slowest is not None and slowest.b == "c"


def test_route_prefers_least_latency() -> None:
    devices = tuple(toy_device(n) for n in "abc")
    c = Cluster("tri", devices, (Link("a", "c", 1e9, 10e-6), Link("a", "b", 1e9, 1e-6),
                                 Link("b", "c", 1e9, 1e-6)))
    assert [h.dst for h in c.route("a", "c")] == ["b", "c"]


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 8), st.randoms(use_true_random=False))
def test_routes_on_random_trees_are_contiguous_paths(n: int, rnd) -> None:
    tree = nx.random_labeled_tree(n, seed=rnd.randint(0, 10**6))
    c = Cluster("tree", tuple(toy_device(f"d{i}") for i in range(n)),
                tuple(Link(f"d{u}", f"d{v}", 1e9, 1e-6) for u, v in tree.edges))
    for a in c.device_names:
        for b in c.device_names:
            hops = c.route(a, b)
            assert len(hops) == nx.shortest_path_length(tree, int(a[1:]), int(b[1:]))
            if hops:
                assert hops[0].src == a and hops[-1].dst == b
                assert all(x.dst == y.src for x, y in itertools.pairwise(hops))


def test_toy_cluster_helper_is_a_chain() -> None:
    assert len(toy_cluster(3).route("d0", "d2")) == 2


def test_specs_and_cost_models_pickle_for_process_pools() -> None:
    # Sweeps send clusters and cost models to worker processes (a pool, a Dask cluster).
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    from hwmodels import RooflineCost
    from tests.hwmodels.pool_work import makespan_in_a_worker

    cluster = get_cluster("dgx1-v100")
    again = pickle.loads(pickle.dumps(cluster))
    assert again == cluster and again.definition_hash == cluster.definition_hash
    assert again.route("gpu0", "gpu5") == cluster.route("gpu0", "gpu5")
    cost = pickle.loads(pickle.dumps(RooflineCost(cluster)))
    assert cost.cluster == cluster
    device = get_device("a100-sxm4-80gb")
    assert pickle.loads(pickle.dumps(device)) == device
    with ProcessPoolExecutor(max_workers=1) as pool:
        there = pool.submit(makespan_in_a_worker, cluster, RooflineCost(cluster)).result()
    assert there == makespan_in_a_worker(cluster, RooflineCost(cluster))


def test_devices_retire_and_join_through_the_cluster_checks() -> None:
    from hwmodels import Link, get_cluster

    dgx = get_cluster("dgx1-v100")
    four = dgx.without("gpu4", "gpu5", "gpu6", "gpu7")
    assert four.device_names == ("gpu0", "gpu1", "gpu2", "gpu3")
    assert all({k.a, k.b} <= set(four.device_names) for k in four.links)
    with pytest.raises(HardwareSpecError, match="no device named 'gpu9'"):
        dgx.without("gpu9")
    quad = get_cluster("quad-v100-nvlink")
    joined = quad.with_devices((quad.device("gpu0").instance("gpu4"),),
                               (Link("gpu4", "gpu3", 10e9, 1e-6),), name="quad-plus")
    assert joined.bandwidth("gpu4", "gpu3") == 10e9 and joined.name == "quad-plus"
    with pytest.raises(HardwareSpecError, match="must be connected"):
        quad.with_devices((quad.device("gpu0").instance("gpu4"),), ())


def test_a_host_slowdown_is_checked_kept_and_read_back() -> None:
    d = (toy_device("a"), toy_device("b"), toy_device("c"))
    links = (Link("a", "b", 1e9), Link("b", "c", 1e9))
    hosts = {"a": "h", "b": "h", "c": "g"}
    with pytest.raises(HardwareSpecError,
                       match=r"^cluster 'c': host_slowdown names 'x', which no device sits on$"):
        Cluster("c", d, links, hosts=hosts, host_slowdown={"x": 1.5})
    for bad in (0.5, float("nan"), float("inf"), True):
        with pytest.raises(HardwareSpecError,
                           match=r"host_slowdown.h must be a finite number >= 1, got"):
            Cluster("c", d, links, hosts=hosts, host_slowdown={"h": bad})
    plain = Cluster("c", d, links, hosts=hosts)
    shared = Cluster("c", d, links, hosts=hosts, host_slowdown={"h": 1.25})
    assert plain.definition_hash == Cluster("c", d, links, hosts=hosts,
                                            host_slowdown={}).definition_hash
    assert shared.definition_hash != plain.definition_hash  # a plan tells them apart
    assert loads(dumps([], [shared]), known_models=lambda _: toy_device("a")
                 ).clusters["c"].host_slowdown == {"h": 1.25}
    assert shared.without("c").host_slowdown == {"h": 1.25}
    assert shared.without("a", "b").host_slowdown == {}  # nobody left on the host
    text = dumps([], [shared]).replace("h = 1.25", "h = 0.5")
    with pytest.raises(HardwareSpecError, match=r"^c.toml: cluster\[0\].host_slowdown.h: "
                                                r"expected a number >= 1, got 0.5$"):
        loads(text, source="c.toml", known_models=lambda _: toy_device("a"))


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


@pytest.mark.parametrize(("change", "message"), [
    ({"kind": "x"}, "kind must be one of cpu, gpu, tpu, npu, fpga, other, got 'x'"),
    ({"peak": {}}, "peak must name at least one dtype, got none"),
    ({"peak": {"fp32": float("nan")}}, "peak.fp32 must be a finite number > 0, got nan"),
    ({"peak": {"fp32": True}}, "peak.fp32 must be a finite number > 0, got True"),
    ({"peak": {"fp32": np.True_}}, "peak.fp32 must be a finite number > 0, got np.True_"),
    ({"memory_bandwidth": np.bool_(True)},
     "memory_bandwidth must be a finite number > 0, got np.True_"),
    ({"memory_bytes": -4}, "memory_bytes must be a finite number > 0, got -4"),
    ({"launch_overhead_s": float("inf")},
     "launch_overhead_s must be a finite number >= 0, got inf"),
    ({"compute_streams": 2.0}, "compute_streams must be an int in [1, 1024], got 2.0"),
    ({"copy_engines": 65}, "copy_engines must be an int in [1, 64], got 65"),
    ({"efficiency": {"gemm": 0.5}}, "efficiency key must be one of matmul, conv, elementwise, "
                                    "reduction, data_movement, got 'gemm'"),
    ({"efficiency": {"matmul": 1.5}}, "efficiency.matmul must be in (0, 1], got 1.5"),
    ({"efficiency": {"matmul": True}}, "efficiency.matmul must be a number or a table "
                                       "[[size_threshold, efficiency], ...], got True"),
    ({"efficiency": {"matmul": [[0, 0.5, 1]]}}, "efficiency.matmul must be a number or a "
                                                "table [[size_threshold, efficiency], ...], "
                                                "got [[0, 0.5, 1]]"),
    ({"efficiency": {"matmul": [[1, 0.5], [0, 0.5]]}},
     "efficiency.matmul table must have finite increasing thresholds and efficiencies in "
     "(0, 1], got [[1, 0.5], [0, 0.5]]"),
    ({"efficiency": {"matmul": [[0, 2]]}}, "efficiency.matmul table must have finite "
                                           "increasing thresholds and efficiencies in (0, 1], "
                                           "got [[0, 2]]"),
    ({"efficiency": {"matmul": []}}, "efficiency.matmul table must have finite increasing "
                                     "thresholds and efficiencies in (0, 1], got []"),
])
def test_a_device_breaking_a_rule_is_one_line(change: dict[str, object], message: str) -> None:
    args = {"name": "d", "kind": "gpu", "peak": {"fp32": 1e9}, "memory_bytes": 2**30,
            "memory_bandwidth": 1e9, **change}
    with pytest.raises(HardwareSpecError) as err:
        Device(**args)  # type: ignore[arg-type]
    assert str(err.value) == f"device 'd': {message}"


@pytest.mark.parametrize(("args", "message"), [
    (("a", "b", float("inf")), "link 'a<->b': bandwidth must be a finite number > 0, got inf"),
    (("a", "b", 1e9, -1.0), "link 'a<->b': latency_s must be a finite number >= 0, got -1.0"),
    (("a", "b", 1e9, 0.0, "simplex"), "link 'a<->b': duplex must be 'full' or 'half', got "
                                      "'simplex'"),
    (("a", "a", 1e9), "link 'a<->a': must join two different nodes, got 'a' twice"),
])
def test_a_link_breaking_a_rule_is_one_line(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(HardwareSpecError) as err:
        Link(*args)  # type: ignore[arg-type]
    assert str(err.value) == message


def test_specs_keep_their_normal_forms() -> None:
    d = Device("n", "gpu", {"fp32": 1}, 16e9, 1, efficiency={  # type: ignore[arg-type]
        "matmul": 1, "conv": [[0, 0.5], [10, 1]]})  # type: ignore[dict-item]
    assert d.peak == {"fp32": 1.0} and type(d.peak["fp32"]) is float
    assert d.memory_bytes == 16 * 10**9 and type(d.memory_bytes) is int
    assert d.memory_bandwidth == 1 and type(d.memory_bandwidth) is int  # as given
    assert d.efficiency == {"matmul": 1.0, "conv": ((0.0, 0.5), (10.0, 1.0))}


def test_a_file_breaking_the_efficiency_rule_names_the_path() -> None:
    text = TOY.format(memory=4) + "efficiency = { matmul = [[1, 0.5], [0, 0.5]] }\n"
    with pytest.raises(HardwareSpecError,
                       match=r"^my.toml: device\[0\].efficiency.matmul: table must have finite "
                             r"increasing thresholds and efficiencies in \(0, 1\], got "):
        loads(text, source="my.toml")
    with pytest.raises(HardwareSpecError, match=r"^my.toml: device\[0\].efficiency.matmul\[0\]"
                                                r"\[1\]: expected a number <= 1, got 2$"):
        loads(TOY.format(memory=4) + "efficiency = { matmul = [[0, 2]] }\n", source="my.toml")


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=1, max_value=2**50))
def test_any_memory_in_bytes_reads_back_exactly(memory_bytes: int) -> None:
    # written in GiB: any byte count, not only whole or short fractions of a GiB
    device = toy_device("toy", memory_bytes=memory_bytes)
    again = loads(dumps([device], []), known_models=get_device).devices["toy"]
    assert again.memory_bytes == memory_bytes


def test_memory_written_as_a_decimal_of_gib_is_rounded_to_the_nearest_byte() -> None:
    text = TOY.format(memory="15.9")  # 17072495001.6 bytes
    assert loads(text).devices["toy-npu"].memory_bytes == 17072495002
