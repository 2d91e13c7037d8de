"""Element expressions → LLVM vectors: one emitter per element kind (:data:`_ELEM`) and the
op → builder tables (binary, unary, cast, and the reductions' lane-wise combine and
horizontal reduce). Numerics are described in :mod:`planner.lower.cpu.codegen`."""

from __future__ import annotations

from collections.abc import Callable

import llvmlite.ir as ir

from planner.errors import error
from planner.ir.core import BinaryFn, ReduceFn, UnaryFn
from planner.ir.dtypes import DType
from planner.lower.cpu.builder import _mem_type, _reg_type, _vec
from planner.lower.cpu.context import _Lanes
from planner.lower.cpu.llvm_helpers import I1
from planner.lower.cpu.memory import _Memory
from planner.lower.cpu.vecmath import emit_exp, emit_log, emit_one_plus_tanh, emit_tanh
from planner.lower.loops import program as lp

_KIND = "lowering"
_CONTRACT = ("contract",)
_ARCP = ("contract", "arcp")  # x / y may become x * (1 / y): one reciprocal per row


class _Elements(_Memory):
    """Emits the element expressions of a segment function."""

    def elem(self, e: lp.Elem, lanes: _Lanes) -> ir.Value:
        got = lanes.cache.get(e)
        if got is None:
            got = _ELEM[type(e)](self, e, lanes)
            lanes.cache[e] = got
        return got

    def _lit(self, e: lp.Lit, lanes: _Lanes) -> ir.Value:
        t = _reg_type(e.dtype)
        v = float(e.value) if e.dtype.is_float else int(e.value)
        return ir.Constant(_vec(t, lanes.w), [v] * lanes.w)

    def _index(self, e: lp.IndexOf, lanes: _Lanes) -> ir.Value:
        v = self.iexpr(e.expr, lanes)
        if not isinstance(v.type, ir.VectorType):
            v = self.splat(v, lanes.w)
        vt = _vec(_reg_type(e.dtype), lanes.w)
        if e.dtype is DType.F32:
            return self.b.sitofp(v, vt)
        if e.dtype is DType.BOOL:
            return self.b.icmp_signed("!=", v, ir.Constant(v.type, [0] * lanes.w))
        return self.b.trunc(v, vt)

    def _view_read(self, e: lp.ViewRead, lanes: _Lanes) -> ir.Value:
        p = self.cg.program.param(e.view)
        mtype = _mem_type(p.dtype)
        fill_v = int(bool(e.fill)) if p.dtype is DType.BOOL else (
            float(e.fill) if p.dtype.is_float else int(e.fill))
        fill = ir.Constant(_vec(mtype, lanes.w), [fill_v] * lanes.w)
        valid = self.view_valid(e.view, e.index, lanes)
        mask, scalar_ok = self.lane_mask(valid, lanes)
        off = self.view_offset(e.view, e.index)
        raw = self.load(self.view_ptr(e.view), off, lanes, mask, scalar_ok, fill, mtype, None)
        return self._from_mem(raw, p.dtype, lanes.w)

    def _buf_read(self, e: lp.BufRead, lanes: _Lanes) -> ir.Value:
        buf = self.cg.program.buffer(e.buffer)
        mtype = _mem_type(buf.dtype)
        fill = ir.Constant(_vec(mtype, lanes.w), None)
        off = self.buffer_offset(buf, e.index)
        raw = self.load(self.buffer_ptr(e.buffer, e.version), off, lanes, lanes.tail, None,
                        fill, mtype, buf)
        return self._from_mem(raw, buf.dtype, lanes.w)

    def _unary(self, e: lp.Unary, lanes: _Lanes) -> ir.Value:
        x = self.elem(e.x, lanes)
        fn = _UNARY.get((e.fn, e.dtype))
        if fn is None:
            raise error(f"lowering: {e.fn.value} of {e.dtype} is not supported", kind=_KIND)
        return fn(self, x)

    def _binary(self, e: lp.Binary, lanes: _Lanes) -> ir.Value:
        u = _one_plus_tanh_arg(e)
        if u is not None:  # 1 + tanh(u) as 2·sigmoid(2u): one exp, no cancellation
            a, scale = _scaled(u)
            return emit_one_plus_tanh(self.b, self.elem(a, lanes), scale)
        recip = lanes.cache.get(reciprocal(e.b)) if e.fn is BinaryFn.DIV else None
        if recip is not None:  # by an invariant divisor: x * (1 / y), 1 / y hoisted
            return self.b.fmul(self.elem(e.a, lanes), recip, flags=_CONTRACT)
        a, c = self.elem(e.a, lanes), self.elem(e.b, lanes)
        fn = _BINARY.get((e.fn, e.a.dtype))
        if fn is None:
            raise error(f"lowering: {e.fn.value} of {e.a.dtype} tiles is not supported",
                        kind=_KIND)
        return fn(self, a, c)

    def _select(self, e: lp.Select, lanes: _Lanes) -> ir.Value:
        return self.b.select(self.elem(e.cond, lanes), self.elem(e.a, lanes),
                             self.elem(e.b, lanes))

    def _cast(self, e: lp.Cast, lanes: _Lanes) -> ir.Value:
        x = self.elem(e.x, lanes)
        if e.x.dtype is e.dtype:
            return x
        fn = _CAST.get((e.x.dtype, e.dtype))
        if fn is None:
            raise error(f"lowering: cast {e.x.dtype} -> {e.dtype} is not supported",
                        kind=_KIND)
        return fn(self, x, _vec(_reg_type(e.dtype), lanes.w))

    def vcall(self, name: str, *args: ir.Value) -> ir.Value:
        t = args[0].type
        fn = self.intrinsic(name, [t], t, [a.type for a in args])
        return self.b.call(fn, list(args))


