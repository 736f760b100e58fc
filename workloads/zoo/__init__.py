"""The model zoo: named graph constructors, each parameterised by batch size (sequence
models also by sequence length).

>>> from workloads.zoo import build_model, list_models
>>> "resnet50" in list_models()
True
>>> build_model("resnet50", batch=1).params
25557032
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING

from workloads.errors import RegistryError
from workloads.registry import Registry

if TYPE_CHECKING:
    from workloads.graph import Graph

__all__ = ["MAX_BATCH", "MAX_SEQ_LEN", "MODELS", "build_model", "check_size", "list_models",
           "register_model"]

#: The largest batch and sequence length a model is built at: far past any real step,
#: and small enough that every byte and FLOP count of the graph stays a finite int64.
MAX_BATCH = 2**24
MAX_SEQ_LEN = 2**24

ModelFn = Callable[..., "Graph"]
#: The zoo's constructors are imported on first lookup (listing names imports none).
MODELS: Registry[ModelFn] = Registry("model", builtins={
    "mlp": "workloads.zoo.dense:mlp", "stacked_autoencoder": "workloads.zoo.dense:"
    "stacked_autoencoder", "lenet5": "workloads.zoo.cnn:lenet5",
    "alexnet": "workloads.zoo.cnn:alexnet", "vgg16": "workloads.zoo.cnn:vgg16",
    "resnet50": "workloads.zoo.cnn:resnet50",
    "inception_v3": "workloads.zoo.inception:inception_v3",
    "lstm": "workloads.zoo.sequence:lstm", "bert_base": "workloads.zoo.sequence:bert_base",
    "gpt2_small": "workloads.zoo.sequence:gpt2_small",
    "bert_large": "workloads.zoo.sequence:bert_large",
    "gpt2_large": "workloads.zoo.sequence:gpt2_large",
    "gpt3_xl": "workloads.zoo.sequence:gpt3_xl",
    "gpt3_xl_neusight": "workloads.zoo.sequence:gpt3_xl_neusight",
    "gpt3_2.7b": "workloads.zoo.sequence:gpt3_2_7b",
    "opt_1.3b": "workloads.zoo.sequence:opt_1_3b",
})


def register_model(name: str, fn: ModelFn) -> None:
    """Add a constructor ``fn(batch=..., dtype=..., [seq_len=...]) -> Graph``."""
    MODELS.register(name, fn)


def list_models() -> list[str]:
    return MODELS.names()


def build_model(name: str, *, batch: int = 1, dtype: str = "fp32",
                seq_len: int | None = None, tp: int = 1) -> Graph:
    """Construct zoo model ``name`` at batch size ``batch`` (and ``seq_len`` tokens for a
    sequence model; its default otherwise); with ``tp > 1``, one rank's shard of its
    tensor-parallel split (the transformers).

    >>> build_model("gpt2_small", seq_len=64, tp=4).params < build_model("gpt2_small",
    ...                                                                  seq_len=64).params
    True
    """
    fn = MODELS.get(name)
    check_size(name, batch, seq_len)
    if tp != 1:
        if "tp" not in inspect.signature(fn).parameters:
            raise RegistryError(f"model {name!r}: has no tensor-parallel split (tp), got "
                                f"tp={tp}; models with one: "
                                f"{', '.join(n for n in MODELS.names() if _splits(n))}")
        fn = functools.partial(fn, tp=tp)
    if seq_len is None:
        graph = fn(batch=batch, dtype=dtype)
    elif "seq_len" not in inspect.signature(fn).parameters:
        raise RegistryError(f"model {name!r}: takes no seq_len, got {seq_len}")
    else:
        graph = fn(batch=batch, dtype=dtype, seq_len=seq_len)
    # the graph is new and not yet shared: record what it is without rebuilding it
    graph.meta = MappingProxyType({**graph.meta, "model": name, "batch": batch,
                                   "seq_len": seq_len, "dtype": dtype, "step": "forward",
                                   **({"tp": tp} if tp != 1 else {})})
    return graph


def check_size(name: str, batch: object, seq_len: object = None) -> None:
    """Refuse a batch or sequence length that is not an int in 1..2**24 (a bool is not one).

    >>> check_size("mlp", 2**30)
    Traceback (most recent call last):
    ...
    workloads.errors.RegistryError: model 'mlp': batch must be an int in 1..16777216, got 1073741824
    """
    for key, value, top in (("batch", batch, MAX_BATCH), ("seq_len", seq_len, MAX_SEQ_LEN)):
        if key == "seq_len" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise RegistryError(f"model {name!r}: {key} must be an int in 1..{top}, got "
                                f"{value!r}")


def _splits(name: str) -> bool:
    return "tp" in inspect.signature(MODELS.get(name)).parameters


