"""The PyTorch engine: a Plan run with torch's own kernels, on CPU or CUDA.

On the CPU, ``TorchEngine(devices=k)`` splits this machine's cores into logical devices
``cpu0..cpu{k-1}`` as the NumPy engine does: each device's worker thread computes with
``cores // k`` intra-op threads (at least one). ``torch.set_num_threads`` sets the calling
thread's OpenMP budget, so each device's budget is set inside its own threads and put back
when they finish; it also sets the value threads started later begin with, which the run
puts back as the caller had it. On CUDA, ``TorchEngine(k, device="cuda")`` (a
:class:`TorchCudaEngine`, registered as ``torch-cuda``) runs devices ``cuda0..cuda{k-1}``,
each op on a stream of its device's own and each copy on the source device's copy stream
(peer to peer where the GPUs allow it).

Arrays are ``torch.Tensor``; kernels come from :mod:`runtime.torch_kernels` (the array-API
kernels on ``array_api_compat.torch`` where torch has none of its own). A plan runs under
``torch.no_grad()``; only a backward op differentiated by autograd enables it.

The module imports without torch; building an engine then raises :class:`EngineUnavailable`
saying what is missing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hwmodels.spec import Cluster
from runtime.engine import (
    CalibratedEngine,
    EngineUnavailable,
    _cores,
    gpu_cluster,
    host_cluster,
)
from workloads.params import Param

if TYPE_CHECKING:
    from runtime.training import Call
    from workloads.graph import Graph
    from workloads.op import Op

__all__ = ["TorchCudaEngine", "TorchEngine", "torch_unavailable"]

def torch_unavailable(device: str = "cpu") -> str | None:
    """Why the torch engine cannot run on ``device`` (``cpu`` or ``cuda``) here, or None
    if it can.

    >>> torch_unavailable("cpu") is None
    True
    """
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed (pip install 'placelab[torch]')"
    if device == "cuda" and not torch.cuda.is_available():
        build = torch.version.cuda
        return ("this PyTorch has no CUDA support (a CPU-only build)" if build is None
                else "no CUDA device is usable (torch.cuda.is_available() is False)")
    return None


class TorchEngine(CalibratedEngine):
    """``devices`` logical devices of this machine run by PyTorch: CPU shares
    ``cpu0..cpu{k-1}`` (``cores // devices`` threads each), or with ``device="cuda"`` the
    first ``devices`` GPUs, ``cuda0..cuda{k-1}`` (then a :class:`TorchCudaEngine`).

    Uncalibrated, a CPU device is the same share of the catalog's Xeon 8380 as the NumPy
    engine's, as model ``host-cpu-torch``; ``calibration`` (a file of ``placelab calibrate
    --engine torch``) gives the measured one.

    >>> engine = TorchEngine(devices=2)
    >>> engine.cluster().device_names, engine.cluster().devices[0].model
    (('cpu0', 'cpu1'), 'host-cpu-torch')
    """

    name = "torch"
    #: The device model of the engine's cluster (and of its calibration files).
    model = "host-cpu-torch"

    def __new__(cls, devices: int = 1, *, device: str = "cpu",
                calibration: str | Path | None = None) -> TorchEngine:
        # TorchEngine(device="cuda") is the CUDA engine, as Path() is a PosixPath
        chosen = TorchCudaEngine if cls is TorchEngine and device == "cuda" else cls
        return super().__new__(chosen)

    params = (Param("devices", "int", 1, minimum=1, doc="logical devices"),
              Param("device", "str", "cpu", choices=("cpu", "cuda"),
                    doc="where PyTorch computes"),
              Param("calibration", "str", None, optional=True,
                    doc="a calibration file whose devices and links this engine takes"))

    def __init__(self, devices: int = 1, *, device: str = "cpu",
                 calibration: str | Path | None = None) -> None:
        self.requested = self.count = self.checked("devices", devices)
        self.device: str = self.checked("device", device)
        reason = torch_unavailable(device)
        if reason:
            raise EngineUnavailable(f"engine {self.name!r}: {reason}")
        self.calibration = self.checked("calibration",
                                        None if calibration is None else str(calibration))
        self.threads = max(1, _cores() // devices)

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(f"cpu{i}" for i in range(self.count))

    def _uncalibrated(self) -> Cluster:
        return host_cluster(self.model, f"torch-{self.count}", self.devices, self.threads)

    def cluster(self) -> Cluster:
        return self._cluster

    @property
    def xp(self) -> Any:
        import array_api_compat.torch as xp

        return xp

    def bind(self, graph: Graph, op: Op) -> Call:
        from runtime.torch_kernels import bind

        return bind(graph, op)

    def libraries(self) -> dict[str, str]:
        import torch

        return {"torch": torch.__version__, "numpy": np.__version__}

    def to_device(self, host: np.ndarray, device: str) -> Any:
        import torch

        return torch.tensor(host, device="cpu")  # whatever default device the caller set

    def copy(self, array: Any, src: str, dst: str) -> Any:
        import torch

        return array.clone(memory_format=torch.contiguous_format)

    def to_host(self, array: Any) -> np.ndarray:
        return np.asarray(array.detach().cpu().numpy())

    @contextlib.contextmanager
    def on(self, device: str) -> Iterator[None]:
        """The calling thread computes for ``device``: its intra-op thread budget, no
        autograd; both put back on exit."""
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            with torch.no_grad():
                yield
        finally:
            torch.set_num_threads(before)

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """A run: no autograd; the thread budget new threads start from is put back as
        it was (setting a device's budget in its thread changes it too)."""
        import torch

        before = torch.get_num_threads()
        try:
            with torch.no_grad():
                yield
        finally:
            torch.set_num_threads(before)


@contextlib.contextmanager
def fp32_in_fp32() -> Iterator[None]:
    """PyTorch's FP32 products, convolutions and recurrent layers in FP32, not TF32, and
    its settings put back after: through ``fp32_precision`` where this PyTorch has it
    (reading the older ``allow_tf32`` after a caller set the newer one raises), else
    ``allow_tf32``.

    >>> import torch
    >>> with fp32_in_fp32():
    ...     torch.backends.cuda.matmul.fp32_precision
    'ieee'
    """
    import torch

    backends = torch.backends
    if hasattr(backends.cuda.matmul, "fp32_precision"):
        cudnn: Any = backends.cudnn  # its conv and rnn settings are set at import time
        knobs = [backends.cuda.matmul, cudnn.conv, cudnn.rnn]
        before = [k.fp32_precision for k in knobs]
        try:
            for k in knobs:
                k.fp32_precision = "ieee"
            yield
        finally:
            for k, was in zip(knobs, before, strict=True):
                k.fp32_precision = was
        return
    matmul, cudnn = backends.cuda.matmul, backends.cudnn
    legacy = matmul.allow_tf32, cudnn.allow_tf32
    try:
        matmul.allow_tf32 = cudnn.allow_tf32 = False
        yield
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = legacy


class TorchCudaEngine(TorchEngine):
    """The first ``devices`` GPUs of this machine run by PyTorch, ``cuda0..cuda{k-1}``.

    Each device computes on a CUDA stream of its own (``synchronize`` waits on an event
    recorded there) and sends copies on a copy stream of its own, GPU to GPU. Uncalibrated,
    each device takes the figures of the catalog GPU its name names (an H100 where none
    matches) and its memory, as model ``gpu-torch`` (another kind than the first GPU's as
    ``gpu-torch-cudaI``, after its first device); links between GPUs are an
    assumed PCIe 25 GB/s and 10 us. FP32 graphs run in FP32 (PyTorch's TF32 shortcuts off
    while it runs). Its tests skip without a GPU.
    """

    name = "torch-cuda"
    model = "gpu-torch"

    params = (Param("devices", "int", 1, minimum=1, doc="GPUs"),
              Param("device", "str", "cuda", choices=("cuda",), doc="where PyTorch computes"),
              Param("calibration", "str", None, optional=True,
                    doc="a calibration file whose devices and links this engine takes"))

    def __init__(self, devices: int = 1, *, device: str = "cuda",
                 calibration: str | Path | None = None) -> None:
        self.checked("device", device)
        super().__init__(devices, device="cuda", calibration=calibration)
        import torch

        present = torch.cuda.device_count()
        if devices > present:
            raise EngineUnavailable(f"engine {self.name!r}: devices must be in [1, {present}] "
                                    f"(the GPUs present), got {devices}")
        self.threads = 1
        self._streams = [torch.cuda.Stream(device=i) for i in range(devices)]
        self._copies = [torch.cuda.Stream(device=i) for i in range(devices)]

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(f"cuda{i}" for i in range(self.count))

    def _uncalibrated(self) -> Cluster:
        import torch

        return gpu_cluster(self.model, f"torch-cuda-{self.count}", self.devices,
                           [(torch.cuda.get_device_name(i),
                             torch.cuda.get_device_properties(i).total_memory)
                            for i in range(self.count)])

    def _index(self, device: str) -> int:
        return int(device.removeprefix("cuda"))

    def libraries(self) -> dict[str, str]:
        import torch

        return {**super().libraries(), "cuda": str(torch.version.cuda),
                "gpu": torch.cuda.get_device_name(0)}

    def to_device(self, host: np.ndarray, device: str) -> Any:
        import torch

        i = self._index(device)
        out = torch.tensor(host, device=f"cuda:{i}")
        torch.cuda.synchronize(i)  # the device's streams read it without waiting
        return out

    def copy(self, array: Any, src: str, dst: str) -> Any:
        """A copy on ``src``'s copy stream (after what its compute stream issued), finished
        on return, and kept from reuse while ``dst``'s stream may read it."""
        import torch

        i, j = self._index(src), self._index(dst)
        stream = self._copies[i]
        with torch.cuda.device(i), torch.cuda.stream(stream):
            stream.wait_stream(self._streams[i])
            out = array.to(f"cuda:{j}", non_blocking=True)
            array.record_stream(stream)
        stream.synchronize()
        out.record_stream(self._streams[j])
        return out

    def synchronize(self, device: str) -> None:
        import torch

        i = self._index(device)
        done = torch.cuda.Event()
        done.record(self._streams[i])
        done.synchronize()

    @contextlib.contextmanager
    def on(self, device: str) -> Iterator[None]:
        import torch

        i = self._index(device)
        torch.cuda.synchronize(i)  # what the caller wrote between runs (weights sent home)
        with torch.cuda.device(i), torch.cuda.stream(self._streams[i]), torch.no_grad():
            yield

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """A run: no autograd, and FP32 products and convolutions in FP32 (the graph's
        dtype says so; PyTorch lets cuDNN run FP32 convolutions as TF32 unless told not
        to); the library's settings are put back after."""
        import torch

        with fp32_in_fp32(), torch.no_grad():
            yield
