"""Edge work of buffer tiles in a parallel instance: rows that no store can write are not
computed (:func:`clamp_rows`), and an mma on a buffer tile that is a fill-0 view window
(or its transpose) clamps M, N, K to what the window holds (:func:`zero_extents`).

An instance whose view stores all write rows ``offset + v`` (``v < E``) of one view
dimension of extent ``L`` drops rows ``v >= R = min(E, max(0, L - offset))`` of every
store. When each statement that feeds a stored value is *row-independent* — a nest whose
first variable ``v < E`` indexes dimension 0 of every buffer it writes and of every
"row buffer" it reads (elementwise ops, reductions along the last axis, broadcasts of a
row vector), or an mma ``c[rows] (+)= a[rows] @ b`` whose ``b`` is not a row buffer —
row ``r`` of every row buffer depends only on row ``r`` of row buffers and on whole
non-row buffers and views. Rows ``>= R`` are then never observed, and the nests and
mmas that compute them run only ``R`` rows. Anything that breaks the pattern (a row
buffer read at another row, by a statement that is not row-aligned, or owned outside the
instance; a store to another dimension or window) leaves the body unchanged.
"""

from __future__ import annotations

import dataclasses

from planner.ir.expr import Const, Expr, Sym, add, emax, emin, mul
from planner.lower.loops import ir as lp


def _leaves(stmts: tuple[lp.Stmt, ...]) -> list[lp.Stmt] | None:
    out: list[lp.Stmt] = []
    for s in stmts:
        if isinstance(s, lp.Loop):
            sub = _leaves(s.body)
        elif isinstance(s, lp.Pipeline):
            sub = []
            for st in s.stages:
                part = _leaves(st.body)
                if part is None:
                    return None
                sub += part
        elif isinstance(s, lp.Parallel):
            return None
        else:
            sub = [s]
        if sub is None:
            return None
        out += sub
    return out


def _parts(s: lp.Stmt) -> tuple[lp.Nest | lp.ReduceNest, ...]:
    if isinstance(s, lp.FusedNest):
        return s.parts
    if isinstance(s, lp.Nest | lp.ReduceNest):
        return (s,)
    return ()


def _row_store(p: lp.Nest, v: str, prog: lp.LoopProgram) -> tuple[Expr, Expr] | None:
    """(offset, view extent) of a store of rows ``offset + v`` along view dimension 0."""
    d = p.dest
    assert isinstance(d, lp.ViewWrite)
    if not d.index or d.index[0] not in (add(d.window.offsets[0], Sym(v)),
                                         add(Sym(v), d.window.offsets[0])):
        return None
    return d.window.offsets[0], prog.param(d.view).shape[0]


