"""Integer expressions (indices, extents, offsets) → i64 scalars, or ``<w x i64>`` lane
vectors where they depend on the vectorized variable; :func:`_coeff` reads the
coefficient of a variable in an affine expression."""

from __future__ import annotations

from collections.abc import Callable

import llvmlite.ir as ir

from planner.errors import error
from planner.ir.expr import Apply, Const, Expr, ExprOp, Sym, add, mul
from planner.lower.cpu.builder import _vec
from planner.lower.cpu.context import _FnState, _Lanes
from planner.lower.cpu.llvm_helpers import I64, c64

_KIND = "lowering"


def _coeff(e: Expr, var: str) -> Expr | None:
    """The coefficient of ``var`` when ``e`` is affine in it, else None."""
    if var not in e.symbols():
        return Const(0)
    if isinstance(e, Sym):
        return Const(1)
    assert isinstance(e, Apply)
    if e.op is ExprOp.ADD:
        parts = [_coeff(a, var) for a in e.args]
        return None if any(p is None for p in parts) else add(*parts)  # type: ignore[arg-type]
    if e.op is ExprOp.MUL:
        with_var = [a for a in e.args if var in a.symbols()]
        if len(with_var) != 1:
            return None
        inner = _coeff(with_var[0], var)
        if inner is None:
            return None
        return mul(inner, *(a for a in e.args if var not in a.symbols()))
    return None


class _IndexExprs(_FnState):
    """Emits the integer expressions of a segment function."""

    def expr(self, e: Expr) -> ir.Value:
        """A scalar i64 (the vector variable, if any, at its lane-0 value)."""
        return self.iexpr(e, None)

    def iexpr(self, e: Expr, lanes: _Lanes | None) -> ir.Value:
        """i64, or ``<w x i64>`` when ``e`` depends on the lanes' vector variable."""
        if isinstance(e, Const):
            return c64(e.value)
        if isinstance(e, Sym):
            if e.name not in self.env:
                raise error(f"lowering: symbol {e.name} is not bound here", kind=_KIND)
            v = self.env[e.name]
            if lanes is not None and lanes.var == e.name and lanes.w > 1:
                iota = ir.Constant(_vec(I64, lanes.w), list(range(lanes.w)))
                return self.b.add(self.splat(v, lanes.w), iota)
            return v
        assert isinstance(e, Apply)
        vector = lanes is not None and lanes.var is not None and lanes.var in e.symbols() \
            and lanes.w > 1
        args = [self.iexpr(a, lanes) for a in e.args]
        if vector:
            args = [a if isinstance(a.type, ir.VectorType) else self.splat(a, lanes.w)
                    for a in args]  # type: ignore[union-attr]
        return _IEXPR[e.op](self, args)

    def _iadd(self, args: list[ir.Value]) -> ir.Value:
        out = args[0]
        for a in args[1:]:
            out = self.b.add(out, a)
        return out

    def _imul(self, args: list[ir.Value]) -> ir.Value:
        out = args[0]
        for a in args[1:]:
            out = self.b.mul(out, a)
        return out

    def _safe_divisor(self, d: ir.Value) -> ir.Value:
        if isinstance(d, ir.Constant) and not isinstance(d.type, ir.VectorType):
            return d
        zero = ir.Constant(d.type, 0) if not isinstance(d.type, ir.VectorType) \
            else ir.Constant(d.type, [0] * d.type.count)
        one = ir.Constant(d.type, 1) if not isinstance(d.type, ir.VectorType) \
            else ir.Constant(d.type, [1] * d.type.count)
        return self.b.select(self.b.icmp_signed("==", d, zero), one, d)

    def _floordiv(self, args: list[ir.Value]) -> ir.Value:
        a, d = args[0], self._safe_divisor(args[1])
        b = self.b
        q, r = b.sdiv(a, d), b.srem(a, d)
        zero = ir.Constant(a.type, None)
        fix = b.and_(b.icmp_signed("!=", r, zero),
                     b.xor(b.icmp_signed("<", r, zero), b.icmp_signed("<", d, zero)))
        return b.sub(q, b.zext(fix, a.type))

    def _mod(self, args: list[ir.Value]) -> ir.Value:
        a, d = args[0], self._safe_divisor(args[1])
        b = self.b
        r = b.srem(a, d)
        zero = ir.Constant(a.type, None)
        fix = b.and_(b.icmp_signed("!=", r, zero),
                     b.xor(b.icmp_signed("<", r, zero), b.icmp_signed("<", d, zero)))
        return b.select(fix, b.add(r, d), r)

    def _ceildiv(self, args: list[ir.Value]) -> ir.Value:
        neg = self.b.neg(args[0])
        return self.b.neg(self._floordiv([neg, args[1]]))

    def _imin(self, args: list[ir.Value]) -> ir.Value:
        return self.b.select(self.b.icmp_signed("<", args[0], args[1]), args[0], args[1])

    def _imax(self, args: list[ir.Value]) -> ir.Value:
        return self.b.select(self.b.icmp_signed(">", args[0], args[1]), args[0], args[1])


_IEXPR: dict[ExprOp, Callable[[_IndexExprs, list[ir.Value]], ir.Value]] = {
    ExprOp.ADD: _IndexExprs._iadd,
    ExprOp.MUL: _IndexExprs._imul,
    ExprOp.FLOORDIV: _IndexExprs._floordiv,
    ExprOp.MOD: _IndexExprs._mod,
    ExprOp.CEIL_DIV: _IndexExprs._ceildiv,
    ExprOp.MIN: _IndexExprs._imin,
    ExprOp.MAX: _IndexExprs._imax,
}
