"""Sibling-nest fusion, a pass over a statement tree (:class:`~planner.lower.loops.ir.FusedNest`).

Consecutive nests over the same iteration space become one loop when a nest reads what
the earlier parts wrote only at the point just written (it may also move before
independent nests to join one); the builder runs the pass on every segment, pinning the
nests that write registers (they move only before nests that read no buffer).

:func:`one_pass_squares` then removes a pass over the row where a reduction sums the
squares of ``a - c`` with ``c`` invariant along the row (a variance): the sum becomes a
:class:`~planner.lower.loops.ir.SquaresNest` in the earlier nest that evaluates ``a``
(Welford's one-pass update, exact for any ``c``), so the nest that subtracted ``c`` can
fuse with the nest after it.  The rewrite is kept only where the statements hold, per
resource, exactly the peak they held before (the plan's capacity accounting, which the
loop program realizes, is unchanged).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from planner.errors import PlannerError
from planner.ir.core import BinaryFn, ReduceFn
from planner.ir.dtypes import DType
from planner.ir.expr import Expr, Sym
from planner.lower.loops.ir import (
    Binary,
    Buffer,
    BufRead,
    BufWrite,
    Cast,
    Elem,
    FusedNest,
    IndexOf,
    Lit,
    Loop,
    Nest,
    Note,
    Parallel,
    Pipeline,
    ReduceNest,
    Select,
    SquaresNest,
    Stmt,
    Unary,
    ViewRead,
    elem_children,
    elem_reads,
)

__all__ = ["dest_key", "fuse_siblings", "one_pass_squares"]

_Pinned = Callable[[Nest | ReduceNest], bool]


def fuse_siblings(body: tuple[Stmt, ...],
                  pinned: Callable[[Nest | ReduceNest], bool] | None = None
                  ) -> tuple[Stmt, ...]:
    """Merge consecutive nests over the same iteration space (see :class:`FusedNest`).

    A nest joins the previous one when it reads what the previous parts wrote only at
    the point being computed (forwarded) and never a reduction they produce, and when
    neither side writes what the other reads.  It may also move before independent
    nests to join an earlier one.  A ``pinned(nest)`` (the builder pins nests that write
    registers) moves only before nests that read no buffer (constants, view loads):
    moving it before a nest that reads one would hold its registers beside that nest's
    operands, which the plan's capacity does not count.  Before a nest that reads no
    buffer it adds nothing: the two destinations are both live after the pair anyway
    (each is read later), and the passed nest's only operands are views, so the peak at
    either point stays within what the plan counted for ``nest``'s own point."""
    out: list[Stmt] = []
    for s in body:
        s = _fuse_inside(s, pinned)
        target = None
        if isinstance(s, Nest | ReduceNest):
            # Look back over nests independent of ``s`` (it may move before them).
            held = pinned is not None and pinned(s)
            for j in range(len(out) - 1, -1, -1):
                if _fusable(out[j], s):
                    target = j
                    break
                if not _independent(out[j], s) or (held and _reads_buffers(out[j])):
                    break
        if target is None:
            out.append(s)
            continue
        prev = out[target]
        parts = prev.parts if isinstance(prev, FusedNest) else (prev,)
        out[target] = FusedNest(s.vars, s.extents, (*parts, s))  # type: ignore[union-attr]
    return tuple(out)


def _independent(t: Stmt, s: Nest | ReduceNest) -> bool:
    """Whether ``s`` may be moved before the nest ``t`` (no dependence either way)."""
    if not isinstance(t, Nest | ReduceNest | FusedNest):
        return False
    parts = t.parts if isinstance(t, FusedNest) else (t,)
    t_writes = {dest_key(p) for p in parts}
    t_reads = set().union(*(_read_keys(p) for p in parts))
    mine = dest_key(s)
    return not (t_writes & _read_keys(s)) and mine not in t_writes and mine not in t_reads


def _reads_buffers(t: Stmt) -> bool:
    """Whether the nest ``t`` (or a part of it) reads a buffer."""
    return any(isinstance(r, BufRead) for p in _parts(t) for r in _part_reads(p))