def _f(name: str, flags: tuple[str, ...] = _CONTRACT
       ) -> Callable[[_Elements, ir.Value, ir.Value], ir.Value]:
    def emit(fn: _Elements, a: ir.Value, b: ir.Value) -> ir.Value:
        return getattr(fn.b, name)(a, b, flags=flags)
    return emit


def _i(name: str) -> Callable[[_Elements, ir.Value, ir.Value], ir.Value]:
    return lambda fn, a, b: getattr(fn.b, name)(a, b)


def _fcmp(op: str) -> Callable[[_Elements, ir.Value, ir.Value], ir.Value]:
    return lambda fn, a, b: fn.b.fcmp_ordered(op, a, b)


def _icmp(op: str, signed: bool = True) -> Callable[[_Elements, ir.Value, ir.Value], ir.Value]:
    if signed:
        return lambda fn, a, b: fn.b.icmp_signed(op, a, b)
    return lambda fn, a, b: fn.b.icmp_unsigned(op, a, b)


def _intr2(name: str) -> Callable[[_Elements, ir.Value, ir.Value], ir.Value]:
    return lambda fn, a, b: fn.vcall(name, a, b)


def _int_div(fn: _Elements, a: ir.Value, d: ir.Value) -> ir.Value:
    """C division; ``x / 0`` gives 0 (the interpreter raises) and INT_MIN / -1 wraps."""
    b = fn.b
    t = a.type
    w = t.count
    zero, one = ir.Constant(t, [0] * w), ir.Constant(t, [1] * w)
    is_zero = b.icmp_signed("==", d, zero)
    overflow = b.and_(b.icmp_signed("==", a, ir.Constant(t, [-(2**31)] * w)),
                      b.icmp_signed("==", d, ir.Constant(t, [-1] * w)))
    safe = b.select(b.or_(is_zero, overflow), one, d)
    return b.select(is_zero, zero, b.sdiv(a, safe))


_BINARY: dict[tuple[BinaryFn, DType], Callable[[_Elements, ir.Value, ir.Value], ir.Value]] = {
    (BinaryFn.ADD, DType.F32): _f("fadd"),
    (BinaryFn.SUB, DType.F32): _f("fsub"),
    (BinaryFn.MUL, DType.F32): _f("fmul"),
    (BinaryFn.DIV, DType.F32): _f("fdiv", _ARCP),
    (BinaryFn.MAX, DType.F32): _intr2("llvm.maximum"),
    (BinaryFn.MIN, DType.F32): _intr2("llvm.minimum"),
    (BinaryFn.LT, DType.F32): _fcmp("<"),
    (BinaryFn.LE, DType.F32): _fcmp("<="),
    (BinaryFn.GT, DType.F32): _fcmp(">"),
    (BinaryFn.GE, DType.F32): _fcmp(">="),
    (BinaryFn.EQ, DType.F32): _fcmp("=="),
    (BinaryFn.ADD, DType.I32): _i("add"),
    (BinaryFn.SUB, DType.I32): _i("sub"),
    (BinaryFn.MUL, DType.I32): _i("mul"),
    (BinaryFn.DIV, DType.I32): _int_div,
    (BinaryFn.MAX, DType.I32): _intr2("llvm.smax"),
    (BinaryFn.MIN, DType.I32): _intr2("llvm.smin"),
    (BinaryFn.LT, DType.I32): _icmp("<"),
    (BinaryFn.LE, DType.I32): _icmp("<="),
    (BinaryFn.GT, DType.I32): _icmp(">"),
    (BinaryFn.GE, DType.I32): _icmp(">="),
    (BinaryFn.EQ, DType.I32): _icmp("=="),
    # i1 follows numpy's bool arithmetic: add/max = or, mul/min = and.
    (BinaryFn.ADD, DType.BOOL): _i("or_"),
    (BinaryFn.MAX, DType.BOOL): _i("or_"),
    (BinaryFn.MUL, DType.BOOL): _i("and_"),
    (BinaryFn.MIN, DType.BOOL): _i("and_"),
    (BinaryFn.LT, DType.BOOL): _icmp("<", signed=False),
    (BinaryFn.LE, DType.BOOL): _icmp("<=", signed=False),
    (BinaryFn.GT, DType.BOOL): _icmp(">", signed=False),
    (BinaryFn.GE, DType.BOOL): _icmp(">=", signed=False),
    (BinaryFn.EQ, DType.BOOL): _icmp("==", signed=False),
}


