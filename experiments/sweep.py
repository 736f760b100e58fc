"""Sweeps: a grid of :class:`~experiments.runspec.RunSpec` run over any
``concurrent.futures.Executor`` (a local process pool by default, a Dask cluster through
``Client(address).get_executor()``), each finished cell written at once, so an interrupted
sweep resumes where it stopped.

A sweep folder holds ``cells/<spec hash>.json`` (one row each, written atomically as cells
finish), ``results.parquet`` (the table, in grid order), and, for a sweep run from a spec
file, ``spec.toml`` (the file as given) and ``environment.json`` (package versions and the
definition hash of every cluster), so that the folder alone suffices to rerun it.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import Field

from experiments.runspec import (
    RESULT_COLUMNS,
    RunSpec,
    blank_row,
    cluster_toml,
    provenance,
    run_one,
)
from workloads.errors import PlacelabError
from workloads.schema import Schema

__all__ = ["Experiment", "SweepError", "SweepFile", "environment", "load_sweep", "run_many",
           "specs_from"]


class SweepError(PlacelabError):
    """A sweep spec or folder that cannot be used."""


class Experiment:
    """Run every spec once (a spec given twice is one cell), in any executor.

    With ``out``, each finished row is written at once to ``out/cells/<hash>.json`` and the
    table to ``out/results.parquet``; a later run with the same ``out`` runs only the cells
    missing there.

    >>> specs = [RunSpec.make("mlp", "workstation", p, batch=8) for p in ("heft", "cpop")]
    >>> df = Experiment(specs).run(workers=1, progress=False)
    >>> list(df["policy"])
    ['heft', 'cpop']
    """

    def __init__(self, specs: Iterable[RunSpec], *, out: str | Path | None = None) -> None:
        self.specs = tuple({s.key: s for s in specs}.values())
        self.out = None if out is None else Path(out)

    def stored(self) -> dict[str, dict[str, Any]]:
        """Rows already in ``out/cells`` for specs of this experiment, by spec hash."""
        if self.out is None:
            return {}
        rows = {}
        for spec in self.specs:
            path = self.out / "cells" / f"{spec.key}.json"
            if path.exists():
                rows[spec.key] = json.loads(path.read_text(encoding="utf-8"))
        return rows

    def run(self, executor: Executor | None = None, *, workers: int | None = None,
            progress: bool | None = None) -> pd.DataFrame:
        """The results table (``RESULT_COLUMNS``, one row per spec, in spec order).

        ``executor``: any ``concurrent.futures.Executor``; without one, a local process pool
        of ``workers`` processes (all cores by default), or this process when ``workers``
        is 1. ``progress``: a bar with ETA on stderr (None: only when stderr is a terminal).
        """
        rows = self.stored()
        todo = [s for s in self.specs if s.key not in rows]
        from tqdm import tqdm

        bar = tqdm(total=len(self.specs), initial=len(rows), unit="cell", file=sys.stderr,
                   disable=(not sys.stderr.isatty()) if progress is None else not progress)
        with bar:
            for row in self._results(todo, executor, workers):
                rows[row["spec_hash"]] = row
                self._store(row)
                bar.update()
        df = pd.DataFrame([rows[s.key] for s in self.specs], columns=list(RESULT_COLUMNS))
        if self.out is not None:
            from experiments.results import write_results

            write_results(df, self.out / "results.parquet")
        return df

    def _results(self, todo: list[RunSpec], executor: Executor | None,
                 workers: int | None) -> Iterator[dict[str, Any]]:
        if not todo:
            return
        if executor is not None:
            yield from _drain(executor, todo, 4)
        elif workers == 1 or len(todo) == 1:
            yield from map(run_one, todo)
        else:
            n = min(workers or os.cpu_count() or 1, len(todo))
            with ProcessPoolExecutor(max_workers=n, initializer=exit_with_parent,
                                     initargs=(os.getpid(),)) as pool:
                yield from _drain(pool, todo, n)

    def _store(self, row: dict[str, Any]) -> None:
        if self.out is not None:
            from workloads.io import write_text_atomic

            write_text_atomic(self.out / "cells" / f"{row['spec_hash']}.json",
                              json.dumps(row, sort_keys=True))


def exit_with_parent(pid: int, every_s: float = 1.0) -> None:
    """Run in each pool worker: a watcher thread ends the worker once process ``pid`` (the
    one that started the pool) is gone. A parent killed outright (the out-of-memory killer,
    ``kill -9``) runs no clean-up, and its workers would otherwise live on for good."""
    import threading

    import psutil

    try:
        parent = psutil.Process(pid)  # by pid and start time: a reused pid is not the parent
    except psutil.NoSuchProcess:
        os._exit(1)

    def watch() -> None:
        # a killed parent nobody has reaped yet is a zombie: gone all the same
        while parent.is_running() and parent.status() != psutil.STATUS_ZOMBIE:
            time.sleep(every_s)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _drain(executor: Executor, todo: list[RunSpec], workers: int) -> Iterator[dict[str, Any]]:
    """Rows as their cells finish; a cell whose worker died still gives a row. Cells go in
    small batches (about 16 per worker, at most 32 cells each): a simulated cell can take
    milliseconds, less than sending it to a worker and back."""
    size = max(1, min(32, len(todo) // (16 * workers)))
    batches = [todo[i:i + size] for i in range(0, len(todo), size)]
    futures: dict[Future[list[dict[str, Any]]], list[RunSpec]] = {
        executor.submit(run_many, batch): batch for batch in batches}
    for future in as_completed(futures):
        try:
            yield from future.result()
        except Exception as err:  # the worker process itself failed: its cells say so
            yield from (_failed(spec, err) for spec in futures[future])


def run_many(specs: list[RunSpec]) -> list[dict[str, Any]]:
    """:func:`run_one` over a batch of specs, in a worker."""
    return [run_one(spec) for spec in specs]


def _failed(spec: RunSpec, err: BaseException) -> dict[str, Any]:
    return blank_row(spec) | {"feasible": False, "reason": f"error: {type(err).__name__}",
                              "error": f"{type(err).__name__}: {err}"}


# -- sweep spec files -------------------------------------------------------------------------


class PolicyGrid(Schema):
    """A policy with a grid of parameter values (each combination is one policy)."""

    name: str = Field(min_length=1)
    params: dict[str, list[int | float | str | bool]] = Field(default_factory=dict)


class WhatIf(Schema):
    """Vary one field of a device model, as its hardware TOML names it, in every cluster
    that has it (``memory_bandwidth_gbps``, ``memory_gib``, ``peak_tflops.bf16``, ...)."""

    device: str = Field(min_length=1)
    field: str = Field(min_length=1)
    values: list[int | float] = Field(min_length=1)


class SweepFile(Schema):
    """A sweep spec: every axis is a list, the grid is their product."""

    models: list[str] = Field(default_factory=list)
    graphs: list[str] = Field(default_factory=list)
    clusters: list[str] = Field(min_length=1)
    policies: list[str] = Field(default_factory=list)
    policy_grid: list[PolicyGrid] = Field(default_factory=list)
    batch: list[int] = Field(default_factory=lambda: [1], min_length=1)
    seq_len: list[int] = Field(default_factory=list)
    dtype: list[str] = Field(default_factory=lambda: ["fp32"], min_length=1)
    train: list[bool] = Field(default_factory=lambda: [False], min_length=1)
    optimizer: list[str] = Field(default_factory=lambda: ["sgd"], min_length=1)
    colocate: list[str] = Field(default_factory=lambda: ["ops"], min_length=1)
    passes: list[list[str]] = Field(default_factory=lambda: [list[str]()], min_length=1)
    cost: list[str] = Field(default_factory=lambda: ["roofline"], min_length=1)
    cost_file: str | None = None
    links: list[str] = Field(default_factory=lambda: ["fcfs"], min_length=1)
    order: list[str] = Field(default_factory=lambda: ["plan"], min_length=1)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    whatif: WhatIf | None = None


def load_sweep(path: str | Path) -> tuple[SweepFile, str]:
    """A sweep spec file, checked against :class:`SweepFile`, and its text."""
    from workloads.io import read_text
    from workloads.schema import load_toml, validate

    text = read_text(path, SweepError, "sweep spec")
    doc = validate(SweepFile, load_toml(text, source=str(path), error=SweepError),
                   source=str(path), error=SweepError)
    if not doc.models and not doc.graphs:
        raise SweepError(f"{path}: models: expected at least one model or graph file, got none")
    if not doc.policies and not doc.policy_grid:
        raise SweepError(f"{path}: policies: expected at least one policy, got none")
    return doc, text


def _policies(doc: SweepFile) -> list[str]:
    from policies.base import make_policy

    out = list(doc.policies)
    for grid in doc.policy_grid:
        keys = list(grid.params)
        for values in itertools.product(*(grid.params[k] for k in keys)):
            args = ",".join(f"{k}={v}" for k, v in zip(keys, values, strict=True))
            out.append(f"{grid.name}:{args}" if args else grid.name)
    for spec in out:
        make_policy(spec)  # a bad name or parameter is one line, before anything runs
    return out


def _clusters(doc: SweepFile, where: str) -> list[tuple[Any, str]]:
    """(cluster, what-if label) pairs: each cluster as named, or once per what-if value."""
    from hwmodels.registry import get_cluster

    clusters = [get_cluster(name) for name in doc.clusters]
    if doc.whatif is None:
        return [(c, "") for c in clusters]
    return [(_vary(c, doc.whatif, value, where), f"{doc.whatif.device}.{doc.whatif.field}="
             f"{value}") for c in clusters for value in doc.whatif.values]


def _vary(cluster: Any, whatif: WhatIf, value: float, where: str) -> Any:
    """``cluster`` with ``whatif.field`` of device model ``whatif.device`` set to ``value``,
    checked as any hardware file is."""
    import tomli_w

    from hwmodels.toml_io import loads

    data = tomllib.loads(cluster_toml(cluster))
    tables = [t for t in data["device"] if t["name"] == whatif.device]
    if not tables:
        raise SweepError(f"{where}: whatif.device: expected a device model of cluster "
                         f"{cluster.name!r} ({', '.join(t['name'] for t in data['device'])}), "
                         f"got {whatif.device!r}")
    *parents, leaf = whatif.field.split(".")
    for table in tables:
        for part in parents:
            table = table.setdefault(part, {})
        table[leaf] = value
    return loads(tomli_w.dumps(data), source=f"{where}: whatif").clusters[cluster.name]


def specs_from(doc: SweepFile, *, where: str = "sweep") -> list[RunSpec]:
    """The grid of a sweep spec, in a fixed order (graphs, clusters, policies, ...)."""
    policies = _policies(doc)
    sources = [(m, None) for m in doc.models] + [(Path(g).stem, g) for g in doc.graphs]
    seq_lens: Sequence[int | None] = doc.seq_len or [None]
    specs = []
    for (model, graph_file), batch, seq_len, dtype, train in itertools.product(
            sources, doc.batch, seq_lens, doc.dtype, doc.train):
        steps = [(o, c) for o in doc.optimizer for c in doc.colocate] if train else [
            ("sgd", "ops")]
        for (optimizer, colocate), passes, (cluster, variant) in itertools.product(
                steps, doc.passes, _clusters(doc, where)):
            for policy, cost, links, order, seed in itertools.product(
                    policies, doc.cost, doc.links, doc.order, doc.seeds):
                specs.append(RunSpec.make(
                    model, cluster, policy, graph_file=graph_file, cost_file=doc.cost_file,
                    batch=batch, seq_len=seq_len, dtype=dtype, train=train,
                    optimizer=optimizer,
                    colocate=colocate, passes=tuple(passes), cost=cost, links=links,
                    order=order, seed=seed, variant=variant))
    return specs


def environment(specs: Sequence[RunSpec]) -> dict[str, Any]:
    """What a rerun needs to know it reruns the same thing: versions and cluster hashes."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    versions = {"python": platform.python_version()}
    for package in ("numpy", "scipy", "networkx", "pandas", "pymetis", "pydantic"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = None  # type: ignore[assignment]
    clusters = {f"{s.cluster}{' ' + s.variant if s.variant else ''}":
                s.built_cluster().definition_hash for s in specs}
    return {**provenance(), "versions": versions, "clusters": clusters, "cells": len(specs)}
