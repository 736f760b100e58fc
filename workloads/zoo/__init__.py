"""The model zoo: named graph constructors, each parameterised by batch size (sequence
models also by sequence length).

>>> from workloads.zoo import build_model, list_models
>>> "resnet50" in list_models()
True
>>> build_model("resnet50", batch=1).params
25557032
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from workloads.errors import RegistryError
from workloads.graph import Graph
from workloads.registry import Registry
from workloads.zoo.cnn import alexnet, lenet5, resnet50, vgg16
from workloads.zoo.dense import mlp, stacked_autoencoder
from workloads.zoo.inception import inception_v3
from workloads.zoo.sequence import bert_base, gpt2_small, lstm

__all__ = [
    "MODELS", "alexnet", "bert_base", "build_model", "gpt2_small", "inception_v3", "lenet5",
    "list_models", "lstm", "mlp", "register_model", "resnet50", "stacked_autoencoder",
    "vgg16",
]

ModelFn = Callable[..., Graph]
MODELS: Registry[ModelFn] = Registry("model")


def register_model(name: str, fn: ModelFn) -> None:
    """Add a constructor ``fn(batch=..., dtype=..., [seq_len=...]) -> Graph``."""
    MODELS.register(name, fn)


def list_models() -> list[str]:
    return MODELS.names()


def build_model(name: str, *, batch: int = 1, dtype: str = "fp32",
                seq_len: int | None = None) -> Graph:
    """Construct zoo model ``name`` at batch size ``batch`` (and ``seq_len`` tokens for a
    sequence model; its default otherwise)."""
    fn = MODELS.get(name)
    if not isinstance(batch, int) or batch < 1:
        raise RegistryError(f"model {name!r}: batch must be an int >= 1, got {batch!r}")
    if seq_len is None:
        return fn(batch=batch, dtype=dtype)
    if "seq_len" not in inspect.signature(fn).parameters:
        raise RegistryError(f"model {name!r}: takes no seq_len, got {seq_len}")
    if not isinstance(seq_len, int) or seq_len < 1:
        raise RegistryError(f"model {name!r}: seq_len must be an int >= 1, got {seq_len!r}")
    return fn(batch=batch, dtype=dtype, seq_len=seq_len)


for _name, _fn in (("mlp", mlp), ("lenet5", lenet5), ("alexnet", alexnet), ("vgg16", vgg16),
                   ("resnet50", resnet50), ("inception_v3", inception_v3),
                   ("stacked_autoencoder", stacked_autoencoder), ("lstm", lstm),
                   ("bert_base", bert_base), ("gpt2_small", gpt2_small)):
    register_model(_name, _fn)
