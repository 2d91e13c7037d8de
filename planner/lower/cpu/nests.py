"""Loop nests: the in-bounds / edge-tile versions, the outer loops, the vectorized
innermost loop (unrolled main loop with independent reduction accumulators, full
vectors, one masked tail), hoisting of invariant subexpressions and W×W transposed
copies.  A :class:`~planner.lower.loops.ir.SquaresNest` keeps Welford's running mean and
centered sum of squares per lane and accumulator (the count is the same for every lane
of a full vector: one reciprocal per unrolled step), merged by Chan's formula after the
row.

A plain nest (no reduction) whose one view store is unit-stride, in the in-bounds
version, streams that store when the kernel's views hold at least the module global
:data:`STREAM_THRESHOLD_SYMBOL` together (:data:`STREAM_MIN_BYTES` unless the runtime's
trial of streamed against plain stores sets it otherwise; checked per row at run time,
with the destination's alignment): plain stores up to its first cache line, whole lines of aligned
non-temporal vector stores, plain stores after the last whole line, and one ``sfence``
before the segment function returns.  Each line of the output is then written without
first being read (write-allocate) and without evicting the inputs from the cache: past
the last-level cache, a pass reading one array and writing another moves two thirds of
the bytes it did."""

from __future__ import annotations

import llvmlite.ir as ir

from planner.ir.core import BinaryFn, ReduceFn
from planner.ir.dtypes import DType
from planner.ir.expr import Const, Expr, add, mul, product
from planner.lower.cpu.builder import _align, _mem_type, _reg_type, _vec
from planner.lower.cpu.context import _Lanes
from planner.lower.cpu.edge_stores import emit_edge_nest
from planner.lower.cpu.elements import _COMBINE, _HORIZONTAL, _Elements, reciprocal
from planner.lower.cpu.index_exprs import _coeff
from planner.lower.cpu.jit import host_target
from planner.lower.cpu.llvm_helpers import F32, I1, I32, I64, c64, declare_function, transpose
from planner.lower.loops import program as lp

_NestLike = lp.Nest | lp.ReduceNest | lp.FusedNest


