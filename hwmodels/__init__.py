"""hwmodels: device, link and cluster specs, the catalog and registry, and cost models.

It answers questions and never schedules.

>>> from hwmodels import get_cluster, RooflineCost
>>> c = get_cluster("quad-v100-nvlink")
>>> RooflineCost(c).transfer_time(25_000_000, "gpu0", "gpu1")  # 1 us + 25 MB / 25 GB/s
0.001001
"""

from hwmodels.collectives import (
    all_gather_time,
    reduce_scatter_time,
    ring_allreduce_time,
    tree_allreduce_time,
)
from hwmodels.cost import (
    COST_MODELS,
    CalibratedCost,
    CostModel,
    RooflineCost,
    TableCost,
    make_cost_model,
)
from hwmodels.registry import (
    find_devices,
    get_cluster,
    get_device,
    list_clusters,
    list_devices,
    load,
    register_cluster,
    register_device,
    register_file,
    source_of,
    user_catalog_dir,
)
from hwmodels.spec import DEVICE_KINDS, Cluster, Device, Hop, Link
from hwmodels.toml_io import HardwareFile, dump, dumps, loads

__all__ = [
    "COST_MODELS", "DEVICE_KINDS", "CalibratedCost", "Cluster", "CostModel", "Device",
    "HardwareFile", "Hop", "Link", "RooflineCost", "TableCost", "all_gather_time", "dump",
    "dumps", "find_devices", "get_cluster", "get_device", "list_clusters", "list_devices",
    "load", "loads", "make_cost_model", "reduce_scatter_time", "register_cluster",
    "register_device", "register_file", "ring_allreduce_time", "source_of",
    "tree_allreduce_time", "user_catalog_dir",
]
