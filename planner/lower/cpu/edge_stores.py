"""Edge-tile stores that cost what they write: the part of the window inside the view.

A nest that stores a tile into a view window, ``view[o + v] = f(buffers)``, and reads
no view needs a mask only to drop the elements outside the view. When the window starts
inside the view (``o >= 0``) those are exactly ``v >= L - o`` in each dimension, so the
edge version of the nest is the unmasked one over ``min(extent, max(0, L - o))``: a
300×200 GEMM's 128-wide edge tiles store their 44 rows and 72 columns with plain
vector stores (one masked tail per row) instead of masking 128×128 elements (a masked
vector store is microcoded on Zen). A window that starts outside keeps the masked nest.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import llvmlite.ir as ir

from planner.ir.expr import Expr, Sym, add
from planner.lower.cpu.llvm_helpers import I1, c64
from planner.lower.loops import program as lp
from planner.realize.edges import valid_expr

if TYPE_CHECKING:
    from planner.lower.cpu.nests import _Nests


def clamped_store(s: lp.Nest | lp.ReduceNest | lp.FusedNest, prog: lp.LoopProgram
                  ) -> tuple[lp.Window, lp.Nest] | None:
    """The store window of ``s`` and ``s`` over the part of it inside the view (what the
    masked nest writes when the window starts inside the view), or None when ``s`` is
    not a plain store ``view[o + v] = f(buffers)`` of one nest variable per dimension."""
    if type(s) is not lp.Nest or not isinstance(s.dest, lp.ViewWrite):
        return None
    if any(isinstance(r, lp.ViewRead) for r in lp.elem_reads(s.value)):
        return None
    win = s.dest.window
    shape = prog.param(win.view).shape
    extents: dict[str, Expr] = dict(zip(s.vars, s.extents, strict=True))
    seen: set[str] = set()
    for idx, off, size in zip(s.dest.index, win.offsets, shape, strict=True):
        var = next((v for v in extents if idx == add(off, Sym(v))), None)
        if var is None or var in seen:
            return None
        seen.add(var)
        extents[var] = valid_expr(extents[var], size, off)
    return win, dataclasses.replace(s, extents=tuple(extents[v] for v in s.vars))


def emit_edge_nest(fn: _Nests, s: lp.Nest | lp.ReduceNest | lp.FusedNest,
                   parts: tuple[lp.Nest | lp.ReduceNest, ...]) -> None:
    """The edge version of nest ``s`` (some window not inside its view): the clamped
    unmasked store when ``s`` is one and its window starts inside the view, else masked."""
    clamped = clamped_store(s, fn.cg.program)
    if clamped is None:
        fn.nest_body(s, parts, edge=True)
        return
    win, inner = clamped
    b = fn.b
    starts: ir.Value = ir.Constant(I1, 1)
    for o in win.offsets:
        starts = b.and_(starts, b.icmp_signed(">=", fn.expr(o), c64(0)))
    with b.if_else(starts) as (then, other):
        with then:
            fn.nest_body(inner, (inner,), edge=False)
        with other:
            fn.nest_body(s, parts, edge=True)
