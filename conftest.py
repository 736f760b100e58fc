"""Test session set-up shared by the tests and the doctests of every package."""

from __future__ import annotations

import importlib.util
import os
import tempfile

# Every run gets its own empty user catalog, whatever the developer's machine holds.
os.environ["PLACELAB_HOME"] = tempfile.mkdtemp(prefix="placelab-test-home-")

# Doctests of the optional importers and of the torch engine need their extras; without them
# they are not collected (their tests skip with the reason).
collect_ignore = [
    path for module, path in (("onnx", "workloads/importers/onnx_import.py"),
                              ("torch", "workloads/importers/torch_import.py"),
                              ("torch", "runtime/torch_engine.py"),
                              ("torch", "runtime/torch_kernels.py"),
                              ("torch", "runtime/torch_gradients.py"),
                              ("torch", "runtime/torch_windows.py"))
    if importlib.util.find_spec(module) is None
]
