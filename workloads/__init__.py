"""workloads: the common IR (Graph, Op, Tensor), the graph builder and the model zoo.

>>> from workloads import build_model
>>> g = build_model("lenet5", batch=1)
>>> g.params
61706
"""

from workloads.builder import GraphBuilder
from workloads.errors import (
    CalibrationError,
    GraphError,
    HardwareSpecError,
    OutOfMemory,
    PlacelabError,
    PlacementError,
    RegistryError,
)
from workloads.graph import DTYPE_BYTES, OP_CLASSES, Edge, Graph, Op, Tensor, dtype_bytes
from workloads.training import OPTIMIZERS, training_graph
from workloads.zoo import build_model, list_models, register_model

__all__ = [
    "DTYPE_BYTES", "OPTIMIZERS", "OP_CLASSES", "CalibrationError", "Edge", "Graph", "GraphBuilder",
    "GraphError", "HardwareSpecError", "Op", "OutOfMemory", "PlacelabError",
    "PlacementError", "RegistryError", "Tensor", "build_model", "dtype_bytes",
    "list_models", "register_model", "training_graph",
]
