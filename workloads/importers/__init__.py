"""Importers: foreign model formats into placelab graphs (ONNX; PyTorch via torch.fx)."""

from workloads.importers.onnx_import import import_onnx
from workloads.importers.torch_import import import_torch

__all__ = ["import_onnx", "import_torch"]
