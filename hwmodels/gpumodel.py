"""A GPU op-time model from specs: tiles and waves for dense ops, bytes for the rest.

What a GPU does with an op is read from its datasheet (:class:`hwmodels.spec.GpuSpec`),
never from measurements of that GPU:

- a **dense op** (a product, a convolution as the implicit GEMM cuDNN runs, and their
  backward ops, one GEMM per gradient) is cut into output tiles, as cuBLAS and cuDNN cut
  it; the tile is chosen among the library's sizes for the least padded work, and the
  tiles run in waves over the SMs, each SM holding as many as its accumulators allow.
  The time of a wave is its tiles' FLOPs at the SM's rate — the CUDA cores' for FP32
  (PyTorch's default for matmul), the tensor cores' for TF32, FP16 and BF16 — so a
  partial last wave costs a whole one;
- every op moves its bytes at the memory bandwidth;
- every kernel pays a launch.

Those are the **base** features of the predictor (:mod:`hwmodels.predictor`), seconds on a
perfect GPU of the spec, at its boost clock and at its base clock: the fit finds, per
kernel family, how far short of peak a library kernel falls and how much of the
boost clock a power-limited card keeps — a handful of non-negative coefficients shared by
every GPU. Gradient-boosted trees then correct the base by what a kernel does at
particular shapes, over features that mean the same on every GPU (waves, the last wave's
fill, padding, intensity against the machine's balance, footprint against L2), so a model
fitted on some GPUs prices another. The result never beats the spec's roofline.

NeuSight (Lee et al., ASPLOS'25) predicts a tile's utilisation with a small network per
kernel family and multiplies by waves, taking the tile from the kernel the library chose
on a training GPU; here the tile is chosen from the shape alone (a GPU the model never saw
has no recorded kernels), the waves and clocks are a linear base whose coefficients are
fitted, and trees correct what is left.

>>> from hwmodels.registry import get_device
>>> a100 = get_device("a100-pcie-40gb")
>>> [(g.batch, g.m, g.n, g.k) for g in gemms(_gemm_op(1, 4096, 4096, 4096))]
[(1, 4096, 4096, 4096)]
>>> tile, waves, fill = tiling(gemms(_gemm_op(1, 4096, 4096, 4096))[0], a100.gpu)
>>> tile, waves
((256, 128), 5)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hwmodels.predictor import ALONE, Context
from hwmodels.spec import Device, GpuSpec
from workloads.errors import HardwareSpecError
from workloads.op import Op, Tensor

__all__ = ["GPU_BASE_FEATURES", "GPU_FEATURES", "Gemm", "GpuFeatures", "dense_rate",
           "gemms", "gpu_key", "tiling"]

#: Output tiles (rows, columns) of the library's GEMM kernels, largest first.
TILES = ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64), (64, 32),
         (32, 64), (32, 32))
#: Output elements an SM accumulates at once (its register file: 64K 32-bit registers
#: less what the loads take): two 128x128 tiles, four 128x64, eight 64x64.
ACCUMULATORS_PER_SM = 32768
#: Most tiles an SM holds at once (thread blocks resident per SM).
MAX_TILES_PER_SM = 8
#: What a tile's loads cost, in multiply-adds per operand element: a ``tm x tn`` tile
#: loads ``(tm + tn) k`` elements for its ``tm tn k`` multiply-adds, so it runs at
#: ``1 / (1 + c (1/tm + 1/tn))`` of the SM's rate — larger tiles reach more of it (an
#: assumption of the model, which the fitted coefficients scale).
TILE_LOAD_COST = 8.0
#: The shallowest slice of a product's inner dimension a split-K kernel gives one SM.
MIN_SPLIT_DEPTH = 256
#: Order of the architectures (a feature: what generation the kernels were written for).
ARCH_ORDER = {"maxwell": 0, "pascal": 1, "volta": 2, "turing": 3, "ampere": 4, "ada": 5,
              "hopper": 6, "blackwell": 7}
DENSE = ("matmul", "conv")

#: What the base is linear in: kernel launches (at the spec's launch overhead), dense work
#: in waves at the clock the card's
#: power allows, bytes at the memory bandwidth (of a footprint beyond L2, and of one that
#: stays in L2 between one run and the next), other FLOPs at the vector rate.
GPU_BASE_FEATURES = ("launch", "waves", "memory", "memory_in_l2", "vector")
#: A measured kernel shorter than this is not fitted: one op timed alone pays the host's
#: launch (tens of microseconds in NeuSight's data), which a kernel queued behind others
#: in a graph does not.
MIN_FIT_SECONDS = 50e-6
#: What the trees read (dimensionless where they can be, so they carry across GPUs).
GPU_FEATURES = (
    "log_flops", "log_bytes", "log_intensity_over_balance", "log_footprint_over_l2",
    "log_waves", "last_wave_fill", "padding_fill", "log_tile", "log_inner", "log_rows",
    "log_cols", "log_batch", "gemms", "log_items_per_sm", "log_row_length", "is_tensor")
#: Watts per SM and GHz of boost clock at which a card keeps its boost clock under load
#: (fitted: :func:`hwmodels.gpufit.fit_gpu_predictor`); below it the clock falls as the
#: cube root of the power (dynamic power goes as the clock times the voltage squared, and
#: the voltage with the clock).
POWER_REFERENCE = 2.0


@dataclass(frozen=True)
class Gemm:
    """One matrix product: ``batch`` products of an ``m x n`` output over an inner ``k``."""

    batch: int
    m: int
    n: int
    k: int

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k


def _split(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(batch, rows, cols) of an output of ``shape`` (a 1-D gradient of weights: as square
    as its size allows, which is what its product's shape is not recorded to say)."""
    if len(shape) >= 3:
        return math.prod(shape[:-2]), shape[-2], shape[-1]
    if len(shape) == 2:
        return 1, shape[0], shape[1]
    size = shape[0] if shape else 1
    rows = 2 ** round(math.log2(max(size, 1)) / 2)
    return 1, rows, max(size // rows, 1)


def _conv_gemm(t: Tensor, flops: float) -> Gemm:
    n, c, h, w = t.shape
    return Gemm(1, n * h * w, c, max(round(flops / (2 * t.numel)), 1))


def gemms(op: Op) -> list[Gemm]:
    """The matrix products a dense op runs (a backward op: one per gradient it computes,
    sharing its FLOPs); none for another op.

    >>> conv = Op("c", "conv2d", "conv", outputs=(Tensor("c", (8, 64, 56, 56)),),
    ...           flops=2 * 8 * 64 * 56 * 56 * 576)
    >>> gemms(conv)
    [Gemm(batch=1, m=25088, n=64, k=576)]
    """
    if op.op_class not in DENSE or not op.flops or not op.outputs:
        return []
    outs = [t for t in op.outputs if t.numel]
    share = op.flops / max(len(outs), 1)
    out = []
    for t in outs:
        if op.op_class == "conv" and len(t.shape) == 4:
            out.append(_conv_gemm(t, share))
            continue
        batch, m, n = _split(t.shape)
        if op.kind == "linear" and len(t.shape) >= 2:
            batch, m = 1, t.numel // n  # one product over every leading row
        out.append(Gemm(batch, m, n, max(round(share / (2 * batch * m * n)), 1)))
    return out


def _slots(tile: tuple[int, int]) -> int:
    return max(1, min(MAX_TILES_PER_SM, ACCUMULATORS_PER_SM // (tile[0] * tile[1])))


def tiling(g: Gemm, gpu: GpuSpec, *, split: bool = True
           ) -> tuple[tuple[int, int], int, float]:
    """The tile a library kernel would take for ``g`` on ``gpu``, its number of waves, and
    the share of the last wave's tile slots that hold a tile. The tile is the one whose
    busiest SM does the least padded work (whole tiles, every wave; the larger tile on a
    tie): a wave fills every SM's slots, the last one spreads what is left over the SMs.

    >>> from hwmodels.spec import GpuSpec
    >>> a100 = GpuSpec("ampere", 108, 7.65e8, 1.41e9, 250.0, 40 * 2**20, 164 * 2**10,
    ...                {"fp32": 19.5e12})
    >>> tiling(Gemm(1, 4096, 4096, 4096), a100)  # 512 tiles: 2 full waves of 216, 80 left
    ((256, 128), 5, 0.7407407407407407)
    """
    best: tuple[float, int, tuple[int, int], int, float] | None = None
    for tile in TILES:
        count = g.batch * math.ceil(g.m / tile[0]) * math.ceil(g.n / tile[1])
        per_wave = gpu.sm_count * _slots(tile)
        waves = math.ceil(count / per_wave)
        left = count - (waves - 1) * per_wave
        key = (tile_work(g, gpu, tile, split=split), -tile[0] * tile[1], tile, waves,
               left / per_wave)
        if best is None or key[:2] < best[:2]:
            best = key
    assert best is not None
    return best[2], best[3], best[4]


def split_k(g: Gemm, gpu: GpuSpec, tile: tuple[int, int]) -> int:
    """How many ways the library splits ``g``'s inner dimension when its tiles would leave
    SMs idle (cuBLAS's split-K: each SM takes a slice of the sum, at least
    :data:`MIN_SPLIT_DEPTH` deep, and the slices are added after)."""
    count = g.batch * math.ceil(g.m / tile[0]) * math.ceil(g.n / tile[1])
    if count >= gpu.sm_count:
        return 1
    return max(1, min(gpu.sm_count // count, g.k // MIN_SPLIT_DEPTH))


def tile_work(g: Gemm, gpu: GpuSpec, tile: tuple[int, int], *, split: bool = True
              ) -> float:
    """Output elements the busiest SM computes for ``g`` cut into ``tile`` (a slot's worth
    of tiles per full wave, then its share of the last; a share of one tile's sum where
    the inner dimension is split, which cuBLAS does and cuDNN's convolutions do not:
    ``split``), weighted by what the tile's loads cost (:data:`TILE_LOAD_COST`)."""
    count = g.batch * math.ceil(g.m / tile[0]) * math.ceil(g.n / tile[1])
    per_wave = gpu.sm_count * _slots(tile)
    waves = math.ceil(count / per_wave)
    tiles = (waves - 1) * _slots(tile) + math.ceil((count - (waves - 1) * per_wave)
                                                   / gpu.sm_count)
    return (tiles * tile[0] * tile[1] * (1 + TILE_LOAD_COST * (1 / tile[0] + 1 / tile[1]))
            / (split_k(g, gpu, tile) if split else 1))


def dense_rate(op: Op, spec: Device) -> tuple[float, bool]:
    """FLOP/s a dense op of ``op``'s dtype runs at on ``spec``, and whether on tensor
    cores: FP32 on the CUDA cores (PyTorch's default for matmul; a TF32 run is a graph of
    dtype ``tf32``), other dtypes at the spec's best rate (tensor cores where it has them).

    >>> from hwmodels.registry import get_device
    >>> dense_rate(_gemm_op(1, 64, 64, 64), get_device("v100-pcie-32gb"))[1]
    False
    """
    gpu = _gpu(spec)
    if op.dtype == "fp32":
        return _vector(spec), False
    rate = spec.peak_flops(op.dtype)
    return rate, rate > gpu.vector_peak.get(op.dtype, 0.0)


def _vector(spec: Device) -> float:
    """The CUDA cores' FP32 rate (the spec's FP32 peak where the gpu table gives none)."""
    return _gpu(spec).vector_peak.get("fp32") or spec.peak_flops("fp32")


def _gpu(spec: Device) -> GpuSpec:
    if spec.gpu is None:
        raise HardwareSpecError(f"device {spec.name!r}: the GPU model needs its gpu table "
                                f"(SMs, clocks, L2), got none")
    return spec.gpu


def sustained_clock(gpu: GpuSpec, power_reference: float = POWER_REFERENCE) -> float:
    """The clock (Hz) ``gpu`` holds under a long dense kernel: its boost clock where its
    power limit per SM and GHz reaches ``power_reference``, else less, as the cube root of
    the shortfall (never below its base clock).

    >>> from hwmodels.registry import get_device
    >>> round(sustained_clock(get_device("t4").gpu, 2.0) / 1e9, 2)
    1.3
    """
    density = gpu.power_w / (gpu.sm_count * gpu.boost_clock_hz / 1e9)
    factor = min(1.0, (density / power_reference) ** (1 / 3))
    return max(gpu.boost_clock_hz * factor, gpu.base_clock_hz)


def gpu_key(op: Op) -> str:
    """What a GPU model is keyed by: the kernel family — ``gemm`` (products, convolutions
    and their gradients), ``layernorm``, ``softmax`` (a backward op: its forward's,
    prefixed) or ``memory`` for every other op, which moves bytes and little else.

    >>> gpu_key(_gemm_op(1, 8, 8, 8))
    'gemm'
    """
    backward = op.kind == "backward"
    kind = str(op.attrs.get("of_kind", op.kind)) if backward else op.kind
    if op.op_class in DENSE:
        return "gemm"  # backward ops and convolutions too: the products they run
    if kind in ("layernorm", "softmax"):
        family = kind
    else:
        return "memory"
    return f"backward:{family}" if backward else family


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else -1.0


@dataclass(frozen=True)
class _Dense:
    seconds_boost: float
    waves: int
    fill: float
    padding: float
    tile: int
    largest: Gemm | None


def _dense(op: Op, spec: Device) -> _Dense:
    gpu = _gpu(spec)
    products = gemms(op)
    if not products:
        return _Dense(0.0, 0, 1.0, 1.0, 0, None)
    rate, _ = dense_rate(op, spec)
    per_sm = rate / gpu.sm_count
    seconds = 0.0
    waves, fills, useful, padded = 0, [], 0.0, 0.0
    split = op.op_class == "matmul"
    for g in products:
        tile, w, fill = tiling(g, gpu, split=split)
        work = tile_work(g, gpu, tile, split=split)
        seconds += work * 2.0 * g.k / per_sm
        waves += w
        fills.append(fill)
        useful += g.batch * g.m * g.n
        padded += work * gpu.sm_count
    largest = max(products, key=lambda g: g.flops)
    tile = tiling(largest, gpu, split=split)[0]
    return _Dense(seconds, waves, min(fills), useful / padded, tile[0] * tile[1], largest)


@dataclass(frozen=True)
class GpuFeatures:
    """What the GPU model reads of an op on a GPU (:data:`GPU_FEATURES`,
    :data:`GPU_BASE_FEATURES`): the spec's SMs, clocks, rates, bandwidth and L2 with the
    op's shape — the :class:`hwmodels.predictor.Featurizer` of a model fitted across GPUs.
    ``power_reference``: see :data:`POWER_REFERENCE`."""

    power_reference: float = POWER_REFERENCE

    def key(self, op: Op) -> str:
        return gpu_key(op)

    def base(self, op: Op, spec: Device, context: Context = ALONE) -> tuple[float, ...]:
        gpu = _gpu(spec)
        dense = _dense(op, spec)
        moved = op.bytes_read + op.bytes_written
        slow = gpu.boost_clock_hz / sustained_clock(gpu, self.power_reference)
        vector = 0.0 if dense.largest else op.flops / _vector(spec)
        memory = moved / spec.memory_bandwidth
        fits = moved <= gpu.l2_bytes
        return (max(len(gemms(op)), 1) * spec.launch_overhead_s, dense.seconds_boost * slow,
                0.0 if fits else memory, memory if fits else 0.0, vector * slow)

    def features(self, op: Op, spec: Device, context: Context = ALONE
                 ) -> tuple[float, ...]:
        gpu = _gpu(spec)
        dense = _dense(op, spec)
        moved = op.bytes_read + op.bytes_written
        rate, tensor = dense_rate(op, spec) if dense.largest else (_vector(spec), False)
        balance = rate / spec.memory_bandwidth
        g = dense.largest
        shape = op.outputs[0].shape if op.outputs else (1,)
        rows = math.prod(shape[:-1]) if shape else 1
        return (
            _log2(op.flops), _log2(moved),
            _log2(op.flops / moved / balance) if moved and op.flops else -30.0,
            _log2(moved / gpu.l2_bytes) if moved else -30.0,
            _log2(dense.waves), dense.fill, dense.padding, _log2(dense.tile),
            _log2(g.k) if g else -1.0, _log2(g.m) if g else _log2(rows),
            _log2(g.n) if g else _log2(shape[-1] if shape else 1),
            _log2(g.batch) if g else -1.0, float(len(gemms(op))),
            _log2(rows / gpu.sm_count), _log2(shape[-1] if shape else 1), float(tensor))

    def roof(self, op: Op, spec: Device) -> float:
        rate = dense_rate(op, spec)[0] if gemms(op) else _vector(spec)
        return max(op.flops / rate, (op.bytes_read + op.bytes_written)
                   / spec.memory_bandwidth, 1e-9)


def _gemm_op(batch: int, m: int, n: int, k: int, dtype: str = "fp32") -> Op:
    """A batched product ``[batch, m, k] @ [batch, k, n]`` as an op (fp32 unless said)."""
    size = 4 if dtype == "fp32" else 2
    shape = (batch, m, n) if batch > 1 else (m, n)
    return Op(f"mm{batch}x{m}x{n}x{k}", "matmul", "matmul",
              outputs=(Tensor("out", shape, dtype),), flops=2 * batch * m * n * k,
              bytes_read=size * batch * (m * k + k * n), bytes_written=size * batch * m * n)

