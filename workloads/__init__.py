"""workloads: the common IR (Graph, Op, Tensor), the graph builder and the model zoo.

Importing the package loads nothing else: each name below is imported on first use, so the
error types and the vocabulary cost no more than their own modules.

>>> from workloads import build_model
>>> g = build_model("lenet5", batch=1)
>>> g.params
61706
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workloads.lazy import attach

if TYPE_CHECKING:
    from workloads.builder import GraphBuilder
    from workloads.dtypes import DTYPE_BYTES, OP_CLASSES, dtype_bytes
    from workloads.errors import (
        CalibrationError,
        GraphError,
        HardwareSpecError,
        OutOfMemory,
        PlacelabError,
        PlacementError,
        RegistryError,
        UnsupportedOp,
    )
    from workloads.graph import Edge, Graph
    from workloads.op import Op, Tensor
    from workloads.training import OPTIMIZERS, training_graph
    from workloads.zoo import build_model, list_models, register_model

_WHERE = {
    "GraphBuilder": "builder", "DTYPE_BYTES": "dtypes", "OP_CLASSES": "dtypes",
    "dtype_bytes": "dtypes", "Edge": "graph", "Graph": "graph", "Op": "op", "Tensor": "op",
    "OPTIMIZERS": "training", "training_graph": "training", "build_model": "zoo",
    "list_models": "zoo", "register_model": "zoo",
    **dict.fromkeys(("CalibrationError", "GraphError", "HardwareSpecError", "OutOfMemory",
                     "PlacelabError", "PlacementError", "RegistryError", "UnsupportedOp"),
                    "errors"),
}

__all__ = ["CalibrationError", "DTYPE_BYTES", "Edge", "Graph", "GraphBuilder", "GraphError",
    "HardwareSpecError", "OPTIMIZERS", "OP_CLASSES", "Op", "OutOfMemory", "PlacelabError",
    "PlacementError", "RegistryError", "Tensor", "UnsupportedOp", "build_model", "dtype_bytes",
    "list_models", "register_model", "training_graph"]

__getattr__, __dir__ = attach(__name__, _WHERE)
