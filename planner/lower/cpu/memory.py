"""Memory access: view and buffer addresses (strides, layouts, swizzles), edge-tile
validity masks, and vector loads and stores classified as contiguous, uniform or
gathered; i1 is stored as i8."""

from __future__ import annotations

import llvmlite.ir as ir

from planner.ir.dtypes import DType
from planner.ir.expr import Const, Expr, Sym, add, mul
from planner.lower.cpu.builder import _align, _mem_type, _vec
from planner.lower.cpu.context import _Lanes
from planner.lower.cpu.index_exprs import _coeff, _IndexExprs
from planner.lower.cpu.llvm_helpers import I1, I8, I32, I64, c64
from planner.lower.loops import program as lp


class _Memory(_IndexExprs):
    """Emits the reads and writes of a segment function."""

    def buffer_ptr(self, name: str, version: Expr) -> ir.Value:
        """Typed pointer to element 0 of ``version`` of buffer ``name``."""
        buf = self.cg.program.buffer(name)
        p = self.typed(self.bases[name], _mem_type(buf.dtype))
        if version != Const(0):
            p = self.b.gep(p, [self.expr(mul(version, buf.version_stride()))])
        return p

    def view_ptr(self, name: str) -> ir.Value:
        p = self.cg.program.param(name)
        return self.typed(self.views[name], _mem_type(p.dtype))

    def view_offset(self, name: str, index: tuple[Expr, ...]) -> Expr:
        rank = len(index)
        terms = [idx if d == rank - 1 else mul(idx, Sym(self.cg.stride_sym(name, d)))
                 for d, idx in enumerate(index)]
        return add(*terms) if terms else Const(0)

    def buffer_offset(self, buf: lp.Buffer, index: tuple[Expr, ...]) -> Expr:
        return buf.layout.linear(index) if index else Const(0)

    def swizzle(self, off: ir.Value, buf: lp.Buffer) -> ir.Value:
        for sw in buf.layout.swizzles:
            ty = off.type
            vec = isinstance(ty, ir.VectorType)
            mask_v = ((1 << sw.bits) - 1) << (sw.base + sw.shift)

            def const(v: int, ty: ir.Type = ty, vec: bool = vec) -> ir.Constant:
                return ir.Constant(ty, [v] * ty.count) if vec else ir.Constant(ty, v)

            moved = self.b.lshr(self.b.and_(off, const(mask_v)), const(sw.shift))
            off = self.b.xor(off, moved)
        return off

    def offset(self, off: Expr, lanes: _Lanes | None, buf: lp.Buffer | None) -> ir.Value:
        """``iexpr(off, lanes)`` through the swizzles of ``buf``'s layout, if any."""
        o = self.iexpr(off, lanes)
        return self.swizzle(o, buf) if buf is not None else o

    def classify(self, off: Expr, lanes: _Lanes, swizzled: bool) -> str:
        if lanes.var is None or lanes.var not in off.symbols():
            return "uniform"
        if lanes.w > 1 and not swizzled and _coeff(off, lanes.var) == Const(1):
            return "contiguous"
        return "gather" if lanes.w > 1 else "uniform"

    def load(self, ptr: ir.Value, off: Expr, lanes: _Lanes, mask: ir.Value | None,
             scalar_ok: ir.Value | None, fill: ir.Value, mtype: ir.Type,
             buf: lp.Buffer | None) -> ir.Value:
        """Load ``w`` lanes of ``ptr[off]`` (masked lanes give ``fill``, a ``<w x T>``)."""
        b = self.b
        w = lanes.w
        vt = _vec(mtype, w)
        swz = buf is not None and bool(buf.layout.swizzles)
        kind = self.classify(off, lanes, swz)
        if kind == "uniform":
            addr = b.gep(ptr, [self.offset(off, None, buf)])
            if scalar_ok is None:
                return self.splat(b.load(addr), w)
            scalar_fill = b.extract_element(fill, ir.Constant(I32, 0))
            return self.splat(self.guarded(scalar_ok, lambda: b.load(addr), scalar_fill), w)
        if kind == "contiguous":
            addr = b.bitcast(b.gep(ptr, [self.iexpr(off, None)]), vt.as_pointer())
            if mask is None:
                return b.load(addr, align=_align(mtype))
            fn = self.intrinsic("llvm.masked.load", [vt, ir.PointerType()], vt,
                                [ir.PointerType(), I32, mask.type, vt])
            return b.call(fn, [addr, ir.Constant(I32, _align(mtype)), mask, fill])
        ptrs = self.lane_ptrs(ptr, self.offset(off, lanes, buf), mtype, w)
        m = mask if mask is not None else ir.Constant(_vec(I1, w), [1] * w)
        fn = self.intrinsic("llvm.masked.gather", [vt, ptrs.type], vt,
                            [ptrs.type, I32, m.type, vt])
        return b.call(fn, [ptrs, ir.Constant(I32, _align(mtype)), m, fill])

    def store(self, value: ir.Value, ptr: ir.Value, off: Expr, lanes: _Lanes,
              mask: ir.Value | None, scalar_ok: ir.Value | None, buf: lp.Buffer | None
              ) -> None:
        b = self.b
        w = lanes.w
        vt = value.type
        mtype = vt.element
        swz = buf is not None and bool(buf.layout.swizzles)
        kind = self.classify(off, lanes, swz)
        if kind == "uniform":
            addr = b.gep(ptr, [self.offset(off, None, buf)])
            lane0 = b.extract_element(value, ir.Constant(I32, 0))
            if scalar_ok is None:
                b.store(lane0, addr)
            else:
                with b.if_then(scalar_ok):
                    b.store(lane0, addr)
            return
        if kind == "contiguous":
            addr = b.bitcast(b.gep(ptr, [self.iexpr(off, None)]), vt.as_pointer())
            if mask is None:
                b.store(value, addr, align=_align(mtype))
                return
            fn = self.intrinsic("llvm.masked.store", [vt, ir.PointerType()], ir.VoidType(),
                                [vt, ir.PointerType(), I32, mask.type])
            b.call(fn, [value, addr, ir.Constant(I32, _align(mtype)), mask])
            return
        ptrs = self.lane_ptrs(ptr, self.offset(off, lanes, buf), mtype, w)
        m = mask if mask is not None else ir.Constant(_vec(I1, w), [1] * w)
        fn = self.intrinsic("llvm.masked.scatter", [vt, ptrs.type], ir.VoidType(),
                            [vt, ptrs.type, I32, m.type])
        b.call(fn, [value, ptrs, ir.Constant(I32, _align(mtype)), m])

    def lane_ptrs(self, ptr: ir.Value, offs: ir.Value, mtype: ir.Type, w: int) -> ir.Value:
        b = self.b
        size = _align(mtype)
        base = self.splat(b.ptrtoint(ptr, I64), w)
        addrs = b.add(base, b.mul(offs, ir.Constant(_vec(I64, w), [size] * w)))
        return b.inttoptr(addrs, _vec(mtype.as_pointer(), w))

    def view_valid(self, view: str, index: tuple[Expr, ...], lanes: _Lanes) -> ir.Value | None:
        """``0 <= index < extent`` in every dim: i1 or ``<w x i1>``; None when not masking."""
        if not lanes.edge:
            return None
        shape = self.cg.program.param(view).shape
        ok: ir.Value | None = None
        for idx, ext in zip(index, shape, strict=True):
            i = self.iexpr(idx, lanes)
            n = self.expr(ext)
            if isinstance(i.type, ir.VectorType):
                n = self.splat(n, lanes.w)
                zero = ir.Constant(i.type, [0] * lanes.w)
            else:
                zero = c64(0)
            c = self.b.and_(self.b.icmp_signed(">=", i, zero), self.b.icmp_signed("<", i, n))
            ok = c if ok is None else self._and_mask(ok, c, lanes.w)
        return ok

    def _and_mask(self, a: ir.Value, c: ir.Value, w: int) -> ir.Value:
        av, cv = isinstance(a.type, ir.VectorType), isinstance(c.type, ir.VectorType)
        if av and not cv:
            c = self.splat(c, w)
        elif cv and not av:
            a = self.splat(a, w)
        return self.b.and_(a, c)

    def lane_mask(self, valid: ir.Value | None, lanes: _Lanes) -> tuple[ir.Value | None,
                                                                          ir.Value | None]:
        """(vector mask or None, scalar condition or None) from validity and the tail."""
        if valid is None:
            return lanes.tail, None
        if not isinstance(valid.type, ir.VectorType):
            wide = self.splat(valid, lanes.w)
            return (wide if lanes.tail is None else self.b.and_(lanes.tail, wide)), valid
        if lanes.tail is not None:
            return self.b.and_(valid, lanes.tail), None
        return valid, None

    def _from_mem(self, raw: ir.Value, dt: DType, w: int) -> ir.Value:
        if dt is DType.BOOL:
            return self.b.icmp_unsigned("!=", raw, ir.Constant(raw.type, [0] * w))
        return raw

    def _to_mem(self, v: ir.Value, dt: DType, w: int) -> ir.Value:
        if dt is DType.BOOL:
            return self.b.zext(v, _vec(I8, w))
        return v

    def write(self, dest: lp.Dest, value: ir.Value, dtype: DType, lanes: _Lanes) -> None:
        v = self._to_mem(value, dtype, lanes.w)
        if isinstance(dest, lp.BufWrite):
            buf = self.cg.program.buffer(dest.buffer)
            self.store(v, self.buffer_ptr(dest.buffer, dest.version),
                       self.buffer_offset(buf, dest.index), lanes, lanes.tail, None, buf)
            return
        valid = self.view_valid(dest.view, dest.index, lanes)
        mask, scalar_ok = self.lane_mask(valid, lanes)
        self.store(v, self.view_ptr(dest.view), self.view_offset(dest.view, dest.index), lanes,
                   mask, scalar_ok, None)
