"""Every tensor the torch engine's kernels and gradients make lands on their inputs' device.

Run on a stand-in device, PyTorch's ``meta`` (shapes, no data), an op that makes a tensor
elsewhere (on the CPU, where a CUDA run needs it on the GPU) fails at once, so what a
GPU run would meet is caught on a machine without one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install "
                                            "'placelab[torch]'): the torch engine needs it")

from policies import plan  # noqa: E402
from runtime import TorchEngine, execute  # noqa: E402
from runtime.unseen import unseen_graphs  # noqa: E402
from tests.runtime.test_torch_engine import ZOO  # noqa: E402
from workloads import Graph, training_graph  # noqa: E402
from workloads.builder import GraphBuilder  # noqa: E402


class MetaEngine(TorchEngine):
    """The torch engine with its tensors on ``meta``: every op runs for its shapes only."""

    name = "torch-meta"

    def to_device(self, host: np.ndarray, device: str) -> Any:
        dtype = torch.from_numpy(np.zeros(0, host.dtype)).dtype
        return torch.empty(host.shape, dtype=dtype, device="meta")

    def to_host(self, array: Any) -> np.ndarray:
        assert array.device.type == "meta", f"a tensor came back from {array.device}"
        return np.zeros(tuple(array.shape), dtype=str(array.dtype).removeprefix("torch."))


def _split_with_an_unread_piece() -> Graph:
    b = GraphBuilder("split_unread")
    h = b.linear(b.input((4, 6)), 6, name="fc0")
    first, _ = b.split(h, [2, 2], axis=1)
    b.softmax(b.linear(first, 3, name="fc1"))
    return b.build()


def _graphs() -> dict[str, Graph]:
    graphs = {name: make() for name, make in ZOO.items()}
    graphs |= {f"{name}.sgd": training_graph(g) for name, g in list(graphs.items())}
    graphs["split_unread.adam"] = training_graph(_split_with_an_unread_piece(), "adam")
    # the calibration's random families: CNNs, perceptrons, transformers, recurrent nets
    return graphs | unseen_graphs(8, seed=2)


@pytest.mark.parametrize(("name", "graph"), sorted(_graphs().items()))
def test_every_tensor_an_op_makes_is_on_its_inputs_device(name: str, graph: Graph) -> None:
    engine = MetaEngine(devices=1)
    run = execute(plan(graph, engine.cluster(), "single_device"), engine, warmup=0, repeats=1)
    assert set(run.outputs) == set(graph.outputs)