def reciprocal(d: lp.Elem) -> lp.Elem:
    """The element ``1 / d`` (f32): where a nest hoists it (``d`` invariant along the
    vectorized variable), every division by ``d`` is a multiply by it, in every loop and
    tail alike (not only where LLVM hoists the reciprocal itself), so an element's value
    does not depend on which vector it falls in."""
    return lp.Binary(BinaryFn.DIV, lp.Lit(1.0, DType.F32), d, DType.F32)


def _one_plus_tanh_arg(e: lp.Binary) -> lp.Elem | None:
    """``u`` when ``e`` is ``1 + tanh(u)`` or ``tanh(u) + 1`` on f32; else None."""
    if e.fn is not BinaryFn.ADD or e.dtype is not DType.F32:
        return None
    for one, t in ((e.a, e.b), (e.b, e.a)):
        if isinstance(one, lp.Lit) and one.value == 1.0 and isinstance(t, lp.Unary) \
                and t.fn is UnaryFn.TANH and t.dtype is DType.F32:
            return t.x
    return None


def _scaled(u: lp.Elem) -> tuple[lp.Elem, float]:
    """``(a, c)`` when ``u`` is ``a * c`` or ``c * a`` with a finite f32 literal c (GELU's
    ``inner * sqrt(2/pi)``): the sigmoid form then multiplies a by -2c once; else
    ``(u, 1.0)``."""
    if isinstance(u, lp.Binary) and u.fn is BinaryFn.MUL:
        for lit, a in ((u.b, u.a), (u.a, u.b)):
            if isinstance(lit, lp.Lit) and 0.0 < abs(float(lit.value)) < 1e38:
                return a, float(lit.value)
    return u, 1.0


def _rsqrt(fn: _Elements, x: ir.Value) -> ir.Value:
    one = ir.Constant(x.type, [1.0] * x.type.count)
    return fn.b.fdiv(one, fn.vcall("llvm.sqrt", x))


def _ineg(fn: _Elements, x: ir.Value) -> ir.Value:
    return fn.b.sub(ir.Constant(x.type, [0] * x.type.count), x)


def _iabs(fn: _Elements, x: ir.Value) -> ir.Value:
    f = fn.intrinsic("llvm.abs", [x.type], x.type, [x.type, I1])
    return fn.b.call(f, [x, ir.Constant(I1, 0)])


_UNARY: dict[tuple[UnaryFn, DType], Callable[[_Elements, ir.Value], ir.Value]] = {
    (UnaryFn.NEG, DType.F32): lambda fn, x: fn.b.fneg(x),
    (UnaryFn.EXP, DType.F32): lambda fn, x: emit_exp(fn.b, x),
    (UnaryFn.LOG, DType.F32): lambda fn, x: emit_log(fn.b, x),
    (UnaryFn.TANH, DType.F32): lambda fn, x: emit_tanh(fn.b, x),
    (UnaryFn.SQRT, DType.F32): lambda fn, x: fn.vcall("llvm.sqrt", x),
    (UnaryFn.RSQRT, DType.F32): _rsqrt,
    (UnaryFn.ABS, DType.F32): lambda fn, x: fn.vcall("llvm.fabs", x),
    (UnaryFn.NEG, DType.I32): _ineg,
    (UnaryFn.ABS, DType.I32): _iabs,
}


def _fptosi_sat(fn: _Elements, x: ir.Value, t: ir.Type) -> ir.Value:
    f = fn.intrinsic("llvm.fptosi.sat", [t, x.type], t, [x.type])
    return fn.b.call(f, [x])


_CAST: dict[tuple[DType, DType], Callable[[_Elements, ir.Value, ir.Type], ir.Value]] = {
    (DType.F32, DType.I32): _fptosi_sat,
    (DType.F32, DType.BOOL): lambda fn, x, t: fn.b.fcmp_unordered(
        "!=", x, ir.Constant(x.type, [0.0] * x.type.count)),
    (DType.I32, DType.F32): lambda fn, x, t: fn.b.sitofp(x, t),
    (DType.I32, DType.BOOL): lambda fn, x, t: fn.b.icmp_signed(
        "!=", x, ir.Constant(x.type, [0] * x.type.count)),
    (DType.BOOL, DType.F32): lambda fn, x, t: fn.b.uitofp(x, t),
    (DType.BOOL, DType.I32): lambda fn, x, t: fn.b.zext(x, t),
}


