"""Loop nests: the in-bounds / edge-tile versions, the outer loops, the vectorized
innermost loop (unrolled main loop with independent reduction accumulators, full
vectors, one masked tail), hoisting of invariant subexpressions and W×W transposed
copies."""

from __future__ import annotations

import llvmlite.ir as ir

from planner.ir.core import ReduceFn
from planner.ir.dtypes import DType
from planner.ir.expr import Const, Expr
from planner.lower.cpu.builder import _align, _reg_type, _vec
from planner.lower.cpu.context import _Lanes
from planner.lower.cpu.elements import _COMBINE, _HORIZONTAL, _Elements
from planner.lower.cpu.index_exprs import _coeff
from planner.lower.cpu.llvm_helpers import I1, I64, c64, transpose
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
            with outside:
                self.nest_body(s, parts, edge=True)

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
        accs: dict[int, tuple[list[ir.Value], ir.Constant, float | int]] = {}
        for i, p in enumerate(parts):
            if isinstance(p, lp.ReduceNest):
                vt = _vec(_reg_type(p.value.dtype), w)
                ident = _identity(p.fn, p.value.dtype)
                ident_v = ir.Constant(vt, [ident] * w)
                slots = [self.alloca(vt) for _ in range(unroll)]
                for slot in slots:
                    b.store(ident_v, slot)
                accs[i] = (slots, ident_v, ident)

        def point(lanes: _Lanes, slot: int = 0) -> None:
            for i, p in enumerate(parts):
                v = self.elem(p.value, lanes)
                if isinstance(p, lp.Nest):
                    self.write(p.dest, v, p.value.dtype, lanes)
                    if isinstance(p.dest, lp.BufWrite):  # forward to later parts
                        lanes.cache[lp.BufRead(p.dest.buffer, p.dest.index, p.dest.version,
                                               p.value.dtype)] = v
                    continue
                slots, ident_v, _ = accs[i]
                if lanes.tail is not None:
                    v = b.select(lanes.tail, v, ident_v)
                acc = slots[slot]
                b.store(_COMBINE[(p.fn, p.value.dtype)](self, b.load(acc), v), acc)

        n = self.expr(s.extents[-1])
        lo = start if start is not None else c64(0)
        with b.if_then(b.icmp_signed(">", n, lo)):
            hoisted = self._hoisted(parts, var, edge)
            const_n = s.extents[-1].const_value() if start is None else None
            full = b.add(lo, b.mul(b.sdiv(b.sub(n, lo), c64(w)), c64(w))) \
                if const_n is None else c64(const_n // w * w)
            done = lo
            if unroll > 1 and (const_n is None or const_n >= unroll * w):
                step = unroll * w
                done = b.add(lo, b.mul(b.sdiv(b.sub(n, lo), c64(step)), c64(step)))
                with self.loop(lo, done, step, "vu") as base:
                    for j in range(unroll):
                        self.env[var] = b.add(base, c64(j * w))
                        point(_Lanes(w, var, None, edge, dict(hoisted)), j)
            if const_n is None or const_n >= w:
                with self.loop(done, full, w, "v") as base:
                    self.env[var] = base
                    point(_Lanes(w, var, None, edge, dict(hoisted)))
            if const_n is None or const_n % w:
                rem = b.sub(n, full)
                with b.if_then(b.icmp_signed(">", rem, c64(0))):
                    self.env[var] = full
                    tail = b.icmp_signed("<", ir.Constant(_vec(I64, w), list(range(w))),
                                         self.splat(rem, w))
                    point(_Lanes(w, var, tail, edge, dict(hoisted)))
        for i, p in enumerate(parts):
            if isinstance(p, lp.ReduceNest):
                slots, _, ident = accs[i]
                combine = _COMBINE[(p.fn, p.value.dtype)]
                vec = b.load(slots[0])
                for slot in slots[1:]:
                    vec = combine(self, vec, b.load(slot))
                total = _HORIZONTAL[(p.fn, p.value.dtype)](self, vec, ident)
                lanes = _Lanes(1, None, None, edge)
                self.write(p.dest, self.splat(total, 1), p.value.dtype, lanes)



def _identity(fn: ReduceFn, dt: DType) -> float | int:
    if fn is ReduceFn.SUM:
        return 0.0 if dt.is_float else 0
    if dt.is_float:
        return float("-inf")
    return 0 if dt is DType.BOOL else -(2**31)


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
