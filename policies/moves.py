"""The moves of :class:`policies.search.MCMC`'s chain over placements and orders.

A *unit* is an op or a co-placement group's lead, which its group follows. A move takes one
unit to another device that runs it (a neighbour's device, a swap with a unit elsewhere, or
any other device), on graphs of more than :data:`SEGMENT_FROM` units a run of up to
:data:`SEGMENT_LONGEST` of one device's units together, or lets an op and the next op of its
device trade places in the global order every device's order is drawn from. A proposal can
be the best of several moves drawn, by the list schedulers' contention-free model
(``screen`` of them on graphs of more than :data:`SCREEN_FROM` units, ``small_screen`` on
smaller ones).

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

import itertools
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from policies.problem import Problem, schedule_length

__all__ = ["KINDS", "SCREEN_FROM", "SEGMENT_FROM", "SEGMENT_LONGEST", "Moves"]

#: Runs of units move together on graphs of more than this many units, at most this long.
SEGMENT_FROM, SEGMENT_LONGEST = 32, 16
#: Proposals are screened (:meth:`Moves.propose`) by ``screen`` on graphs of more than
#: this many units, by ``small_screen`` on the others.
SCREEN_FROM = 32
#: The kinds of move (:attr:`Moves.kind`): a unit to a neighbour's device, two units
#: swapping devices, a unit to any other device, a run of units together, two ops trading
#: places in the global order.
KINDS = ("neighbour", "swap", "device", "segment", "order")


class Moves:
    """Proposes the chain's next state ``(where, ranked)`` from its current one: each
    op's device index and a global order (see the module)."""

    #: Whether contention-free makespans run compiled
    #: (:func:`policies.compiled.schedule_length`) where the transfer table fits; off,
    #: interpreted (:func:`policies.problem.schedule_length`, the same to the bit), as
    #: ``benchmarks/placement_quality.py`` times them.
    compiled: ClassVar[bool] = True

    def __init__(self, problem: Problem, segments: float, rng: np.random.Generator,
                 screen: int = 1, small_screen: int = 1) -> None:
        """What proposals draw from: the units that may move and where, each unit's
        neighbours, and the edges an order move must not invert. ``segments``: the share
        of moves that take a run of units elsewhere, on graphs of more than
        :data:`SEGMENT_FROM` units; ``screen``: the moves drawn per proposal, of which the
        one of least contention-free makespan is proposed, on graphs of more than
        :data:`SCREEN_FROM` units (``small_screen`` on smaller ones) whose transfer times
        tabulate (:func:`policies.compiled.comm_table`: the model can run compiled)."""
        self.problem, self.rng = problem, rng
        p = problem
        self.units = p.units()
        self.able = [np.flatnonzero(np.isfinite(p.times[u])).tolist() for u in self.units]
        self._able = [frozenset(a) for a in self.able]
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
        sized = screen if len(self.units) > SCREEN_FROM else small_screen
        self.screen = sized if sized > 1 and p.comm_table is not None else 1
        self._leads = np.asarray(p.node_of, dtype=np.int64)  # each op follows its lead
        # the current state's arrays, and those of the move proposed last
        self._state: _State | None = None
        self._next: _State | None = None
        # what the last draw changed: the units it moved, or the new order's op indices
        self._moved: list[int] = []
        self._sequence: np.ndarray | None = None
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
        state = self._current(where, ranked)
        if self.screen <= 1:
            moved = self.draw(where, ranked)
            if moved is not None:  # its arrays worked out if the chain goes there
                self._next = _State(*moved, self.index, self._leads)
            return moved
        drawn = []
        for _ in range(self.screen):
            moved = self.draw(where, ranked)
            if moved is None:
                return None
            units, sequence = self._arrays(state, *moved)
            drawn.append((self._schedule_length(units[self._leads], sequence), moved,
                          self.kind, units, sequence))
        _, best, self.kind, units, sequence = min(drawn, key=lambda row: row[0])  # first on a tie
        self._next = _State(*best, self.index, self._leads, units, sequence)
        return best

    def plan_arrays(self, where: list[int], ranked: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """State ``(where, ranked)`` as arrays: each op's device (its lead's) and the global
        order's op indices, those of the move proposed last or of the current state where
        it is one of them (worked out already)."""
        state = self._known(where, ranked) or self._outside(where, ranked)
        return state.units[self._leads], state.sequence

    def _arrays(self, state: _State, where: list[int], ranked: list[str]
                ) -> tuple[np.ndarray, np.ndarray]:
        """The device of each op's lead and the order's op indices of a state the last
        :meth:`draw` made from ``state``, from what the draw changed."""
        units = state.units
        if where is not state.where:
            units = units.copy()
            units[self._moved] = [where[u] for u in self._moved]
        if ranked is state.ranked:
            return units, state.sequence
        assert self._sequence is not None  # an order move's
        return units, self._sequence

    def estimate(self, where: list[int], ranked: list[str]) -> float:
        """The contention-free makespan of state ``(where, ranked)``: compiled where the
        transfer table fits and :attr:`compiled` is on
        (:func:`policies.compiled.schedule_length`), else interpreted.

        >>> from hwmodels import RooflineCost, get_cluster
        >>> from workloads import build_model
        >>> c = get_cluster("quad-v100-nvlink")
        >>> p = Problem(build_model("mlp", batch=8), c, RooflineCost(c))
        >>> moves = Moves(p, 0.3, np.random.default_rng(0))
        >>> where, ranked = [0] * p.n, list(p.names)
        >>> moves.estimate(where, ranked) == schedule_length(p, where, list(range(p.n)))
        True
        """
        state = _State(where, ranked, self.index, self._leads)
        self._check(state)
        return self._schedule_length(state.units[self._leads], state.sequence)

    def _schedule_length(self, devices: np.ndarray, sequence: np.ndarray) -> float:
        """The contention-free makespan of each op on ``devices``, in order ``sequence``:
        compiled where the transfer table fits and :attr:`compiled` is on, else
        interpreted. The indices' range is not checked again: a state is checked where it
        comes from outside (:meth:`_check`), and the moves drawn from it stay in range."""
        if self.compiled:
            from policies.compiled import schedule_length as compiled

            length = compiled(self.problem, devices, sequence, check=False)
            if length is not None:
                return length
        return schedule_length(self.problem, devices.tolist(), sequence.tolist())

    def _current(self, where: list[int], ranked: list[str]) -> _State:
        """State ``(where, ranked)``'s arrays, kept while the chain stays there (it never
        changes a state's lists in place); those of the move :meth:`propose` chose last
        are taken over."""
        state = self._known(where, ranked) or self._outside(where, ranked)
        self._state, self._next = state, None
        return state

    def _known(self, where: list[int], ranked: list[str]) -> _State | None:
        """The arrays of state ``(where, ranked)`` where it is the current state or the move
        proposed last (the same lists), else None."""
        for state in (self._state, self._next):
            if state is not None and where is state.where and ranked is state.ranked:
                return state
        return None

    def _outside(self, where: list[int], ranked: list[str]) -> _State:
        """The arrays of a state from outside (a start, a restart), checked once, as the
        compiled model reads its indices unchecked."""
        state = _State(where, ranked, self.index, self._leads)
        self._check(state)
        return state

    def _check(self, state: _State) -> None:
        """Refuses a state whose ``where`` is not a device index for each op."""
        units, n, k = state.units, self.problem.n, len(self.problem.devices)
        if units.shape != (n,) or (n and not 0 <= units.min() <= units.max() < k):
            raise ValueError(f"moves: expected a device 0 to {k - 1} for each of {n} ops")

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
                self.kind, self._moved = "neighbour", [u]
                return out, ranked
        elif draw < 0.6:
            j = self.movable[int(rng.integers(len(self.movable)))]
            v = self.units[j]
            if where[v] != where[u] and where[v] in self.able[k] and where[u] in self.able[j]:
                out[u], out[v] = where[v], where[u]
                self.kind, self._moved = "swap", [u, v]
                return out, ranked
        choices = [d for d in self.able[k] if d != where[u]]
        out[u] = choices[int(rng.integers(len(choices)))]
        self.kind, self._moved = "device", [u]
        return out, ranked

    def segment(self, where: list[int], ranked: list[str]) -> list[int] | None:
        """A run of 2 to :data:`SEGMENT_LONGEST` units of one device, consecutive in the
        global order from a random op on, moved together to another device all of them
        can run on (None where there is none): a layer's ops leave a device at once, where
        moving one alone only adds transfers."""
        rng, state = self.rng, self._current(where, ranked)
        at = int(rng.integers(len(ranked)))
        leads, devices = state.lists
        first = leads[at]
        device, run = where[first], [first]
        length = int(rng.integers(2, SEGMENT_LONGEST + 1))
        for k in range(at + 1, len(ranked)):
            if len(run) == length:
                break
            if devices[k] == device and leads[k] not in run:
                run.append(leads[k])
        targets = frozenset.intersection(*(self._able[self.unit_of[u]] for u in run)) \
            - {device}
        if not targets:
            return None
        out = list(where)
        chosen = sorted(targets)[int(rng.integers(len(targets)))]
        for u in run:
            out[u] = chosen
        self._moved = run
        return out

    def reorder(self, where: list[int], ranked: list[str], start: int) -> list[str] | None:
        """The first op from ``start`` on (cyclically) that can trade places with the next
        op of its device, traded: it moves to just after that op in the global order, or
        that op to just before it, whichever passes no edge (an op between them that it
        feeds, or that feeds the other). Only the device's order changes."""
        state = self._current(where, ranked)
        following, edges, n = state.following, self.edges, len(ranked)
        for i in itertools.chain(range(start, n), range(start)):
            j = following[i]
            if j < 0:
                continue
            a, b = ranked[i], ranked[j]
            if (a, b) in edges:
                continue
            between, seq = ranked[i + 1:j], state.sequence
            if not any((a, x) in edges for x in between):
                if self.screen > 1:  # the new order's indices, for its estimate
                    self._sequence = np.concatenate((seq[:i], seq[i + 1:j + 1],
                                                     seq[i:i + 1], seq[j + 1:]))
                return [*ranked[:i], *between, b, a, *ranked[j + 1:]]
            if not any((x, b) in edges for x in between):
                if self.screen > 1:
                    self._sequence = np.concatenate((seq[:i], seq[j:j + 1], seq[i:j],
                                                     seq[j + 1:]))
                return [*ranked[:i], b, a, *between, *ranked[j + 1:]]
        return None


class _State:
    """A chain state ``(where, ranked)`` and the arrays drawn from its lists, each worked
    out when first asked for."""

    def __init__(self, where: list[int], ranked: list[str], index: Mapping[str, int],
                 leads: np.ndarray, units: np.ndarray | None = None,
                 sequence: np.ndarray | None = None) -> None:
        self.where, self.ranked = where, ranked
        self._index, self._leads = index, leads
        self._units, self._sequence = units, sequence
        self._lead_at: np.ndarray | None = None
        self._device: np.ndarray | None = None
        self._following: list[int] | None = None
        self._lists: tuple[list[int], list[int]] | None = None

    @property
    def units(self) -> np.ndarray:
        """``where`` as an array (each unit's device; a group's followers' entries unused)."""
        if self._units is None:
            self._units = np.asarray(self.where, dtype=np.int64)
        return self._units

    @property
    def sequence(self) -> np.ndarray:
        """The op index at each position of ``ranked``."""
        if self._sequence is None:
            self._sequence = np.fromiter(map(self._index.__getitem__, self.ranked),
                                         dtype=np.int64, count=len(self.ranked))
        return self._sequence

    @property
    def lead_at(self) -> np.ndarray:
        """The unit (the op's lead) at each position of ``ranked``."""
        if self._lead_at is None:
            self._lead_at = self._leads[self.sequence]
        return self._lead_at

    @property
    def device(self) -> np.ndarray:
        """The device at each position of ``ranked``."""
        if self._device is None:
            self._device = self.units[self.lead_at]
        return self._device

    @property
    def lists(self) -> tuple[list[int], list[int]]:
        """:attr:`lead_at` and :attr:`device` as lists (read one position at a time)."""
        if self._lists is None:
            self._lists = (self.lead_at.tolist(), self.device.tolist())
        return self._lists

    @property
    def following(self) -> list[int]:
        """For each position of ``ranked``, the next position on the same device (-1 for
        a device's last)."""
        if self._following is None:
            device = self.device
            by_device = np.argsort(device, kind="stable")  # in order within each device
            same = device[by_device[1:]] == device[by_device[:-1]]
            following = np.full(len(device), -1, dtype=np.int64)
            following[by_device[:-1][same]] = by_device[1:][same]
            self._following = following.tolist()
        return self._following
