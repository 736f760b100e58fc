"""Reading and writing files: atomic writes (a reader sees the old file or the new one,
never half of one) and reads whose errors are one line."""

from __future__ import annotations

import functools
import glob
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from workloads.errors import PlacelabError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["STDOUT", "check_room", "memory_headroom", "read_text", "write_bytes_atomic",
           "write_figure", "write_text_atomic"]


def _kernel_umask() -> int | None:
    """The process's umask as Linux reports it, without changing it (None elsewhere)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    return None


@functools.cache
def _file_mode() -> int:
    """The mode ``open()`` would give a new file (0666 less the umask); mkstemp uses 0600.

    Where the kernel does not report the umask it is set and restored at once, on the first
    write rather than at import, where it would change the importer's process state.
    """
    umask = _kernel_umask()
    if umask is None:
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask


#: Writing to this path writes to standard output.
STDOUT = "-"


def _clean_stale(path: Path) -> None:
    """Remove temporary files an interrupted writer of ``path`` left (their process is
    gone); a live writer's are kept."""
    import psutil

    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        parts = tmp.name[len(path.name) + 2:].split(".")
        if parts and parts[0].isdigit() and not psutil.pid_exists(int(parts[0])):
            tmp.unlink(missing_ok=True)


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` so that a reader sees the old file or the new one.

    A regular file (or a new one) is replaced through a temporary file in the same folder,
    keeping the mode of the file it replaces; a symbolic link keeps pointing where it
    pointed and its target is replaced; a FIFO or a device is written through, as a shell
    redirection would; ``-`` is standard output. Temporary files that interrupted writers
    of the same path left behind are removed.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.txt"
    >>> write_bytes_atomic(p, b"hi").read_bytes()
    b'hi'
    """
    if str(path) == STDOUT:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return Path(STDOUT)
    path = Path(path)
    target = path.resolve() if path.is_symlink() else path
    if target.exists() and not target.is_file():
        with open(target, "wb") as f:  # a FIFO, a terminal, /dev/null: no rename possible
            f.write(data)
        return path
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else _file_mode()
    target.parent.mkdir(parents=True, exist_ok=True)
    _clean_stale(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp",
                               dir=target.parent)
    try:
        os.chmod(tmp, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_figure(fig: Figure, path: str | Path, *, dpi: int = 110) -> Path:
    """Render ``fig`` in the format its suffix names (PNG, SVG, PDF, ...) and write it
    atomically. Figures are built on ``matplotlib.figure.Figure``, never through pyplot, so
    drawing one neither switches the user's backend nor keeps the figure alive.

    >>> import tempfile, pathlib
    >>> from matplotlib.figure import Figure
    >>> fig = Figure()
    >>> _ = fig.add_subplot().plot([0, 1], [1, 0])
    >>> write_figure(fig, pathlib.Path(tempfile.mkdtemp()) / "f.svg").read_bytes()[:5]
    b'<?xml'
    """
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lower().lstrip(".") or "png", dpi=dpi)
    return write_bytes_atomic(path, buf.getvalue())


def read_text(path: str | Path, error: type[PlacelabError], what: str) -> str:
    """The UTF-8 text of ``path``; an unreadable or non-UTF-8 file raises ``error`` with
    one line naming the file (``what`` says what it was meant to be).

    >>> read_text("/nonexistent.toml", PlacelabError, "hardware file")
    Traceback (most recent call last):
    ...
    workloads.errors.PlacelabError: /nonexistent.toml: cannot read hardware file: No such ...
    """
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise error(f"{path}: cannot read {what}: {err.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise error(f"{path}: expected UTF-8 text, got a byte {data[err.start]:#x} at "
                    f"offset {err.start}") from None


def memory_headroom() -> tuple[int, str]:
    """Bytes this process can still allocate, and what bounds them: the memory the system
    has available or, where lower, what the address-space limit (``ulimit -v``) leaves.

    >>> room, bound = memory_headroom()
    >>> bound in ("available memory", "the address-space limit (ulimit -v)")
    True
    """
    import resource

    import psutil

    room, bound = int(psutil.virtual_memory().available), "available memory"
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    if limit != resource.RLIM_INFINITY:
        left = limit - psutil.Process().memory_info().vms
        if left < room:
            room, bound = max(left, 0), "the address-space limit (ulimit -v)"
    return room, bound


def check_room(path: str | Path, per_byte: float, error: type[PlacelabError],
               what: str) -> None:
    """Refuse, before reading it, a file whose objects need more memory than is left
    (``per_byte`` bytes of memory per byte of file): a one-line error rather than an
    allocation failure deep inside a parser, or swapping.

    >>> check_room(__file__, 10, PlacelabError, "source file")  # a small file fits
    """
    try:
        size = Path(path).stat().st_size
    except OSError:
        return  # the read that follows reports it
    need = int(size * per_byte)
    room, bound = memory_headroom()
    if need > room:
        raise error(f"{path}: a {size / 2**20:,.0f} MiB {what} needs about "
                    f"{need / 2**30:,.1f} GiB to load; {bound} leaves "
                    f"{room / 2**30:,.1f} GiB")