def _parts(s: Stmt) -> tuple[Nest | ReduceNest, ...]:
    if isinstance(s, FusedNest):
        return s.parts
    return (s,) if isinstance(s, Nest | ReduceNest) else ()


def _part_reads(p: Nest | ReduceNest) -> list[ViewRead | BufRead]:
    """The reads of a part: its value's, and a :class:`SquaresNest`'s center's."""
    out = list(elem_reads(p.value))
    if isinstance(p, SquaresNest):
        out += elem_reads(p.center)
    return out


def _fuse_inside(s: Stmt, pinned: Callable[[Nest | ReduceNest], bool] | None) -> Stmt:
    if isinstance(s, Loop | Parallel):
        return dataclasses.replace(s, body=fuse_siblings(s.body, pinned))
    if isinstance(s, Pipeline):
        return dataclasses.replace(s, stages=tuple(
            dataclasses.replace(st, body=fuse_siblings(st.body, pinned)) for st in s.stages))
    return s


def dest_key(p: Nest | ReduceNest) -> tuple[str, str]:
    d = p.dest
    return ("buf", d.buffer) if isinstance(d, BufWrite) else ("view", d.view)


def _read_keys(p: Nest | ReduceNest) -> set[tuple[str, str]]:
    return {("buf", r.buffer) if isinstance(r, BufRead) else ("view", r.view)
            for r in _part_reads(p)}


def _fusable(prev: Stmt, s: Nest | ReduceNest) -> bool:
    if not isinstance(prev, Nest | ReduceNest | FusedNest) or not s.vars:
        return False
    if prev.vars != s.vars or prev.extents != s.extents:
        return False
    parts = prev.parts if isinstance(prev, FusedNest) else (prev,)
    identity = tuple(Sym(v) for v in s.vars)
    written = {dest_key(p): p for p in parts}
    for r in elem_reads(s.value):
        key = ("buf", r.buffer) if isinstance(r, BufRead) else ("view", r.view)
        w = written.get(key)
        if w is None:
            continue
        if not (isinstance(w, Nest) and isinstance(r, BufRead) and isinstance(w.dest, BufWrite)
                and r.index == identity == w.dest.index and r.version == w.dest.version):
            return False
    mine = dest_key(s)
    return mine not in written and all(mine not in _read_keys(p) for p in parts)


# =========================================================================== one-pass squares

_FLAT = (Nest, ReduceNest, FusedNest, Note)


def one_pass_squares(body: tuple[Stmt, ...], buffers: Mapping[str, Buffer],
                     env: Mapping[str, int], pinned: _Pinned | None = None
                     ) -> tuple[Stmt, ...]:
    """``body`` with each sum of squares of ``a - c`` (``c`` invariant along the row)
    computed in the earlier nest that evaluates ``a`` (see the module docstring), where
    the statements' peaks per resource at ``env`` stay what they were.  Only a body of
    nests is rewritten (no loops, mmas or barriers)."""
    if not all(isinstance(s, _FLAT) for s in body):
        return body
    try:
        before = _peaks(body, buffers, env)
    except (PlannerError, KeyError):  # a size the bindings do not fix: no rewrite
        return body
    refused: set[Nest | ReduceNest] = set()
    while True:
        todo = [(i, p) for i, s in enumerate(body) for p in _parts(s) if p not in refused]
        for i, p in todo:
            new = _hoist_squares(body, i, p)
            if new is not None:
                new = fuse_siblings(new, pinned)
                if _peaks(new, buffers, env) == before:
                    body = new
                    break
            refused.add(p)
        else:
            return body


