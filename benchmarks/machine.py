"""What the benchmarks print about the machine they ran on."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> str:
    """``machine: <cpu>, <n> cores, Python <version>``."""
    return (f"machine: {cpu_name()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}")
