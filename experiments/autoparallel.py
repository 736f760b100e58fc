"""The best way to train a zoo model on a cluster: parallel strategies, simulated, ranked.

:func:`autoparallel` enumerates data (``dp``) x tensor (``tp``, within one host) x pipeline
(``pp``) degrees over 1, 2, 4, ... and all of the cluster's devices (the *shape*), and for
each the micro-batches (``pp``, ``2 pp``, ``4 pp``, at least one sample each) and schedule
(1F1B, GPipe) of a pipeline and the gradient bucket size (5, 25, 100 MiB) and all-reduce
algorithm (ring; hierarchical across hosts) of data parallelism (the *settings*). Each
candidate is built by the transforms a hand-picked strategy uses
(:func:`policies.tensor_parallel.parallelize`) and simulated (links shared max-min fairly;
plan order for a pipeline, priority order otherwise, as ``parallelize`` prescribes) on a
process pool.

The search runs in two rounds: every shape with its middle settings (1F1B at the middle
number of micro-batches, 25 MiB buckets, the hierarchical all-reduce across hosts), then
every other setting of the ``refine`` best shapes and of every shape whose middle settings
did not run (out of memory, or not applicable); the settings of the other shapes are not
tried (the result says how many).
Before a candidate is built it gets a lower bound (:func:`bound`): one tensor-parallel
rank's whole training step at its data-parallel share of the batch, each op on its fastest
device, over the pipeline's stages and the devices' compute streams. A candidate whose
bound is no better than the steps found so far is pruned unbuilt: in round one, than the
``refine``-th best (so that the shapes refined are the best whatever order the pool
finishes in), in round two than the best.

The table ranks what ran, fastest first, and says why each lost to the winner: out of
memory, not applicable (a split the model lacks), pruned by its bound, or the part of its
step that grew most against the winner's: compute (the busiest device's), bubble or waiting
(its idle time with no transfer or collective kernel of its own in flight: a pipeline's
bubble, or waiting on other devices) or exposed communication (its idle time while one
of its own is).
"""

from __future__ import annotations

import bisect
import math
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from workloads.errors import PlacelabError, PlacementError

if TYPE_CHECKING:
    import pandas as pd

    from hwmodels.spec import Cluster

__all__ = ["Strategy", "autoparallel", "bound", "candidates", "rank_work"]

BUCKETS_MIB = (5.0, 25.0, 100.0)


@dataclass(frozen=True)
class Strategy:
    """One way to spread a training step over ``dp * tp * pp`` devices."""

    dp: int
    tp: int
    pp: int
    microbatches: int = 1
    schedule: str = "1f1b"
    bucket_mib: float = 25.0
    algorithm: str = "ring"

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    def label(self) -> str:
        """``dp4 x tp2 x pp2 (m8 1f1b)``: the degrees above 1 and their settings.

        >>> Strategy(4, 1, 2, microbatches=8, bucket_mib=25.0).label()
        'dp4 x pp2 (m8 1f1b, 25 MiB ring)'
        """
        parts = [f"{k}{v}" for k, v in (("dp", self.dp), ("tp", self.tp), ("pp", self.pp))
                 if v > 1] or ["one device"]
        extra = ([f"m{self.microbatches} {self.schedule}"] if self.pp > 1 else []) + (
            [f"{self.bucket_mib:g} MiB {self.algorithm}"] if self.dp > 1 else [])
        return " x ".join(parts) + (f" ({', '.join(extra)})" if extra else "")


def fastest_first(cluster: Cluster, dtype: str) -> list[str]:
    """The cluster's devices by peak rate for ``dtype``, fastest first (in the cluster's
    order among equals, so that hosts of like devices stay together; on hosts that mix
    models, tensor-parallel ranks may then span hosts); those without it last. A strategy
    over ``g`` devices takes the first ``g``.

    >>> from hwmodels import get_cluster
    >>> fastest_first(get_cluster("workstation"), "fp16")
    ['gpu0', 'cpu0']
    """
    return sorted(cluster.device_names,
                  key=lambda d: -cluster.device(d).peak.get(dtype, 0.0))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _per_host(cluster: Cluster) -> int:
    """The most devices one host holds (tensor parallelism stays within it)."""
    counts: dict[str, int] = {}
    for d in cluster.device_names:
        host = cluster.hosts.get(d, d)
        counts[host] = counts.get(host, 0) + 1
    return max(counts.values())


