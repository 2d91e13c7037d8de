"""Where an mma operand is packed from: copies the CPU's packed GEMM makes unnecessary.

The GEMM packs each operand into its micro-kernel's panel format through both element
strides, so a copy whose only reader is an mma is a pass over the data for nothing:

* a **staging copy** ``%stage[i, j] = %src[i, j]`` of a whole operand, just before the
  mma that reads ``%stage`` (a column-major ``Bs``, say): the mma packs ``%src``
  (:func:`staging_forwards`, per statement list);
* a **view copy** into an explicit Memory (or a materialized tile)
  ``%As<v>[i, j] = A[o0 + i, o1 + j]`` of a window of a read-only view (the whole
  window, or the part of it from its corner that :func:`~.rows.clamp_rows` and
  :func:`~.zero_tiles.clamp_zero_tiles` keep), where that copy is the buffer's only write and
  mmas of the same iteration, reading what it wrote, are its only reads (the manual
  GEMM's ``As``/``Bs``): the mma
  packs the window straight from the view, clamped to what the view holds when the fill
  is 0 (:func:`view_copies`, over a segment). The view never changes, so the window read
  at the mma is what the copy would have stored; a window that does not start inside the
  view (or runs past it with another fill) is copied as before, then packed.

A **k loop** of tile products is lowered to one packed GEMM over the whole reduction
(:func:`k_merge`). The loop program of a tiled GEMM accumulates an output tile over the
k steps of a loop (or pipeline) whose iteration only multiplies one window of A by one
window of B into the accumulator::

    loop k_tiles: %t < E
      mma [m x k] @ [k x n]: %acc += A[o_m +: m, k*%t + o_a +: k] @ B[k*%t + o_b +: k, o_n +: n]

(the windows read in place, or through the copies above). Each step is one call of the
packed GEMM, which packs its k × n panel of B and m × k block of A and loads and stores
the tile of C, its KC blocking never spanning more than one step. :func:`k_merge`
recognises that shape from the loop program, whatever kernel it comes from, and gives
the one mma doing the whole loop's work, ``%acc += A[o_m +: m, o_a +: E*k] @
B[o_b +: E*k, o_n +: n]``: the GEMM packs each panel once, accumulates KC-deep blocks in
registers and passes over C once per KC block instead of once per step. Every window
has fill 0, so the steps' windows past the view add nothing, and the merged windows
(clamped to the view by the mma) cover exactly the steps' elements in the view (the
steps tile ``[o, o + E*k)`` along k without gaps: the coefficient of ``%t`` is ``k``);
only the rounding order changes. The emitter (:meth:`~.mma._Mma.k_loop`) runs the merged
mma where both merged windows start inside their views (the in-place case of every
step), else the loop as the program has it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields, is_dataclass

from planner.ir.dtypes import DType
from planner.ir.expr import Apply, Const, Expr, ExprOp, Sym, add, mul
from planner.lower.cpu.index_exprs import _coeff
from planner.lower.loops import program as lp

#: A statement's place: its container (a statement list or a pipeline) and its order
#: within one iteration of it ((lag, stage, index) in a pipeline, (index,) in a list).
_Place = tuple[int, tuple[int, ...]]


@dataclass(frozen=True)
class ViewCopies:
    """Memory copies no code is emitted for, and the mma operands that read through them."""

    skip: frozenset[int] = frozenset()  # ids of the copy nests
    sources: dict[tuple[int, int], lp.Nest] = field(default_factory=dict)  # (id(mma), 0|1)


@dataclass(frozen=True)
class KMerge:
    """The mma doing a whole k loop's work (both operands view windows, fill 0)."""

    mma: lp.Mma

    @property
    def windows(self) -> tuple[lp.Window, lp.Window]:
        return (self.mma.a.window, self.mma.b.window)  # type: ignore[union-attr]


def k_merge(s: lp.Loop | lp.Pipeline, prog: lp.LoopProgram, sources: ViewCopies
            ) -> KMerge | None:
    """The merged mma of ``s`` (see the module docstring) when it is a loop over one
    variable whose iterations run one accumulating mma of two view windows (fill 0,
    tiling k with the loop variable) and otherwise only copies that mma reads through
    (staging copies it skips, view copies it packs from the view: ``sources``),
    barriers, notes and prefetches; else None."""
    if len(s.vars) != 1:
        return None
    var = s.vars[0]
    lists = (s.body,) if isinstance(s, lp.Loop) else tuple(st.body for st in s.stages)
    mmas: list[lp.Mma] = []
    for stmts in lists:
        staged, _ = staging_forwards(stmts, prog)
        for i, t in enumerate(stmts):
            if isinstance(t, lp.Mma):
                mmas.append(t)
            elif isinstance(t, lp.Barrier | lp.Note | lp.Prefetch):
                continue
            elif not (type(t) is lp.Nest and (i in staged or id(t) in sources.skip)):
                return None
    if len(mmas) != 1:
        return None
    mm = mmas[0]
    if not mm.accumulate or any(var in e.symbols() for e in (mm.m, mm.n, mm.k,
                                                              mm.c.version)):
        return None
    total = mul(s.extents[0], mm.k)
    ops: list[lp.MmaView] = []
    for slot, o in enumerate((mm.a, mm.b)):
        if isinstance(o, lp.MmaView):
            win, fill = o.window, o.fill
        else:
            copy = sources.sources.get((id(mm), slot))
            if copy is None:
                return None
            win, fill = copy.value.window, copy.value.fill  # type: ignore[attr-defined]
        kdim = 1 - slot  # a: [m, k], b: [k, n]
        if fill != 0.0 or len(win.offsets) != 2:
            return None
        off = win.offsets[kdim]
        if _coeff(off, var) != mm.k or var in win.offsets[1 - kdim].symbols():
            return None
        start = off.substitute({var: Const(0)})
        offsets = (win.offsets[0], start) if kdim == 1 else (start, win.offsets[1])
        shape = (win.shape[0], total) if kdim == 1 else (total, win.shape[1])
        ops.append(lp.MmaView(lp.Window(win.view, offsets, shape), 0.0, ""))
    return KMerge(lp.Mma(mm.c, ops[0], ops[1], mm.m, mm.n, total, True))


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
                or name not in seg.buffers \
                or prog.buffer(name).role not in ("memory", "materialized"):
            continue
        (copy, wplace), = ws
        covered = _view_copy_extents(copy, prog)
        if covered is None:
            continue
        ok = all(r.version == copy.dest.version and rplace[0] == wplace[0]  # type: ignore[union-attr]
                 and wplace[1] < rplace[1]
                 and all(_within(c, d) for c, d in zip(covered, _dims(mm, slot),
                                                      strict=True))
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
