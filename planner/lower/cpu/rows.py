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

Columns too (:func:`clamp_masked_columns`, after the rows): a tile whose columns past
``B`` a select masks to a constant (attention's keys past the sequence, -inf) is computed,
with everything computed from it, only over the columns that can change what is observed
(see the comment above that function); an mma reading such a tile stops at the rows of its
other operand known to be 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from planner.ir.core import BinaryFn, ReduceFn, UnaryFn
from planner.ir.dtypes import DType
from planner.ir.expr import Const, Expr, Sym, add, emax, emin
from planner.lower.loops import ir as lp
from planner.realize.edges import granule_expr, valid_expr


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
    return valid_expr(e, extent, offset), rows, row_stmts


def clamp_rows(seg: lp.Segment, prog: lp.LoopProgram) -> tuple[lp.Stmt, ...]:
    """The instance body of ``seg`` with its row statements clamped to ``R`` rows (the
    body unchanged where the pattern does not hold), then its nests over masked columns
    clamped to the columns observed (:func:`clamp_masked_columns`)."""
    return clamp_masked_columns(_clamped_rows(seg, prog), seg, prog)


def _clamped_rows(seg: lp.Segment, prog: lp.LoopProgram) -> tuple[lp.Stmt, ...]:
    if not seg.parallel:
        return seg.body
    got = row_limit(seg, prog)
    if got is None:
        return seg.body
    r, _, row_stmts = got

    def clamp(s: lp.Stmt) -> lp.Stmt:
        if id(s) not in row_stmts:
            return s
        if isinstance(s, lp.Mma):
            return dataclasses.replace(s, m=r)
        if isinstance(s, lp.FusedNest):
            return dataclasses.replace(
                s, extents=(r, *s.extents[1:]),
                parts=tuple(dataclasses.replace(p, extents=(r, *p.extents[1:]))
                            for p in s.parts))
        return dataclasses.replace(s, extents=(r, *s.extents[1:]))  # type: ignore[arg-type]

    return _map_leaves(seg.body, clamp)


def _map_leaves(stmts: tuple[lp.Stmt, ...], change: Callable[[lp.Stmt], lp.Stmt]
                ) -> tuple[lp.Stmt, ...]:
    """``stmts`` with every statement inside loops and pipeline stages (not the loops and
    pipelines themselves) replaced by ``change(statement)``."""
    out: list[lp.Stmt] = []
    for s in stmts:
        if isinstance(s, lp.Loop):
            s = dataclasses.replace(s, body=_map_leaves(s.body, change))
        elif isinstance(s, lp.Pipeline):
            s = dataclasses.replace(s, stages=tuple(
                dataclasses.replace(st, body=_map_leaves(st.body, change))
                for st in s.stages))
        else:
            s = change(s)
        out.append(s)
    return tuple(out)



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
            r, c = (valid_expr(e, x, o)
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


# ------------------------------------------------------------------ masked columns
#
# Columns of a tile that a select masks to a constant (``s = where(j < B, x, -inf)``,
# attention's keys past the end of the sequence) need not be computed when everything
# computed from them there is the same for every masked column of a row and adds nothing
# to what is observed. The masked region of a nest over ``(..., j < E)`` is ``j >= B``
# (``B`` not depending on the nest's variables). There each element expression is
# evaluated abstractly (:func:`_masked`): ``None`` when its value may depend on ``j``,
# else the set of classes (``-inf``, negative, zero, positive, ``+inf``, NaN; true or
# false; any integer) the row's one value lies in. A read of a tile written at masked
# columns by an earlier nest of the same iteration gets that nest's classes; a read that
# does not depend on ``j`` (a row vector, a scalar) is any value, but one per row.
#
# What a masked column contributes, given its value ``c`` is one per row:
#
# * a sum over ``j``: nothing when ``c`` is ±0 (the accumulators start at +0 and are never
#   -0, so adding a zero changes no bit); NaN when it is NaN, which one masked column
#   gives as well as all of them;
# * a max over ``j``: nothing when ``c`` is -inf (the identity); NaN when it is NaN;
# * an mma ``acc (+)= t @ b`` reading the tile as ``a``: nothing past ``b``'s rows known to
#   be 0 (:func:`zero_extents`, the clamp the mma already makes: the mma's ``k`` is set to
#   it here, so the mma never reads the columns that are not computed).
#
# So ``exp(s - m)`` at masked columns is ``exp(-inf - m)``, which is +0 unless ``m`` is
# -inf or NaN (then NaN: ``-inf - -inf``): its row sum needs ``max(0, B) + 1`` columns at
# most, the row max of ``s`` itself only ``max(0, B)``. Each nest whose every part
# evaluates to one value per row runs ``R = min(E, max of what its parts need)`` columns:
# a tile it writes needs the most its readers read of it (all of it for any other
# reader), a reduction what is said above (all of it for another class). Summation order
# follows the clamped row (as for any row of that length), so sums may round differently.

# A clamp is rounded up to whole :data:`~planner.realize.edges.GRANULE`-lane vectors
# (:func:`~planner.realize.edges.granule_expr`): the extra columns are masked columns too,
# holding the same value, so the row runs whole vectors, no masked tail.

_NINF, _NEG, _ZERO, _POS, _PINF, _NAN = "-inf", "-", "0", "+", "+inf", "nan"
_FLOATS = frozenset((_NINF, _NEG, _ZERO, _POS, _PINF, _NAN))
_BOOLS = frozenset((True, False))
_INTS = frozenset(("int",))
_Classes = frozenset


def _any(dt: object) -> _Classes:
    if dt is DType.BOOL:
        return _BOOLS
    return _FLOATS if dt is DType.F32 else _INTS


def _float_class(x: float) -> str:
    if x != x:
        return _NAN
    if x == float("inf"):
        return _PINF
    if x == float("-inf"):
        return _NINF
    return _ZERO if x == 0 else (_POS if x > 0 else _NEG)


_SIGN = {_NEG: -1, _ZERO: 0, _POS: 1, _NINF: -1, _PINF: 1}
_NEGATE = {_NINF: _PINF, _NEG: _POS, _ZERO: _ZERO, _POS: _NEG, _PINF: _NINF, _NAN: _NAN}


def _finite(sign: int) -> frozenset[str]:
    """A finite nonzero result of that sign, possibly over- or underflowing."""
    return frozenset({1: (_POS, _ZERO, _PINF), -1: (_NEG, _ZERO, _NINF)}[sign])


def _add1(x: str, y: str) -> frozenset[str]:
    if _NAN in (x, y) or {x, y} == {_NINF, _PINF}:
        return frozenset((_NAN,))
    for inf in (_NINF, _PINF):
        if inf in (x, y):
            return frozenset((inf,))
    if x == _ZERO or y == _ZERO:
        return frozenset((y if x == _ZERO else x,))
    if x == y:
        return _finite(_SIGN[x])
    return frozenset((_NEG, _ZERO, _POS))


def _mul1(x: str, y: str) -> frozenset[str]:
    if _NAN in (x, y):
        return frozenset((_NAN,))
    inf = x in (_NINF, _PINF) or y in (_NINF, _PINF)
    if _ZERO in (x, y):
        return frozenset((_NAN,)) if inf else frozenset((_ZERO,))
    sign = _SIGN[x] * _SIGN[y]
    if inf:
        return frozenset((_PINF if sign > 0 else _NINF,))
    return _finite(sign)


def _div1(x: str, y: str) -> frozenset[str]:
    """``x / y``, also as ``x * (1 / y)`` (``arcp``)."""
    if _NAN in (x, y):
        return frozenset((_NAN,))
    xinf, yinf = x in (_NINF, _PINF), y in (_NINF, _PINF)
    if (xinf and yinf) or (x == _ZERO and y == _ZERO):
        return frozenset((_NAN,))
    if y == _ZERO:  # the zero's sign is not tracked
        return frozenset((_NINF, _PINF))
    if x == _ZERO or yinf:
        return frozenset((_ZERO,))
    sign = _SIGN[x] * _SIGN[y]
    if xinf:
        return frozenset((_PINF if sign > 0 else _NINF,))
    return _finite(sign)


def _pairwise(f, a: _Classes, b: _Classes) -> _Classes:  # type: ignore[no-untyped-def]
    out: set[str] = set()
    for x in a:
        for y in b:
            out |= f(x, y)
    return frozenset(out)


_EXP = {_NINF: (_ZERO,), _NEG: (_ZERO, _POS), _ZERO: (_POS,), _POS: (_POS, _PINF),
        _PINF: (_PINF,), _NAN: (_NAN,)}
_SQRT = {_NINF: (_NAN,), _NEG: (_NAN,), _ZERO: (_ZERO,), _POS: (_POS,), _PINF: (_PINF,),
         _NAN: (_NAN,)}
_ABS = {_NINF: (_PINF,), _NEG: (_POS,), _ZERO: (_ZERO,), _POS: (_POS,), _PINF: (_PINF,),
        _NAN: (_NAN,)}


def _mask_of(cond: lp.Elem, j: str) -> tuple[Expr, bool] | None:
    """``(B, value at j >= B)`` when ``cond`` is ``j < B`` or ``j >= B`` (either way round),
    ``B`` an index expression not depending on ``j`` (nor on any nest variable)."""
    if not (isinstance(cond, lp.Binary) and isinstance(cond.a, lp.IndexOf)
            and isinstance(cond.b, lp.IndexOf)):
        return None
    a, b = cond.a.expr, cond.b.expr
    forms = {(BinaryFn.LT, True): False, (BinaryFn.GE, True): True,
             (BinaryFn.GT, False): False, (BinaryFn.LE, False): True}
    for j_first, (x, bound) in ((True, (a, b)), (False, (b, a))):
        got = forms.get((cond.fn, j_first))
        if got is not None and x == Sym(j) and not any(
                s.startswith("i.") for s in bound.symbols()):
            return bound, got
    return None


def _masked(e: lp.Elem, j: str, bound: Expr, tile: dict[str, _Classes]) -> _Classes | None:
    """The classes of ``e``'s one value per row at columns ``j >= bound``, or None when it
    may differ between them. ``tile``: per buffer read at ``[..., j]``, its classes there
    (the caller checks that the read is of a tile so written)."""
    if isinstance(e, lp.Lit):
        if e.dtype is DType.F32:
            return frozenset((_float_class(float(e.value)),))
        return frozenset((bool(e.value),)) if e.dtype is DType.BOOL else _INTS
    if isinstance(e, lp.IndexOf):
        return None if j in e.expr.symbols() else _any(e.dtype)
    if isinstance(e, lp.ViewRead):
        return None if any(j in i.symbols() for i in e.index) else _any(e.dtype)
    if isinstance(e, lp.BufRead):
        if j in e.version.symbols() or any(j in i.symbols() for i in e.index[:-1]):
            return None
        if e.index and e.index[-1] == Sym(j):
            return tile.get(e.buffer)
        return None if any(j in i.symbols() for i in e.index) else _any(e.dtype)
    if isinstance(e, lp.Select):
        got = _mask_of(e.cond, j)
        c = frozenset((got[1],)) if got is not None and got[0] == bound else \
            _masked(e.cond, j, bound, tile)
        if c is None:
            return None
        a = _masked(e.a, j, bound, tile) if True in c else frozenset()
        b = _masked(e.b, j, bound, tile) if False in c else frozenset()
        return None if a is None or b is None else a | b
    kids = [_masked(k, j, bound, tile) for k in lp.elem_children(e)]
    if any(k is None for k in kids):
        return None
    if isinstance(e, lp.Unary) and e.dtype is DType.F32:
        (x,) = kids
        table = {UnaryFn.EXP: _EXP, UnaryFn.SQRT: _SQRT, UnaryFn.ABS: _ABS}.get(e.fn)
        if e.fn is UnaryFn.NEG:
            return frozenset(_NEGATE[c] for c in x)  # type: ignore[union-attr]
        if table is not None:
            return frozenset(r for c in x for r in table[c])  # type: ignore[union-attr]
        return _FLOATS
    if isinstance(e, lp.Binary) and e.a.dtype is DType.F32 and e.dtype is DType.F32:
        a, b = kids
        if e.fn is BinaryFn.ADD:
            return _pairwise(_add1, a, b)  # type: ignore[arg-type]
        if e.fn is BinaryFn.SUB:
            return _pairwise(_add1, a, frozenset(_NEGATE[c] for c in b))  # type: ignore[arg-type,union-attr]
        if e.fn is BinaryFn.MUL:
            return _pairwise(_mul1, a, b)  # type: ignore[arg-type]
        if e.fn is BinaryFn.DIV:
            return _pairwise(_div1, a, b)  # type: ignore[arg-type]
        if e.fn in (BinaryFn.MAX, BinaryFn.MIN):  # one of the operands (NaN propagates)
            return a | b  # type: ignore[operator]
        return _FLOATS
    return _any(e.dtype)


def _identity_class(fn: object) -> str:
    return _ZERO if fn is ReduceFn.SUM else _NINF


def clamp_masked_columns(body: tuple[lp.Stmt, ...], seg: lp.Segment, prog: lp.LoopProgram
                         ) -> tuple[lp.Stmt, ...]:
    """``body`` with the nests over masked columns clamped to the columns that are observed
    (see the comment above), for each mask bound in turn; unchanged where nothing is."""
    leaves = _leaves(body)
    if leaves is None:
        return body
    bounds: list[Expr] = []
    for s in leaves:
        for p in _parts(s):
            for x in _elems(p.value):
                got = _mask_of(x.cond, s.vars[-1]) if isinstance(x, lp.Select) and \
                    s.vars else None  # type: ignore[union-attr]
                if got is not None and got[0] not in bounds:
                    bounds.append(got[0])
    for bound in bounds:
        body = _clamp_bound(body, seg, prog, bound)
    return body


def _elems(e: lp.Elem) -> list[lp.Elem]:
    out = [e]
    for c in lp.elem_children(e):
        out += _elems(c)
    return out


def _clamp_bound(body: tuple[lp.Stmt, ...], seg: lp.Segment, prog: lp.LoopProgram,
                 bound: Expr) -> tuple[lp.Stmt, ...]:
    leaves = _leaves(body)
    if leaves is None:
        return body
    places: dict[int, tuple[tuple[object, ...], int]] = {}
    _places(body, (), places)
    owned = set(seg.buffers)
    writers: dict[str, list[lp.Stmt]] = {}
    for s in leaves:
        if isinstance(s, lp.Mma):
            writers.setdefault(s.c.buffer, []).append(s)
        for p in _parts(s):
            if isinstance(p.dest, lp.BufWrite):
                writers.setdefault(p.dest.buffer, []).append(s)

    # forward: the classes of each nest's parts at masked columns, the tiles they write
    tiles: dict[str, tuple[lp.Stmt, lp.BufWrite, _Classes]] = {}
    parts_of: dict[int, list[_Classes]] = {}
    for s in leaves:
        parts = _parts(s)
        if not parts or not s.vars:  # type: ignore[union-attr]
            continue
        j, e = s.vars[-1], s.extents[-1]  # type: ignore[union-attr]
        # tiles written earlier in the same iteration over the same columns (their
        # writes, their classes), then those this nest's earlier parts write
        known: dict[str, tuple[lp.BufWrite, _Classes]] = {
            name: (dest, cls) for name, (w, dest, cls) in tiles.items()
            if places[id(w)][0] == places[id(s)][0] and places[id(w)][1] < places[id(s)][1]
            and w.extents[-1] == e}  # type: ignore[union-attr]
        got: list[_Classes] = []
        mine: dict[str, tuple[lp.BufWrite, _Classes]] = {}
        for p in parts:
            if isinstance(p, lp.SquaresNest) or p.vars != s.vars:  # type: ignore[union-attr]
                break
            seen = {**known, **mine}
            # a tile is read at the version and index it was written, or not known
            cls = {r.buffer: seen[r.buffer][1] for r in lp.elem_reads(p.value)
                   if isinstance(r, lp.BufRead) and r.buffer in seen
                   and (r.version, r.index) == (seen[r.buffer][0].version,
                                                seen[r.buffer][0].index)}
            c = _masked(p.value, j, bound, cls)
            if c is None:
                break
            got.append(c)
            d = p.dest
            if isinstance(p, lp.Nest) and isinstance(d, lp.BufWrite) and d.index and \
                    d.index[-1] == Sym(j) and not any(j in i.symbols() for i in d.index[:-1]) \
                    and j not in d.version.symbols() and len(writers[d.buffer]) == 1 \
                    and d.buffer in owned:
                mine[d.buffer] = (d, c)
        else:
            parts_of[id(s)] = got
            for name, (d, c) in mine.items():
                tiles[name] = (s, d, c)
    if not tiles:
        return body

    # backward: the columns of each tile that are read, and each nest's clamp
    zeros = zero_extents(body, seg, prog)
    needs: dict[str, list[Expr] | None] = {name: [] for name in tiles}
    clamps: dict[int, Expr] = {}
    ks: dict[int, Expr] = {}

    def read(name: str, cols: Expr | None, reader: lp.Stmt) -> None:
        if name not in needs or needs[name] is None:
            return
        w = tiles[name][0]
        if w is reader:
            return  # a later part of the same nest: the same columns
        same = places[id(w)][0] == places[id(reader)][0] and \
            places[id(w)][1] < places[id(reader)][1]
        if cols is None or not same:
            needs[name] = None
        else:
            needs[name].append(cols)  # type: ignore[union-attr]

    for s in reversed(leaves):
        if isinstance(s, lp.Mma):
            a = s.a
            if isinstance(a, lp.MmaBuf) and a.buffer in tiles and \
                    a.version == tiles[a.buffer][1].version and \
                    isinstance(s.b, lp.MmaBuf):
                z = zeros.get((id(s), s.b.buffer, s.b.version))
                k = s.k if z is None else emin(s.k, z[0])
                read(a.buffer, k, s)
                if z is not None:
                    ks[id(s)] = k
            else:
                for o in (s.a,):
                    if isinstance(o, lp.MmaBuf):
                        read(o.buffer, None, s)
            for o in (s.b, s.c):
                if isinstance(o, lp.MmaBuf):
                    read(o.buffer, None, s)
            continue
        parts = _parts(s)
        if not parts:
            continue
        classes = parts_of.get(id(s))
        e = s.extents[-1] if s.vars else None  # type: ignore[union-attr]
        r: Expr | None = None
        if classes is not None and e is not None:
            want: list[Expr] | None = []
            lo = emin(e, emax(Const(0), bound))
            for p, c in zip(parts, classes, strict=True):
                if isinstance(p, lp.ReduceNest):
                    ident = _identity_class(p.fn)
                    if p.value.dtype is not DType.F32 or p.fn not in (ReduceFn.SUM, ReduceFn.MAX):
                        want = None
                    elif c <= {ident}:
                        want.append(lo)  # type: ignore[union-attr]
                    elif c <= {ident, _NAN}:
                        want.append(emin(e, add(emax(Const(0), bound), 1)))  # type: ignore[union-attr]
                    else:
                        want = None
                elif isinstance(p.dest, lp.BufWrite) and p.dest.buffer in tiles and \
                        tiles[p.dest.buffer][0] is s:
                    got = needs[p.dest.buffer]
                    if got is None:
                        want = None
                    else:
                        want += got  # type: ignore[operator]
                else:
                    want = None
                if want is None:
                    break
            if want is not None:
                most: Expr = Const(0)
                for i, x in enumerate(dict.fromkeys(want)):
                    most = x if i == 0 else emax(most, x)
                r = granule_expr(most, e)
                if r != e:
                    clamps[id(s)] = r
        j = s.vars[-1] if s.vars else None  # type: ignore[union-attr]
        for p in parts:
            for x in lp.elem_reads(p.value):
                if isinstance(x, lp.BufRead) and x.buffer in tiles:
                    at = j is not None and bool(x.index) and x.index[-1] == Sym(j)
                    read(x.buffer, (r if r is not None else e) if at else None, s)
    if not clamps:
        return body

    def clamp(s: lp.Stmt) -> lp.Stmt:
        if id(s) in clamps:
            r = clamps[id(s)]
            if isinstance(s, lp.FusedNest):
                return dataclasses.replace(
                    s, extents=(*s.extents[:-1], r),
                    parts=tuple(dataclasses.replace(p, extents=(*p.extents[:-1], r))
                                for p in s.parts))
            return dataclasses.replace(s, extents=(*s.extents[:-1], r))  # type: ignore[arg-type]
        if id(s) in ks and isinstance(s, lp.Mma):
            return dataclasses.replace(s, k=ks[id(s)])
        return s

    return _map_leaves(body, clamp)
