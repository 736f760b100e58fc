"""runtime: real execution of the same Plan the simulator evaluates.

Engines expose their devices as a ``hwmodels.Cluster`` (NumPy: logical CPU devices on
worker threads; CuPy: GPUs; PyTorch, with its own kernels: either), one kernel library
written against the array API runs on NumPy and CuPy (and on torch where it has no kernel),
and :func:`execute` interprets a Plan into a measured Trace, makespan and peak memory.

>>> from runtime import NumpyEngine
>>> NumpyEngine(devices=2).cluster().device_names
('cpu0', 'cpu1')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workloads.lazy import attach

if TYPE_CHECKING:
    from runtime.cupy_engine import CupyEngine
    from runtime.engine import Engine, EngineUnavailable, NumpyEngine
    from runtime.executor import RunResult, execute, make_inputs
    from runtime.kernels import KERNELS, run_kernel
    from runtime.torch_engine import TorchEngine

_WHERE = {"CupyEngine": "cupy_engine", "Engine": "engine", "EngineUnavailable": "engine",
          "NumpyEngine": "engine", "RunResult": "executor", "execute": "executor",
          "make_inputs": "executor", "KERNELS": "kernels", "run_kernel": "kernels",
          "TorchEngine": "torch_engine"}

__all__ = ["KERNELS", "CupyEngine", "Engine", "EngineUnavailable", "NumpyEngine",
           "RunResult", "TorchEngine", "execute", "make_inputs", "run_kernel"]

__getattr__, __dir__ = attach(__name__, _WHERE)
