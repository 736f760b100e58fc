"""What every benchmark shares: the machine it ran on, and how its report is kept."""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
from pathlib import Path
from types import ModuleType

from workloads.io import write_text_atomic


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo where there is one (Linux), else what platform says."""
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.exists() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return names[0] if names else platform.processor() or platform.machine()


def describe() -> str:
    """``machine: <cpu>, <n> cores, Python <version>``."""
    return (f"machine: {cpu_name()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}")


def record(lines: list[str], out: str | None) -> str:
    """The report as text, also written atomically to ``out`` when given."""
    text = "\n".join(lines) + "\n"
    if out:
        write_text_atomic(out, text)
    return text


def suite_module(relative: str) -> ModuleType:
    """A module of the test suite (``tests/sim/oracle.py``) loaded from its file, so that a
    benchmark times the very model the tests check against without putting the repository
    on ``sys.path``."""
    path = Path(__file__).resolve().parents[1] / relative
    name = "placelab_tests." + relative.removesuffix(".py").replace("/", ".")
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while being made
        spec.loader.exec_module(module)
    return sys.modules[name]
