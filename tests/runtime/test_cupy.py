"""The CuPy engine, where CuPy and a CUDA device are present; elsewhere it must still import
and these tests skip, saying why."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.cupy_engine import CupyEngine, cupy_unavailable
from runtime.engine import EngineUnavailable

REASON = cupy_unavailable()
needs_gpu = pytest.mark.skipif(REASON is not None, reason=f"CuPy engine: {REASON}")


def test_without_a_gpu_the_engine_refuses_clearly() -> None:
    if REASON is None:
        pytest.skip("a GPU is present: the refusal cannot be shown")
    with pytest.raises(EngineUnavailable, match=r"^engine 'gpu': "):
        CupyEngine()


@needs_gpu
@pytest.mark.parametrize("model", ["mlp", "lenet5", "resnet50"])
def test_gpu_outputs_equal_the_cpu_engines(model: str) -> None:
    from policies import plan
    from runtime import NumpyEngine, execute
    from workloads import build_model

    graph = build_model(model, batch=2)
    gpu = CupyEngine()
    cpu = NumpyEngine(devices=1)
    on_gpu = execute(plan(graph, gpu.cluster(), "round_robin"), gpu, warmup=1, repeats=2)
    on_cpu = execute(plan(graph, cpu.cluster(), "single_device"), cpu, warmup=0, repeats=1)
    for name, value in on_cpu.outputs.items():
        np.testing.assert_allclose(on_gpu.outputs[name], value, rtol=1e-3, atol=1e-5)
    assert on_gpu.makespan_s > 0 and set(on_gpu.peak_memory_bytes) == set(gpu.devices)
