"""The price of each asynchronous copy, from its realization (:mod:`planner.realize.copies`).

A copy on an engine costs its issue cycles plus the transfer it does not hide (an
overlapped async copy hides it, see the realization); a synchronous copy reads its window
from the source resource like a ``tile.load`` and writes its destination like a
``memory.store`` (that write is part of the Memory's traffic in each home,
:mod:`planner.solve.memories`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from planner.catalog import Target
from planner.ir import core
from planner.plan.decisions import CopyPlan, MaterializationPlan, Status
from planner.realize.binding import bind_execution
from planner.realize.copies import CopyRealization, realize_copies, source_resource

if TYPE_CHECKING:
    from planner.solve.context import Context

__all__ = ["copy_cycles", "copy_realization", "plan_copies"]


def copy_realization(ctx: Context, op: core.CopyAsyncOp) -> CopyRealization:
    """How ``op`` runs with every Memory in its default home (computed once per build)."""
    if id(op) not in ctx.copies:
        ctx.copies.update((id(c.op), c) for c in realize_copies(ctx.kernel, ctx.target,
                                                                ctx.binding, ctx.env))
    return ctx.copies[id(op)]


def copy_cycles(ctx: Context, op: core.CopyAsyncOp, scope: str) -> tuple[float, float]:
    """(compute, traffic) cycles of one execution of the copy on its issuer."""
    real = copy_realization(ctx, op)
    if real.engine is not None:
        return real.cycles()
    src = source_resource(ctx.target, ctx.binding, op, {})
    if src is None or not real.nbytes:
        return 0.0, 0.0
    return 0.0, ctx.fig.traffic_cycles(real.nbytes, src, scope)


def plan_copies(kernel: core.Kernel, target: Target, bindings: Mapping[str, int] | None,
                plan: MaterializationPlan) -> tuple[CopyPlan, ...]:
    """The plan's record of every copy: its realization in the Memory homes the plan
    chose, with the versions it keeps (an async copy overlaps only with the versions it
    wants; with fewer its transfer is exposed, priced as a stall)."""
    if not any(isinstance(op, core.CopyAsyncOp) for op in kernel.walk()) \
            or plan.status is Status.INFEASIBLE:
        return ()
    env = dict(bindings or {})
    binding = bind_execution(kernel, target, env)
    homes = {m.name.lstrip("%"): m.resource for m in plan.memories}
    versions = {m.name: (m.versions, m.max_versions) for m in plan.memories}
    out = []
    for real in realize_copies(kernel, target, binding, env, homes):
        kept, wanted = versions.get(f"%{real.memory}", (1, 1))
        overlapped = real.overlapped and kept >= real.versions
        out.append(CopyPlan(f"%{real.memory}", real.op.loc.line, real.source,
                            real.source_resource, real.destination, real.scope,
                            real.engine.name if real.engine else None, real.mode, real.nbytes,
                            kept, max(wanted, real.versions), overlapped, real.wait,
                            real.describe(kept)))
    return tuple(out)
