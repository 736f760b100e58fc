"""Convolutional networks: LeNet-5, AlexNet, VGG-16, ResNet-50, Inception v3."""

from __future__ import annotations

from workloads.builder import GraphBuilder
from workloads.graph import Graph

__all__ = ["alexnet", "lenet5", "resnet50", "vgg16"]


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


def alexnet(batch: int = 1, dtype: str = "fp32") -> Graph:
    """AlexNet as in torchvision (Krizhevsky et al. 2012, one-GPU variant of
    Krizhevsky 2014): 61,100,840 parameters at 224x224."""
    b = GraphBuilder("alexnet", dtype)
    x = b.input((batch, 3, 224, 224))
    for i, (out, k, s, p, pool) in enumerate(((64, 11, 4, 2, True), (192, 5, 1, 2, True),
                                              (384, 3, 1, 1, False), (256, 3, 1, 1, False),
                                              (256, 3, 1, 1, True)), 1):
        x = b.relu(b.conv2d(x, out, k, stride=s, padding=p, bias=True, name=f"conv{i}"))
        if pool:
            x = b.max_pool2d(x, 3, stride=2, name=f"pool{i}")
    x = b.flatten(b.adaptive_avg_pool2d(x, 6, name="avgpool"))
    x = b.relu(b.linear(x, 4096, name="fc6"))
    x = b.relu(b.linear(x, 4096, name="fc7"))
    b.softmax(b.linear(x, 1000, name="fc8"))
    return b.build()


def vgg16(batch: int = 1, dtype: str = "fp32") -> Graph:
    """VGG-16, configuration D of Simonyan and Zisserman (2015), without batch norm as in
    torchvision: 138,357,544 parameters."""
    b = GraphBuilder("vgg16", dtype)
    x = b.input((batch, 3, 224, 224))
    for stage, (width, convs) in enumerate(((64, 2), (128, 2), (256, 3), (512, 3), (512, 3)),
                                           1):
        for i in range(1, convs + 1):
            x = b.relu(b.conv2d(x, width, 3, padding=1, bias=True, name=f"conv{stage}_{i}"))
        x = b.max_pool2d(x, 2, name=f"pool{stage}")
    x = b.flatten(b.adaptive_avg_pool2d(x, 7, name="avgpool"))
    x = b.relu(b.linear(x, 4096, name="fc6"))
    x = b.relu(b.linear(x, 4096, name="fc7"))
    b.softmax(b.linear(x, 1000, name="fc8"))
    return b.build()