def row_limit(seg: lp.Segment, prog: lp.LoopProgram
              ) -> tuple[Expr, set[str], set[int]] | None:
    """(R, the row buffers, ids of the row statements) where the instance's rows can be
    clamped (see the module docstring), else None."""
    leaves = _leaves(seg.body)
    if leaves is None:
        return None
    stores: set[tuple[Expr, Expr, Expr]] = set()
    rows: set[str] = set()
    for s in leaves:
        for p in _parts(s):
            if isinstance(p, lp.Nest) and isinstance(p.dest, lp.ViewWrite):
                ext = s.extents  # type: ignore[union-attr]
                v = s.vars[0] if s.vars else None  # type: ignore[union-attr]
                got = _row_store(p, v, prog) if v is not None else None
                if got is None:
                    return None
                stores.add((*got, ext[0]))
                rows |= {r.buffer for r in lp.elem_reads(p.value)
                         if isinstance(r, lp.BufRead) and r.index and r.index[0] == Sym(v)}
    if len(stores) != 1 or not rows:
        return None
    (offset, extent, e), = stores
    owned = set(seg.buffers)
    row_stmts: set[int] = set()
    changed = True
    while changed:
        changed = False
        row_stmts = set()
        for s in leaves:
            if isinstance(s, lp.Mma):
                if s.c.buffer not in rows:
                    continue
                if s.m != e or (isinstance(s.b, lp.MmaBuf) and s.b.buffer in rows):
                    return None
                if isinstance(s.a, lp.MmaBuf) and s.a.buffer not in rows:
                    rows.add(s.a.buffer)
                    changed = True
                row_stmts.add(id(s))
                continue
            parts = _parts(s)
            if not parts:
                continue
            writes = {p.dest.buffer for p in parts if isinstance(p.dest, lp.BufWrite)}
            stores_here = any(isinstance(p.dest, lp.ViewWrite) for p in parts)
            if not (writes & rows) and not stores_here:
                continue
            v = s.vars[0] if s.vars else None  # type: ignore[union-attr]
            if v is None or s.extents[0] != e:  # type: ignore[union-attr]
                return None
            for p in parts:
                if p.vars[0] != v or p.extents[0] != e:
                    return None
                if isinstance(p.dest, lp.BufWrite):
                    if not p.dest.index or p.dest.index[0] != Sym(v):
                        return None
                    if p.dest.buffer not in rows:
                        rows.add(p.dest.buffer)
                        changed = True
                if isinstance(p, lp.ReduceNest) and len(s.vars) < 2:  # type: ignore[union-attr]
                    return None
                for r in lp.elem_reads(p.value):
                    if (isinstance(r, lp.BufRead) and r.index and r.index[0] == Sym(v)
                            and r.buffer not in rows):
                        rows.add(r.buffer)
                        changed = True
            row_stmts.add(id(s))
    if not rows <= owned:
        return None
    # every statement that is not a row statement must not read a row buffer, and a row
    # statement must read a row buffer only at its own row
    for s in leaves:
        if isinstance(s, lp.Mma):
            ops = [o.buffer for o in (s.a, s.b) if isinstance(o, lp.MmaBuf)]
            if id(s) in row_stmts:
                if isinstance(s.b, lp.MmaBuf) and s.b.buffer in rows:
                    return None
            elif (s.c.buffer in rows) or any(o in rows for o in ops):
                return None
            continue
        for p in _parts(s):
            v = s.vars[0] if id(s) in row_stmts else None  # type: ignore[union-attr]
            for r in lp.elem_reads(p.value):
                if isinstance(r, lp.BufRead) and r.buffer in rows and (
                        v is None or not r.index or r.index[0] != Sym(v)):
                    return None
    r_expr = emin(e, emax(Const(0), add(extent, _neg(offset))))
    return r_expr, rows, row_stmts


def _neg(x: Expr) -> Expr:
    return mul(-1, x)


def clamp_rows(seg: lp.Segment, prog: lp.LoopProgram) -> tuple[lp.Stmt, ...]:
    """The instance body of ``seg`` with its row statements clamped to ``R`` rows (the
    body unchanged where the pattern does not hold)."""
    if not seg.parallel:
        return seg.body
    got = row_limit(seg, prog)
    if got is None:
        return seg.body
    r, _, row_stmts = got

    def rewrite(stmts: tuple[lp.Stmt, ...]) -> tuple[lp.Stmt, ...]:
        out: list[lp.Stmt] = []
        for s in stmts:
            if isinstance(s, lp.Loop):
                s = dataclasses.replace(s, body=rewrite(s.body))
            elif isinstance(s, lp.Pipeline):
                s = dataclasses.replace(s, stages=tuple(
                    dataclasses.replace(st, body=rewrite(st.body)) for st in s.stages))
            elif id(s) in row_stmts:
                if isinstance(s, lp.Mma):
                    s = dataclasses.replace(s, m=r)
                elif isinstance(s, lp.FusedNest):
                    s = dataclasses.replace(
                        s, extents=(r, *s.extents[1:]),
                        parts=tuple(dataclasses.replace(p, extents=(r, *p.extents[1:]))
                                    for p in s.parts))
                else:
                    s = dataclasses.replace(s, extents=(r, *s.extents[1:]))  # type: ignore[arg-type]
            out.append(s)
        return tuple(out)

    return rewrite(seg.body)



def _places(stmts: tuple[lp.Stmt, ...], path: tuple[object, ...],
            out: dict[int, tuple[tuple[object, ...], int]]) -> None:
    """Per leaf statement id: (its container path, its position in that body)."""
    for i, s in enumerate(stmts):
        if isinstance(s, lp.Loop):
            _places(s.body, (*path, ("loop", id(s))), out)
        elif isinstance(s, lp.Pipeline):
            for j, st in enumerate(s.stages):
                _places(st.body, (*path, ("stage", id(s), j, st.lag)), out)
        else:
            out[id(s)] = (path, i)


