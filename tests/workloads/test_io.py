"""Atomic writes: a new file gets the mode ``open()`` would give it, and importing the module
leaves the process's umask alone."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

WRITE = """
import os, stat, sys
os.umask(0o027)
real = os.umask
def watched(mask):
    raise AssertionError(f"umask changed to {mask:o} on import")
os.umask = watched
import workloads.io
os.umask = real
path = workloads.io.write_text_atomic(sys.argv[1], "x")
print(oct(stat.S_IMODE(path.stat().st_mode)))
"""


def test_a_new_file_gets_0666_less_the_umask_and_import_changes_nothing(tmp_path) -> None:
    out = subprocess.run([sys.executable, "-c", WRITE, str(tmp_path / "f.txt")],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == oct(0o640)


def test_a_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    from workloads.io import write_text_atomic

    path = tmp_path / "f.txt"
    path.write_text("old")
    path.chmod(0o600)
    write_text_atomic(path, "new")
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
