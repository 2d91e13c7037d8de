"""What a plan means physically: the one model every consumer reads.

:mod:`.binding` binds parallel regions to hardware scopes and Memory to owners and legal
homes (S5, S7, S17, S20).  The proofs (``planner.prove``), the cost model
(``planner.solve``), the loop program and both backends (``planner.lower``) import it
instead of re-deriving any of it.
"""

from planner.realize.binding import (
    ROOT_OWNER,
    BindingProblem,
    ExecutionBinding,
    MemoryAccess,
    MemoryBinding,
    OpContext,
    bind_execution,
    memory_homes,
    memory_name,
    op_class,
)

__all__ = [
    "ROOT_OWNER",
    "BindingProblem",
    "ExecutionBinding",
    "MemoryAccess",
    "MemoryBinding",
    "OpContext",
    "bind_execution",
    "memory_homes",
    "memory_name",
    "op_class",
]
