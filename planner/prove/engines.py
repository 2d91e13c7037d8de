"""Which catalog operation performs each explicit Memory access (S6, S20).

A plain ``memory.store`` is a ``write`` and a plain ``memory.load`` a ``read``.  Some
resources are reached only through an engine: on ``nvidia-b200`` tensor memory is read
and written by the tensor core in place (``mma_read`` / ``mma_write``) and filled or
drained by asynchronous copies (``copy_async``: tcgen05.st / tcgen05.ld, completed by
the resource's sync rule before the value is used), never by plain loads and stores.
An access is performed by the first of its alternatives that the target allows at the
access's scope:

===============================================  ==========================
access                                            alternatives, in order
===============================================  ==========================
``memory.store`` of a ``tile.mma`` result         ``write``, ``mma_write``
any other ``memory.store``                        ``write``, ``copy_async``
``memory.load`` whose every use is an mma         ``read``, ``mma_read``
any other ``memory.load``                         ``read``, ``copy_async``
``tile.load`` above the default parallel scope,   ``read``, ``copy_async``
whose every use is a memory.store
===============================================  ==========================

The plain operation comes first, so wherever it is allowed nothing changes.  An in-place
``mma_read`` also needs every tile.mma operand the snapshot feeds to be one the access
entry's ``mma_operands`` lists (:meth:`Target.mma_operand_allowed`; on ``nvidia-b200``
tensor memory holds A and the accumulator, never B): :func:`refused_operands`.  An
``auto_`` Memory's homes are still chosen by plain operations (the execution binding's
rule): the engine alternatives serve a Memory whose class the user chose, where the
plain access would otherwise be refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from planner.catalog import MmaOperand, Operation, Target
from planner.ir import core
from planner.realize.binding import MemoryAccess


@dataclass(frozen=True, slots=True)
class Uses:
    """Which values are mma results, the op kinds that use each value, and the tile.mma
    operands each value is."""

    mma_results: frozenset[int]
    users: Mapping[int, frozenset[type]]
    mma_operands: Mapping[int, frozenset[MmaOperand]] = field(default_factory=dict)

    def only(self, value: core.Value, kind: type) -> bool:
        """Whether ``value`` has uses and every one of them is a ``kind`` op."""
        users = self.users.get(id(value), frozenset())
        return bool(users) and users == {kind}


def kernel_uses(kernel: core.Kernel) -> Uses:
    results: set[int] = set()
    users: dict[int, set[type]] = {}
    slots: dict[int, set[MmaOperand]] = {}
    for op in kernel.walk():
        if isinstance(op, core.MmaOp):
            results.update(id(r) for r in op.results)
            for v, operand in zip((op.a, op.b, op.acc), MmaOperand, strict=True):
                slots.setdefault(id(v), set()).add(operand)
        for v in op.operands():
            users.setdefault(id(v), set()).add(type(op))
    return Uses(frozenset(results), {k: frozenset(v) for k, v in users.items()},
                {k: frozenset(v) for k, v in slots.items()})


def refused_operands(op: core.Op, scope: str, uses: Uses, target: Target, resource: str
                     ) -> tuple[MmaOperand, ...]:
    """The tile.mma operands a ``memory.load`` feeds that the mma of ``scope`` may not read
    in place from ``resource`` (tile.mma's operand order); empty for any other op."""
    if not isinstance(op, core.MemLoadOp):
        return ()
    fed = uses.mma_operands.get(id(op.result), frozenset())
    return tuple(o for o in MmaOperand if o in fed
                 and not target.mma_operand_allowed(scope, resource, o))


def alternatives(acc: MemoryAccess, uses: Uses) -> tuple[Operation, ...]:
    """The operations that may perform ``acc``, plain first (see the module table)."""
    op = acc.op
    if isinstance(op, core.MemStoreOp):
        engine = Operation.MMA_WRITE if id(op.tile) in uses.mma_results \
            else Operation.COPY_ASYNC
    else:
        assert isinstance(op, core.MemLoadOp)
        engine = Operation.MMA_READ if uses.only(op.result, core.MmaOp) \
            else Operation.COPY_ASYNC
    return (acc.operation, engine)


def view_load_alternatives(op: core.LoadOp, uses: Uses, target: Target, scope: str
                           ) -> tuple[Operation, ...]:
    """A view load above the target's default parallel scope (a cluster, on the GPUs)
    whose every use stores it into a Memory is a copy into that Memory, issued for the
    whole scope by a copy engine (TMA multicast): ``read``, then ``copy_async``.  At and
    below the default scope a load stays a plain read (asynchronous copies there are the
    IR's explicit ``copy_async``, not an implicit choice)."""
    default = target.default_parallel_scope
    above = scope != default and target.is_ancestor_or_self(scope, default)
    if above and uses.only(op.result, core.MemStoreOp):
        return (Operation.READ, Operation.COPY_ASYNC)
    return (Operation.READ,)
