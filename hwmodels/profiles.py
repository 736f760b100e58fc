"""The profile database: op signatures measured in context on an engine and machine, each
once, as FlexFlow's simulator measures each operator configuration once.

An entry is keyed by engine, machine (a hash of its fingerprint: CPU model, cores, library
versions), threads per device, dtype, op signature (:func:`hwmodels.cost.op_signature`) and
batch; it holds the median seconds the op kept its device busy, the runs that median is
over, the op's kind, the graph it was measured in and when. The ``calibrated`` cost model
takes a measured signature before any fitted model.

The database is one SQLite file (stdlib ``sqlite3``) in write-ahead-log mode; every graph's
entries are written in one transaction, so concurrent writers (a process pool, Dask workers)
never corrupt it or see half a graph. A file that is not such a database, or one written by
another schema version, is refused in one line.

>>> import tempfile, pathlib
>>> store = ProfileStore(pathlib.Path(tempfile.mkdtemp()) / "profiles.sqlite")
>>> store.record("cpu", {"cpu": "x"}, 1, [Entry("fp32", "sig", 4, 1e-3, 9, "relu")], "g")
1
>>> store.view("cpu", {"cpu": "x"}, 1).seconds("sig", 4)
0.001
>>> store.view("cpu", {"cpu": "y"}, 1).seconds("sig", 4) is None
True
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.errors import PlacelabError

__all__ = ["SCHEMA_VERSION", "Entry", "ProfileError", "ProfileStore", "ProfileView",
           "default_path", "machine_key"]

#: The layout this code reads and writes (SQLite's ``user_version``).
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS profile (
    engine TEXT NOT NULL, machine TEXT NOT NULL, threads INTEGER NOT NULL,
    dtype TEXT NOT NULL, signature TEXT NOT NULL, batch INTEGER NOT NULL,
    seconds REAL NOT NULL CHECK (seconds > 0 AND seconds < 1e6),
    runs INTEGER NOT NULL, kind TEXT NOT NULL, graph TEXT NOT NULL, measured_at TEXT NOT NULL,
    PRIMARY KEY (engine, machine, threads, dtype, signature, batch));
CREATE TABLE IF NOT EXISTS machine (machine TEXT PRIMARY KEY, fingerprint TEXT NOT NULL);
"""


def _retry(step: Callable[[], object], attempts: int = 100) -> None:
    """Run ``step``, again after a pause while another process holds the file (SQLite
    does not wait by itself to change the journal mode)."""
    for attempt in range(attempts):
        try:
            step()
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or attempt == attempts - 1:
                raise
            time.sleep(0.01 * (attempt + 1))


class ProfileError(PlacelabError):
    """The profile database cannot be read or written."""


@dataclass(frozen=True)
class Entry:
    """One measured signature: its dtype, signature, batch, seconds, the runs the time is
    the median of, and the op's kind."""

    dtype: str
    signature: str
    batch: int
    seconds: float
    runs: int
    kind: str


def default_path() -> Path:
    """``$PLACELAB_HOME/profiles.sqlite`` (by default under ``~/.config/placelab``)."""
    from hwmodels.registry import user_catalog_dir

    return user_catalog_dir().parent / "profiles.sqlite"


def machine_key(fingerprint: Mapping[str, Any]) -> str:
    """A short stable hash of a machine's fingerprint.

    >>> machine_key({"cpu": "x", "cores": 2}) == machine_key({"cores": 2, "cpu": "x"})
    True
    """
    text = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ProfileView:
    """The entries of one engine, machine and thread count, read once: ``(signature,
    batch) -> seconds``."""

    def __init__(self, times: Mapping[tuple[str, int], float]) -> None:
        self.times = dict(times)

    def seconds(self, signature: str, batch: int) -> float | None:
        return self.times.get((signature, batch))

    def __len__(self) -> int:
        return len(self.times)