class _Nests(_Elements):
    """Emits the loop nests of a segment function."""

    def windows_inside(self, windows: tuple[lp.Window, ...]) -> ir.Value:
        b = self.b
        ok: ir.Value = ir.Constant(I1, 1)
        for w in windows:
            shape = self.cg.program.param(w.view).shape
            for off, n, ext in zip(w.offsets, w.shape, shape, strict=True):
                o = self.expr(off)
                ok = b.and_(ok, b.icmp_signed(">=", o, c64(0)))
                ok = b.and_(ok, b.icmp_signed("<=", b.add(o, self.expr(n)), self.expr(ext)))
        return ok

    def nest(self, s: lp.Nest | lp.ReduceNest | lp.FusedNest) -> None:
        parts = s.parts if isinstance(s, lp.FusedNest) else (s,)
        windows = s.windows
        if not windows:
            self.nest_body(s, parts, edge=False)
            return
        with self.b.if_else(self.windows_inside(windows)) as (inside, outside):
            with inside:
                self.nest_body(s, parts, edge=False)
            with outside:  # a plain store runs unmasked over what is inside the view
                emit_edge_nest(self, s, parts)

    def nest_body(self, s: _NestLike, parts: tuple[lp.Nest | lp.ReduceNest, ...],
                  edge: bool) -> None:
        if not s.vars:
            lanes = _Lanes(1, None, None, edge)
            for p in parts:
                assert isinstance(p, lp.Nest)
                self.write(p.dest, self.elem(p.value, lanes), p.value.dtype, lanes)
            return
        self._outer(s, parts, 0, edge)

    def _outer(self, s: _NestLike, parts: tuple[lp.Nest | lp.ReduceNest, ...], d: int,
               edge: bool) -> None:
        if d == len(s.vars) - 1:
            self._inner(s, parts, edge)
            return
        if d == len(s.vars) - 2 and not edge and self._transposable(s, parts):
            self._transposed(s, parts[0])  # type: ignore[arg-type]
            return
        with self.loop(c64(0), self.expr(s.extents[d]), 1, f"n{d}") as i:
            self.env[s.vars[d]] = i
            self._outer(s, parts, d + 1, edge)

    # ------------------------------------------------------------------ transposed copies

    def _copy_ends(self, p: lp.Nest) -> tuple[tuple[ir.Value, Expr, bool],
                                              tuple[ir.Value, Expr, bool]]:
        """(pointer, offset, swizzled) of the source read and the destination write."""
        r = p.value
        if isinstance(r, lp.ViewRead):
            src = (self.view_ptr(r.view), self.view_offset(r.view, r.index), False)
        else:
            assert isinstance(r, lp.BufRead)
            buf = self.cg.program.buffer(r.buffer)
            src = (self.buffer_ptr(r.buffer, r.version), self.buffer_offset(buf, r.index),
                   bool(buf.layout.swizzles))
        d = p.dest
        if isinstance(d, lp.ViewWrite):
            dst = (self.view_ptr(d.view), self.view_offset(d.view, d.index), False)
        else:
            buf = self.cg.program.buffer(d.buffer)
            dst = (self.buffer_ptr(d.buffer, d.version), self.buffer_offset(buf, d.index),
                   bool(buf.layout.swizzles))
        return src, dst

    def _transposable(self, s: _NestLike, parts: tuple[lp.Nest | lp.ReduceNest, ...]) -> bool:
        """A plain copy whose source is unit-stride along the outer of the last two
        variables and whose destination is unit-stride along the last one."""
        if len(parts) != 1 or not isinstance(parts[0], lp.Nest):
            return False
        p = parts[0]
        if not isinstance(p.value, lp.ViewRead | lp.BufRead):
            return False
        v0, v1 = s.vars[-2], s.vars[-1]
        r = p.value
        src_off = (self.view_offset(r.view, r.index) if isinstance(r, lp.ViewRead) else
                   self.buffer_offset(self.cg.program.buffer(r.buffer), r.index))
        d = p.dest
        dst_off = (self.view_offset(d.view, d.index) if isinstance(d, lp.ViewWrite) else
                   self.buffer_offset(self.cg.program.buffer(d.buffer), d.index))
        swizzled = any(self.cg.program.buffer(x).layout.swizzles for x in (
            [r.buffer] if isinstance(r, lp.BufRead) else []) + (
            [d.buffer] if isinstance(d, lp.BufWrite) else []))
        return (not swizzled and _coeff(dst_off, v1) == Const(1)
                and _coeff(src_off, v0) == Const(1) and _coeff(src_off, v1) != Const(1))

    def _transposed(self, s: _NestLike, p: lp.Nest) -> None:
        """Copy W×W blocks: W vector loads along the source's unit stride, an in-register
        transpose, W vector stores along the destination's; the rest element-wise."""
        b = self.b
        w = self.cg.config.vector_width
        v0, v1 = s.vars[-2], s.vars[-1]
        n0, n1 = self.expr(s.extents[-2]), self.expr(s.extents[-1])
        full0 = b.mul(b.sdiv(n0, c64(w)), c64(w))
        full1 = b.mul(b.sdiv(n1, c64(w)), c64(w))
        (sp, so, _), (dp, do, _) = self._copy_ends(p)
        vt = _vec(sp.type.pointee, w)
        with self.loop(c64(0), full0, w, "t0") as b0:
            with self.loop(c64(0), full1, w, "t1") as b1:
                cols = []
                self.env[v0] = b0
                for c in range(w):
                    self.env[v1] = b.add(b1, c64(c))
                    addr = b.bitcast(b.gep(sp, [self.expr(so)]), vt.as_pointer())
                    cols.append(b.load(addr, align=_align(vt.element)))
                self.env[v1] = b1
                for r, row in enumerate(transpose(b, cols)):
                    self.env[v0] = b.add(b0, c64(r))
                    addr = b.bitcast(b.gep(dp, [self.expr(do)]), vt.as_pointer())
                    b.store(row, addr, align=_align(vt.element))
            with self.loop(b0, b.add(b0, c64(w)), 1, "t.rows") as r:
                self.env[v0] = r
                self._inner(s, (p,), False, start=full1)
        with self.loop(full0, n0, 1, "t.rest") as r:
            self.env[v0] = r
            self._inner(s, (p,), False)

    def _hoisted(self, parts: tuple[lp.Nest | lp.ReduceNest, ...], var: str,
                 edge: bool) -> dict[lp.Elem, ir.Value]:
        """Evaluate the subexpressions that do not depend on ``var`` once (splatted)."""
        w = self.cg.config.vector_width
        dests = {lp.dest_key(p) for p in parts}
        roots: list[lp.Elem] = []
        for p in parts:
            _invariant_roots(p.value, var, dests, roots)
        lanes = _Lanes(w, None, None, edge)
        for r in roots:
            self.elem(r, lanes)
        one = ir.Constant(_vec(F32, w), [1.0] * w)
        for p in parts:  # 1 / y of each division by an invariant y (see ``reciprocal``)
            for d in _invariant_divisors(p.value, lanes.cache):
                if reciprocal(d) not in lanes.cache:
                    lanes.cache[reciprocal(d)] = self.b.fdiv(one, lanes.cache[d])
        return lanes.cache

    def _inner(self, s: _NestLike, parts: tuple[lp.Nest | lp.ReduceNest, ...],
               edge: bool, start: ir.Value | None = None) -> None:
        """Vectors of the innermost variable (from ``start``, default 0): a main loop,
        unrolled ``reduce_unroll`` times with as many independent accumulators when the
        nest reduces (breaking the add/max latency chain), a loop over the remaining full
        vectors, then one masked tail; reductions combine their accumulators lane-wise
        and reduce horizontally after the row."""
        b = self.b
        w = self.cg.config.vector_width
        var = s.vars[-1]
        reducing = any(isinstance(p, lp.ReduceNest) for p in parts)
        unroll = self.cg.config.reduce_unroll if reducing else 1
        dead = self.dead_stores() if len(parts) > 1 else frozenset()
        accs: dict[int, tuple[list[ir.Value], ir.Constant, float | int]] = {}
        moments: dict[int, list[_Welford]] = {}
        for i, p in enumerate(parts):
            if isinstance(p, lp.SquaresNest):
                moments[i] = [_Welford.start(self, w) for _ in range(unroll)]
            elif isinstance(p, lp.ReduceNest):
                vt = _vec(_reg_type(p.value.dtype), w)
                ident = _identity(p.fn, p.value.dtype)
                ident_v = ir.Constant(vt, [ident] * w)
                slots = [self.alloca(vt) for _ in range(unroll)]
                for slot in slots:
                    b.store(ident_v, slot)
                accs[i] = (slots, ident_v, ident)

        def point(lanes: _Lanes, slot: int = 0, step: dict[str, ir.Value] | None = None,
                  streamed: int | None = None) -> None:
            for i, p in enumerate(parts):
                v = self.elem(p.value, lanes)
                if isinstance(p, lp.Nest):
                    if i == streamed:
                        self._streaming_write(p, v, lanes)
                    elif not (isinstance(p.dest, lp.BufWrite) and p.dest.buffer in dead):
                        self.write(p.dest, v, p.value.dtype, lanes)
                    if isinstance(p.dest, lp.BufWrite):  # forward to later parts
                        lanes.cache[lp.BufRead(p.dest.buffer, p.dest.index, p.dest.version,
                                               p.value.dtype)] = v
                    continue
                if i in moments:
                    moments[i][slot].update(self, v, lanes.tail, step)
                    continue
                slots, ident_v, _ = accs[i]
                if lanes.tail is not None:
                    v = b.select(lanes.tail, v, ident_v)
                acc = slots[slot]
                b.store(_COMBINE[(p.fn, p.value.dtype)](self, b.load(acc), v), acc)

        n = self.expr(s.extents[-1])
        lo = start if start is not None else c64(0)

        def rate(before: ir.Value) -> dict[str, ir.Value] | None:
            """``1 / count`` of a Welford update after ``before`` earlier ones."""
            if not moments:
                return None
            k = b.sitofp(b.add(before, c64(1)), F32)
            return {"r": self.splat(b.fdiv(ir.Constant(F32, 1.0), k), w)}

        def plain_row(hoisted: dict[lp.Elem, ir.Value]) -> None:
            """The vectors of the row from ``lo``: the unrolled main loop, the remaining
            full vectors, one masked tail."""
            const_n = s.extents[-1].const_value() if start is None else None
            full = b.add(lo, b.mul(b.sdiv(b.sub(n, lo), c64(w)), c64(w))) \
                if const_n is None else c64(const_n // w * w)
            done = lo
            unrolled = c64(0)  # steps of the unrolled loop
            if unroll > 1 and (const_n is None or const_n >= unroll * w):
                step = unroll * w
                done = b.add(lo, b.mul(b.sdiv(b.sub(n, lo), c64(step)), c64(step)))
                unrolled = b.sdiv(b.sub(done, lo), c64(step))
                with self.loop(lo, done, step, "vu") as base:
                    same = rate(b.sdiv(b.sub(base, lo), c64(step)))  # all in lockstep
                    for j in range(unroll):
                        self.env[var] = b.add(base, c64(j * w))
                        point(_Lanes(w, var, None, edge, dict(hoisted)), j, same)
            if const_n is None or const_n >= w:
                with self.loop(done, full, w, "v") as base:
                    self.env[var] = base
                    point(_Lanes(w, var, None, edge, dict(hoisted)), 0, rate(
                        b.add(unrolled, b.sdiv(b.sub(base, done), c64(w)))))
            rest = b.add(unrolled, b.sdiv(b.sub(full, done), c64(w)))
            if const_n is None or const_n % w:
                rem = b.sub(n, full)
                with b.if_then(b.icmp_signed(">", rem, c64(0))):
                    self.env[var] = full
                    tail = b.icmp_signed("<", ir.Constant(_vec(I64, w), list(range(w))),
                                         self.splat(rem, w))
                    point(_Lanes(w, var, tail, edge, dict(hoisted)), 0, rate(rest))
            for slots in moments.values():  # the count of each lane of each accumulator
                slots[0].counted(self, rest, b.sub(n, full))
                for other in slots[1:]:
                    other.counted(self, unrolled, c64(0))

        def masked(at: ir.Value, count: ir.Value, hoisted: dict[lp.Elem, ir.Value]) -> None:
            """One vector at ``at`` with its first ``count`` (1..w) lanes active."""
            self.env[var] = at
            tail = b.icmp_signed("<", ir.Constant(_vec(I64, w), list(range(w))),
                                 self.splat(count, w))
            point(_Lanes(w, var, tail, edge, dict(hoisted)))

        def plain_vectors(at: ir.Value, stop: ir.Value, hoisted: dict[lp.Elem, ir.Value]
                          ) -> None:
            """``[at, stop)`` with plain stores: full vectors, then one masked."""
            full = b.add(at, b.mul(b.sdiv(b.sub(stop, at), c64(w)), c64(w)))
            with self.loop(at, full, w, "vp") as base:
                self.env[var] = base
                point(_Lanes(w, var, None, edge, dict(hoisted)))
            rem = b.sub(stop, full)
            with b.if_then(b.icmp_signed(">", rem, c64(0))):
                masked(full, rem, hoisted)

        def streamed_row(k: int, head: ir.Value, hoisted: dict[lp.Elem, ir.Value]) -> None:
            """The row with part ``k``'s stores streamed: plain stores up to the first
            cache line of its destination (``head`` elements), whole lines of aligned
            non-temporal vector stores, plain stores after the last whole line (a line
            is never written partly by non-temporal stores)."""
            per_line = _LINE // 4
            lo2 = b.add(lo, self.smin(head, b.sub(n, lo)))
            plain_vectors(lo, lo2, hoisted)
            lines = b.add(lo2, b.mul(b.sdiv(b.sub(n, lo2), c64(per_line)), c64(per_line)))
            with self.loop(lo2, lines, per_line, "vs") as base:
                for j in range(0, per_line, w):
                    self.env[var] = b.add(base, c64(j))
                    point(_Lanes(w, var, None, edge, dict(hoisted)), streamed=k)
            plain_vectors(lines, n, hoisted)

        with b.if_then(b.icmp_signed(">", n, lo)):
            hoisted = self._hoisted(parts, var, edge)
            stream = None if reducing or edge or start is not None \
                else self._streamable(parts, var)
            if stream is None:
                plain_row(hoisted)
            else:
                ok, head = self._stream_gate(parts[stream], var, lo)  # type: ignore[arg-type]
                with b.if_else(ok) as (yes, no):
                    with yes:
                        streamed_row(stream, head, hoisted)
                    with no:
                        plain_row(hoisted)
        for i, p in enumerate(parts):
            if i in moments:
                self._squares_result(p, moments[i], edge)  # type: ignore[arg-type]
            elif isinstance(p, lp.ReduceNest):
                slots, _, ident = accs[i]
                combine = _COMBINE[(p.fn, p.value.dtype)]
                vec = self._merged(slots, combine, n, lo,
                                   s.extents[-1].const_value() if start is None else None)
                total = _HORIZONTAL[(p.fn, p.value.dtype)](self, vec, ident)
                lanes = _Lanes(1, None, None, edge)
                self.write(p.dest, self.splat(total, 1), p.value.dtype, lanes)


    def _merged(self, slots: list[ir.Value], combine, n: ir.Value, lo: ir.Value,  # type: ignore[no-untyped-def]
                const_n: int | None) -> ir.Value:
        """The accumulators of a row combined lane-wise, in order. Only the unrolled loop
        (``n - lo >= len(slots) * w``) adds to the accumulators after the first; where it
        does not run they hold the identity, which changes no bit of the first (a sum's
        accumulator starts at +0 and is never -0), and are not combined: a row of fewer
        than ``len(slots)`` vectors (a clamped edge tile's) skips that latency chain."""
        b = self.b
        step = len(slots) * self.cg.config.vector_width
        if len(slots) == 1 or (const_n is not None and const_n < step):
            return b.load(slots[0])

        def merge() -> ir.Value:
            vec = b.load(slots[0])
            for slot in slots[1:]:
                vec = combine(self, vec, b.load(slot))
            return vec

        if const_n is not None:
            return merge()
        with b.if_then(b.icmp_signed(">=", b.sub(n, lo), c64(step))):
            b.store(merge(), slots[0])
        return b.load(slots[0])

    # ------------------------------------------------------------------ streaming stores

    def _streamable(self, parts: tuple[lp.Nest | lp.ReduceNest, ...], var: str) -> int | None:
        """The part whose stores a plain (non-reducing) nest may stream: the only part
        writing a view, 4-byte elements, unit stride along ``var``; None when there is
        none, on a non-x86 host, or when the kernel's views are too small together (see
        :data:`STREAM_MIN_BYTES`)."""
        if not host_target().x86 \
                or _LINE % (4 * self.cg.config.vector_width):
            return None
        views = [i for i, p in enumerate(parts) if isinstance(p.dest, lp.ViewWrite)]
        if len(views) != 1 or any(not isinstance(p, lp.Nest) for p in parts):
            return None
        d = parts[views[0]].dest
        assert isinstance(d, lp.ViewWrite)
        if _mem_type(self.cg.program.param(d.view).dtype) not in (F32, I32):
            return None
        if _coeff(self.view_offset(d.view, d.index), var) != Const(1):
            return None
        known = view_bytes(self.cg.program).const_value()
        if known is not None and known < STREAM_MIN_BYTES:
            return None
        return views[0]

    def _stream_gate(self, p: lp.Nest, var: str, lo: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(whether this row streams, the lanes before the destination's first aligned
        vector): the kernel's views hold at least the module global
        :data:`STREAM_THRESHOLD_SYMBOL`'s bytes and the destination's elements are 4-byte
        aligned."""
        b = self.b
        d = p.dest
        assert isinstance(d, lp.ViewWrite)
        vb = _LINE  # stream whole cache lines (a power of two, a multiple of a vector)
        self.env[var] = lo
        addr = b.ptrtoint(b.gep(self.view_ptr(d.view),
                                [self.iexpr(self.view_offset(d.view, d.index), None)]), I64)
        aligned = b.icmp_signed("==", b.and_(addr, c64(3)), c64(0))
        threshold = self.module.globals.get(STREAM_THRESHOLD_SYMBOL)
        if threshold is None:
            threshold = ir.GlobalVariable(self.module, I64, STREAM_THRESHOLD_SYMBOL)
            threshold.initializer = c64(STREAM_MIN_BYTES)
        big = b.icmp_signed(">=", self.expr(view_bytes(self.cg.program)),
                            b.load(threshold))
        head = b.lshr(b.and_(b.sub(c64(0), addr), c64(vb - 1)), c64(2))
        return b.and_(aligned, big), head

    def _streaming_write(self, p: lp.Nest, v: ir.Value, lanes: _Lanes) -> None:
        """``write`` of a full vector whose address is vector-aligned (``_stream_gate``),
        as a non-temporal store: the line is written without being read first."""
        b = self.b
        block = b.block
        first = len(block.instructions)
        self.write(p.dest, v, p.value.dtype, lanes)
        assert b.block is block, "a streamed store is one unmasked vector store"
        for ins in block.instructions[first:]:
            if isinstance(ins, ir.StoreInstr) and isinstance(ins.operands[0].type,
                                                             ir.VectorType):
                ins.align = 4 * self.cg.config.vector_width
                ins.set_metadata("nontemporal", self.module.add_metadata(
                    [ir.Constant(ir.IntType(32), 1)]))
                self.__dict__["_streamed"] = True

    def end_streams(self) -> None:
        """``sfence`` after the non-temporal stores of the function, if any: they are
        weakly ordered, and whoever joins the segment must see them."""
        if self.__dict__.get("_streamed"):
            fence = declare_function(self.module, "llvm.x86.sse.sfence",
                                     ir.FunctionType(ir.VoidType(), []))
            self.b.call(fence, [])

    def dead_stores(self) -> frozenset[str]:
        """Buffers a fused nest writes that nothing reads but its later parts at the point
        just written (forwarded): their stores are skipped."""
        got = self.__dict__.get("_dead_stores")
        if got is None:
            got = self.__dict__["_dead_stores"] = _forwarded_only(self.cg.program)
        return got

    def _squares_result(self, p: lp.SquaresNest, slots: list[_Welford], edge: bool) -> None:
        """``m2 + n·(mean - center)²`` of the merged accumulators (0 for an empty row); the
        accumulators merge lane-wise, then their lanes pairwise (a tree of vector merges:
        no chain of ``w`` scalar divisions after each row)."""
        b = self.b
        n, m, q = slots[0].values(self)
        for other in slots[1:]:
            n, m, q = _chan(b, (n, m, q), other.values(self))
        w = width = n.type.count
        while width > 1:  # lanes pairwise, as a tree: lane k takes in lane k + width/2
            half = width // 2
            idx = ir.Constant(ir.VectorType(I32, w), [(k + half) % w for k in range(w)])
            n, m, q = _chan(b, (n, m, q), tuple(b.shuffle_vector(x, x, idx)
                                                for x in (n, m, q)))  # type: ignore[arg-type]
            width = half
        sn, sm, sq = (b.extract_element(x, c64(0)) for x in (n, m, q))
        one = _Lanes(1, None, None, edge)
        c = b.extract_element(self.elem(p.center, one), c64(0))
        d = b.fsub(sm, c)
        total = b.fadd(sq, b.fmul(sn, b.fmul(d, d)))
        zero = ir.Constant(F32, 0.0)
        total = b.select(b.fcmp_ordered(">", sn, zero), total, zero)
        self.write(p.dest, self.splat(total, 1), p.value.dtype, one)


class _Welford:
    """One accumulator of a :class:`~planner.lower.loops.ir.SquaresNest`: per lane the
    running mean, centered sum of squares and (set after the row) count."""

    def __init__(self, mean: ir.Value, m2: ir.Value, count: ir.Value) -> None:
        self.mean, self.m2, self.count = mean, m2, count

    @classmethod
    def start(cls, fn: _Nests, w: int) -> _Welford:
        vt = _vec(F32, w)
        slots = (fn.alloca(vt), fn.alloca(vt), fn.alloca(vt))
        for slot in slots:
            fn.b.store(ir.Constant(vt, [0.0] * w), slot)
        return cls(*slots)

    def update(self, fn: _Nests, x: ir.Value, tail: ir.Value | None,
               step: dict[str, ir.Value] | None) -> None:
        """Add the lanes of ``x`` (those of ``tail`` only): ``d = x - mean``, ``mean +=
        d / n``, ``m2 += d·(x - mean)``, with ``1 / n`` from ``step`` (the same for every
        lane and for accumulators updated in lockstep)."""
        assert step is not None
        b = fn.b
        mean, m2 = b.load(self.mean), b.load(self.m2)
        d = b.fsub(x, mean)
        new_mean = b.fadd(mean, b.fmul(d, step["r"], flags=("contract",)), flags=("contract",))
        new_m2 = b.fadd(m2, b.fmul(d, b.fsub(x, new_mean), flags=("contract",)),
                        flags=("contract",))
        if tail is not None:
            new_mean = b.select(tail, new_mean, mean)
            new_m2 = b.select(tail, new_m2, m2)
        b.store(new_mean, self.mean)
        b.store(new_m2, self.m2)

    def counted(self, fn: _Nests, vectors: ir.Value, tail: ir.Value) -> None:
        """Record the count: ``vectors`` full vectors, then lanes below ``tail``."""
        b = fn.b
        vt = self.mean.type.pointee
        w = vt.count
        lanes = b.icmp_signed("<", ir.Constant(_vec(I64, w), list(range(w))),
                              fn.splat(tail, w))
        extra = b.select(lanes, ir.Constant(vt, [1.0] * w), ir.Constant(vt, [0.0] * w))
        b.store(b.fadd(fn.splat(b.sitofp(vectors, F32), w), extra), self.count)

    def values(self, fn: _Nests) -> tuple[ir.Value, ir.Value, ir.Value]:
        """(count, mean, m2) per lane."""
        b = fn.b
        return b.load(self.count), b.load(self.mean), b.load(self.m2)


def _forwarded_only(program: lp.LoopProgram) -> frozenset[str]:
    """Buffers written by a part of a fused nest and read only by later parts of the
    same nest at the element written (every other read, an mma's included, keeps the
    store)."""
    reads: set[str] = set()
    fused: set[str] = set()
    for seg in program.segments:
        for s in lp.walk_stmts(seg.body):
            if isinstance(s, lp.Mma):
                reads |= {o.buffer for o in (s.a, s.b, s.c) if isinstance(o, lp.MmaBuf)}
                continue
            parts = s.parts if isinstance(s, lp.FusedNest) else (
                (s,) if isinstance(s, lp.Nest | lp.ReduceNest) else ())
            written: dict[str, lp.BufWrite] = {}
            for p in parts:
                got = list(lp.elem_reads(p.value))
                if isinstance(p, lp.SquaresNest):
                    got += lp.elem_reads(p.center)
                for r in got:
                    w = written.get(r.buffer) if isinstance(r, lp.BufRead) else None
                    if isinstance(r, lp.BufRead) and (
                            w is None or (r.index, r.version) != (w.index, w.version)):
                        reads.add(r.buffer)
                if isinstance(p, lp.Nest) and isinstance(p.dest, lp.BufWrite):
                    written[p.dest.buffer] = p.dest
                    if isinstance(s, lp.FusedNest):
                        fused.add(p.dest.buffer)
    return frozenset(b for b in fused - reads
                     if program.buffer(b).role in ("materialized", "virtual"))


#: Stores are streamed (non-temporal) only where the kernel's views hold at least this
#: many bytes together: half the 32 MiB L3 of the x86 targets' machine class, past which
#: the output is evicted before anything could read it from cache, and writing it
#: through the cache only costs a read of every line (write-allocate) and evicts inputs.
STREAM_MIN_BYTES = 16 << 20
#: The i64 module global the rows compare the views' bytes with: the runtime raises it
#: out of reach where plain stores measured faster (``planner.lower.cpu.runtime``'s
#: ``_StreamTrial``: on an Intel Xeon VM with a 480 MiB L3, GELU on 16M floats ran
#: 9.5 ms on 1 thread with plain stores against 13.0 ms streamed, while softmax and
#: layernorm on 4096×4096 ran 15 and 10 ms streamed against 19 and 14 ms plain).
STREAM_THRESHOLD_SYMBOL = "planner.stream_min_bytes"
_LINE = 64  # bytes of a cache line; streamed stores write whole lines


def view_bytes(program: lp.LoopProgram) -> Expr:
    """The bytes of every view of ``program`` together."""
    return add(*(mul(_align(_mem_type(p.dtype)), product(p.shape)) for p in program.params))


def _chan(b: ir.IRBuilder, x: tuple[ir.Value, ir.Value, ir.Value],
          y: tuple[ir.Value, ir.Value, ir.Value]) -> tuple[ir.Value, ir.Value, ir.Value]:
    """Chan's merge of two (count, mean, m2) (lane-wise on vectors): an empty side leaves
    the other unchanged."""
    (na, ma, qa), (nb, mb, qb) = x, y
    t = na.type
    zero = ir.Constant(t, [0.0] * t.count) if isinstance(t, ir.VectorType) \
        else ir.Constant(t, 0.0)
    one = ir.Constant(t, [1.0] * t.count) if isinstance(t, ir.VectorType) \
        else ir.Constant(t, 1.0)
    n = b.fadd(na, nb)
    f = b.fdiv(nb, b.select(b.fcmp_ordered(">", n, zero), n, one))  # nb / n
    d = b.fsub(mb, ma)
    m = b.fadd(ma, b.fmul(d, f))
    q = b.fadd(b.fadd(qa, qb), b.fmul(b.fmul(d, d), b.fmul(na, f)))
    return n, m, q


def _identity(fn: ReduceFn, dt: DType) -> float | int:
    if fn is ReduceFn.SUM:
        return 0.0 if dt.is_float else 0
    if dt.is_float:
        return float("-inf")
    return 0 if dt is DType.BOOL else -(2**31)


def _invariant_divisors(e: lp.Elem, hoisted: dict[lp.Elem, ir.Value]) -> list[lp.Elem]:
    """The divisors of the f32 divisions in ``e`` that are hoisted (invariant), where the
    division itself is not."""
    out: list[lp.Elem] = []
    stack = [e]
    while stack:
        x = stack.pop()
        if x in hoisted:
            continue
        if isinstance(x, lp.Binary) and x.fn is BinaryFn.DIV and x.dtype is DType.F32 \
                and x.b in hoisted and x.b not in out:
            out.append(x.b)
        stack.extend(lp.elem_children(x))
    return out


def _invariant_roots(e: lp.Elem, var: str, dests: set[tuple[str, str]],
                     out: list[lp.Elem]) -> bool:
    """Collect maximal subtrees independent of ``var`` (not reading a destination of
    the nest); returns whether ``e`` itself is invariant."""
    children = lp.elem_children(e)
    flags = [_invariant_roots(c, var, dests, out) for c in children]
    if isinstance(e, lp.ViewRead | lp.BufRead):
        key = ("view", e.view) if isinstance(e, lp.ViewRead) else ("buf", e.buffer)
        mine = key not in dests and all(var not in i.symbols() for i in e.index)
        if isinstance(e, lp.BufRead):
            mine = mine and var not in e.version.symbols()
    elif isinstance(e, lp.IndexOf):
        mine = var not in e.expr.symbols()
    elif isinstance(e, lp.Lit):
        return True
    else:
        mine = all(flags)
    if not mine:
        for c, f in zip(children, flags, strict=True):
            if f and not isinstance(c, lp.Lit):
                out.append(c)
    return mine
