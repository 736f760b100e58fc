"""A memory budget that follows the scheduler's own schedule (Baechi's TensorFlow placer).

:class:`~policies.problem.MemoryBook` charges every output, workspace and received copy as
if nothing were ever freed: a plan that respects it cannot run out of memory, but it
refuses plans that fit (a step whose simulated peak is half its budget). A list scheduler
knows the order it runs ops in, so :class:`ScheduleBook` keeps memory along that order, as
Baechi's m-ETF and m-SCT do: when an op is scheduled its resident state, outputs and
workspace and a copy of every remote input not yet on its device are charged; the
workspace is released at once; a tensor (every copy of it) is released once all its
readers have been scheduled, at once if it has none. A co-placement group's resident state
and its floating ops' outputs (a layer's weights) are charged where and when the group is
placed. Nothing is reserved for the group's later ops (reserving, as Baechi's
``reserve_memory`` option does, holds memory through the whole forward pass), but a
group's first op goes only where the outputs and workspace of the group's other ops would
also fit at that moment (:meth:`ScheduleBook.headroom`; where no device has that room, it
goes where it fits), so a backward op seldom finds its forward op's device full; when it
does, the policy refuses. The budget is the peak of that
account, which the simulator's peak can exceed (it frees at op ends, not at scheduling);
``sim.repair`` closes that gap where it can.
"""

from __future__ import annotations

import numpy as np

from policies.problem import Problem, out_of_memory
from workloads.errors import OutOfMemory

__all__ = ["ScheduleBook"]


class ScheduleBook:
    """Bytes in use per device along the schedule, and their peak."""

    def __init__(self, problem: Problem, policy: str) -> None:
        p = self.p = problem
        a = p.graph.arrays
        self.policy = policy
        self.used = [0] * len(p.devices)
        self.peak = [0] * len(p.devices)
        self.param = a.param_bytes.tolist()
        self.workspace = a.workspace_bytes.tolist()
        offsets = a.out_offsets.tolist()
        self.outputs = [range(offsets[i], offsets[i + 1]) for i in range(p.n)]
        self.left = np.bincount(a.edge_tensor, minlength=len(p.tensor_bytes)).tolist()
        self.holders: dict[int, list[int]] = {}
        self.pinned = [False] * len(p.members)
        #: Whether a group's first op must find :meth:`headroom` (a preference: a
        #: scheduler that finds no device with it places without).
        self.roomy = True

    def _group_extra(self, op: int) -> int:
        """What placing ``op`` brings of its group, if the group has no device yet: every
        member's resident state and the floating members' outputs."""
        p = self.p
        g = p.group[op]
        if g < 0 or self.pinned[g]:
            return 0
        return sum(self.param[m] for m in p.members[g] if m != op) + sum(
            p.tensor_bytes[t] for m in p.members[g] if p.floating[m] for t in self.outputs[m])

    def _remote(self, op: int, d: int, where: list[int]) -> list[int]:
        """The inputs of ``op`` that must be copied to device ``d``."""
        tensors = dict.fromkeys(t for s, t in self.p.preds[op]
                                if where[s] >= 0 and d not in self.holders.get(t, ()))
        return list(tensors)

    def need(self, op: int, d: int, where: list[int]) -> int:
        """Bytes in use on ``d`` while ``op`` runs there, beyond what is in use now."""
        p = self.p
        own = 0 if p.group[op] >= 0 and self.pinned[p.group[op]] else self.param[op]
        return (own + self._group_extra(op) + self.workspace[op]
                + sum(p.tensor_bytes[t] for t in self.outputs[op])
                + sum(p.tensor_bytes[t] for t in self._remote(op, d, where)))

    def headroom(self, op: int) -> int:
        """Room a group's first op must find beyond what it takes: the outputs and
        workspace of the group's other scheduled ops, which will be made where it goes.
        Checked, not charged, so a group is not pinned to a device that is nearly full
        (charging it would hold it for the whole forward pass)."""
        p = self.p
        g = p.group[op]
        if g < 0 or self.pinned[g] or not self.roomy:
            return 0
        return sum(self._transient(m) for m in p.members[g] if m != op and not p.floating[m])

    def _transient(self, op: int) -> int:
        return self.workspace[op] + sum(self.p.tensor_bytes[t] for t in self.outputs[op])

    def need_row(self, op: int, where: list[int]) -> np.ndarray:
        """:meth:`need` on every device at once, with the :meth:`headroom` the op must
        find."""
        p = self.p
        own = 0 if p.group[op] >= 0 and self.pinned[p.group[op]] else self.param[op]
        base = own + self._group_extra(op) + self.workspace[op] + sum(
            p.tensor_bytes[t] for t in self.outputs[op]) + self.headroom(op)
        row = np.full(len(p.devices), float(base))
        for t in dict.fromkeys(t for s, t in p.preds[op] if where[s] >= 0):
            row += p.tensor_bytes[t]
            for d in self.holders.get(t, ()):
                row[d] -= p.tensor_bytes[t]
        return row

    def fits(self, op: int, d: int, where: list[int]) -> bool:
        return self.used[d] + self.need(op, d, where) <= self.p.capacity[d]

    def commit(self, op: int, d: int, where: list[int]) -> None:
        p = self.p
        remote = self._remote(op, d, where)
        self.used[d] += self.need(op, d, where)
        self.peak[d] = max(self.peak[d], self.used[d])
        self.used[d] -= self.workspace[op]
        for t in remote:
            self.holders.setdefault(t, []).append(d)
        held = [op]
        g = p.group[op]
        if g >= 0 and not self.pinned[g]:
            self.pinned[g] = True
            held += [m for m in p.members[g] if p.floating[m]]
        for m in held:
            for t in self.outputs[m]:
                self.holders.setdefault(t, []).append(d)
        for _, t in p.preds[op]:
            self.left[t] -= 1
        for t in {t for _, t in p.preds[op]} | {t for m in held for t in self.outputs[m]}:
            if self.left[t] == 0:
                self._release(t)

    def _release(self, t: int) -> None:
        for device in self.holders.pop(t, ()):
            self.used[device] -= self.p.tensor_bytes[t]

    def fail(self, op: int) -> OutOfMemory:
        return out_of_memory(self.p, self.policy, op, self.need_alone(op), self.used)

    def need_alone(self, op: int) -> int:
        """Bytes ``op`` needs with every input already on its device."""
        return self.param[op] + self.workspace[op] + sum(
            self.p.tensor_bytes[t] for t in self.outputs[op])
