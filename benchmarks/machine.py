"""What the benchmarks print about the machine they ran on."""

from __future__ import annotations

import os
import platform
from pathlib import Path


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
