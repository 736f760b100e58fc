"""Pipeline parallelism against its closed forms: the bubble of GPipe and 1F1B on uniform
stages, the activations each schedule holds, gradient accumulation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hwmodels import Cluster, Link
from hwmodels.cost import CostModel
from policies.parallel import pipeline
from sim import simulate
from tests.helpers import toy_device
from workloads import Graph, GraphBuilder, Op, build_model
from workloads.errors import PlacelabError
from workloads.zoo import MODELS, register_model

LAYERS, WIDTH = 8, 64


def _chain(batch: int = 1, dtype: str = "fp32") -> Graph:
    """Eight identical layers (bias-free linear), then a softmax."""
    b = GraphBuilder("chain8")
    x = b.input((batch, WIDTH))
    for i in range(LAYERS):
        x = b.linear(x, WIDTH, bias=False, name=f"fc{i}")
    b.softmax(x, name="out")
    return b.build()


@pytest.fixture(autouse=True)
def chain_model() -> Iterator[None]:
    register_model("chain8", _chain)
    yield
    MODELS.unregister("chain8")


class LayerCost(CostModel):
    """Each layer 1 s forward and 2 s backward, everything else free."""

    name = "layers"

    def op_time(self, op: Op, device: str) -> float:
        if op.kind == "linear":
            return 1.0
        if op.kind == "backward" and op.op_class == "matmul":
            return 2.0
        return 0.0


def _ring(n: int) -> Cluster:
    """``n`` devices with links so fast that transfers take no time to speak of."""
    devices = tuple(toy_device(f"d{i}") for i in range(n))
    links = tuple(Link(f"d{i}", f"d{i + 1}", 1e18, 1e-15, name=f"l{i}") for i in range(n - 1))
    return Cluster("pipe", devices, links)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("stages", "microbatches"), [(2, 4), (4, 4), (4, 8), (2, 1)])
def test_the_bubble_is_the_closed_form_on_uniform_stages(schedule: str, stages: int,
                                                         microbatches: int) -> None:
    cluster = _ring(stages)
    cost = LayerCost(cluster)
    p = pipeline(build_model("chain8", batch=8), cluster, cost, stages=stages,
                 microbatches=microbatches, schedule=schedule)
    # the pipeline policy cuts the eight equal layers evenly
    per_stage = {d: sum(1 for n, dev in p.placement.items() if dev == d and
                        p.graph.op(n).kind == "linear") for d in cluster.device_names}
    assert set(per_stage.values()) == {LAYERS // stages * microbatches}
    r = simulate(p, cluster, cost, links="none")
    slot = LAYERS // stages * (1.0 + 2.0)  # one micro-batch's forward and backward
    assert r.makespan_s == pytest.approx((microbatches + stages - 1) * slot, rel=1e-9)
    busy = microbatches * slot
    bubble = 1 - busy / r.makespan_s
    assert bubble == pytest.approx((stages - 1) / (microbatches + stages - 1), abs=1e-9)


def _peak(schedule: str, microbatches: int, per_microbatch: int = 256) -> int:
    cluster = _ring(2)
    cost = LayerCost(cluster)
    p = pipeline(build_model("chain8", batch=microbatches * per_microbatch), cluster, cost,
                 stages=2, microbatches=microbatches, schedule=schedule)
    return simulate(p, cluster, cost, links="none").peak_memory_bytes["d0"]


def test_gpipe_holds_every_micro_batch_and_1f1b_at_most_the_stages() -> None:
    # What a micro-batch keeps on stage 0 until its backward reads it: the inputs of the
    # stage's four layers (its input and three layers' outputs), 256 x 64 fp32 each.
    held = 4 * 256 * WIDTH * 4
    # GPipe's peak grows by that much with each micro-batch more; 1F1B's does not move
    # once there are more micro-batches than stages (it holds S - s = 2 on stage 0)
    assert _peak("gpipe", 8) - _peak("gpipe", 4) == 4 * held
    assert _peak("1f1b", 8) == _peak("1f1b", 4) < _peak("gpipe", 4)


def test_gradients_are_accumulated_as_micro_batches_end_and_applied_once() -> None:
    cluster = _ring(2)
    p = pipeline(build_model("chain8", batch=8), cluster, LayerCost(cluster), stages=2,
                 microbatches=4, schedule="gpipe")
    g = p.graph
    # mb0 + mb1 -> acc1, + mb2 -> acc2, + mb3 -> the gradient the update reads
    assert g.op("fc3.wgrad.sum1").inputs == ("mb0/fc3.wgrad", "mb1/fc3.wgrad")
    assert g.op("fc3.wgrad.sum2").inputs == ("fc3.wgrad.acc1", "mb2/fc3.wgrad")
    assert g.op("fc3.wgrad.sum3").inputs == ("fc3.wgrad.acc2", "mb3/fc3.wgrad")
    assert g.op("fc3.update").inputs[0] == "fc3.wgrad"
    assert p.placement["fc3.update"] == p.placement["mb0/fc3"] == p.placement["fc3.weights"]
    # the weights exist once: the graph has the model's parameters, not four copies
    assert g.params == build_model("chain8", batch=8).params
    assert g.meta["microbatches"] == 4 and g.meta["batch"] == 8


def test_bad_pipelines_are_one_clear_line() -> None:
    cluster = _ring(2)
    cost = LayerCost(cluster)
    with pytest.raises(PlacelabError, match="batch 8 must be a multiple of microbatches, "
                                            "got 3"):
        pipeline(build_model("chain8", batch=8), cluster, cost, stages=2, microbatches=3)
    with pytest.raises(PlacelabError, match="schedule must be one of gpipe, 1f1b"):
        pipeline(build_model("chain8", batch=8), cluster, cost, stages=2, microbatches=2,
                 schedule="zero_bubble")
    with pytest.raises(PlacelabError, match="stages must be between 1 and the cluster's 2"):
        pipeline(build_model("chain8", batch=8), cluster, cost, stages=3, microbatches=2)
    with pytest.raises(PlacelabError, match="expected a zoo model's forward graph"):
        pipeline(_chain(8), cluster, cost, stages=2, microbatches=2)


class FreeCompute(CostModel):
    """Every op free: a step's time is its transfers'."""

    name = "free-compute"

    def op_time(self, op: Op, device: str) -> float:
        return 0.0


def _closed_ring(n: int, bandwidth: float, latency_s: float, streams: int = 1) -> Cluster:
    """``n`` devices, each linked to the next and the last to the first (full duplex)."""
    devices = tuple(toy_device(f"d{i}", streams=streams) for i in range(n))
    links = tuple(Link(f"d{i}", f"d{(i + 1) % n}", bandwidth, latency_s, name=f"l{i}")
                  for i in range(n if n > 2 else 1))  # two devices: one link, both ways
    return Cluster("ring", devices, links)


@pytest.mark.parametrize("links", ["fcfs", "fair"])
@pytest.mark.parametrize("replicas", [2, 4, 8])
def test_a_ring_all_reduce_takes_its_closed_form(links: str, replicas: int) -> None:
    from policies.data_parallel import data_parallel

    bandwidth, latency = 1e9, 1e-5
    cluster = _closed_ring(replicas, bandwidth, latency)
    cost = FreeCompute(cluster)
    p = data_parallel(build_model("chain8", batch=8 * replicas), cluster, cost,
                      replicas=replicas, bucket_bytes=2**40)
    nbytes = LAYERS * WIDTH * WIDTH * 4  # every weight gradient, one bucket
    r = simulate(p, cluster, cost, links=links, order="priority")
    closed = (2 * (replicas - 1) / replicas * nbytes / bandwidth
              + 2 * (replicas - 1) * latency)
    assert r.makespan_s == pytest.approx(closed, rel=1e-9)
    moved = r.trace[r.trace["kind"] == "transfer"]["bytes"]
    assert moved.sum() == 2 * (replicas - 1) * nbytes  # each replica sends 2(p-1) chunks


def test_data_parallel_overlaps_the_all_reduce_with_the_backward_pass() -> None:
    from policies.data_parallel import data_parallel

    # a second stream for the communication steps, as NCCL runs on its own CUDA stream
    cluster = _closed_ring(4, 1e6, 1e-6, streams=2)
    cost = LayerCost(cluster)  # layers 1 s forward, 2 s backward; 16 KB per gradient
    one = simulate(pipeline(build_model("chain8", batch=32), _ring(1), LayerCost(_ring(1)),
                            stages=1, microbatches=1), _ring(1), LayerCost(_ring(1)))
    times = {}
    for bucket in (2**40, 20_000):  # one bucket for all, or one per gradient
        p = data_parallel(build_model("chain8", batch=32), cluster, cost, replicas=4,
                          bucket_bytes=bucket)
        times[bucket] = simulate(p, cluster, cost, order="priority").makespan_s
    compute = one.makespan_s  # per replica the same layers (costs here do not scale)
    gradient = WIDTH * WIDTH * 4
    ring = 2 * 3 / 4 * gradient / 1e6 + 2 * 3 * 1e-6  # one gradient's all-reduce
    # one bucket: the all-reduce of all eight gradients follows the backward pass
    assert times[2**40] == pytest.approx(compute + 2 * 3 / 4 * 8 * gradient / 1e6
                                         + 2 * 3 * 1e-6, rel=1e-9)
    # a bucket per gradient: each all-reduce hides behind the next layer's backward (it
    # takes 0.025 s against 2 s) but the last (the first layer's gradient)
    assert times[20_000] == pytest.approx(compute + ring, rel=1e-9)


def _tied(batch: int = 1, dtype: str = "fp32") -> Graph:
    """Eight layers and a head that shares the first layer's weights (as GPT-2's head
    shares the token embedding)."""
    b = GraphBuilder("tied8")
    x = b.input((batch, WIDTH))
    for i in range(LAYERS):
        x = b.linear(x, WIDTH, bias=False, name=f"fc{i}")
    b.add_op("linear", "matmul", (x,), (batch, WIDTH), name="head",
             flops=2 * batch * WIDTH * WIDTH,
             attrs={"in_features": WIDTH, "out_features": WIDTH, "bias": False,
                    "shares": "fc0"})
    return b.build()


def test_tied_weights_cross_a_stage_cut_once_per_step_not_per_micro_batch() -> None:
    from policies.parallel import micro_step
    from policies.pipeline import Pipeline

    register_model("tied8", _tied)
    try:
        # nine 3 s layers; the shared weights and the head's gradient of them (32.5 KB with
        # an activation) cross any cut, at 1.6 KB/s: 20.3 s. Counted per micro-batch the
        # best cut is after fc0 (3 + 20.3 against 24 s); once per step of eight, a
        # balanced one (12 + 2.5 against 15 s)
        devices = tuple(toy_device(f"d{i}") for i in range(2))
        cluster = Cluster("slow", devices,
                          (Link("d0", "d1", WIDTH * WIDTH * 4 / 10, 0.0),))
        cost = LayerCost(cluster)
        step = micro_step(build_model("tied8", batch=8), 8, "sgd")
        layers = [f"fc{i}" for i in range(LAYERS)]
        whole = Pipeline().place(step, cluster, cost).devices
        assert [whole[n] for n in layers] == ["d0"] + ["d1"] * 7
        split = Pipeline(microbatches=8).place(step, cluster, cost).devices
        assert [split[n] for n in layers] == ["d0"] * 4 + ["d1"] * 4  # 13.5 s each side
        p = pipeline(build_model("tied8", batch=8), cluster, cost, stages=2, microbatches=8)
        assert {p.placement[f"mb0/fc{i}"] for i in range(LAYERS)} == {"d0", "d1"}
    finally:
        MODELS.unregister("tied8")
