"""The model zoo: named graph constructors, each parameterised by batch size.

>>> from workloads.zoo import build_model, list_models
>>> "resnet50" in list_models()
True
>>> build_model("resnet50", batch=1).params
25557032
"""

from __future__ import annotations

from collections.abc import Callable

from workloads.builder import GraphBuilder
from workloads.errors import RegistryError
from workloads.graph import Graph

__all__ = ["build_model", "list_models", "lenet5", "mlp", "register_model", "resnet50"]

ModelFn = Callable[..., Graph]
_MODELS: dict[str, ModelFn] = {}


def register_model(name: str, fn: ModelFn) -> None:
    """Add a model constructor ``fn(batch=..., dtype=...) -> Graph`` under ``name``."""
    if name in _MODELS:
        raise RegistryError(f"model {name!r} is already registered")
    _MODELS[name] = fn


def list_models() -> list[str]:
    return sorted(_MODELS)


def build_model(name: str, *, batch: int = 1, dtype: str = "fp32") -> Graph:
    """Construct zoo model ``name`` at batch size ``batch``."""
    try:
        fn = _MODELS[name]
    except KeyError:
        raise RegistryError(
            f"unknown model {name!r}; expected one of: {', '.join(list_models())}"
        ) from None
    if not isinstance(batch, int) or batch < 1:
        raise RegistryError(f"model {name!r}: batch must be an int >= 1, got {batch!r}")
    return fn(batch=batch, dtype=dtype)


def mlp(batch: int = 1, dtype: str = "fp32", in_features: int = 784,
        hidden: tuple[int, ...] = (1024, 1024), classes: int = 10) -> Graph:
    """A multi-layer perceptron with ReLU between layers and a softmax head."""
    b = GraphBuilder("mlp", dtype)
    x = b.input((batch, in_features))
    for i, width in enumerate(hidden, 1):
        x = b.relu(b.linear(x, width, name=f"fc{i}"), name=f"relu{i}")
    b.softmax(b.linear(x, classes, name=f"fc{len(hidden) + 1}"), name="softmax")
    return b.build()


def lenet5(batch: int = 1, dtype: str = "fp32") -> Graph:
    """LeNet-5 (LeCun et al. 1998) on 32x32 inputs, with full C3 connectivity: 61,706 params."""
    b = GraphBuilder("lenet5", dtype)
    x = b.input((batch, 1, 32, 32))
    x = b.avg_pool2d(b.tanh(b.conv2d(x, 6, 5, bias=True, name="c1")), 2, name="s2")
    x = b.avg_pool2d(b.tanh(b.conv2d(x, 16, 5, bias=True, name="c3")), 2, name="s4")
    x = b.flatten(x)
    x = b.tanh(b.linear(x, 120, name="c5"))
    x = b.tanh(b.linear(x, 84, name="f6"))
    b.softmax(b.linear(x, 10, name="output"))
    return b.build()


def _bottleneck(b: GraphBuilder, x: str, width: int, stride: int, prefix: str) -> str:
    out_channels = width * 4
    y = b.relu(b.batchnorm(b.conv2d(x, width, 1, name=f"{prefix}.conv1"),
                           name=f"{prefix}.bn1"), name=f"{prefix}.relu1")
    y = b.relu(b.batchnorm(b.conv2d(y, width, 3, stride=stride, padding=1,
                                    name=f"{prefix}.conv2"), name=f"{prefix}.bn2"),
               name=f"{prefix}.relu2")
    y = b.batchnorm(b.conv2d(y, out_channels, 1, name=f"{prefix}.conv3"),
                    name=f"{prefix}.bn3")
    shortcut = x
    if stride != 1 or b.shape(x)[1] != out_channels:
        shortcut = b.batchnorm(
            b.conv2d(x, out_channels, 1, stride=stride, name=f"{prefix}.downsample.conv"),
            name=f"{prefix}.downsample.bn")
    return b.relu(b.add(y, shortcut, name=f"{prefix}.add"), name=f"{prefix}.relu3")


def resnet50(batch: int = 1, dtype: str = "fp32", image: int = 224,
             classes: int = 1000) -> Graph:
    """ResNet-50 (He et al. 2016, Table 1), stride on the 3x3 conv as in torchvision."""
    b = GraphBuilder("resnet50", dtype)
    x = b.input((batch, 3, image, image))
    x = b.relu(b.batchnorm(b.conv2d(x, 64, 7, stride=2, padding=3, name="conv1"),
                           name="bn1"), name="relu")
    x = b.max_pool2d(x, 3, stride=2, padding=1, name="maxpool")
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512),
                                                strict=True), 1):
        for i in range(blocks):
            stride = 2 if stage > 1 and i == 0 else 1
            x = _bottleneck(b, x, width, stride, f"layer{stage}.{i}")
    x = b.flatten(b.global_avg_pool(x, name="avgpool"), name="flatten")
    b.softmax(b.linear(x, classes, name="fc"), name="softmax")
    return b.build()


register_model("mlp", mlp)
register_model("lenet5", lenet5)
register_model("resnet50", resnet50)