def _centered(s: Stmt, part: Nest | ReduceNest) -> tuple[Elem, Elem] | None:
    """``(a, c)`` when ``part`` sums ``(a - c)²`` over its row (``a - c`` inline or
    written at the point by an earlier part of ``s``) with ``c`` invariant along it."""
    if type(part) is not ReduceNest or part.fn is not ReduceFn.SUM \
            or part.value.dtype is not DType.F32:
        return None
    v = part.value
    if not (isinstance(v, Binary) and v.fn is BinaryFn.MUL and v.a == v.b):
        return None
    e = v.a
    if isinstance(e, BufRead):
        parts = _parts(s)
        earlier = parts[:next(k for k, p in enumerate(parts) if p is part)]
        if e.index != tuple(Sym(x) for x in part.vars):
            return None
        w = next((p for p in earlier if isinstance(p, Nest)
                  and p.dest == BufWrite(e.buffer, e.index, e.version)), None)
        if w is None:
            return None
        e = w.value
    if not (isinstance(e, Binary) and e.fn is BinaryFn.SUB and e.dtype is DType.F32):
        return None
    return (e.a, e.b) if _row_invariant(e.b, part.vars[-1]) else None


def _row_invariant(e: Elem, var: str) -> bool:
    """Whether ``e`` reads no view and nothing that varies with ``var``."""
    if isinstance(e, ViewRead):
        return False
    if isinstance(e, BufRead):
        return all(var not in i.symbols() for i in (*e.index, e.version))
    if isinstance(e, IndexOf):
        return var not in e.expr.symbols()
    return all(_row_invariant(c, var) for c in elem_children(e))


def _hoist_squares(body: tuple[Stmt, ...], i: int, part: Nest | ReduceNest
                   ) -> tuple[Stmt, ...] | None:
    """``body`` with ``part`` of ``body[i]`` moved, as a :class:`SquaresNest`, to the end
    of the nearest earlier nest over its space that can evaluate it (``a`` there, ``c``
    after that nest's row: the reductions it reads are written by then, nothing it reads
    is written in between); None when there is none."""
    got = _centered(body[i], part)
    if got is None:
        return None
    consts = _constants(body)
    a, c = got[0], _propagate(got[1], consts)
    sq = SquaresNest(part.vars, part.extents, part.fn, part.dest, a, c)
    own = _parts(body[i])
    k = next(k for k, p in enumerate(own) if p is part)
    needs = {("buf", r.buffer) if isinstance(r, BufRead) else ("view", r.view)
             for r in _part_reads(sq)}
    mine = dest_key(sq)
    passed: list[Nest | ReduceNest] = list(own[:k])
    for j in range(i - 1, -1, -1):
        t = body[j]
        if _fusable(t, sq) and _center_ready(t, c):
            if any(dest_key(p) in needs or mine in _read_keys(p) | {dest_key(p)}
                   for p in passed):
                return None
            rest = own[:k] + own[k + 1:]
            kept = () if not rest else (rest[0],) if len(rest) == 1 else (
                FusedNest(body[i].vars, body[i].extents, rest),)  # type: ignore[attr-defined]
            grown = FusedNest(t.vars, t.extents, (*_parts(t), sq))  # type: ignore[attr-defined]
            new = (*body[:j], grown, *body[j + 1:i], *kept, *body[i + 1:])
            return _inline_constants(new, {b for b in consts if ("buf", b) in {
                ("buf", r.buffer) for r in elem_reads(got[1]) if isinstance(r, BufRead)}},
                consts)
        if not _parts(t):
            if not isinstance(t, Note):
                return None
            continue
        passed.extend(_parts(t))
    return None


def _center_ready(t: Stmt, c: Elem) -> bool:
    """Whether ``c`` can be evaluated after the row of nest ``t``: of what ``t`` writes it
    reads only reductions, at the element they write."""
    written = {dest_key(p): p for p in _parts(t)}
    for r in elem_reads(c):
        if not isinstance(r, BufRead):
            return False
        w = written.get(("buf", r.buffer))
        if w is not None and not (isinstance(w, ReduceNest)
                                  and w.dest == BufWrite(r.buffer, r.index, r.version)):
            return False
    return True


def _constants(body: tuple[Stmt, ...]) -> dict[str, Nest]:
    """Buffers written once, by a nest of their own whose value reads nothing (a
    ``full`` or ``iota``), at its point: each read of them can be that value."""
    writes: dict[str, list[Nest | ReduceNest]] = {}
    for s in body:
        for p in _parts(s):
            if isinstance(p.dest, BufWrite):
                writes.setdefault(p.dest.buffer, []).append(p)
    out: dict[str, Nest] = {}
    for s in body:
        if isinstance(s, Nest) and isinstance(s.dest, BufWrite) and len(
                writes[s.dest.buffer]) == 1 and not list(elem_reads(s.value)) \
                and s.dest.index == tuple(Sym(v) for v in s.vars):
            out[s.dest.buffer] = s
    return out


