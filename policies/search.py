"""Search with an evaluator in the loop: the ``mcmc`` policy.

A search policy scores candidate plans with an *evaluator*, a callable ``Plan -> seconds``
(infinity for a plan that does not fit), which its caller supplies: ``experiments`` hands
it the simulator (:func:`sim.evaluator`), so candidates are judged by what the simulator
will say of the result, contention and memory included; ``policies`` never imports the
simulator. Called without one (:meth:`PlacementPolicy.place`), a search scores plans by
:func:`contention_free`, the list schedulers' own model.

``mcmc`` is the Metropolis-Hastings search of FlexFlow (Jia, Zaharia and Aiken, SysML 2019)
over placements and orders: it starts from the best plan of a few heuristics and proposes
a move: one op, or one co-placement group, to another device that can run it (a
neighbour's device, a swap with an op elsewhere, or any other device), on graphs of more
than 32 ops and groups a run of up to 16 of one device's, consecutive in the global order,
to another device together (``segments`` of the moves), or an op and the next op of its
device trading places in the global order from which every device's order is drawn (where
no edge forbids it). A faster plan is always accepted; one slower by
``Δ`` with probability ``exp(-beta · n · Δ)``, ``n`` the number of ops and groups and ``Δ``
the slowdown in units of the mean op's share of the makespan (the makespan over ``n``): a
larger graph has more moves that gain, and its chain can afford to be greedier. The default,
0.2, was chosen on tuning sets kept apart from what ``benchmarks/search_quality.py``
reports: 40 random graphs of 8-12 ops (seeds 100-139; the benchmark's are 0-19), where
0.1, 0.2 and 0.4 reached the MILP optimum on 33, 35 and 30, and six forward passes and
SGD steps on clusters far from their bound (the benchmark's are Adam steps), where 0.2 and
0.4 did alike and 0.1 worse; ``segments`` (0.3) was chosen on the same cells, where runs
of units lifted the median gain over the best heuristic from -0.2% to +0.9% and its worst
cell from -22% to -1.5%, and on the small graphs cost optima (35 of 40 without them, 32
with), hence only on large graphs (``benchmarks/search_tuning.py``). The budget is a
number of evaluations (every plan scored counts, the starts included), never wall time, so
a seed gives the same plan on any machine under any load; ``patience`` (off by default)
ends the search once that many evaluations in a row found nothing faster than the best so
far, still counted in evaluations; ``time_limit_s`` (off by default) adds a wall-clock cap
at the price of that guarantee. The search restarts
``restarts`` times from the best plan found so far, and returns the best plan it scored, so
it is never worse than its start. A chain that follows one which found nothing faster than
the best plan before it starts from that plan kicked, as iterated local search does:
``kick`` (0.5) x (the ops and groups) of the chain's moves drawn at random, unscreened, at
least two, the kicked plan scored first (where it does not fit, the chain starts from the
best plan as it is); from the plan as it is, the chain would wander back into the
neighbourhood it left. On the small tuning graphs a kick of 0, 0.25, 0.5, 0.75 and 1
reached the MILP optimum on 38, 38, 40, 38 and 40 of 40 at 2,000 evaluations (0.02, 0.05
and 0.1: 39), and on the tuning cells each gave a median gain of +2.2% or +2.3%. The
starts are scored as their policies made them; the chain's global order starts as one
that gives the best start's device orders back.

Before the chain, on graphs of more than 32 ops and groups, a share ``keyed`` (0.25) of the
evaluations left after the starts goes to a search over HEFT's priorities
(:mod:`policies.keys`): each candidate is a list schedule under perturbed priorities
(HEFT's scheduler, each op's device chosen by PEFT's predicted finish), so a move
re-places every op after the one it changed, where a chain's move leaves them all where
they were; of up to :data:`policies.keys.SCREEN` moves decoded, the scheduler's own
estimate picks the one scored. The chain then starts from the best of the starts and that
search. The share was chosen on the same tuning cells (after ``beta`` and ``segments``, which were
chosen without it): 0, 0.25, 0.5 and 0.75 gave a median gain of +0.9%, +2.2%, +1.4% and
+0.8% over the best heuristic (+3.6% to +7.3% and +4.9% to +7.0% on the two cells where it
matters most), and a step of the priorities of 0.1 beat 0.05 and 0.2 there (at the share
0.75: +0.8% against +0.0% and -0.0%); on the small graphs it cost optima at 0.75 (35 of 40
without it, 32 with) and none at 0.25, but runs only on large graphs, as runs of units do.
Picking one of four moves by the scheduler's estimate, against scoring each, lifted the
gain on each of the three tuning cells with room (means of four seeds: +8.4%, +4.0% and
+6.0% against +7.6%, +3.0% and +5.8%).

The chain screens its moves too, on graphs whose transfer times tabulate: each evaluation
scores, of ``screen`` (16) moves drawn from the current state (on graphs of more than 32 ops
and groups; ``small_screen`` on the others, below), the one whose plan the list schedulers'
contention-free model (:func:`policies.problem.schedule_length`, compiled) puts first (the
first such on a tie), so the evaluator's budget goes to the moves that model favours and,
where none of them is faster in it, to the least slower, most often a trade of places in the
order that leaves the model's makespan as it was. On the tuning cells (means of seeds 0 and
1) 1, 4, 16 and 64 moves gave a median gain of +2.2%, +2.1%, +2.3% and +2.2%, and on the
three cells with room +8.5%, +8.8%, +8.9% and +8.9% (Inception-v3's SGD step on four V100s),
+4.2%, +4.2%, +4.4% and +4.3% (its forward pass on the workstation) and +6.4%, +7.2%, +7.1%
and +7.3% (BERT-base's SGD step on the workstation); on the small graphs, screened in those
rows only, 4 reached 38 optima of 40, 16 reached 34 (35 unscreened) and 64 only 26. Graphs
of at most 32 ops and groups are screened by their own number, ``small_screen`` (8), chosen
on the small tuning graphs: 1, 2, 4 and 8 moves reached 35, 36, 38 and 38 optima of 40, mean
gap 0.09%, 0.16%, 0.09% and 0.03% (the large graphs' gains the same in every row). Where the
evaluator is the contention-free model itself, as in ``benchmarks/search_quality.py``'s
comparison with the MILP, the screen ranks a move by the very score it would get.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.base import POLICIES, PlacementPolicy, Seed, make_policy, make_rng, plan
from policies.moves import KINDS, Moves
from policies.params import Param
from policies.plans import Placement, Plan, priorities_from_order
from policies.problem import Problem, model_makespan, plan_memory_used
from workloads.errors import PlacementError
from workloads.graph import Graph

__all__ = ["MCMC", "Evaluator", "contention_free"]

#: Scores a plan: its makespan in seconds, ``math.inf`` where it does not fit.
Evaluator = Callable[[Plan], float]
#: The default share of the budget searched over list-scheduling priorities (see the module),
#: on graphs of more than KEYED_FROM units.
KEYED, KEYED_FROM = 0.25, 32
#: The default moves drawn per evaluation of the chain, the one of least contention-free
#: makespan scored (see the module), on graphs of more than
#: :data:`policies.moves.SCREEN_FROM` units.
SCREEN = 16
#: The default moves drawn per evaluation of the chain on graphs of at most
#: :data:`policies.moves.SCREEN_FROM` units (see the module).
SMALL_SCREEN = 8
#: The default share of the units moved at random before a chain that follows one which
#: found nothing faster (see the module); at least :data:`KICK_LEAST` of the chain's moves
#: (one is a move the chain itself could propose, and undo with its first).
KICK, KICK_LEAST = 0.5, 2


def contention_free(cluster: Cluster, cost: CostModel) -> Evaluator:
    """An evaluator that needs no simulator: the makespan with each device running one op
    at a time in plan order and transfers taking their contention-free time
    (:func:`policies.problem.model_makespan`), infinity where the plan exceeds a device's
    memory under the conservative model of :mod:`policies.problem`.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> p = plan(build_model("mlp", batch=8), c, "heft")
    >>> contention_free(c, RooflineCost(c))(p) == p.estimated_makespan_s
    True
    """
    problems: dict[int, Problem] = {}

    def evaluate(p: Plan) -> float:
        problem = problems.get(id(p.graph))
        if problem is None or problem.graph is not p.graph:
            problem = problems[id(p.graph)] = Problem(p.graph, cluster, cost)
        used = plan_memory_used(problem, p)
        if any(u > c for u, c in zip(used, problem.capacity, strict=True)):
            return math.inf
        return model_makespan(p, cluster, cost, problem)

    return evaluate


class MCMC(PlacementPolicy):
    """Metropolis-Hastings over placements with an evaluator in the loop (see the module).

    ``info`` of the plan reports the start, the evaluations spent (``keyed_evals`` of them
    on priorities, whose best score is ``keyed_score_s``) and the one that scored the plan
    returned (``best_eval``, 1-based), the chain's moves accepted, the chains that started
    from a kicked plan (``kicks``), what stopped the search
    (``evals``, ``patience`` or ``time_limit_s``), the best score at each restart, and for
    each kind of move (:data:`policies.moves.KINDS`) how many the chain proposed, accepted,
    and found faster than its current plan (``moves``).
    """

    name = "mcmc"
    scores_plans = True
    #: Not among "all" policies: its cost is its budget of evaluations (simulations).
    in_all = False
    params = (Param("evals", "int", 2000, minimum=1,
                    doc="plans scored in all, the starts included"),
              Param("beta", "float", 0.2, minimum=0,
                    doc="inverse temperature per op: on a graph of n ops and groups, a move "
                        "slower by 1/(beta n) of the mean op's share of the makespan is "
                        "accepted with probability 1/e"),
              Param("segments", "float", 0.3,
                    doc="on graphs of more than 32 ops and groups, the share of moves that "
                        "take a run of 2 to 16 consecutive units of a device elsewhere "
                        "together (0 to 1)"),
              Param("screen", "int", SCREEN, minimum=1,
                    doc="on graphs of more than 32 ops and groups, the moves drawn per "
                        "evaluation, of which the one of least contention-free makespan "
                        "is scored"),
              Param("small_screen", "int", SMALL_SCREEN, minimum=1,
                    doc="on graphs of at most 32 ops and groups, the moves drawn per "
                        "evaluation, of which the one of least contention-free makespan "
                        "is scored"),
              Param("keyed", "float", KEYED,
                    doc="the share of the evaluations left after the starts spent first on "
                        "list schedules under perturbed priorities (0 to 1), on graphs of "
                        "more than 32 ops and groups"),
              Param("restarts", "int", 4, minimum=1,
                    doc="chains, each from the best plan found so far"),
              Param("kick", "float", KICK,
                    doc="a chain after one that found nothing faster than the best plan "
                        "before it starts from that plan with this share of the number of "
                        "ops and groups in random moves made first, at least two (0 to 1; "
                        "0: from the best plan as it is)"),
              Param("start", "str", "heft+metis+m_etf",
                    doc="the policies whose best plan the search starts from, joined by +"),
              Param("seed", "seed", 0, doc="fixes the moves"),
              Param("patience", "int", None, minimum=1, optional=True,
                    doc="stop once this many evaluations in a row found no plan faster "
                        "than the best so far (off by default)"),
              Param("time_limit_s", "float", None, minimum=0, optional=True,
                    doc="a wall-clock cap (the plan then depends on the machine)"))

    def __init__(self, evals: int = 2000, beta: float = 0.2, segments: float = 0.3,
                 keyed: float = KEYED, restarts: int = 4, start: str = "heft+metis+m_etf",
                 seed: Seed = 0, patience: int | None = None,
                 time_limit_s: float | None = None, screen: int = SCREEN,
                 small_screen: int = SMALL_SCREEN, kick: float = KICK) -> None:
        self.evals: int = self.checked("evals", evals)
        self.beta: float = self.checked("beta", beta)
        self.segments: float = self._share("segments", segments, "the moves")
        self.screen: int = self.checked("screen", screen)
        self.small_screen: int = self.checked("small_screen", small_screen)
        self.keyed: float = self._share("keyed", keyed, "the evaluations")
        self.restarts: int = self.checked("restarts", restarts)
        self.kick: float = self._share("kick", kick, "the ops and groups")
        self.start: str = self.checked("start", start)
        self.seed = self.checked("seed", seed)
        self.patience: int | None = self.checked("patience", patience)
        self.time_limit_s = self.checked("time_limit_s", time_limit_s)
        starts = _starts(self.start)
        for spec in starts:
            name = spec.partition(":")[0]
            if name not in POLICIES or getattr(POLICIES.get(name), "scores_plans", False):
                raise PlacementError(f"policy 'mcmc': start must name registered policies "
                                     f"that score no plans, got {spec!r}")
            make_policy(spec)
        if not starts:
            raise PlacementError("policy 'mcmc': start must name at least one policy, "
                                 "got none")

    def _share(self, name: str, value: float, of: str) -> float:
        """``value`` of parameter ``name``, checked to be a share (0 to 1) of ``of``."""
        share: float = self.checked(name, value)
        if not 0 <= share <= 1:
            raise PlacementError(f"policy 'mcmc': {name} must be a share of {of}, in [0, 1], "
                                 f"got {value!r}")
        return share

    def place(self, graph: Graph, cluster: Cluster, cost: CostModel) -> Placement:
        return self.place_scored(graph, cluster, cost, contention_free(cluster, cost))

    def place_scored(self, graph: Graph, cluster: Cluster, cost: CostModel,
                     evaluate: Evaluator) -> Placement:
        search = _Search(self, graph, cluster, cost, evaluate)
        return search.run()


class _Search:
    """One run of :class:`MCMC`: its budget, its chain and the best plan seen."""

    def __init__(self, policy: MCMC, graph: Graph, cluster: Cluster, cost: CostModel,
                 evaluate: Evaluator) -> None:
        self.policy, self.graph, self.cluster, self.cost = policy, graph, cluster, cost
        self.evaluate, self.rng = evaluate, make_rng(policy.seed)
        self.problem = Problem(graph, cluster, cost)
        self.used = 0
        #: the least score so far, and the evaluation (1-based) that first scored it
        self.least, self.found_at = math.inf, 0
        self.began = time.perf_counter()
        self.stopped = "evals"
        self.moves = Moves(self.problem, policy.segments, self.rng, policy.screen,
                           policy.small_screen)

    def out_of_time(self) -> bool:
        """Whether ``time_limit_s`` has passed (then the search stops, and says so)."""
        limit = self.policy.time_limit_s
        if limit is not None and time.perf_counter() - self.began > limit:
            self.stopped = "time_limit_s"
            return True
        return False

    def left(self) -> bool:
        patience = self.policy.patience
        if self.out_of_time():
            return False
        if self.used >= self.policy.evals:
            return False  # stopped by "evals", as it says already
        if patience is not None and self.used - self.found_at >= patience:
            self.stopped = "patience"
            return False
        return True

    def score(self, where: list[int], ranked: list[str]) -> tuple[float, Plan]:
        """The evaluator's score of state ``(where, ranked)`` and its plan: each op on its
        lead's device, every device's ops in the global order, under priorities that give
        that order back (for an evaluator in priority order)."""
        codes, sequence = self.moves.plan_arrays(where, ranked)
        candidate = Plan.from_sequence(self.graph, self.problem.devices, codes, sequence,
                                       policy="mcmc")
        return self.scored(candidate), candidate

    def scored(self, candidate: Plan) -> float:
        """The evaluator's score of ``candidate``, counted against the budget."""
        self.used += 1
        seconds = self.evaluate(candidate)
        if seconds < self.least or self.found_at == 0:  # none fits: the first is kept
            self.least, self.found_at = seconds, self.used
        return seconds

    def state(self, p: Plan) -> tuple[list[int], list[str]]:
        """The chain's state for plan ``p``: each op's device index, and a global order
        that gives ``p``'s device orders back."""
        index = {d: k for k, d in enumerate(self.problem.devices)}
        return [index[p.placement[n]] for n in self.problem.names], _merged(self.graph, p)

    def begin(self) -> tuple[float, Plan, str]:
        """The best plan of the start policies, each scored as its policy made it, as many
        as the budget allows in the order given (so the search is never worse than any
        scored)."""
        best: tuple[float, Plan, str] | None = None
        errors = []
        for spec in _starts(self.policy.start):
            if best is not None and not self.left():
                break  # the first start is always scored: a search needs one
            try:
                start = plan(self.graph, self.cluster, spec, self.cost)
            except PlacementError as err:
                errors.append(f"{spec}: {err}")
                continue
            if not start.priority:  # for an evaluator in priority order: its own orders
                start = Plan(self.graph, start.placement, start.order, policy=start.policy,
                             priority=priorities_from_order(_merged(self.graph, start)))
            seconds = self.scored(start)
            if best is None or seconds < best[0]:
                best = (seconds, start, spec)
        if best is None:
            raise PlacementError("policy 'mcmc': no start policy gave a plan: "
                                 + "; ".join(errors))
        return best

    def run(self) -> Placement:
        best, best_plan, start = self.begin()
        first = best
        before = self.used
        keyed = self.keyed()
        keyed_evals = self.used - before
        if keyed is not None and keyed[0] < best:
            best, best_plan = keyed
        best_state = self.state(best_plan)
        accepted, per_restart, kicks, stuck = 0, [], 0, False
        tally = {kind: dict.fromkeys(("proposed", "accepted", "faster"), 0) for kind in KINDS}
        chains = self.policy.restarts
        for chain in range(chains):
            current, now = best_state, best
            budget = (self.policy.evals - self.used) // (chains - chain)
            kicked = self.kicked(best_state) if stuck and budget > 0 and self.left() else None
            if kicked is not None:  # scored as the chain's first plan
                seconds, scored = self.score(*kicked)
                budget, kicks = budget - 1, kicks + 1
                if seconds < best:
                    best, best_state, best_plan = seconds, kicked, scored
                # from a plan that does not fit the chain would take any move (accept):
                # where another fits, it starts from the best plan instead
                if math.isfinite(seconds) or math.isinf(best):
                    current, now = kicked, seconds
            best_before = best
            for _ in range(budget):
                if not self.left():
                    break
                proposal = self.moves.propose(*current)
                if proposal is None:
                    break  # nothing to move: one device, one op
                seconds, scored = self.score(*proposal)
                counts = tally[self.moves.kind]
                counts["proposed"] += 1
                counts["faster"] += int(seconds < now)
                if self.accept(now, seconds):
                    current, now = proposal, seconds
                    accepted += 1
                    counts["accepted"] += 1
                    if seconds < best:
                        best, best_state, best_plan = seconds, proposal, scored
            per_restart.append(best)
            stuck = best >= best_before
        return Placement(dict(best_plan.placement), best_plan.order,
                         priority=best_plan.priority or priorities_from_order(best_state[1]), info={
            "start": start, "start_score_s": first, "score_s": best,
            "keyed_evals": keyed_evals, "keyed_score_s": None if keyed is None else keyed[0],
            "evals": self.used, "best_eval": self.found_at, "accepted": accepted,
            "kicks": kicks,
            "stopped_by": self.stopped, "moves": tally,
            "best_per_restart_s": per_restart})

    def kick_moves(self) -> int:
        """The moves a kick draws: ``kick`` x the ops and groups, at least
        :data:`KICK_LEAST`."""
        return max(KICK_LEAST, round(self.policy.kick * len(self.moves.units)))

    def kicked(self, state: tuple[list[int], list[str]]
               ) -> tuple[list[int], list[str]] | None:
        """``state`` after ``kick`` x (its ops and groups) of the chain's moves, drawn at
        random and unscreened, at least :data:`KICK_LEAST`: where a chain found nothing
        faster, the next starts from there rather than from the same plan, so that it can
        leave that plan's neighbourhood (None where ``kick`` is 0, where a draw finds
        nothing to move, and where ``time_limit_s`` passes mid-kick: a draw's time grows with
        the units, as does a kick's number of draws). Where the kicked plan does not fit and
        another did, the chain starts from ``state`` as it is."""
        if not self.policy.kick:
            return None
        for _ in range(self.kick_moves()):
            if self.out_of_time():
                return None
            moved = self.moves.draw(*state)
            if moved is None:
                return None
            state = moved
        return state

    def keyed(self) -> tuple[float, Plan] | None:
        """The search over list-scheduling priorities (:func:`policies.keys.key_search`),
        from HEFT's upward ranks, on a share
        ``keyed`` of the evaluations left, on graphs of more than 32 units (None where it
        does not run): its best score and plan."""
        evals = int(self.policy.keyed * (self.policy.evals - self.used))
        if len(self.moves.units) <= KEYED_FROM or evals < 1:
            return None
        from policies.keys import key_search

        return key_search(self.problem, self.scored, self.left, self.rng, evals)

    def accept(self, now: float, seconds: float) -> bool:
        """Metropolis: a faster plan always; a slower one with probability
        ``exp(-beta · n · Δ)`` (see the module); one that does not fit never (unless
        nothing found so far fits)."""
        if seconds <= now:
            return True
        if math.isinf(seconds):
            return False
        if math.isinf(now):
            return True
        n = len(self.moves.units)
        delta = (seconds - now) * n / now if now > 0 else math.inf  # in mean ops' shares
        return bool(self.rng.random() < math.exp(-self.policy.beta * n * delta))


def _starts(text: str) -> list[str]:
    """``"heft+metis:seed=2"`` -> ``["heft", "metis:seed=2"]`` (``+``: a comma would end
    the ``mcmc:...`` spec on the command line)."""
    return [part for part in text.split("+") if part]


def _merged(graph: Graph, start: Plan) -> list[str]:
    """One topological order of every op that keeps each device's order of ``start``
    (so splitting it by device gives those orders back), ties in the graph's order."""
    import networkx as nx

    g = graph.to_networkx()
    for ops in start.order.values():
        g.add_edges_from(itertools.pairwise(ops))
    position = graph.arrays.position
    return list(nx.lexicographical_topological_sort(g, key=position.__getitem__))