def _running_max(fn: _Elements, acc: ir.Value, x: ir.Value) -> ir.Value:
    """``max(acc, x)`` for a reduction: ``x`` when it is greater or NaN, else ``acc`` (a
    NaN stays, as in numpy). One compare on the accumulator's latency chain instead of
    ``llvm.maximum``'s sign-of-zero ordering (a blend, a max and a NaN fix-up); like
    numpy's reductions, a row holding both zeros gives the one met first."""
    b = fn.b
    take = b.or_(b.fcmp_ordered(">", x, acc), b.fcmp_unordered("uno", x, x))
    return b.select(take, x, acc)


_COMBINE: dict[tuple[ReduceFn, DType], Callable[[_Elements, ir.Value, ir.Value], ir.Value]] = {
    (ReduceFn.SUM, DType.F32): _f("fadd"),
    (ReduceFn.MAX, DType.F32): _running_max,
    (ReduceFn.SUM, DType.I32): _i("add"),
    (ReduceFn.MAX, DType.I32): _intr2("llvm.smax"),
    (ReduceFn.SUM, DType.BOOL): _i("or_"),
    (ReduceFn.MAX, DType.BOOL): _i("or_"),
}


def _hreduce(name: str) -> Callable[[_Elements, ir.Value, float | int], ir.Value]:
    def emit(fn: _Elements, v: ir.Value, ident: float | int) -> ir.Value:
        el = v.type.element
        f = fn.intrinsic(name, [v.type], el, [v.type])
        return fn.b.call(f, [v])
    return emit


def _htree(combine: Callable[[_Elements, ir.Value, ir.Value], ir.Value]
           ) -> Callable[[_Elements, ir.Value, float | int], ir.Value]:
    """Lanes combined pairwise, as a tree: the upper half onto the lower half, halving the
    width each step (log2(w) vector ops; an ordered float reduction is a chain of w
    dependent scalar adds, and ``llvm.vector.reduce.fmaximum`` expands to a longer one)."""
    def emit(fn: _Elements, v: ir.Value, ident: float | int) -> ir.Value:
        b = fn.b
        width = v.type.count
        assert width & (width - 1) == 0, "catalog vector widths are 4, 8 or 16 lanes"
        while width > 1:
            half = width // 2
            lo = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), half),
                                                    list(range(half))))
            hi = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), half),
                                                    list(range(half, width))))
            v, width = combine(fn, lo, hi), half
        return b.extract_element(v, ir.Constant(ir.IntType(64), 0))
    return emit


def _greater(fn: _Elements, acc: ir.Value, x: ir.Value) -> ir.Value:
    return fn.b.select(fn.b.fcmp_ordered(">", x, acc), x, acc)


def _hmax(fn: _Elements, v: ir.Value, ident: float | int) -> ir.Value:
    """The lanes' maximum: a tree of plain ``x > acc`` selects, then NaN when any lane is
    NaN, tested once on the whole vector beside the tree rather than at every step
    (:func:`_running_max`'s NaN test doubles the tree's latency chain)."""
    b = fn.b
    best = _htree(_greater)(fn, v, ident)
    lanes = v.type.count
    nan = b.bitcast(b.fcmp_unordered("uno", v, v), ir.IntType(lanes))
    anynan = b.icmp_unsigned("!=", nan, ir.Constant(ir.IntType(lanes), 0))
    return b.select(anynan, ir.Constant(best.type, float("nan")), best)


_HORIZONTAL: dict[tuple[ReduceFn, DType],
                  Callable[[_Elements, ir.Value, float | int], ir.Value]] = {
    (ReduceFn.SUM, DType.F32): _htree(_f("fadd")),
    (ReduceFn.MAX, DType.F32): _hmax,
    (ReduceFn.SUM, DType.I32): _hreduce("llvm.vector.reduce.add"),
    (ReduceFn.MAX, DType.I32): _hreduce("llvm.vector.reduce.smax"),
    (ReduceFn.SUM, DType.BOOL): _hreduce("llvm.vector.reduce.or"),
    (ReduceFn.MAX, DType.BOOL): _hreduce("llvm.vector.reduce.or"),
}

_ELEM: dict[type, Callable[[_Elements, lp.Elem, _Lanes], ir.Value]] = {
    lp.Lit: _Elements._lit,
    lp.IndexOf: _Elements._index,
    lp.ViewRead: _Elements._view_read,
    lp.BufRead: _Elements._buf_read,
    lp.Unary: _Elements._unary,
    lp.Binary: _Elements._binary,
    lp.Select: _Elements._select,
    lp.Cast: _Elements._cast,
}
