"""How ``mcmc``'s defaults (``beta``, ``segments``, ``screen``, ``small_screen``, ``keyed``)
were chosen: on sets kept apart from everything ``benchmarks/search_quality.py`` reports, so
that its figures are on instances the choice never saw.

1. **small graphs**: random DAGs of 8-12 ops, seeds :data:`TUNING_SEEDS` (the benchmark
   reports :data:`benchmarks.search_quality.REPORTED_SEEDS`), against the MILP optimum
   under the contention-free model, 2,000 evaluations;
2. **large graphs**: :data:`TUNING_CELLS`, forward passes and SGD steps (the benchmark's
   cells are Adam steps) on clusters where the heuristics are far from the bound, with
   the simulator (fair links) as evaluator, 2,000 evaluations: the gain over the best
   one-shot heuristic.

Each ``--betas`` value with the other defaults, then each ``--segments`` value, each
``--screens`` number of the chain's moves drawn per evaluation (on graphs of more than 32
units), each ``--small-screens`` number of them on graphs of at most 32, each ``--keyed``
share, each ``--key-sigmas`` step of the priorities (the default 0.1 is the ``keyed`` row
of the default share), each ``--key-screens`` number of priority moves decoded per
evaluation, each ``--key-selects`` choice of device in the priority search's decoder
(``optimistic``: PEFT's, ``earliest``: HEFT's) and each ``--kicks`` share of the units moved
at random before a chain that follows one which found nothing faster; the small graphs'
segment, screen and keyed rows let runs of units move, the chain's moves be screened, and
the priority search run, on graphs of any size (by default all three only on graphs of more
than 32 units).
``--seeds``: the large graphs' gains are means over these seeds of the search.

    python -m benchmarks.search_tuning [--betas 0.1,0.2,0.4] [--segments 0,0.15,0.3]
                                       [--screens 1,4,16,64] [--small-screens 1,2,4,8]
                                       [--keyed 0,0.25,0.5,0.75] [--key-sigmas 0.05,0.2]
                                       [--key-screens 1,4]
                                       [--key-selects earliest,optimistic]
                                       [--kicks 0,0.25,0.5,1] [--seeds 0]
                                       [--out F]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import shlex
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from unittest import mock

import numpy as np

from benchmarks.machine import describe, record
from benchmarks.placement_quality import optimum, small_cluster
from benchmarks.search_quality import Cell, heuristics, searched, small_graph
from hwmodels import RooflineCost, get_cluster
from policies import keys, moves, plan, search
from policies.bounds import lower_bound
from policies.problem import model_makespan
from policies.search import MCMC, contention_free
from workloads import build_model, training_graph

#: Seeds of the small graphs beta is chosen on.
TUNING_SEEDS = range(100, 140)
#: (model, step, batch, cluster) of the large graphs beta is chosen on: ``fwd`` a forward
#: pass, ``sgd`` an SGD training step.
TUNING_CELLS = (("inception_v3", "sgd", 8, "quad-v100-nvlink"),
                ("inception_v3", "fwd", 32, "workstation"),
                ("bert_base", "sgd", 4, "workstation"),
                ("bert_base", "fwd", 16, "hetero-box"),
                ("resnet50", "sgd", 16, "hetero-box"),
                ("gpt2_small", "fwd", 16, "quad-v100-nvlink"))


def tuning_cells() -> list[Cell]:
    out = []
    for model, step, batch, name in TUNING_CELLS:
        forward = build_model(model, batch=batch)
        graph = forward if step == "fwd" else training_graph(forward, "sgd")
        cluster = get_cluster(name)
        cost = RooflineCost(cluster)
        out.append(Cell(f"{model} {step} b{batch}", name, graph, cluster, cost,
                        lower_bound(graph, cluster, cost), heuristics(graph, cluster, cost)))
    return out


@dataclass(frozen=True)
class Setting:
    """One row: its label, the policy, and the module constants it sets for that row
    (``module.name = value``)."""

    label: str
    policy: MCMC
    constants: tuple[tuple[ModuleType, str, object], ...] = ()

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for module, name, value in self.constants:
                stack.enter_context(mock.patch.object(module, name, value))
            yield


def _settings(betas: list[float], segments: list[float], screens: list[int],
              small_screens: list[int], keyed: list[float], sigmas: list[float],
              key_screens: list[int], selects: list[str], kicks: list[float]
              ) -> list[Setting]:
    # runs of units, screened moves and the priority search on graphs of any size (for
    # the small graphs)
    anywhere = ((moves, "SEGMENT_FROM", 0),)
    screened_anywhere = ((moves, "SCREEN_FROM", 0),)
    keyed_anywhere = ((search, "KEYED_FROM", 0),)
    return ([Setting(f"beta {b:g}", MCMC(beta=b)) for b in betas]
            + [Setting(f"segments {g:g}", MCMC(segments=g), anywhere) for g in segments]
            + [Setting(f"screen {k}", MCMC(screen=k), screened_anywhere)
               for k in screens]
            + [Setting(f"small screen {k}", MCMC(small_screen=k)) for k in small_screens]
            + [Setting(f"keyed {k:g}", MCMC(keyed=k), keyed_anywhere) for k in keyed]
            + [Setting(f"key sigma {x:g}", MCMC(), (*keyed_anywhere, (keys, "KEY_SIGMA", x)))
               for x in sigmas]
            + [Setting(f"key screen {k}", MCMC(), (*keyed_anywhere, (keys, "SCREEN", k)))
               for k in key_screens]
            + [Setting(f"key select {x}", MCMC(), (*keyed_anywhere, (keys, "SELECT", x)))
               for x in selects]
            + [Setting(f"kick {k:g}", MCMC(kick=k)) for k in kicks])


def small_graphs(settings: list[Setting]) -> list[str]:
    cluster = small_cluster()
    cost = RooflineCost(cluster)
    graphs = {seed: small_graph(seed) for seed in TUNING_SEEDS}
    optima = {seed: optimum(g, cluster, cost)[1] for seed, g in graphs.items()}
    lines = ["| setting | optimum reached | mean gap | worst gap |", "|---|---:|---:|---:|"]
    for row in settings:
        label, policy = row.label, row.policy
        with row.applied():
            gaps = np.array([model_makespan(plan(g, cluster, policy.clone().set_params(
                seed=seed), cost, evaluate=contention_free(cluster, cost)), cluster, cost)
                / optima[seed] - 1 for seed, g in graphs.items()])
        lines.append(f"| {label} | {int((gaps <= 1e-9).sum())} of {len(gaps)} | "
                     f"{gaps.mean():.2%} | {gaps.max():.2%} |")
    return lines


def large_graphs(settings: list[Setting], seeds: list[int]) -> list[str]:
    cells = tuning_cells()
    lines = ["| setting | " + " | ".join(f"{c.model} on {c.cluster_name}" for c in cells)
             + " | median |", "|---|" + "---:|" * (len(cells) + 1)]
    for row in settings:
        label = row.label
        with row.applied():
            gains = [float(np.mean([searched(c, row.policy.clone().set_params(seed=seed))[0][
                "gain_vs_heuristic"] for seed in seeds])) for c in cells]
        lines.append(f"| {label} | " + " | ".join(f"{g:+.1%}" for g in gains)
                     + f" | {np.median(gains):+.1%} |")
    return lines


def _counts(parser: argparse.ArgumentParser, text: str, name: str, least: int,
            required: bool) -> list[int]:
    """The comma-separated whole numbers of option ``name``, each at least ``least`` (at
    least one where ``required``)."""
    values = [x for x in text.split(",") if x]
    if not all(x.isdigit() and int(x) >= least for x in values) or (required and not values):
        parser.error(f"{name}: expected {'one or more ' if required else ''}whole numbers "
                     f">= {least}, got {text!r}")
    return [int(x) for x in values]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--betas", default="0.1,0.2,0.4")
    parser.add_argument("--segments", default="0,0.15,0.3")
    parser.add_argument("--screens", default="1,4,64",
                        help="moves drawn per evaluation of the chain (the default, 16, is the "
                             "default row of every other family)")
    parser.add_argument("--small-screens", default="1,2,4,8",
                        help="moves drawn per evaluation of the chain on graphs of at most 32 "
                             "units (the small graphs; the large ones are not screened so)")
    parser.add_argument("--keyed", default="0,0.25,0.5,0.75")
    parser.add_argument("--key-sigmas", default="0.05,0.2")
    parser.add_argument("--key-screens", default="1")
    parser.add_argument("--key-selects", default="earliest",
                        help="the priority search's choices of device: earliest, optimistic")
    parser.add_argument("--kicks", default="0,0.25,0.5,1",
                        help="shares of the units moved at random before a chain that follows "
                             "one which found nothing faster")
    parser.add_argument("--seeds", default="0", help="the large graphs' search seeds")
    parser.add_argument("--out")
    args = parser.parse_args()
    screens = _counts(parser, args.screens, "--screens", 1, required=False)
    small_screens = _counts(parser, args.small_screens, "--small-screens", 1, required=False)
    key_screens = _counts(parser, args.key_screens, "--key-screens", 1, required=False)
    seeds = _counts(parser, args.seeds, "--seeds", 0, required=True)
    selects = [x for x in args.key_selects.split(",") if x]
    if not set(selects) <= {"earliest", "optimistic"}:
        parser.error(f"--key-selects: expected earliest or optimistic, comma-separated, "
                     f"got {args.key_selects!r}")
    betas, segments, keyed, sigmas, kicks = (
        [float(x) for x in text.split(",") if x] for text in
        (args.betas, args.segments, args.keyed, args.key_sigmas, args.kicks))
    settings = _settings(betas, segments, screens, small_screens, keyed, sigmas, key_screens,
                         selects, kicks)
    start = time.perf_counter()
    lines = [describe(), f"date: {datetime.date.today().isoformat()}",
             "command: python -m benchmarks.search_tuning " + " ".join(
                 f"--{name.replace('_', '-')} {shlex.quote(getattr(args, name))}" for name in (
                     "betas", "segments", "screens", "small_screens", "keyed", "key_sigmas",
                     "key_screens", "key_selects", "kicks", "seeds")), "",
             "small graphs (tuning seeds), mcmc against the MILP optimum, 2,000 evals:", "",
             *small_graphs(settings), "",
             "large graphs (tuning cells), mcmc's gain over the best one-shot heuristic, "
             f"2,000 evals, mean over seeds {args.seeds}:", "",
             *large_graphs(settings, seeds), "",
             f"total {time.perf_counter() - start:.0f} s"]
    print(record(lines, args.out), end="")


if __name__ == "__main__":
    main()
