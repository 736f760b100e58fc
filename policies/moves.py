"""The moves of :class:`policies.search.MCMC`'s chain over placements and orders.

A *unit* is an op or a co-placement group's lead, which its group follows. A move takes one
unit to another device that runs it (a neighbour's device, a swap with a unit elsewhere, or
any other device), on graphs of more than :data:`SEGMENT_FROM` units a run of up to
:data:`SEGMENT_LONGEST` of one device's units together, or lets an op and the next op of its
device trade places in the global order every device's order is drawn from. On graphs of
more than :data:`SCREEN_FROM` units a proposal can be the best of several moves drawn, by
the list schedulers' contention-free model (``screen``).

>>> from hwmodels import RooflineCost, get_cluster
>>> from policies.problem import Problem
>>> from workloads import build_model
>>> c = get_cluster("quad-v100-nvlink")
>>> moves = Moves(Problem(build_model("mlp", batch=8), c, RooflineCost(c)), 0.3,
...               np.random.default_rng(0))
>>> where, ranked = [0] * moves.problem.n, list(moves.problem.names)
>>> new_where, new_ranked = moves.propose(where, ranked)
>>> new_where != where or new_ranked != ranked
True
"""

from __future__ import annotations

import numpy as np

from policies.problem import Problem, schedule_length

__all__ = ["KINDS", "SCREEN_FROM", "SEGMENT_FROM", "SEGMENT_LONGEST", "Moves"]

#: Runs of units move together on graphs of more than this many units, at most this long.
SEGMENT_FROM, SEGMENT_LONGEST = 32, 16
#: Proposals are screened (:meth:`Moves.propose`) on graphs of more than this many units.
SCREEN_FROM = 32
#: The kinds of move (:attr:`Moves.kind`): a unit to a neighbour's device, two units
#: swapping devices, a unit to any other device, a run of units together, two ops trading
#: places in the global order.
KINDS = ("neighbour", "swap", "device", "segment", "order")


