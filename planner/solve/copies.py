"""The price of each asynchronous copy, from its realization (:mod:`planner.realize.copies`).

A copy on an engine costs its issue cycles plus the transfer it does not hide (an
overlapped async copy hides it, see the realization); a synchronous copy reads its window
from the source resource like a ``tile.load`` and writes its destination like a
``memory.store`` (that write is part of the Memory's traffic in each home,
:mod:`planner.solve.memories`).  A staged view load/store
(:class:`~planner.realize.copies.StagedTransfer`) costs its engine's issue + bytes /
bandwidth (``planner.solve.context.op_cycles``), and the plan records it beside the copies
with the engine of the value's planned placement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from planner.catalog import Target
from planner.ir import core
from planner.ir.printer import Printer, PrintOptions
from planner.plan.decisions import CopyPlan, MaterializationPlan, Status
from planner.realize.binding import ExecutionBinding, bind_execution
from planner.realize.copies import (
    CopyRealization,
    StagedTransfer,
    realize_copies,
    realize_transfers,
    source_resource,
)

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
    if plan.status is Status.INFEASIBLE:
        return ()
    env = dict(bindings or {})
    binding = bind_execution(kernel, target, env)
    staged = _plan_transfers(kernel, target, binding, env, plan)
    if not any(isinstance(op, core.CopyAsyncOp) for op in kernel.walk()):
        return staged
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
                            real.describe(kept), cycles=sum(real.cycles())
                            if real.engine is not None else None))
    return (*out, *staged)


def _plan_transfers(kernel: core.Kernel, target: Target, binding: ExecutionBinding,
                    env: Mapping[str, int], plan: MaterializationPlan
                    ) -> tuple[CopyPlan, ...]:
    """The staged view loads/stores, each with the engine that moves the value to or
    from the resource the plan placed it in (default staging where it is not held)."""
    if not target.copy_engines or not realize_transfers(kernel, target, binding, env):
        return ()  # (without staging, no names to print)
    printer = Printer(PrintOptions(locations=False))
    printer.print_kernel(kernel)
    names = printer.namer.names
    held = {b.name: b.resource for b in plan.buffers if b.role in ("value", "carry")}
    carry = {id(r): arg for op in kernel.walk() if isinstance(op, core.LoopOp)
             for r, arg in zip(op.results, op.body.args, strict=False)}  # result: its carry
    value_of: dict[int, str] = {}
    placements: dict[int, str] = {}
    for op in kernel.walk():
        if isinstance(op, (core.LoadOp, core.StoreOp)):
            tile = op.results[0] if isinstance(op, core.LoadOp) else op.tile
            while id(tile) in carry:
                tile = carry[id(tile)]
            value_of[id(op)] = f"%{names.get(tile, '?')}"
            if value_of[id(op)] in held:
                placements[id(op)] = held[value_of[id(op)]]
    return tuple(_transfer_plan(t, value_of[id(t.op)])
                 for t in realize_transfers(kernel, target, binding, env, placements))


def _transfer_plan(t: StagedTransfer, value: str) -> CopyPlan:
    """A load is a copy into its value (from the view), a store one into the view."""
    load = t.direction == "load"
    into, source = (value, f"view {t.view}") if load else (f"view {t.view}", value)
    return CopyPlan(into, t.op.loc.line, source, t.source_resource, t.destination,
                    t.scope, t.engine.name, t.engine.mode.value, t.nbytes, 1, 1, False,
                    t.wait, t.describe(), kind=f"staged {t.direction}", staging=t.staging,
                    cycles=t.cycles())