def candidates(cluster: Cluster, global_batch: int, gpus: Sequence[int]) -> list[Strategy]:
    """Every strategy over ``gpus`` devices (each count in turn) that divides the batch:
    ``tp`` within one host, micro-batches of at least one sample.

    >>> from hwmodels import get_cluster
    >>> [s.label() for s in candidates(get_cluster("quad-v100-nvlink"), 4, [2])][:3]
    ['dp2 (5 MiB ring)', 'dp2 (25 MiB ring)', 'dp2 (100 MiB ring)']
    """
    hosts = len({cluster.hosts.get(d, d) for d in cluster.device_names})
    out = []
    for g in gpus:
        for tp in _divisors(g):
            if tp > _per_host(cluster):
                continue
            for pp in _divisors(g // tp):
                dp = g // (tp * pp)
                if global_batch % dp:
                    continue
                local = global_batch // dp
                micro = [m for m in (pp, 2 * pp, 4 * pp) if local % m == 0] if pp > 1 else [1]
                schedules = ("1f1b", "gpipe") if pp > 1 else ("1f1b",)
                buckets = BUCKETS_MIB if dp > 1 else (25.0,)
                algorithms = ("ring", "hierarchical") if dp > 1 and hosts > 1 else ("ring",)
                out += [Strategy(dp, tp, pp, m, s, b, a) for m in micro for s in schedules
                        for b in buckets for a in algorithms]
    return out


def _cost(cluster_name: str) -> tuple[Any, Any]:
    from hwmodels import get_cluster, make_cost_model

    cluster = get_cluster(cluster_name)
    return cluster, make_cost_model("roofline", cluster)


def rank_work(model: str, batch: int, seq_len: int | None, dtype: str, optimizer: str,
              cluster_name: str, tp: int) -> float:
    """One tensor-parallel rank's training step at ``batch``, each op on the device of the
    cluster that runs it fastest, in seconds (the sum of its ops' times)."""
    import dataclasses

    import numpy as np

    from policies.parallel import micro_step
    from workloads import build_model

    cluster, cost = _cost(cluster_name)
    step = micro_step(build_model(model, batch=batch, seq_len=seq_len, dtype=dtype, tp=tp),
                      1, optimizer)
    kinds: dict[Any, str] = {}  # one device of each kind (a cluster repeats its models)
    for name in cluster.device_names:
        kinds.setdefault(dataclasses.replace(cluster.device(name), name="any"), name)
    fastest = np.min([_op_times(cost, step, d) for d in kinds.values()], axis=0)
    if not np.isfinite(fastest).all():
        op = step.ops[int(np.flatnonzero(~np.isfinite(fastest))[0])]
        raise PlacementError(f"op {op.name!r} ({op.dtype}) runs on no device of cluster "
                             f"{cluster_name!r}")
    return float(fastest.sum())


def _op_times(cost: Any, step: Any, device: str) -> list[float]:
    """Each op's time on ``device``, infinity where it cannot run there (a dtype the
    device lacks)."""
    from workloads.errors import UnsupportedOp

    try:
        return list(cost.op_times(step, dict.fromkeys(step.names, device)))
    except UnsupportedOp:
        times = []
        for op in step:
            try:
                times.append(cost.op_time(op, device))
            except UnsupportedOp:
                times.append(math.inf)
        return times


def bound(strategy: Strategy, step_s: float, streams: int) -> float:
    """A lower bound of the strategy's step from one tensor-parallel rank's whole step
    (``step_s``, each op on its fastest device) on devices of ``streams`` compute streams:
    the busiest of the pipeline's stages holds at least its share of the rank's work, and
    splitting the batch into micro-batches never takes less time in all (the roofline).

    >>> bound(Strategy(2, 1, 4, 8), 8.0, 1)
    2.0
    """
    return step_s / (strategy.pp * streams)


def evaluate(strategy: Strategy, model: str, batch: int, seq_len: int | None, dtype: str,
             optimizer: str, cluster_name: str) -> dict[str, Any]:
    """Build and simulate one strategy; its step and where the step's time went."""
    from policies.tensor_parallel import parallelize
    from sim import simulate
    from workloads import build_model

    cluster, cost = _cost(cluster_name)
    row: dict[str, Any] = {**asdict(strategy), "strategy": strategy.label(),
                           "gpus": strategy.gpus}
    try:
        forward = build_model(model, batch=batch, seq_len=seq_len, dtype=dtype)
        plan = parallelize(forward, cluster, cost, dp=strategy.dp, pp=strategy.pp,
                           tp=strategy.tp, microbatches=strategy.microbatches,
                           schedule=strategy.schedule, algorithm=strategy.algorithm,
                           bucket_bytes=int(strategy.bucket_mib * 2**20),
                           optimizer=optimizer,
                           devices=fastest_first(cluster, dtype)[:strategy.gpus])
        result = simulate(plan, cluster, cost, links="fair",
                          order="plan" if strategy.pp > 1 else "priority")
    except PlacelabError as err:  # a split the model lacks, stages on unlinked devices, a
        # device without the dtype
        return row | {"feasible": False, "reason": f"not applicable: {err}"}
    return row | {"step_s": result.makespan_s, "feasible": result.feasible,
                  "samples_per_s": batch / result.makespan_s,
                  "reason": result.reason,
                  "peak_memory_gb": max(result.peak_memory_bytes.values()) / 1e9,
                  **_breakdown(result)}


def _breakdown(result: Any) -> dict[str, float]:
    """The busiest device's compute, and its idle time split by whether a transfer of its
    own (a collective's step, an activation between stages) or a kernel of one of its
    collectives is in flight."""
    trace = result.trace
    compute = trace[trace["kind"] == "compute"]
    busy = (compute["end_s"] - compute["start_s"]).groupby(compute["device"]).sum()
    if busy.empty:
        return {"compute_s": 0.0, "bubble_s": 0.0, "exposed_comm_s": 0.0}
    device = str(busy.idxmax())
    mine = compute[compute["device"] == device]
    # its transfers, and the pack, reduce and unpack kernels of its collectives
    moves = trace[((trace["kind"] == "transfer")
                   & ((trace["src"] == device) | (trace["dst"] == device)))
                  | ((trace["kind"] == "collective") & (trace["device"] == device))]
    computing = _union(mine["start_s"].to_numpy(), mine["end_s"].to_numpy())
    moving = _union(moves["start_s"].to_numpy(), moves["end_s"].to_numpy())
    exposed = _length(moving) - _overlap(moving, computing)
    compute_s = _length(computing)
    return {"compute_s": compute_s, "exposed_comm_s": exposed,
            "bubble_s": max(result.makespan_s - compute_s - exposed, 0.0)}


def _union(start: np.ndarray, end: np.ndarray) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for s, e in sorted(zip(start.tolist(), end.tolist(), strict=True)):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def _length(spans: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in spans)


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    total, j = 0.0, 0
    for s, e in a:
        while j < len(b) and b[j][1] <= s:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            total += min(e, b[k][1]) - max(s, b[k][0])
            k += 1
    return total


def autoparallel(model: str, cluster_name: str, *, global_batch: int,
                 seq_len: int | None = None, dtype: str = "fp16", optimizer: str = "adam",
                 gpus: Sequence[int] | None = None, workers: int | None = None,
                 refine: int = 3, exhaustive: bool = False) -> pd.DataFrame:
    """Every strategy of training ``model`` on ``cluster_name`` at ``global_batch``,
    simulated where its bound lets it win, ranked (see the module). ``gpus``: the device
    counts to try (default: the powers of two below the cluster's count, and that count).
    ``workers``: processes (default: every core; 1: this process). ``refine``: how many of
    the best shapes get every setting tried (``df.attrs["untried"]`` says what was left).
    ``exhaustive``: every candidate built and simulated, nothing pruned or left (slow; what
    the search is checked against).

    >>> df = autoparallel("mlp", "quad-v100-nvlink", global_batch=64, gpus=[1, 2],
    ...                   workers=1)
    >>> df.iloc[0]["strategy"], df.iloc[0]["why"]
    ('one device', 'fastest')
    """
    import pandas as pd

    from hwmodels import get_cluster
    from workloads import build_model

    cluster = get_cluster(cluster_name)
    build_model(model, batch=global_batch, seq_len=seq_len, dtype=dtype)  # bad names: now
    if isinstance(refine, bool) or not isinstance(refine, int) or refine < 1:
        raise PlacelabError(f"autoparallel: refine must be an int >= 1, got {refine!r}")
    n = len(cluster.devices)
    # strong scaling: fewer devices can be faster (a small batch, slow links)
    counts = list(gpus) if gpus else [*(2**k for k in range(n.bit_length()) if 2**k < n), n]
    for g in counts:
        if not 1 <= g <= len(cluster.devices):
            raise PlacelabError(f"autoparallel: gpus must be between 1 and cluster "
                                f"{cluster_name!r}'s {len(cluster.devices)}, got {g}")
    work: dict[tuple[int, int], float | str] = {}
    every = candidates(cluster, global_batch, counts)
    if not every:
        raise PlacelabError(f"autoparallel: no strategy over {counts} devices divides the "
                            f"global batch {global_batch}")
    for s in every:
        if (s.dp, s.tp) not in work:
            try:
                work[s.dp, s.tp] = rank_work(model, global_batch // s.dp, seq_len, dtype,
                                             optimizer, cluster_name, s.tp)
            except PlacelabError as err:  # a model with no such split (tp), a batch too small
                work[s.dp, s.tp] = f"not applicable: {err}"
    rows = [{**asdict(s), "strategy": s.label(), "gpus": s.gpus, "feasible": False,
             "reason": work[s.dp, s.tp]} for s in every if isinstance(work[s.dp, s.tp], str)]
    streams = max(d.compute_streams for d in cluster.devices)
    bounds = {s: bound(s, float(work[s.dp, s.tp]), streams)
              for s in every if not isinstance(work[s.dp, s.tp], str)}
    args = (model, global_batch, seq_len, dtype, optimizer, cluster_name)
    shapes: dict[tuple[int, int, int], list[Strategy]] = {}
    for strategy in bounds:
        shapes.setdefault((strategy.dp, strategy.tp, strategy.pp), []).append(strategy)
    # round 1: each shape (dp, tp, pp) with its middle settings; a shape is pruned only
    # when its bound cannot beat the ``refine``-th best step so far, so the shapes refined
    # are the best ``refine`` whatever order the pool finishes in
    first = {shape: _middle(options) for shape, options in shapes.items()}
    if exhaustive:  # every shape refined, nothing pruned
        refine = len(shapes)
    tried = list(_run(_by_bound(list(first.values()), bounds), bounds, args, workers,
                      [], keep=refine))
    # round 2: every other setting of the best ``refine`` shapes
    steps = {(r["dp"], r["tp"], r["pp"]): r["step_s"] for r in tried if r["feasible"]}
    best_shapes = sorted(steps, key=lambda k: (steps[k], k))[:refine]
    # and every shape whose middle settings did not run (out of memory: more micro-batches
    # may fit; not applicable: a ring where the hierarchical all-reduce cannot go)
    failed = [(r["dp"], r["tp"], r["pp"]) for r in tried
              if r["feasible"] is False and (r["dp"], r["tp"], r["pp"]) not in best_shapes]
    best_shapes += failed
    more = [s for shape in best_shapes for s in shapes[shape] if s != first[shape]]
    tried += list(_run(_by_bound(more, bounds), bounds, args, workers,
                       sorted(steps.values()), keep=len(bounds) + 1 if exhaustive else 1))
    if not any(r["feasible"] for r in tried):
        reasons = [r["reason"] for r in rows + tried if r.get("reason")]
        raise PlacelabError(f"autoparallel: no strategy of training {model!r} on "
                            f"{cluster_name!r} ran (out of memory or not applicable); the "
                            f"first reason: {reasons[0] if reasons else 'none'}")
    left = [shape for shape in shapes if shape not in best_shapes and len(shapes[shape]) > 1]
    untried = sum(len(shapes[shape]) - 1 for shape in left)
    df = _ranked(pd.DataFrame(rows + tried))
    df.attrs["untried"] = (
        f"{untried} other settings of {len(left)} shapes not tried: with their middle "
        f"settings those shapes were slower than the best {refine} or pruned by their "
        f"bound" if untried else
        "every setting of every shape tried or pruned by its bound")
    return df


def _by_bound(listed: list[Strategy], bounds: dict[Strategy, float]) -> list[Strategy]:
    return sorted(listed, key=lambda s: _by_bound_key(s, bounds))


def _middle(options: list[Strategy]) -> Strategy:
    """The settings tried first for one shape: 1F1B at the middle number of
    micro-batches, 25 MiB buckets, all-reduced hierarchically where they cross hosts (as
    NCCL does), by a ring otherwise."""
    ms = sorted({s.microbatches for s in options})
    m = ms[len(ms) // 2]
    algorithm = "hierarchical" if any(s.algorithm == "hierarchical" for s in options) \
        else "ring"
    return next(s for s in options if s.microbatches == m and s.schedule == "1f1b"
                and s.bucket_mib == 25.0 and s.algorithm == algorithm)


def _run(listed: list[Strategy], bounds: dict[Strategy, float], args: tuple[Any, ...],
         workers: int | None, steps: list[float], *, keep: int) -> Iterator[dict[str, Any]]:
    """Each strategy's row, as it finishes; none built whose bound is no better than the
    ``keep``-th best feasible step known (``steps``, and those found since)."""
    steps = sorted(steps)

    def threshold() -> float:
        return steps[keep - 1] if len(steps) >= keep else math.inf

    def record(row: dict[str, Any]) -> dict[str, Any]:
        if row["feasible"]:
            bisect.insort(steps, row["step_s"])
        return row

    if workers == 1:
        for s in listed:
            if bounds[s] >= threshold():
                yield _pruned(s, bounds[s], threshold())
                continue
            yield record(evaluate(s, *args) | {"bound_s": bounds[s]})
        return
    from experiments.sweep import exit_with_parent

    queue = list(listed)
    with ProcessPoolExecutor(workers, initializer=exit_with_parent,
                             initargs=(os.getpid(),)) as pool:
        running: dict[Future[dict[str, Any]], Strategy] = {}
        size = workers or os.cpu_count() or 1  # how many to keep in flight
        while queue or running:
            while queue and len(running) < size:
                s = queue.pop(0)
                if bounds[s] >= threshold():
                    yield _pruned(s, bounds[s], threshold())
                    continue
                running[pool.submit(evaluate, s, *args)] = s
            if not running:
                continue
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=lambda f: _by_bound_key(running[f], bounds)):
                s = running.pop(future)
                yield record(future.result() | {"bound_s": bounds[s]})


def _by_bound_key(s: Strategy, bounds: dict[Strategy, float]) -> tuple[float, int, str]:
    return (bounds[s], s.gpus, s.label())


def _pruned(s: Strategy, bound: float, best: float) -> dict[str, Any]:
    return {**asdict(s), "strategy": s.label(), "gpus": s.gpus, "bound_s": bound,
            "feasible": None, "reason": f"pruned: its bound {bound * 1e3:.3f} ms is no "
                                        f"better than a step already found, "
                                        f"{best * 1e3:.3f} ms"}


def _ranked(df: pd.DataFrame) -> pd.DataFrame:
    """Fastest feasible first; each row's ``why`` against the winner."""
    for column in ("step_s", "samples_per_s", "compute_s", "bubble_s", "exposed_comm_s",
                   "peak_memory_gb", "bound_s"):
        if column not in df:
            df[column] = np.nan
    ok = df["feasible"].fillna(False).astype(bool)
    df = df.assign(_key=np.where(ok, df["step_s"], np.inf)).sort_values(
        ["_key", "bound_s", "gpus", "strategy"], kind="stable").drop(
        columns="_key").reset_index(drop=True)
    ok = df["feasible"].fillna(False).astype(bool)
    df.insert(0, "rank", range(1, len(df) + 1))
    winner = df[ok].iloc[0] if ok.any() else None
    df["why"] = [_why(row, winner) for _, row in df.iterrows()]
    return df


def _why(row: Any, winner: Any) -> str:
    if winner is not None and row["rank"] == winner["rank"]:
        return "fastest"
    if row["feasible"] is None or (isinstance(row["feasible"], float)
                                   and math.isnan(row["feasible"])):
        return str(row["reason"])
    if not row["feasible"]:
        reason = str(row["reason"])
        return reason if reason.startswith("not applicable") else f"memory: {reason}"
    if winner is None:
        return ""
    parts = {"compute": row["compute_s"] - winner["compute_s"],
             "bubble or waiting": row["bubble_s"] - winner["bubble_s"],
             "exposed communication": row["exposed_comm_s"] - winner["exposed_comm_s"]}
    what = max(parts, key=lambda k: parts[k])
    slower = row["step_s"] / winner["step_s"] - 1
    return f"{slower:+.1%}: {what} {parts[what] * 1e3:+.3f} ms"
