"""LLVM IR for a loop program: the CPU backend's code generator (llvmlite).

ABI
---
Each segment of the program becomes one function::

    void <kernel>.seg<j>(i64 begin, i64 end, i64* syms, i8** views, i64* strides,
                         i8* worker_arena, i8* global_arena, i64* bufinfo)

``[begin, end)`` is the range of parallel instances (row-major linear ids) this call
runs, so a worker pool splits a segment's instances across threads; a serial segment
is called once with ``[0, 1)``.  ``syms`` holds the program's symbols in
``LoopProgram.symbols`` order, ``views`` the data pointers of the view parameters and
``strides`` their element strides (all dims of all views, in parameter order); extents
and strides are run-time values, so one compiled kernel serves every shape.  The last
dimension of every view has unit stride (the runtime checks it).

Buffer placement (:func:`placements`): per-instance buffers of a parallel segment live
in the worker's arena (reused by each instance the worker runs), on the stack when they
are private (register-class) and small and static, or, when the plan put them in a
global-class resource, at ``global_arena + offset + instance * stride`` (one copy per
instance, the real traffic a global materialization costs).  Buffers of serial segments
are kernel-scoped in the global arena.  ``bufinfo[2i], bufinfo[2i+1]`` are buffer
``i``'s byte offset and per-instance stride, computed by the runtime.

Code shape
----------
Every nest is emitted with explicit vectors of ``vector_width`` lanes along its last
(unit-stride) variable (the target catalog's ``cpu.vector_width``: 8 = ymm for x86-avx2,
16 = zmm for x86-avx512, whatever the host has): a main
loop of full vectors and one masked tail.  Reads are classified by the coefficient of
that variable in their address: *contiguous* (vector load), *uniform* (one scalar
load, broadcast; hoisted out of the vector loop together with every other
subexpression that does not depend on it) or *gathered* (``llvm.masked.gather``;
transposed reads and XOR-swizzled layouts).  A plain copy between transposed layouts
(e.g. into the column-major ``Bs`` of the manual GEMM) moves W×W blocks with an
in-register shuffle transpose instead.  A nest touching view windows is versioned:
when every window lies inside its view it runs unmasked, else each element is masked
exactly like the interpreter (reads outside give the load's fill, writes outside are
dropped).  Reductions keep ``reduce_unroll`` independent vector accumulators (the
add/max latency chain would otherwise bound them), combine them lane-wise and reduce
horizontally at the end of the row; a fused nest forwards a value it just wrote to the
reduction that reads it, so producer and reduction take one pass.

Numerics.  Transcendentals use the polynomial vector math of
:mod:`planner.lower.cpu.vecmath` (``exp``, ``tanh``, ``log``); ``sqrt`` is
``llvm.sqrt``.  Arithmetic carries the ``contract`` fast-math flag (FMA contraction: one
rounding instead of two) and division also ``arcp`` (``x / y`` may become
``x * (1 / y)``, within an ulp; a division by a row-invariant value then costs one
reciprocal per row).  Never ``nnan``/``ninf`` (masked attention rows rely on ``-inf``
and NaN propagates as in the interpreter) and never ``reassoc`` (reduction order is the
explicit one above).  ``max``/``min`` are ``llvm.maximum``/``llvm.minimum``
(NaN-propagating like numpy).  i32 division by zero gives 0 (the interpreter raises)
instead of trapping.  Buffers are 64-byte aligned; loads and stores assume only element
alignment (unaligned vector accesses cost nothing extra on aligned data).

``mma`` calls a small vectorized kernel for tiny products of unit-inner-stride operands
and otherwise the packed, register-blocked GEMM of :mod:`planner.lower.cpu.gemm`
(:func:`~planner.lower.cpu.gemm.emit_gemm_f32_strided`), directly on buffers (with
both their element strides) or on a view window in place (staged with its fill when it
is an edge tile).  A staging copy ``%stage[i, j] = %src[i, j]`` that the loop program
puts before an mma (for a column-major ``Bs``, say) is skipped and the mma packs
``%src`` through its strides.  The GEMM's packing scratch is allocated once per call of
the segment function (i.e. per worker), grown on demand and freed on return.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields, is_dataclass

import llvmlite.ir as ir

from planner.catalog import Target
from planner.errors import error
from planner.ir.core import BinaryFn, ReduceFn, UnaryFn
from planner.ir.dtypes import DType
from planner.ir.expr import Apply, Const, Expr, ExprOp, Sym, add, mul, product
from planner.lower.cpu.gemm import GemmConfig, emit_gemm_f32_strided, emit_scratch_floats
from planner.lower.cpu.jit import declare_intrinsic
from planner.lower.cpu.llvm_helpers import (
    F32,
    F32P,
    I1,
    I8,
    I8P,
    I32,
    I64,
    I64P,
    c64,
    declare_function,
    internal,
    loop,
    smax,
    smin,
    splat,
    transpose,
)
from planner.lower.cpu.vecmath import emit_exp, emit_log, emit_tanh
from planner.lower.loops import program as lp

__all__ = ["CodegenConfig", "ModuleInfo", "emit_program", "placements"]

_KIND = "lowering"
_NestLike = lp.Nest | lp.ReduceNest | lp.FusedNest
_CONTRACT = ("contract",)
_ARCP = ("contract", "arcp")  # x / y may become x * (1 / y): one reciprocal per row


@dataclass(frozen=True, slots=True)
class CodegenConfig:
    """Vector width (lanes of f32), register budget, stack budget and the mma kernel.

    :meth:`for_target` takes them from the target catalog (the plan's figures), never
    from the host: an x86-avx2 plan gets 8-lane vectors on an AVX-512 machine too.
    """

    vector_width: int = 8  # lanes of f32: the catalog's cpu.vector_width (for_target)
    registers: int = 16  # vector registers: private capacity / (vector_width * 4 B)
    stack_limit: int = 16 * 1024  # bytes per private buffer kept on the stack
    small_mma: int = 32 * 32 * 32  # m*n*k up to which mma uses the small kernel
    reduce_unroll: int = 4  # independent accumulators of a vectorized reduction
    gemm: GemmConfig | None = None  # None: GemmConfig.for_figures(vector_width, registers)

    @classmethod
    def for_target(cls, target: Target) -> CodegenConfig:
        """The figures of ``target``: ``cpu.vector_width`` lanes, and as many vector
        registers as its private resource at the default parallel scope holds."""
        if target.cpu is None:
            raise error(f"target {target.name!r} has no 'cpu' section (vector_width, "
                        "llvm_cpu, llvm_features) to compile for", kind=_KIND)
        width = target.cpu.vector_width
        registers = 16
        private = target.resolve("private", target.default_parallel_scope)
        if private is not None and private.capacity is not None:
            registers = max(1, private.capacity // (width * 4))
        return cls(vector_width=width, registers=registers,
                   gemm=GemmConfig.for_figures(width, registers))


@dataclass(frozen=True, slots=True)
class ModuleInfo:
    """What the runtime needs to call the emitted functions."""

    functions: tuple[str, ...]  # one per segment
    placement: tuple[str, ...]  # per buffer: stack | worker | global | kernel
    view_rank_offsets: tuple[int, ...]  # index of each view's first stride


def placements(program: lp.LoopProgram, config: CodegenConfig) -> dict[str, str]:
    """Where each buffer lives on the CPU (see the module docstring)."""
    owner: dict[str, lp.Segment] = {}
    for seg in program.segments:
        for name in seg.buffers:
            owner[name] = seg
    out: dict[str, str] = {}
    for buf in program.buffers:
        seg = owner.get(buf.name)
        if seg is None or not seg.parallel:
            out[buf.name] = "kernel"
        elif buf.resource_class == "global":
            out[buf.name] = "global"
        else:
            n = buf.static_elements()
            small = n is not None and n * _mem_size(buf.dtype) <= config.stack_limit
            out[buf.name] = "stack" if buf.resource_class == "private" and small else "worker"
    return out


def _mem_size(dt: DType) -> int:
    return 1 if dt is DType.BOOL else dt.itemsize


def _check_dtype(dt: DType) -> None:
    if dt not in (DType.F32, DType.I32, DType.BOOL):
        raise error(f"the CPU backend computes in f32, i32 and i1; {dt} is not supported",
                    kind=_KIND)


def _reg_type(dt: DType) -> ir.Type:
    _check_dtype(dt)
    return {DType.F32: F32, DType.I32: I32, DType.BOOL: I1}[dt]


def _mem_type(dt: DType) -> ir.Type:
    _check_dtype(dt)
    return {DType.F32: F32, DType.I32: I32, DType.BOOL: I8}[dt]


def _vec(t: ir.Type, w: int) -> ir.VectorType:
    return ir.VectorType(t, w)


# =========================================================================== IR helpers


class _IR:
    """Small builder conveniences shared by the function emitters."""

    def __init__(self, b: ir.IRBuilder) -> None:
        self.b = b

    @property
    def module(self) -> ir.Module:
        return self.b.module

    def intrinsic(self, name: str, overloads: list[ir.Type], ret: ir.Type,
                  args: list[ir.Type]) -> ir.Function:
        return declare_intrinsic(self.module, name, overloads, ret, args)

    def splat(self, x: ir.Value, w: int) -> ir.Value:
        return splat(self.b, x, w)

    def loop(self, start: ir.Value, stop: ir.Value, step: int, name: str
             ) -> AbstractContextManager[ir.Value]:
        """``for (i = start; i < stop; i += step)`` over signed i64."""
        return loop(self.b, start, stop, step, name)

    def smin(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return smin(self.b, x, y)

    def smax(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return smax(self.b, x, y)

    def byte_ptr(self, base: ir.Value, offset: ir.Value) -> ir.Value:
        return self.b.gep(base, [offset])

    def typed(self, p: ir.Value, t: ir.Type) -> ir.Value:
        return self.b.bitcast(p, t.as_pointer())

    def guarded(self, cond: ir.Value, then: Callable[[], ir.Value], other: ir.Value
                ) -> ir.Value:
        """``cond ? then() : other`` where ``then`` must not run unless ``cond``."""
        b = self.b
        pre = b.block
        with b.if_then(cond):
            val = then()
            then_block = b.block
        phi = b.phi(other.type)
        phi.add_incoming(val, then_block)
        phi.add_incoming(other, pre)
        return phi


# =========================================================================== expressions


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


@dataclass
class _Lanes:
    """The lanes of one vectorized point of a nest."""

    w: int
    var: str | None  # the vectorized nest variable (its scalar value is env[var])
    tail: ir.Value | None  # <w x i1> active lanes, None when all are active
    edge: bool  # the masked edge-tile version of the nest
    cache: dict[lp.Elem, ir.Value] = field(default_factory=dict)


class _Fn(_IR):
    """Emits one segment function."""

    def __init__(self, cg: _Module, seg: lp.Segment, fn: ir.Function) -> None:
        super().__init__(ir.IRBuilder(fn.append_basic_block("entry")))
        self.cg = cg
        self.seg = seg
        self.fn = fn
        self.env: dict[str, ir.Value] = {}
        self.bases: dict[str, ir.Value] = {}
        self.views: dict[str, ir.Value] = {}
        self.entry = self.b.block
        self.scratch: tuple[ir.Value, ir.Value] | None = None  # mma packing scratch
        self.mma_forward: dict[str, lp.MmaBuf] = {}  # staging copies skipped (body)

    # ------------------------------------------------------------------ entry

    def emit(self) -> None:
        prog = self.cg.program
        begin, end, syms, views, strides, warena, garena, info = self.fn.args
        b = self.b
        for i, name in enumerate(prog.symbols):
            self.env[name] = b.load(b.gep(syms, [c64(i)]))
        for i, p in enumerate(prog.params):
            self.views[p.name] = b.load(b.gep(views, [c64(i)]))
            base = self.cg.info_rank[i]
            for d in range(len(p.shape)):
                self.env[self.cg.stride_sym(p.name, d)] = b.load(
                    b.gep(strides, [c64(base + d)]))
        per_instance: list[tuple[str, ir.Value, ir.Value]] = []
        for idx, buf in enumerate(prog.buffers):
            where = self.cg.placement[buf.name]
            own = buf.name in self.seg.buffers
            off = b.load(b.gep(info, [c64(2 * idx)]))
            if where == "kernel":
                self.bases[buf.name] = b.gep(garena, [off])
            elif not own:
                continue
            elif where == "stack":
                n = buf.static_elements() or 0
                arr = b.alloca(ir.ArrayType(_mem_type(buf.dtype), max(n, 1)))
                arr.align = 64
                self.bases[buf.name] = b.bitcast(arr, I8P)
            elif where == "worker":
                self.bases[buf.name] = b.gep(warena, [off])
            else:
                stride = b.load(b.gep(info, [c64(2 * idx + 1)]))
                per_instance.append((buf.name, b.gep(garena, [off]), stride))
        with self.loop(begin, end, 1, "inst") as inst:
            self.bind(self.seg.vars, self.seg.extents, inst)
            for name, base, stride in per_instance:
                self.bases[name] = b.gep(base, [b.mul(inst, stride)])
            self.body(self.seg.body)
        self.free_scratch()
        b.ret_void()

    def bind(self, vars_: tuple[str, ...], extents: tuple[Expr, ...], lin: ir.Value) -> None:
        """Bind the row-major axis indices of linear index ``lin``."""
        if len(vars_) == 1:
            self.env[vars_[0]] = lin
            return
        rest = lin
        for v, e in reversed(list(zip(vars_, extents, strict=True))):
            n = self.expr(e)
            safe = self.smax(n, c64(1))
            self.env[v] = self.b.urem(rest, safe)
            rest = self.b.udiv(rest, safe)

    def body(self, stmts: tuple[lp.Stmt, ...]) -> None:
        skip, subst = self.forwarded_copies(stmts)
        for i, s in enumerate(stmts):
            if i in skip:
                continue
            self.mma_forward = subst.get(i, {})
            _STMT[type(s)](self, s)
        self.mma_forward = {}

    def alloca(self, t: ir.Type) -> ir.Value:
        with self.b.goto_block(self.entry):
            if self.entry.instructions:
                self.b.position_before(self.entry.instructions[0])
            return self.b.alloca(t)

    # ------------------------------------------------------------------ integer exprs

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

    # ------------------------------------------------------------------ memory access

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

    # ------------------------------------------------------------------ elements

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

    def _from_mem(self, raw: ir.Value, dt: DType, w: int) -> ir.Value:
        if dt is DType.BOOL:
            return self.b.icmp_unsigned("!=", raw, ir.Constant(raw.type, [0] * w))
        return raw

    def _to_mem(self, v: ir.Value, dt: DType, w: int) -> ir.Value:
        if dt is DType.BOOL:
            return self.b.zext(v, _vec(I8, w))
        return v

    def _unary(self, e: lp.Unary, lanes: _Lanes) -> ir.Value:
        x = self.elem(e.x, lanes)
        fn = _UNARY.get((e.fn, e.dtype))
        if fn is None:
            raise error(f"lowering: {e.fn.value} of {e.dtype} is not supported", kind=_KIND)
        return fn(self, x)

    def _binary(self, e: lp.Binary, lanes: _Lanes) -> ir.Value:
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

    # ------------------------------------------------------------------ writes

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

    # ------------------------------------------------------------------ nests

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

    # ------------------------------------------------------------------ mma

    def mma(self, s: lp.Mma) -> None:
        m, n, k = self.expr(s.m), self.expr(s.n), self.expr(s.k)
        c_ptr, ldc, _ = self.mma_buffer(s.c)
        a_ptr, rsa, csa = self.mma_operand(s.a)
        b_ptr, rsb, csb = self.mma_operand(s.b)
        b = self.b
        acc = ir.Constant(I32, int(s.accumulate))
        work = b.mul(b.mul(m, n), k)
        small = b.icmp_signed("<=", work, c64(self.cg.config.small_mma))
        unit = b.and_(b.icmp_signed("==", csa, c64(1)), b.icmp_signed("==", csb, c64(1)))
        with b.if_else(b.and_(small, unit)) as (then, other):
            with then:
                b.call(self.cg.small_gemm(),
                       [m, n, k, a_ptr, rsa, b_ptr, rsb, c_ptr, ldc, acc])
            with other:
                scratch = self.gemm_scratch(n)
                b.call(self.cg.sgemm(), [m, n, k, a_ptr, rsa, csa, b_ptr, rsb, csb, c_ptr,
                                         ldc, acc, scratch])

    def gemm_scratch(self, n: ir.Value) -> ir.Value:
        """Packing scratch for an mma with ``n`` columns: one buffer per call of the
        segment function (one per worker), grown on demand and freed on return."""
        b = self.b
        if self.scratch is None:
            with b.goto_block(self.entry):
                if self.entry.instructions:
                    b.position_before(self.entry.instructions[0])
                ptr, cap = b.alloca(F32P, name="gemm.scratch"), b.alloca(I64, name="gemm.cap")
                b.store(ir.Constant(F32P, None), ptr)
                b.store(c64(0), cap)
            self.scratch = (ptr, cap)
        ptr, cap = self.scratch
        mod = self.cg.module
        need = emit_scratch_floats(b, self.cg.gemm_config, n)
        with b.if_then(b.icmp_signed(">", need, b.load(cap)), likely=False):
            free = declare_function(mod, "free", ir.FunctionType(ir.VoidType(), [I8P]))
            alloc = declare_function(mod, "aligned_alloc", ir.FunctionType(I8P, [I64, I64]))
            trap = mod.declare_intrinsic("llvm.trap", fnty=ir.FunctionType(ir.VoidType(), []))
            b.call(free, [b.bitcast(b.load(ptr), I8P)])
            raw = b.call(alloc, [c64(64), b.mul(need, c64(4))])  # need*4: a multiple of 64
            with b.if_then(b.icmp_unsigned("==", raw, ir.Constant(I8P, None)), likely=False):
                b.call(trap, [])
            b.store(b.bitcast(raw, F32P), ptr)
            b.store(need, cap)
        return b.load(ptr)

    def free_scratch(self) -> None:
        if self.scratch is not None:
            free = declare_function(self.cg.module, "free",
                                    ir.FunctionType(ir.VoidType(), [I8P]))
            self.b.call(free, [self.b.bitcast(self.b.load(self.scratch[0]), I8P)])

    def mma_buffer(self, o: lp.MmaBuf) -> tuple[ir.Value, ir.Value, ir.Value]:
        """Pointer, row stride and column stride (elements) of a buffer operand."""
        o = self.mma_forward.get(o.buffer, o)
        buf = self.cg.program.buffer(o.buffer)
        strides = buf.layout.strides
        return (self.buffer_ptr(o.buffer, o.version), self.expr(strides[0]),
                self.expr(strides[1]))

    def mma_operand(self, o: lp.MmaBuf | lp.MmaView
                    ) -> tuple[ir.Value, ir.Value, ir.Value]:
        """Pointer, row stride and column stride (elements) of an mma operand."""
        if isinstance(o, lp.MmaBuf):
            return self.mma_buffer(o)
        b = self.b
        win = o.window
        stride0 = self.env[self.cg.stride_sym(win.view, 0)]
        inside = self.windows_inside((win,))
        with b.if_else(inside) as (then, other):
            with then:
                off = self.expr(self.view_offset(win.view, win.offsets))
                p_in = b.gep(self.view_ptr(win.view), [off])
                blk_in = b.block
            with other:
                idx = tuple(Sym(lp.nest_var(i)) for i in range(2))
                read = lp.ViewRead(win.view, tuple(add(o_, i) for o_, i in
                                                   zip(win.offsets, idx, strict=True)),
                                   o.fill, DType.F32, win)
                copy = lp.Nest((lp.nest_var(0), lp.nest_var(1)), win.shape,
                               lp.BufWrite(o.staging, idx, Const(0)), read)
                self.nest_body(copy, (copy,), edge=True)
                p_out = self.buffer_ptr(o.staging, Const(0))
                ld_out = self.expr(win.shape[1])
                blk_out = b.block
        ptr = b.phi(F32P)
        ptr.add_incoming(p_in, blk_in)
        ptr.add_incoming(p_out, blk_out)
        ld = b.phi(I64)
        ld.add_incoming(stride0, blk_in)
        ld.add_incoming(ld_out, blk_out)
        return ptr, ld, c64(1)

    def forwarded_copies(self, stmts: tuple[lp.Stmt, ...]
                         ) -> tuple[set[int], dict[int, dict[str, lp.MmaBuf]]]:
        """Staging copies an mma can skip: ``%stage[i, j] = %src[i, j]`` of a whole
        operand, followed (with only nests writing other buffers in between) by the mma
        that reads ``%stage``. The packed GEMM takes both element strides of ``%src``
        (a column-major ``Bs``, say) and packs it directly, so the copy is dropped and
        the mma reads ``%src``. Returns the indices of the skipped copies and, per mma
        index, the operand substitutions."""
        skip: set[int] = set()
        subst: dict[int, dict[str, lp.MmaBuf]] = {}
        prog = self.cg.program
        for j, mm in enumerate(stmts):
            if not isinstance(mm, lp.Mma):
                continue
            for o, dims in ((mm.a, (mm.m, mm.k)), (mm.b, (mm.k, mm.n))):
                if not isinstance(o, lp.MmaBuf) or o.version != Const(0):
                    continue
                stage = prog.buffer(o.buffer)
                if stage.role != "stage":
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

    # ------------------------------------------------------------------ structure

    def loop_stmt(self, s: lp.Loop | lp.Parallel) -> None:
        n = self.expr(product(s.extents))
        with self.loop(c64(0), n, 1, s.label.replace(" ", "_")) as it:
            self.bind(s.vars, s.extents, it)
            self.body(s.body)

    def pipeline(self, s: lp.Pipeline) -> None:
        b = self.b
        n = self.expr(product(s.extents))
        maxlag = max(st.lag for st in s.stages)
        with self.loop(c64(0), b.add(n, c64(maxlag)), 1, s.label) as t:
            for st in s.stages:
                i = b.sub(t, c64(st.lag))
                ok = b.icmp_signed("<", i, n)
                if st.lag:
                    ok = b.and_(ok, b.icmp_signed(">=", i, c64(0)))
                with b.if_then(ok):
                    self.bind(s.vars, s.extents, i)
                    self.body(st.body)

    def nothing(self, s: lp.Stmt) -> None:
        """Barriers inside an instance need no code on the CPU: one worker runs the whole
        instance, in program order (cross-worker ordering is the segment join)."""


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


def _align(t: ir.Type) -> int:
    if isinstance(t, ir.IntType):
        return max(1, t.width // 8)
    return 4


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


# =========================================================================== op tables

def _f(name: str, flags: tuple[str, ...] = _CONTRACT
       ) -> Callable[[_Fn, ir.Value, ir.Value], ir.Value]:
    def emit(fn: _Fn, a: ir.Value, b: ir.Value) -> ir.Value:
        return getattr(fn.b, name)(a, b, flags=flags)
    return emit


def _i(name: str) -> Callable[[_Fn, ir.Value, ir.Value], ir.Value]:
    return lambda fn, a, b: getattr(fn.b, name)(a, b)


def _fcmp(op: str) -> Callable[[_Fn, ir.Value, ir.Value], ir.Value]:
    return lambda fn, a, b: fn.b.fcmp_ordered(op, a, b)


def _icmp(op: str, signed: bool = True) -> Callable[[_Fn, ir.Value, ir.Value], ir.Value]:
    if signed:
        return lambda fn, a, b: fn.b.icmp_signed(op, a, b)
    return lambda fn, a, b: fn.b.icmp_unsigned(op, a, b)


def _intr2(name: str) -> Callable[[_Fn, ir.Value, ir.Value], ir.Value]:
    return lambda fn, a, b: fn.vcall(name, a, b)


def _int_div(fn: _Fn, a: ir.Value, d: ir.Value) -> ir.Value:
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


_BINARY: dict[tuple[BinaryFn, DType], Callable[[_Fn, ir.Value, ir.Value], ir.Value]] = {
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


def _rsqrt(fn: _Fn, x: ir.Value) -> ir.Value:
    one = ir.Constant(x.type, [1.0] * x.type.count)
    return fn.b.fdiv(one, fn.vcall("llvm.sqrt", x))


def _ineg(fn: _Fn, x: ir.Value) -> ir.Value:
    return fn.b.sub(ir.Constant(x.type, [0] * x.type.count), x)


def _iabs(fn: _Fn, x: ir.Value) -> ir.Value:
    f = fn.intrinsic("llvm.abs", [x.type], x.type, [x.type, I1])
    return fn.b.call(f, [x, ir.Constant(I1, 0)])


_UNARY: dict[tuple[UnaryFn, DType], Callable[[_Fn, ir.Value], ir.Value]] = {
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


def _fptosi_sat(fn: _Fn, x: ir.Value, t: ir.Type) -> ir.Value:
    f = fn.intrinsic("llvm.fptosi.sat", [t, x.type], t, [x.type])
    return fn.b.call(f, [x])


_CAST: dict[tuple[DType, DType], Callable[[_Fn, ir.Value, ir.Type], ir.Value]] = {
    (DType.F32, DType.I32): _fptosi_sat,
    (DType.F32, DType.BOOL): lambda fn, x, t: fn.b.fcmp_unordered(
        "!=", x, ir.Constant(x.type, [0.0] * x.type.count)),
    (DType.I32, DType.F32): lambda fn, x, t: fn.b.sitofp(x, t),
    (DType.I32, DType.BOOL): lambda fn, x, t: fn.b.icmp_signed(
        "!=", x, ir.Constant(x.type, [0] * x.type.count)),
    (DType.BOOL, DType.F32): lambda fn, x, t: fn.b.uitofp(x, t),
    (DType.BOOL, DType.I32): lambda fn, x, t: fn.b.zext(x, t),
}

_COMBINE: dict[tuple[ReduceFn, DType], Callable[[_Fn, ir.Value, ir.Value], ir.Value]] = {
    (ReduceFn.SUM, DType.F32): _f("fadd"),
    (ReduceFn.MAX, DType.F32): _intr2("llvm.maximum"),
    (ReduceFn.SUM, DType.I32): _i("add"),
    (ReduceFn.MAX, DType.I32): _intr2("llvm.smax"),
    (ReduceFn.SUM, DType.BOOL): _i("or_"),
    (ReduceFn.MAX, DType.BOOL): _i("or_"),
}


def _hreduce(name: str, with_start: bool = False
             ) -> Callable[[_Fn, ir.Value, float | int], ir.Value]:
    def emit(fn: _Fn, v: ir.Value, ident: float | int) -> ir.Value:
        el = v.type.element
        if with_start:
            f = fn.intrinsic(name, [v.type], el, [el, v.type])
            return fn.b.call(f, [ir.Constant(el, ident), v])
        f = fn.intrinsic(name, [v.type], el, [v.type])
        return fn.b.call(f, [v])
    return emit


_HORIZONTAL: dict[tuple[ReduceFn, DType], Callable[[_Fn, ir.Value, float | int], ir.Value]] = {
    (ReduceFn.SUM, DType.F32): _hreduce("llvm.vector.reduce.fadd", with_start=True),
    (ReduceFn.MAX, DType.F32): _hreduce("llvm.vector.reduce.fmaximum"),
    (ReduceFn.SUM, DType.I32): _hreduce("llvm.vector.reduce.add"),
    (ReduceFn.MAX, DType.I32): _hreduce("llvm.vector.reduce.smax"),
    (ReduceFn.SUM, DType.BOOL): _hreduce("llvm.vector.reduce.or"),
    (ReduceFn.MAX, DType.BOOL): _hreduce("llvm.vector.reduce.or"),
}

_IEXPR: dict[ExprOp, Callable[[_Fn, list[ir.Value]], ir.Value]] = {
    ExprOp.ADD: _Fn._iadd,
    ExprOp.MUL: _Fn._imul,
    ExprOp.FLOORDIV: _Fn._floordiv,
    ExprOp.MOD: _Fn._mod,
    ExprOp.CEIL_DIV: _Fn._ceildiv,
    ExprOp.MIN: _Fn._imin,
    ExprOp.MAX: _Fn._imax,
}

_ELEM: dict[type, Callable[[_Fn, lp.Elem, _Lanes], ir.Value]] = {
    lp.Lit: _Fn._lit,
    lp.IndexOf: _Fn._index,
    lp.ViewRead: _Fn._view_read,
    lp.BufRead: _Fn._buf_read,
    lp.Unary: _Fn._unary,
    lp.Binary: _Fn._binary,
    lp.Select: _Fn._select,
    lp.Cast: _Fn._cast,
}

_STMT: dict[type, Callable[[_Fn, lp.Stmt], None]] = {
    lp.Nest: _Fn.nest,
    lp.ReduceNest: _Fn.nest,
    lp.FusedNest: _Fn.nest,
    lp.Mma: _Fn.mma,
    lp.Loop: _Fn.loop_stmt,
    lp.Parallel: _Fn.loop_stmt,
    lp.Pipeline: _Fn.pipeline,
    lp.Barrier: _Fn.nothing,
    lp.Note: _Fn.nothing,
}


# =========================================================================== module


class _Module:
    def __init__(self, program: lp.LoopProgram, config: CodegenConfig) -> None:
        self.program = program
        self.config = config
        self.module = ir.Module(name=f"planner.{program.kernel}")
        self.placement = placements(program, config)
        ranks = [0]
        for p in program.params:
            ranks.append(ranks[-1] + len(p.shape))
        self.info_rank = ranks[:-1]
        self._sgemm: ir.Function | None = None
        self._small: ir.Function | None = None
        self._gemm_config: GemmConfig | None = None

    def stride_sym(self, view: str, d: int) -> str:
        i = next(i for i, p in enumerate(self.program.params) if p.name == view)
        return f"v.{i}.s.{d}"

    @property
    def gemm_config(self) -> GemmConfig:
        if self._gemm_config is None:
            self._gemm_config = self.config.gemm or GemmConfig.for_figures(
                self.config.vector_width, self.config.registers)
        return self._gemm_config

    def sgemm(self) -> ir.Function:
        """The strided packed GEMM with caller-provided scratch (emitted on first use)."""
        if self._sgemm is None:
            self._sgemm = emit_gemm_f32_strided(self.module, f"{self.program.kernel}.sgemm",
                                                config=self.gemm_config)
        return self._sgemm

    def small_gemm(self) -> ir.Function:
        if self._small is None:
            self._small = _emit_small_gemm(self.module, f"{self.program.kernel}.small_gemm",
                                           self.config.vector_width)
        return self._small

    def emit(self) -> ModuleInfo:
        names = []
        fnty = ir.FunctionType(ir.VoidType(), [I64, I64, I64P, I8P.as_pointer(), I64P, I8P,
                                               I8P, I64P])
        for j, seg in enumerate(self.program.segments):
            name = f"{self.program.kernel}.seg{j}"
            fn = ir.Function(self.module, fnty, name=name)
            fn.attributes.add("nounwind")
            for arg, an in zip(fn.args, ("begin", "end", "syms", "views", "strides",
                                         "worker_arena", "global_arena", "bufinfo"),
                               strict=True):
                arg.name = an
            _Fn(self, seg, fn).emit()
            names.append(name)
        return ModuleInfo(tuple(names),
                          tuple(self.placement[b.name] for b in self.program.buffers),
                          tuple(self.info_rank))


def _emit_small_gemm(module: ir.Module, name: str, w: int) -> ir.Function:
    """``C (+)= A @ B`` for small tiles: rows of C updated with broadcast-FMA vectors."""
    fnty = ir.FunctionType(ir.VoidType(), [I64, I64, I64, F32P, I64, F32P, I64, F32P, I64,
                                           I32])
    fn = internal(ir.Function(module, fnty, name=name), inline=False)
    m, n, k, a, lda, bm, ldb, c, ldc, acc = fn.args
    h = _IR(ir.IRBuilder(fn.append_basic_block("entry")))
    b = h.b
    vt = _vec(F32, w)
    full = b.mul(b.sdiv(n, c64(w)), c64(w))
    rem = b.sub(n, full)
    tail = b.icmp_signed("<", ir.Constant(_vec(I64, w), list(range(w))), h.splat(rem, w))
    mload = declare_intrinsic(module, "llvm.masked.load", [vt, ir.PointerType()], vt,
                              [ir.PointerType(), I32, tail.type, vt])
    mstore = declare_intrinsic(module, "llvm.masked.store", [vt, ir.PointerType()],
                               ir.VoidType(), [vt, ir.PointerType(), I32, tail.type])
    fma = declare_intrinsic(module, "llvm.fma", [vt], vt, [vt, vt, vt])
    zero = ir.Constant(vt, [0.0] * w)
    four = ir.Constant(I32, 4)

    def vptr(p: ir.Value, off: ir.Value) -> ir.Value:
        return b.bitcast(b.gep(p, [off]), vt.as_pointer())

    with h.loop(c64(0), m, 1, "i") as i:
        crow = b.gep(c, [b.mul(i, ldc)])
        with b.if_then(b.icmp_signed("==", acc, ir.Constant(I32, 0))):
            with h.loop(c64(0), full, w, "z") as j:
                b.store(zero, vptr(crow, j), align=4)
            b.call(mstore, [zero, vptr(crow, full), four, tail])
        with h.loop(c64(0), k, 1, "p") as p:
            av = h.splat(b.load(b.gep(a, [b.add(b.mul(i, lda), p)])), w)
            brow = b.gep(bm, [b.mul(p, ldb)])
            with h.loop(c64(0), full, w, "j") as j:
                cp = vptr(crow, j)
                b.store(b.call(fma, [av, b.load(vptr(brow, j), align=4),
                                     b.load(cp, align=4)]), cp, align=4)
            cp = vptr(crow, full)
            cv = b.call(mload, [cp, four, tail, zero])
            bv = b.call(mload, [vptr(brow, full), four, tail, zero])
            b.call(mstore, [b.call(fma, [av, bv, cv]), cp, four, tail])
    b.ret_void()
    return fn


def emit_program(program: lp.LoopProgram, config: CodegenConfig | None = None
                 ) -> tuple[ir.Module, ModuleInfo]:
    """The LLVM module of ``program`` and the calling information for the runtime."""
    cg = _Module(program, config or CodegenConfig())
    info = cg.emit()
    return cg.module, info
