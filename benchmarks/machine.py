"""What every benchmark shares: the machine it ran on, and how its report is kept."""

from __future__ import annotations

import os
import platform
from pathlib import Path

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
