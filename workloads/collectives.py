"""Collectives in the IR: one op for an all-reduce, all-gather, reduce-scatter or broadcast
over a group of ``members``, placed (by the transform that makes it) on a device group.

A collective's inputs and outputs are listed member by member: member ``m`` contributes
``inputs[m*k:(m+1)*k]`` and receives ``outputs[m*k:(m+1)*k]`` (``k`` tensors each), except a
broadcast, whose ``k`` inputs are the root's (member 0) and whose outputs are every
member's. Shapes follow the collective: an all-reduce's outputs match its inputs, a
reduce-scatter's are ``1/members`` of them, an all-gather's ``members`` times. How it runs
(the algorithm's point-to-point steps) is decided by the plan's device group and the
cluster, not by the IR: see :func:`policies.collectives.lower`.

>>> from workloads.op import Tensor
>>> g = [Tensor(f"g{m}", (1024,)) for m in range(4)]
>>> op = all_reduce("ar0", [[t] for t in g])
>>> op.attrs["members"], member_inputs(op, 2), [t.name for t in member_outputs(op, 2)]
(4, ('g2',), ['g2.reduced'])
"""

from __future__ import annotations

from collections.abc import Sequence

from workloads.errors import GraphError
from workloads.op import Op, Tensor

__all__ = ["ALGORITHMS", "COLLECTIVE_KINDS", "all_reduce", "collective", "is_collective",
           "member_inputs", "member_outputs", "payload_bytes"]

#: The collective op kinds, each with the algorithms :func:`policies.collectives.lower`
#: knows for it (the first is the default).
COLLECTIVE_KINDS: dict[str, tuple[str, ...]] = {
    "all_reduce": ("ring", "tree", "hierarchical"),
    "reduce_scatter": ("ring",),
    "all_gather": ("ring",),
    "broadcast": ("tree",),
}
#: Every algorithm name.
ALGORITHMS = ("ring", "tree", "hierarchical")


def is_collective(op: Op) -> bool:
    """Whether ``op`` is a collective (its placement is a device group)."""
    return op.kind in COLLECTIVE_KINDS


def _check(name: str, kind: str, members: int, per_member: int, algorithm: str) -> None:
    if kind not in COLLECTIVE_KINDS:
        raise GraphError(f"collective {name!r}: kind must be one of "
                         f"{', '.join(COLLECTIVE_KINDS)}, got {kind!r}")
    if members < 1 or per_member < 1:
        raise GraphError(f"collective {name!r}: expected at least one member with at least "
                         f"one tensor, got {members} members of {per_member}")
    if algorithm not in COLLECTIVE_KINDS[kind]:
        raise GraphError(f"collective {name!r}: algorithm for {kind} must be one of "
                         f"{', '.join(COLLECTIVE_KINDS[kind])}, got {algorithm!r}")


def _scaled(t: Tensor, name: str, members: int, kind: str) -> Tensor:
    """Member output ``name`` of a collective whose member input is ``t``."""
    if kind == "all_gather":
        return Tensor(name, (t.shape[0] * members, *t.shape[1:]), t.dtype)
    if kind == "reduce_scatter":
        if t.shape[0] % members:
            raise GraphError(f"reduce_scatter {name!r}: the first dimension of {t.name!r} "
                             f"must be a multiple of {members} members, got {t.shape}")
        return Tensor(name, (t.shape[0] // members, *t.shape[1:]), t.dtype)
    return Tensor(name, t.shape, t.dtype)


def collective(name: str, kind: str, inputs: Sequence[Sequence[Tensor]], *,
               algorithm: str | None = None, suffix: str = ".reduced",
               members: int | None = None, attrs: dict[str, object] | None = None) -> Op:
    """A ``kind`` collective over ``len(inputs)`` members, ``inputs[m]`` being member
    ``m``'s tensors (a broadcast: one list, the root's, and the group's size ``members``).
    Member ``m``'s outputs are named ``<its input><suffix>`` (a broadcast's:
    ``<input>@m``).

    >>> from workloads.op import Tensor
    >>> op = collective("ag", "all_gather", [[Tensor("x0", (2, 8))], [Tensor("x1", (2, 8))]],
    ...                 suffix=".full")
    >>> [(t.name, t.shape) for t in op.outputs]
    [('x0.full', (4, 8)), ('x1.full', (4, 8))]
    """
    extra = dict(attrs or {})
    members = members or len(inputs) if kind == "broadcast" else len(inputs)
    algorithm = algorithm or COLLECTIVE_KINDS.get(kind, ("ring",))[0]
    _check(name, kind, members, min((len(m) for m in inputs), default=0), algorithm)
    if kind == "broadcast":
        root = list(inputs[0])
        outputs = [Tensor(f"{t.name}@{m}", t.shape, t.dtype)
                   for m in range(members) for t in root]
    else:
        if len({len(m) for m in inputs}) != 1:
            raise GraphError(f"collective {name!r}: every member must bring the same number "
                             f"of tensors, got {[len(m) for m in inputs]}")
        outputs = [_scaled(t, f"{t.name}{suffix}", members, kind) for m in inputs for t in m]
    flat = [t for m in inputs for t in m]
    nbytes = sum(t.nbytes for t in flat)
    reduces = kind in ("all_reduce", "reduce_scatter")
    return Op(name, kind, "data_movement", inputs=[t.name for t in flat], outputs=outputs,
              attrs={**extra, "members": members, "algorithm": algorithm},
              flops=(sum(t.numel for t in flat) * (members - 1) // members) if reduces else 0,
              bytes_read=nbytes, bytes_written=sum(t.nbytes for t in outputs))


def all_reduce(name: str, inputs: Sequence[Sequence[Tensor]], *,
               algorithm: str = "ring") -> Op:
    """An all-reduce (sum) of each member's ``inputs[m]``; outputs ``<input>.reduced``."""
    return collective(name, "all_reduce", inputs, algorithm=algorithm)


def _per_member(op: Op, tensors: Sequence[object], what: str) -> int:
    members = int(op.attrs["members"])
    if len(tensors) % members:
        raise GraphError(f"collective {op.name!r}: its {len(tensors)} {what} must split "
                         f"evenly over {members} members")
    return len(tensors) // members


def member_inputs(op: Op, m: int) -> tuple[str, ...]:
    """The names of member ``m``'s inputs (a broadcast's root holds them all)."""
    if op.kind == "broadcast":
        return op.inputs if m == 0 else ()
    k = _per_member(op, op.inputs, "inputs")
    return op.inputs[m * k:(m + 1) * k]


def member_outputs(op: Op, m: int) -> tuple[Tensor, ...]:
    """Member ``m``'s outputs."""
    k = _per_member(op, op.outputs, "outputs")
    return op.outputs[m * k:(m + 1) * k]


def payload_bytes(op: Op) -> int:
    """The bytes one member contributes (a broadcast: the root's), the ``B`` of the
    algorithms' cost formulas: an all-gather's is what each member ends with."""
    members = int(op.attrs["members"])
    if op.kind == "broadcast":
        return sum(t.nbytes for t in op.outputs) // members
    first = sum(t.nbytes for t in member_outputs(op, 0))
    return first * members if op.kind == "reduce_scatter" else first