class Moves:
    """Proposes the chain's next state ``(where, ranked)`` from its current one: each
    op's device index and a global order (see the module)."""

    def __init__(self, problem: Problem, segments: float, rng: np.random.Generator,
                 screen: int = 1) -> None:
        """What proposals draw from: the units that may move and where, each unit's
        neighbours, and the edges an order move must not invert. ``segments``: the share
        of moves that take a run of units elsewhere, on graphs of more than
        :data:`SEGMENT_FROM` units; ``screen``: the moves drawn per proposal, of which the
        one of least contention-free makespan is proposed, on graphs of more than
        :data:`SCREEN_FROM` units whose transfer times tabulate
        (:func:`policies.compiled.comm_table`: the model runs compiled)."""
        self.problem, self.rng = problem, rng
        p = problem
        self.units = [i for i in range(p.n) if p.node_of[i] == i]
        self.able = [np.flatnonzero(np.isfinite(p.times[u])).tolist() for u in self.units]
        self.movable = [k for k, a in enumerate(self.able) if len(a) > 1]
        # the ops (any member of another unit) each unit's members exchange tensors with
        unit_of = {u: k for k, u in enumerate(self.units)}
        self.neighbours: list[list[int]] = [[] for _ in self.units]
        for i in range(p.n):
            for j, _ in p.preds[i]:
                a, b = unit_of[p.node_of[i]], unit_of[p.node_of[j]]
                if a != b:
                    self.neighbours[a].append(p.node_of[j])
                    self.neighbours[b].append(p.node_of[i])
        self.edges = {(p.names[j], p.names[i]) for i in range(p.n) for j, _ in p.preds[i]}
        self.index = {name: i for i, name in enumerate(p.names)}
        self.unit_of = unit_of
        # a small graph's single moves already reach far: runs of units only on large ones
        self.segments = segments if len(self.units) > SEGMENT_FROM else 0.0
        # the interpreted model, 16 times an evaluation, can cost more than the evaluation
        # (the transfer table is built only where a screen would use it)
        self.screen = screen if screen > 1 and len(self.units) > SCREEN_FROM \
            and p.comm_table is not None else 1
        self._leads = np.asarray(p.node_of, dtype=np.int64)  # each op follows its lead
        self._ranked: list[str] | None = None
        self._sequence = np.empty(0, dtype=np.int64)
        #: the kind (one of :data:`KINDS`) of the last move proposed
        self.kind = ""

    def propose(self, where: list[int], ranked: list[str]
                ) -> tuple[list[int], list[str]] | None:
        """A move (:meth:`draw`); where ``screen`` is more than one, the one of that many
        drawn whose plan has the least contention-free makespan
        (:func:`policies.problem.schedule_length`, each device's ops in the global order),
        the first such on a tie: the evaluator's budget goes to the moves the list
        schedulers' model favours (the priority search screens too,
        :data:`policies.keys.SCREEN`, but takes the first move no worse than its current
        plan). None where nothing can move."""
        if self.screen <= 1:
            return self.draw(where, ranked)
        if ranked is not self._ranked:  # the current order: most moves keep it
            self._ranked, self._sequence = ranked, self._indices(ranked)
        drawn = []
        for _ in range(self.screen):
            moved = self.draw(where, ranked)
            if moved is None:
                return None
            drawn.append((self.estimate(*moved), moved, self.kind))
        _, best, self.kind = min(drawn, key=lambda row: row[0])  # the first on a tie
        return best

    def estimate(self, where: list[int], ranked: list[str]) -> float:
        """The contention-free makespan of state ``(where, ranked)``: compiled where the
        transfer table fits (:func:`policies.compiled.schedule_length`), else
        interpreted. The current state's order (``ranked`` of the last :meth:`propose`,
        which the chain never changes in place) has its indices kept.

        >>> from hwmodels import RooflineCost, get_cluster
        >>> from workloads import build_model
        >>> c = get_cluster("quad-v100-nvlink")
        >>> p = Problem(build_model("mlp", batch=8), c, RooflineCost(c))
        >>> moves = Moves(p, 0.3, np.random.default_rng(0))
        >>> where, ranked = [0] * p.n, list(p.names)
        >>> moves.estimate(where, ranked) == schedule_length(p, where, list(range(p.n)))
        True
        """
        from policies.compiled import schedule_length as compiled

        sequence = self._sequence if ranked is self._ranked else self._indices(ranked)
        devices = np.asarray(where, dtype=np.int64)[self._leads]
        length = compiled(self.problem, devices, sequence)
        if length is None:
            return schedule_length(self.problem, devices.tolist(), sequence.tolist())
        return length

    def _indices(self, ranked: list[str]) -> np.ndarray:
        """The op indices of order ``ranked``."""
        return np.fromiter(map(self.index.__getitem__, ranked), dtype=np.int64,
                           count=len(ranked))

    def draw(self, where: list[int], ranked: list[str]
             ) -> tuple[list[int], list[str]] | None:
        """A move: on a graph of more than 32 units, a share ``segments`` of the time a
        run of units of one device elsewhere (:meth:`segment`); otherwise one time in
        five, an op and the next op of its device trade places in the global order
        (:meth:`reorder`); otherwise one unit (an op, or a group's lead, which its group
        follows) goes to another device
        that runs it: to the device of a unit it exchanges a tensor with (two times in
        five), by swapping devices with a unit elsewhere that can run on its device (one
        time in five), or to any other device."""
        rng = self.rng
        if self.movable and self.segments and rng.random() < self.segments:
            moved = self.segment(where, ranked)
            if moved is not None:
                self.kind = "segment"
                return moved, ranked
        if len(ranked) > 1 and (not self.movable or rng.random() < 0.2):
            order = self.reorder(where, ranked, int(rng.integers(len(ranked))))
            if order is not None:
                self.kind = "order"
                return where, order
        if not self.movable:
            return None  # a chain on one device: nothing to change
        out = list(where)
        k = self.movable[int(rng.integers(len(self.movable)))]
        u = self.units[k]
        draw = rng.random()
        if draw < 0.4:  # to a neighbour's device: what saves a transfer
            near = [where[i] for i in self.neighbours[k] if where[i] != where[u]
                    and where[i] in self.able[k]]
            if near:
                out[u] = near[int(rng.integers(len(near)))]
                self.kind = "neighbour"
                return out, ranked
        elif draw < 0.6:
            j = self.movable[int(rng.integers(len(self.movable)))]
            v = self.units[j]
            if where[v] != where[u] and where[v] in self.able[k] and where[u] in self.able[j]:
                out[u], out[v] = where[v], where[u]
                self.kind = "swap"
                return out, ranked
        choices = [d for d in self.able[k] if d != where[u]]
        out[u] = choices[int(rng.integers(len(choices)))]
        self.kind = "device"
        return out, ranked

    def segment(self, where: list[int], ranked: list[str]) -> list[int] | None:
        """A run of 2 to :data:`SEGMENT_LONGEST` units of one device, consecutive in the
        global order from a random op on, moved together to another device all of them
        can run on (None where there is none): a layer's ops leave a device at once, where
        moving one alone only adds transfers."""
        p, rng = self.problem, self.rng
        at = int(rng.integers(len(ranked)))
        first = p.node_of[self.index[ranked[at]]]
        device, run = where[first], [first]
        length = int(rng.integers(2, SEGMENT_LONGEST + 1))
        for name in ranked[at + 1:]:
            if len(run) == length:
                break
            lead = p.node_of[self.index[name]]
            if where[lead] == device and lead not in run:
                run.append(lead)
        targets = set.intersection(*(set(self.able[self.unit_of[u]]) for u in run)) - {device}
        if not targets:
            return None
        out = list(where)
        chosen = sorted(targets)[int(rng.integers(len(targets)))]
        for u in run:
            out[u] = chosen
        return out

    def reorder(self, where: list[int], ranked: list[str], start: int) -> list[str] | None:
        """The first op from ``start`` on (cyclically) that can trade places with the next
        op of its device, traded: it moves to just after that op in the global order, or
        that op to just before it, whichever passes no edge (an op between them that it
        feeds, or that feeds the other). Only the device's order changes."""
        p = self.problem
        device = [where[p.node_of[self.index[n]]] for n in ranked]
        n = len(ranked)
        for i in (*range(start, n), *range(start)):
            j = next((k for k in range(i + 1, n) if device[k] == device[i]), None)
            if j is None:
                continue
            a, b = ranked[i], ranked[j]
            if (a, b) in self.edges:
                continue
            between = ranked[i + 1:j]
            if not any((a, x) in self.edges for x in between):
                return [*ranked[:i], *between, b, a, *ranked[j + 1:]]
            if not any((x, b) in self.edges for x in between):
                return [*ranked[:i], b, a, *between, *ranked[j + 1:]]
        return None
