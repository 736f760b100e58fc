"""hwmodels: device, link and cluster specs, the catalog and registry, and cost models.

It answers questions and never schedules.

>>> from hwmodels import get_cluster, RooflineCost
>>> c = get_cluster("quad-v100-nvlink")
>>> RooflineCost(c).transfer_time(25_000_000, "gpu0", "gpu1")  # 1 us + 25 MB / 25 GB/s
0.001001
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workloads.lazy import attach

if TYPE_CHECKING:
    from hwmodels.calibrated import CalibratedCost
    from hwmodels.cost import (
        COST_MODELS,
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
    from hwmodels.spec import DEVICE_KINDS, GPU_ARCHITECTURES, Cluster, Device, GpuSpec, Hop, Link
    from hwmodels.toml_io import HardwareFile, dump, dumps, loads

_WHERE = {
    "COST_MODELS": "cost", "CalibratedCost": "calibrated", "Cluster": "spec", "CostModel": "cost",
    "DEVICE_KINDS": "spec", "Device": "spec", "GPU_ARCHITECTURES": "spec", "GpuSpec": "spec",
    "HardwareFile": "toml_io", "Hop": "spec",
    "Link": "spec", "RooflineCost": "cost", "TableCost": "cost",
    "dump": "toml_io", "dumps": "toml_io",
    "find_devices": "registry", "get_cluster": "registry", "get_device": "registry",
    "list_clusters": "registry", "list_devices": "registry", "load": "registry",
    "loads": "toml_io", "make_cost_model": "cost",
    "register_cluster": "registry", "register_device": "registry",
    "register_file": "registry", "remove": "registry",
    "source_of": "registry",
    "user_catalog_dir": "registry",
}

__all__ = ["COST_MODELS", "CalibratedCost", "Cluster", "CostModel", "DEVICE_KINDS", "Device",
    "GPU_ARCHITECTURES", "GpuSpec", "HardwareFile", "Hop", "Link", "RooflineCost", "TableCost",
    "dump", "dumps", "find_devices", "get_cluster", "get_device",
    "list_clusters", "list_devices", "load", "loads", "make_cost_model",
    "register_cluster", "register_device", "register_file", "remove",
    "source_of", "user_catalog_dir"]

__getattr__, __dir__ = attach(__name__, _WHERE)
