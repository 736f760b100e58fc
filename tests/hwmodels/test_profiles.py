"""The profile database: keys, concurrent writers, corrupt files and schema versions."""

from __future__ import annotations

import sqlite3
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from hwmodels.profiles import SCHEMA_VERSION, Entry, ProfileError, ProfileStore, machine_key
from tests.hwmodels.pool_work import write_profiles

MACHINE = {"cpu": "AMD EPYC", "cores": 2, "libraries": {"numpy": "2.0"}}


def _entry(signature: str = "s", batch: int = 4, seconds: float = 1e-3) -> Entry:
    return Entry("fp32", signature, batch, seconds, 5, "relu")


def test_entries_are_keyed_by_engine_machine_threads_signature_and_batch(tmp_path) -> None:
    store = ProfileStore(tmp_path / "p.sqlite")
    store.record("cpu", MACHINE, 1, [_entry(seconds=1e-3), _entry(batch=8, seconds=2e-3)],
                 "g")
    store.record("torch", MACHINE, 1, [_entry(seconds=5e-3)], "g")
    store.record("cpu", {**MACHINE, "cores": 4}, 1, [_entry(seconds=7e-3)], "g")
    store.record("cpu", MACHINE, 2, [_entry(seconds=9e-3)], "g")
    view = store.view("cpu", MACHINE, 1)
    assert (view.seconds("s", 4), view.seconds("s", 8), view.seconds("s", 2)) == (
        1e-3, 2e-3, None)
    assert store.view("torch", MACHINE, 1).seconds("s", 4) == 5e-3
    assert store.view("cpu", {**MACHINE, "cores": 4}, 1).seconds("s", 4) == 7e-3
    assert store.view("cpu", MACHINE, 2).seconds("s", 4) == 9e-3
    store.record("cpu", MACHINE, 1, [_entry(seconds=3e-3)], "h")  # measured again: replaced
    assert store.view("cpu", MACHINE, 1).seconds("s", 4) == 3e-3
    rows = {(r["engine"], r["threads"], r["machine"]): r for r in store.summary()}
    assert rows[("cpu", 1, machine_key(MACHINE))]["entries"] == 2
    assert rows[("cpu", 1, machine_key(MACHINE))]["graphs"] == 2
    assert rows[("cpu", 1, machine_key(MACHINE))]["fingerprint"] == MACHINE


def test_concurrent_writers_lose_nothing_and_never_corrupt_it(tmp_path) -> None:
    path = tmp_path / "p.sqlite"
    with ProcessPoolExecutor(4) as pool:
        written = list(pool.map(write_profiles, [str(path)] * 8, range(8)))
    assert written == [40] * 8
    view = ProfileStore(path).view("cpu", {"worker": "pool"}, 1)
    assert len(view) == 8 * 40
    assert all(view.seconds(f"w{w}.s{i}", 2) == pytest.approx((w + 1) * 1e-4 + i * 1e-6)
               for w in range(8) for i in range(40))
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_file_that_is_not_a_database_is_one_clear_line(tmp_path) -> None:
    path = tmp_path / "p.sqlite"
    path.write_bytes(b"this is no database" * 100)
    with pytest.raises(ProfileError, match=r"^profile database .*p.sqlite: expected a placelab "
                                           r"profile database, got a file SQLite cannot read "
                                           r"\(file is not a database\); move it aside or run "
                                           r"placelab profile --clear$"):
        ProfileStore(path).view("cpu", MACHINE, 1)
    with pytest.raises(ProfileError, match="got a file SQLite cannot read"):
        ProfileStore(path).record("cpu", MACHINE, 1, [_entry()], "g")


def test_another_schema_version_or_another_database_is_refused(tmp_path) -> None:
    path = tmp_path / "p.sqlite"
    ProfileStore(path).record("cpu", MACHINE, 1, [_entry()], "g")
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(ProfileError, match=rf"schema version {SCHEMA_VERSION} expected, got "
                                           rf"{SCHEMA_VERSION + 1} \(written by another "
                                           r"placelab, or not a profile database\)"):
        ProfileStore(path).view("cpu", MACHINE, 1)
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (x TEXT)")
    with pytest.raises(ProfileError, match="schema version 1 expected, got 0"):
        ProfileStore(other).record("cpu", MACHINE, 1, [_entry()], "g")


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), 0.0, -1.0])
def test_a_time_that_is_not_a_positive_finite_number_is_refused(tmp_path, seconds) -> None:
    store = ProfileStore(tmp_path / "p.sqlite")
    with pytest.raises(ProfileError, match=r"profile of 'g': signature 's': expected seconds "
                                           r"in \(0, 1e6\) and batch >= 1, got"):
        store.record("cpu", MACHINE, 1, [_entry(seconds=seconds)], "g")
    assert not (tmp_path / "p.sqlite").exists()  # nothing stored


def test_clear_removes_the_database_whatever_its_state(tmp_path) -> None:
    path = tmp_path / "p.sqlite"
    path.write_bytes(b"garbage")
    store = ProfileStore(path)
    assert store.clear() and not path.exists() and not store.clear()
    assert store.summary() == []
    with pytest.raises(ProfileError, match="no such file"):
        store.view("cpu", MACHINE, 1)


def test_a_missing_parent_folder_is_made(tmp_path: Path) -> None:
    store = ProfileStore(tmp_path / "a" / "b" / "p.sqlite")
    assert store.record("cpu", MACHINE, 1, [_entry()], "g") == 1