def _propagate(e: Elem, consts: Mapping[str, Nest]) -> Elem:
    """``e`` with each read of a constant buffer replaced by the writer's value there."""
    if isinstance(e, BufRead) and e.buffer in consts:
        w = consts[e.buffer]
        assert isinstance(w.dest, BufWrite)
        if e.version != w.dest.version or e.dtype is not w.value.dtype:
            return e
        return _at(w.value, dict(zip(w.vars, e.index, strict=True)))
    kids = elem_children(e)
    if not kids:
        return e
    new = tuple(_propagate(k, consts) for k in kids)
    if isinstance(e, Unary | Cast):
        return dataclasses.replace(e, x=new[0])
    if isinstance(e, Binary):
        return dataclasses.replace(e, a=new[0], b=new[1])
    assert isinstance(e, Select)
    return dataclasses.replace(e, cond=new[0], a=new[1], b=new[2])


def _at(e: Elem, env: Mapping[str, Expr]) -> Elem:
    """A read-free element ``e`` at the point ``env`` (nest variables -> index)."""
    if isinstance(e, IndexOf):
        return IndexOf(e.expr.substitute(env), e.dtype)
    if isinstance(e, Lit):
        return e
    kids = tuple(_at(k, env) for k in elem_children(e))
    if isinstance(e, Unary | Cast):
        return dataclasses.replace(e, x=kids[0])
    if isinstance(e, Binary):
        return dataclasses.replace(e, a=kids[0], b=kids[1])
    assert isinstance(e, Select)
    return dataclasses.replace(e, cond=kids[0], a=kids[1], b=kids[2])


def _inline_constants(body: tuple[Stmt, ...], names: set[str], consts: Mapping[str, Nest]
                      ) -> tuple[Stmt, ...]:
    """``body`` with the constant buffers ``names`` read as their value everywhere, and
    their writers dropped (nothing reads them any more)."""
    use = {n: consts[n] for n in names}

    def part(p: Nest | ReduceNest) -> Nest | ReduceNest:
        p = dataclasses.replace(p, value=_propagate(p.value, use))
        if isinstance(p, SquaresNest):
            p = dataclasses.replace(p, center=_propagate(p.center, use))
        return p

    out: list[Stmt] = []
    for s in body:
        if any(s is w for w in use.values()):
            continue
        if isinstance(s, FusedNest):
            s = dataclasses.replace(s, parts=tuple(part(p) for p in s.parts))
        elif isinstance(s, Nest | ReduceNest):
            s = part(s)
        out.append(s)
    return tuple(out)


def _peaks(body: tuple[Stmt, ...], buffers: Mapping[str, Buffer], env: Mapping[str, int]
           ) -> dict[str, int]:
    """Per resource: the most bytes the buffers of ``body`` hold at one part of a nest,
    a buffer being held from the first part that touches it to the last (the measure
    of ``tests/solve/test_plan_matches_lowering.py``; explicit Memory over the body)."""
    life: dict[str, list[int]] = {}
    pos = 0
    for s in body:
        for p in _parts(s):
            pos += 1
            names = [r.buffer for r in _part_reads(p) if isinstance(r, BufRead)]
            if isinstance(p.dest, BufWrite):
                names.append(p.dest.buffer)
            for n in names:
                span = life.setdefault(n, [pos, pos])
                span[1] = pos
    out: dict[str, int] = {}
    for at in range(1, pos + 1):
        held: dict[str, int] = {}
        for n, (lo, hi) in life.items():
            b = buffers[n]
            if b.role == "memory" or lo <= at <= hi:
                held[b.resource] = held.get(b.resource, 0) + b.footprint_bytes(env)
        for r, v in held.items():
            out[r] = max(out.get(r, 0), v)
    return out
