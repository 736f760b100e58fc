"""Tensor parallelism (Megatron's split) and its hybrids against closed forms: the shard's
FLOPs and parameters, two all-reduces of the activations forward and two backward per
layer in the simulated transfer bytes, and the device groups of dp x pp x tp."""

from __future__ import annotations

import pytest

from hwmodels import Cluster, Link, RooflineCost, get_cluster
from policies.tensor_parallel import parallelize, tensor_parallel
from sim import simulate
from tests.helpers import toy_device
from workloads import build_model
from workloads.collectives import is_collective, payload_bytes
from workloads.errors import PlacelabError

BATCH, SEQ, DIM, LAYERS = 2, 32, 768, 12


def _switched(n: int) -> Cluster:
    """``n`` devices on one switch (each its own full-duplex link)."""
    devices = tuple(toy_device(f"d{i}") for i in range(n))
    return Cluster("switched", devices,
                   tuple(Link(f"d{i}", "sw", 1e10, 1e-6, name=f"l{i}") for i in range(n)),
                   switches=("sw",))


@pytest.mark.parametrize("model", ["bert_base", "gpt2_small"])
@pytest.mark.parametrize("tp", [2, 4])
def test_a_shard_has_1_over_tp_of_each_split_layer(model: str, tp: int) -> None:
    full = build_model(model, batch=BATCH, seq_len=SEQ)
    shard = build_model(model, batch=BATCH, seq_len=SEQ, tp=tp)
    assert sorted(shard.names) == sorted(full.names)
    rows = BATCH * SEQ
    for op in shard:
        whole = full.op(op.name)
        split = op.attrs.get("parallel")
        if split == "column":  # outputs split: every FLOP divides
            assert op.flops * tp == whole.flops
        elif split == "row":  # inputs split: the bias is added whole on every rank
            assert op.flops == (whole.flops - rows * DIM) // tp + rows * DIM
        elif op.name.endswith((".scores", ".context")):  # heads / tp of them
            assert op.flops * tp == whole.flops


@pytest.mark.parametrize("model", ["bert_base", "gpt2_small"])
@pytest.mark.parametrize("tp", [2, 3, 4])
def test_megatron_all_reduces_two_activations_forward_and_two_backward(model: str,
                                                                      tp: int) -> None:
    cluster = _switched(tp)
    cost = RooflineCost(cluster)
    p = tensor_parallel(build_model(model, batch=BATCH, seq_len=SEQ), cluster, cost,
                        degree=tp)
    collectives = [op for op in p.graph if is_collective(op)]
    activation = BATCH * SEQ * DIM * 4
    assert len(collectives) == 4 * LAYERS
    assert {payload_bytes(op) for op in collectives} == {activation}
    forward = [op for op in collectives if not op.name.endswith(".grad")]
    assert len(forward) == 2 * LAYERS
    r = simulate(p, cluster, cost, order="priority")
    # a ring all-reduce: each of tp members sends 2 (tp - 1) chunks of activation / tp
    volume = 4 * LAYERS * 2 * (tp - 1) * activation
    assert r.collective_bytes == pytest.approx(volume, rel=1e-3)  # chunks round up
    moved = r.trace[r.trace["kind"] == "transfer"]["bytes"].sum()
    assert moved == r.transfer_bytes == r.collective_bytes  # nothing else crosses
    assert p.graph.params == build_model(model, seq_len=SEQ).params


def test_data_parallel_reduces_each_tensor_parallel_rank_s_gradients() -> None:
    cluster = _switched(8)
    cost = RooflineCost(cluster)
    p = parallelize(build_model("bert_base", batch=8, seq_len=SEQ), cluster, cost, dp=4,
                    tp=2, bucket_bytes=2**40)
    groups = set(p.device_groups.values())
    tp_groups = {g for n, g in p.device_groups.items() if "tp/" in n}
    dp_groups = groups - tp_groups
    # tensor-parallel ranks on neighbouring devices, replicas of a rank across them
    assert tp_groups == {("d0", "d1"), ("d2", "d3"), ("d4", "d5"), ("d6", "d7")}
    assert dp_groups == {("d0", "d2", "d4", "d6"), ("d1", "d3", "d5", "d7")}
    shard = build_model("bert_base", batch=2, seq_len=SEQ, tp=2)
    for group in dp_groups:  # one bucket per rank: all of that rank's weight gradients
        (op,) = [p.graph.op(n) for n, g in p.device_groups.items() if g == group]
        assert payload_bytes(op) == shard.params * 4


def test_three_dimensional_parallelism_uses_every_device_of_four_nodes() -> None:
    cluster = get_cluster("dgx-h100-x4-ib")
    cost = RooflineCost(cluster)
    p = parallelize(build_model("bert_base", batch=8, seq_len=SEQ), cluster, cost, dp=2,
                    pp=4, tp=4, microbatches=4)
    r = simulate(p, cluster, cost)
    assert r.feasible and all(u > 0 for u in r.utilization.values())
    hosts = cluster.hosts
    for name, group in p.device_groups.items():
        if "tp/" in name:  # a tensor-parallel group: inside one node
            assert len({hosts[d] for d in group}) == 1
    assert p.info["stages"] == 4 and p.info["replicas"] == 2 and p.info["tp"] == 4


def test_bad_splits_are_one_clear_line() -> None:
    cluster = _switched(4)
    cost = RooflineCost(cluster)
    with pytest.raises(PlacelabError, match=r"model 'resnet50': has no tensor-parallel "
                                            r"split \(tp\), got tp=2; models with one: "):
        parallelize(build_model("resnet50"), cluster, cost, tp=2)
    with pytest.raises(PlacelabError, match=r"dp x pp x tp must be between 1 and the "
                                            r"cluster's 4 devices"):
        parallelize(build_model("bert_base", batch=4, seq_len=SEQ), cluster, cost, dp=2,
                    tp=4)
    with pytest.raises(PlacelabError, match=r"batch must be a multiple of dp=3, got 4"):
        parallelize(build_model("bert_base", batch=4, seq_len=SEQ), _switched(3),
                    RooflineCost(_switched(3)), dp=3)
