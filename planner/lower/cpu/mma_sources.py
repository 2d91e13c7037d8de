"""Where an mma operand is packed from: copies the CPU's packed GEMM makes unnecessary.

The GEMM packs each operand into its micro-kernel's panel format through both element
strides, so a copy whose only reader is an mma is a pass over the data for nothing:

* a **staging copy** ``%stage[i, j] = %src[i, j]`` of a whole operand, just before the
  mma that reads ``%stage`` (a column-major ``Bs``, say): the mma packs ``%src``
  (:func:`staging_forwards`, per statement list);
* a **view copy** into an explicit Memory ``%As<v>[i, j] = A[o0 + i, o1 + j]`` of a
  window of a read-only view (the whole window, or the rows of it that
  :func:`~.rows.clamp_rows` keeps), where that copy is the Memory's only write and
  mmas of the same iteration, reading what it wrote, are its only reads (the manual
  GEMM's ``As``/``Bs``): the mma
  packs the window straight from the view, clamped to what the view holds when the fill
  is 0 (:func:`view_copies`, over a segment). The view never changes, so the window read
  at the mma is what the copy would have stored; a window that does not start inside the
  view (or runs past it with another fill) is copied as before, then packed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields, is_dataclass

from planner.ir.dtypes import DType
from planner.ir.expr import Apply, Const, Expr, ExprOp, Sym, add
from planner.lower.loops import program as lp

#: A statement's place: its container (a statement list or a pipeline) and its order
#: within one iteration of it ((lag, stage, index) in a pipeline, (index,) in a list).
_Place = tuple[int, tuple[int, ...]]


@dataclass(frozen=True)
class ViewCopies:
    """Memory copies no code is emitted for, and the mma operands that read through them."""

    skip: frozenset[int] = frozenset()  # ids of the copy nests
    sources: dict[tuple[int, int], lp.Nest] = field(default_factory=dict)  # (id(mma), 0|1)


def staging_forwards(stmts: tuple[lp.Stmt, ...], prog: lp.LoopProgram
                     ) -> tuple[set[int], dict[int, dict[str, lp.MmaBuf]]]:
    """Staging copies an mma can skip: ``%stage[i, j] = %src[i, j]`` of a whole operand,
    followed (with only nests writing other buffers in between) by the mma that reads
    ``%stage``. Returns the indices of the skipped copies and, per mma index, the operand
    substitutions (the mma reads ``%src``)."""
    skip: set[int] = set()
    subst: dict[int, dict[str, lp.MmaBuf]] = {}
    for j, mm in enumerate(stmts):
        if not isinstance(mm, lp.Mma):
            continue
        for o, dims in ((mm.a, (mm.m, mm.k)), (mm.b, (mm.k, mm.n))):
            if not isinstance(o, lp.MmaBuf) or o.version != Const(0):
                continue
            if prog.buffer(o.buffer).role != "stage":
                continue
            for i in range(j - 1, -1, -1):
                s = stmts[i]
                if not isinstance(s, lp.Nest) or not isinstance(s.dest, lp.BufWrite):
                    break
                if s.dest.buffer != o.buffer:
                    continue  # another nest; checked below that it leaves src alone
                src = _plain_copy_source(s, prog, dims)
                between = stmts[i + 1 : j]  # nests writing buffers (checked above)
                if src is not None and all(
                        t.dest.buffer != src.buffer  # type: ignore[union-attr]
                        and o.buffer not in _buffers_read(t.value)  # type: ignore[union-attr]
                        for t in between):
                    skip.add(i)
                    subst.setdefault(j, {})[o.buffer] = src
                break
    return skip, subst


def view_copies(body: tuple[lp.Stmt, ...], prog: lp.LoopProgram, seg: lp.Segment
                ) -> ViewCopies:
    """The view copies of ``body`` (segment ``seg``'s, as emitted) that its mmas pack from
    the view instead; only of Memory the segment owns and no other segment refers to."""
    writes: dict[str, list[tuple[lp.Nest, _Place]]] = {}
    reads: dict[str, list[tuple[lp.Mma, int, lp.MmaBuf, _Place]]] = {}
    others: set[str] = set().union(*(_names(t.body) for t in prog.segments if t is not seg))
    for s, place, subst in _statements(body, prog):
        if isinstance(s, lp.Mma):
            for slot, o in enumerate((s.a, s.b)):
                if isinstance(o, lp.MmaBuf):
                    r = subst.get(o.buffer, o)
                    reads.setdefault(r.buffer, []).append((s, slot, r, place))
                else:
                    others.update(_names(o))
            others.update(_names(s.c))
        elif type(s) is lp.Nest and isinstance(s.dest, lp.BufWrite):
            writes.setdefault(s.dest.buffer, []).append((s, place))
            others.update(_names(s.value))
        else:
            others.update(_names(s))
    skip: set[int] = set()
    sources: dict[tuple[int, int], lp.Nest] = {}
    for name, ws in writes.items():
        if len(ws) != 1 or name in others or not reads.get(name) \
                or name not in seg.buffers or prog.buffer(name).role != "memory":
            continue
        (copy, wplace), = ws
        covered = _view_copy_extents(copy, prog)
        if covered is None:
            continue
        ok = all(r.version == copy.dest.version and rplace[0] == wplace[0]  # type: ignore[union-attr]
                 and wplace[1] < rplace[1] and covered == _dims(mm, slot)
                 for mm, slot, r, rplace in reads[name])
        if ok:
            skip.add(id(copy))
            sources.update({(id(mm), slot): copy for mm, slot, _, _ in reads[name]})
    return ViewCopies(frozenset(skip), sources)


def _statements(body: tuple[lp.Stmt, ...], prog: lp.LoopProgram
                ) -> Iterator[tuple[lp.Stmt, _Place, dict[str, lp.MmaBuf]]]:
    """Every leaf statement of ``body`` that is emitted (staging copies an mma skips are
    not), with its place and, for an mma, its staging substitutions."""
    def walk(stmts: tuple[lp.Stmt, ...], container: int, prefix: tuple[int, ...]
             ) -> Iterator[tuple[lp.Stmt, _Place, dict[str, lp.MmaBuf]]]:
        skip, subst = staging_forwards(stmts, prog)
        for j, s in enumerate(stmts):
            if j in skip:
                continue
            if isinstance(s, lp.Loop | lp.Parallel):
                yield from walk(s.body, id(s.body), ())
            elif isinstance(s, lp.Pipeline):
                for k, st in enumerate(s.stages):
                    yield from walk(st.body, id(s), (st.lag, k))
            else:
                yield s, (container, (*prefix, j)), subst.get(j, {})

    yield from walk(body, id(body), ())


def _dims(mm: lp.Mma, slot: int) -> tuple[Expr, Expr]:
    return (mm.m, mm.k) if slot == 0 else (mm.k, mm.n)


def _view_copy_extents(s: lp.Nest, prog: lp.LoopProgram) -> tuple[Expr, Expr] | None:
    """The rows and columns ``s`` copies when it is ``%mem<v>[i, j] = view[o0 + i,
    o1 + j]`` from a read-only f32 view into an f32 buffer, over the window or a part of
    it that starts at its corner (``min(window, …)`` rows: :func:`~.rows.clamp_rows`);
    else None."""
    dest, val = s.dest, s.value
    if not (isinstance(dest, lp.BufWrite) and isinstance(val, lp.ViewRead)) \
            or len(s.vars) != 2 or len(dest.index) != 2:
        return None
    ext = dict(zip(s.vars, s.extents, strict=True))
    if not all(isinstance(x, Sym) and x.name in ext for x in dest.index) \
            or len(set(dest.index)) != 2:
        return None
    win = val.window
    param = prog.param(val.view)
    covered = tuple(ext[x.name] for x in dest.index)  # type: ignore[union-attr]
    ok = (param.readonly and param.dtype is DType.F32 and val.dtype is DType.F32
          and prog.buffer(dest.buffer).dtype is DType.F32 and len(win.shape) == 2
          and all(_within(e, w) for e, w in zip(covered, win.shape, strict=True))
          and val.index == tuple(add(o, i) for o, i in zip(win.offsets, dest.index,
                                                           strict=True)))
    return covered if ok else None  # type: ignore[return-value]


def _within(e: Expr, size: Expr) -> bool:
    """Whether the extent ``e`` is ``size`` or a minimum with it."""
    return e == size or (isinstance(e, Apply) and e.op is ExprOp.MIN and size in e.args)


def _names(x: object) -> set[str]:
    """Every buffer name a statement, operand or expression refers to."""
    if isinstance(x, tuple):
        return set().union(*(_names(y) for y in x))
    if not is_dataclass(x) or isinstance(x, type | Expr):
        return set()
    out: set[str] = set()
    for f in fields(x):
        v = getattr(x, f.name)
        if f.name in ("buffer", "staging") and isinstance(v, str):
            out.add(v)
        else:
            out |= _names(v)
    return out


def _buffers_read(e: object) -> set[str]:
    """Names of the buffers an element expression reads."""
    if isinstance(e, lp.BufRead):
        return {e.buffer} | _buffers_read(e.index)
    if isinstance(e, tuple):
        return set().union(*(_buffers_read(x) for x in e))
    if is_dataclass(e) and isinstance(e, lp.Elem):
        return set().union(*(_buffers_read(getattr(e, f.name)) for f in fields(e)))
    return set()


def _plain_copy_source(s: lp.Nest, prog: lp.LoopProgram, dims: tuple[Expr, Expr]
                       ) -> lp.MmaBuf | None:
    """``src`` when ``s`` is ``%stage[i, j] = %src<v>[i, j]`` over exactly ``dims``, with
    ``%src`` an f32 buffer of plain (unswizzled) strides; else None."""
    dest, val = s.dest, s.value
    if not (isinstance(dest, lp.BufWrite) and isinstance(val, lp.BufRead)):
        return None
    if dest.version != Const(0) or val.index != dest.index or len(dest.index) != 2:
        return None
    ext = dict(zip(s.vars, s.extents, strict=True))
    if not all(isinstance(x, Sym) and x.name in ext for x in dest.index) \
            or len(set(dest.index)) != 2 or len(s.vars) != 2:
        return None
    if tuple(ext[x.name] for x in dest.index) != dims:  # type: ignore[union-attr]
        return None
    src = prog.buffer(val.buffer)
    if src.dtype is not DType.F32 or src.layout.swizzles or src.layout.rank != 2 \
            or val.dtype is not DType.F32:
        return None
    return lp.MmaBuf(val.buffer, val.version)