class ProfileStore:
    """The profile database at ``path`` (created on the first write)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @contextmanager
    def _connect(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        if not write and not self.path.exists():
            raise ProfileError(f"profile database {self.path}: no such file")
        if write:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        except sqlite3.Error as err:
            raise ProfileError(f"profile database {self.path}: cannot open: {err}") from None
        try:
            self._check(conn, write=write)
            yield conn
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) and "busy" not in str(err):
                raise self._unreadable(err) from None
            raise ProfileError(f"profile database {self.path}: expected to get it within "
                               f"60 s, got it held by another writer all along "
                               f"({err})") from None
        except sqlite3.DatabaseError as err:
            raise self._unreadable(err) from None
        finally:
            conn.close()

    def _unreadable(self, err: Exception) -> ProfileError:
        return ProfileError(f"profile database {self.path}: expected a placelab profile "
                            f"database, got a file SQLite cannot read ({err}); move it aside "
                            f"or run placelab profile --clear")

    def _check(self, conn: sqlite3.Connection, *, write: bool) -> None:
        if write and self._fresh(conn):
            _retry(lambda: conn.execute("PRAGMA journal_mode = WAL"))
            conn.execute("BEGIN IMMEDIATE")  # one process lays a new file out
            if self._fresh(conn):
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise ProfileError(f"profile database {self.path}: schema version "
                               f"{SCHEMA_VERSION} expected, got {version} (written by "
                               f"another placelab, or not a profile database); move it "
                               f"aside or run placelab profile --clear")
        tables = self._tables(conn)
        if not {"profile", "machine"} <= tables:
            raise ProfileError(f"profile database {self.path}: expected tables profile "
                               f"and machine, got {sorted(tables) or 'none'}")

    @staticmethod
    def _tables(conn: sqlite3.Connection) -> set[str]:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = "
                                           "'table'")}

    def _fresh(self, conn: sqlite3.Connection) -> bool:
        """Whether the file is new: no schema version, no tables."""
        return (conn.execute("PRAGMA user_version").fetchone()[0] == 0
                and not self._tables(conn))

    def record(self, engine: str, fingerprint: Mapping[str, Any], threads: int,
               entries: Sequence[Entry], graph: str) -> int:
        """Store ``entries`` measured in ``graph`` (one transaction; a signature measured
        before is replaced); return how many."""
        for e in entries:
            if not (math.isfinite(e.seconds) and 0 < e.seconds < 1e6) or e.batch < 1:
                raise ProfileError(f"profile of {graph!r}: signature {e.signature[:60]!r}: "
                                   f"expected seconds in (0, 1e6) and batch >= 1, got "
                                   f"{e.seconds!r} at batch {e.batch!r}")
        machine = machine_key(fingerprint)
        when = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        with self._connect(write=True) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("INSERT OR REPLACE INTO machine VALUES (?, ?)",
                             (machine, json.dumps(fingerprint, sort_keys=True, default=str)))
                conn.executemany(
                    "INSERT OR REPLACE INTO profile VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    [(engine, machine, threads, e.dtype, e.signature, e.batch, e.seconds,
                      e.runs, e.kind, graph, when) for e in entries])
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        return len(entries)

    def view(self, engine: str, fingerprint: Mapping[str, Any], threads: int) -> ProfileView:
        """The entries of ``engine`` on the machine of ``fingerprint`` at ``threads``."""
        with self._connect(write=False) as conn:
            rows = conn.execute("SELECT signature, batch, seconds FROM profile WHERE engine "
                                "= ? AND machine = ? AND threads = ?",
                                (engine, machine_key(fingerprint), threads)).fetchall()
        return ProfileView({(s, int(b)): float(t) for s, b, t in rows})

    def summary(self) -> list[dict[str, Any]]:
        """Per engine, machine and thread count: the entries, graphs and the latest date."""
        if not self.path.exists():
            return []
        with self._connect(write=False) as conn:
            rows = conn.execute(
                "SELECT p.engine, p.machine, p.threads, COUNT(*), COUNT(DISTINCT p.graph), "
                "MAX(p.measured_at), m.fingerprint FROM profile p JOIN machine m USING "
                "(machine) GROUP BY p.engine, p.machine, p.threads ORDER BY p.engine, "
                "p.machine, p.threads").fetchall()
        return [{"engine": e, "machine": m, "threads": t, "entries": n, "graphs": g,
                 "latest": when, "fingerprint": json.loads(f)}
                for e, m, t, n, g, when, f in rows]

    def clear(self) -> bool:
        """Remove the database (whatever its state); return whether there was one."""
        found = False
        for suffix in ("", "-wal", "-shm"):
            path = Path(f"{self.path}{suffix}")
            if path.exists():
                os.remove(path)
                found = True
        return found
