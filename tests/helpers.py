"""Test helpers: small graphs and clusters with round numbers, and a fixed-time cost."""

from __future__ import annotations

from collections.abc import Mapping

from hwmodels import Cluster, CostModel, Device, Link
from workloads import Graph, Op, Tensor


def toy_device(name: str, *, memory_bytes: int = 2**34, streams: int = 1) -> Device:
    return Device(name, "gpu", peak={"fp32": 1e12}, memory_bytes=memory_bytes,
                  memory_bandwidth=1e11, compute_streams=streams)


def toy_cluster(n: int = 2, *, bandwidth: float = 1e9, latency_s: float = 1e-6,
                memory_bytes: int = 2**34, duplex: str = "full") -> Cluster:
    """``n`` identical devices d0..d(n-1) in a chain joined by identical links."""
    devices = tuple(toy_device(f"d{i}", memory_bytes=memory_bytes) for i in range(n))
    links = tuple(Link(f"d{i}", f"d{i + 1}", bandwidth, latency_s, duplex, name=f"l{i}")
                  for i in range(n - 1))
    return Cluster("toy", devices, links)


def op(name: str, inputs: tuple[str, ...] = (), *, nbytes: int = 4, flops: int = 0,
       param_bytes: int = 0, workspace_bytes: int = 0) -> Op:
    """An elementwise op whose output is ``nbytes`` of fp32."""
    return Op(name, "relu", "elementwise", inputs=inputs,
              outputs=(Tensor(name, (nbytes // 4,)),), flops=flops,
              param_bytes=param_bytes, workspace_bytes=workspace_bytes)


def chain(n: int, *, nbytes: int = 4) -> Graph:
    ops = [op("op0", nbytes=nbytes)]
    ops += [op(f"op{i}", (f"op{i - 1}",), nbytes=nbytes) for i in range(1, n)]
    return Graph("chain", ops)


class FixedCost(CostModel):
    """Op times from a table (default 1 s); transfers from the cluster's links."""

    name = "fixed"

    def __init__(self, cluster: Cluster, times: Mapping[str, float] | None = None,
                 default: float = 1.0) -> None:
        super().__init__(cluster)
        self.times = dict(times or {})
        self.default = default

    def op_time(self, op: Op, device: str) -> float:
        return self.times.get(op.name, self.default)