def _reaches(w: tuple[tuple[object, ...], int], r: tuple[tuple[object, ...], int],
             version: Expr) -> bool:
    """Whether what writer place ``w`` wrote is what reader place ``r`` reads, in the same
    iteration of every enclosing loop: an earlier statement of the same body, or an
    earlier stage of the same pipeline iteration reading the version it wrote (a version
    that depends on the iteration: the pipeline's window keeps it until it is read)."""
    (wp, wi), (rp, ri) = w, r
    if wp == rp:
        return wi < ri
    if len(wp) != len(rp) or not wp or wp[:-1] != rp[:-1]:
        return False
    a, b = wp[-1], rp[-1]
    if not (isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0] == "stage"
            and a[1] == b[1]):
        return False
    later = b[3] > a[3] or (b[3] == a[3] and b[2] > a[2])  # type: ignore[operator]
    return later and not isinstance(version, Const)


def zero_extents(body: tuple[lp.Stmt, ...], seg: lp.Segment, prog: lp.LoopProgram
                 ) -> dict[tuple[int, str, Expr], tuple[Expr, Expr]]:
    """Per (reader statement id, buffer, version) of a 2-D tile an mma reads: the rows
    and columns past which the tile is all 0 when that statement reads it.

    Derived where the buffer has exactly one writer in the instance, a nest
    ``%t[v0, v1] = X[o0 + v0, o1 + v1]`` of a view window with fill 0 (elements past
    ``min(E, max(0, X.extent - o))`` per dimension read the fill), or a transpose
    ``%u[v0, v1] = %t[v1, v0]`` of such a tile; the bounds are evaluated where the tile is
    read, so the writer must reach the reader in the same iteration (``_reaches``)."""
    leaves = _leaves(body)
    if leaves is None:
        return {}
    places: dict[int, tuple[tuple[object, ...], int]] = {}
    _places(body, (), places)
    writers: dict[str, list[tuple[lp.Stmt, object]]] = {}
    for s in leaves:
        if isinstance(s, lp.Mma):
            writers.setdefault(s.c.buffer, []).append((s, s))
        for p in _parts(s):
            if isinstance(p.dest, lp.BufWrite):
                writers.setdefault(p.dest.buffer, []).append((s, p))
    owned = set(seg.buffers)

    def source(name: str) -> tuple[lp.Stmt, lp.Nest] | None:
        ws = writers.get(name, [])
        if len(ws) != 1 or name not in owned or not isinstance(ws[0][1], lp.Nest):
            return None
        p = ws[0][1]
        if len(p.vars) != 2 or not isinstance(p.dest, lp.BufWrite) or \
                p.dest.index != (Sym(p.vars[0]), Sym(p.vars[1])):
            return None
        return ws[0][0], p

    def extents(name: str, version: Expr, reader: lp.Stmt, depth: int = 0
                ) -> tuple[Expr, Expr] | None:
        got = source(name)
        if got is None or depth > 1:
            return None
        stmt, p = got
        assert isinstance(p.dest, lp.BufWrite)
        if p.dest.version != version or not _reaches(places[id(stmt)], places[id(reader)],
                                                     version):
            return None
        v0, v1 = Sym(p.vars[0]), Sym(p.vars[1])
        val = p.value
        if isinstance(val, lp.ViewRead) and val.fill == 0.0 and len(val.index) == 2:
            win = val.window
            if val.index != (add(win.offsets[0], v0), add(win.offsets[1], v1)):
                return None
            shape = prog.param(val.view).shape
            r, c = (emin(e, emax(Const(0), add(x, _neg(o))))
                    for e, x, o in zip(p.extents, shape, win.offsets, strict=True))
            return r, c
        if isinstance(val, lp.BufRead) and val.index == (v1, v0):
            inner = extents(val.buffer, val.version, stmt, depth + 1)
            return None if inner is None else (inner[1], inner[0])
        return None

    out: dict[tuple[int, str, Expr], tuple[Expr, Expr]] = {}
    for s in leaves:
        if not isinstance(s, lp.Mma):
            continue
        for o in (s.a, s.b):
            if isinstance(o, lp.MmaBuf):
                got = extents(o.buffer, o.version, s)
                if got is not None:
                    out[(id(s), o.buffer, o.version)] = got
    return out
