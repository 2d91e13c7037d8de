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
horizontally at the end of the row, lanes pairwise as a tree (upper half onto lower half,
log2(w) steps); a fused nest forwards a value it just wrote to the
reduction that reads it, so producer and reduction take one pass.  A plain nest's
unit-stride view store is streamed (whole cache lines of non-temporal stores, then one
``sfence`` per call) where the kernel's views are larger than the cache
(:mod:`planner.lower.cpu.nests`).

Numerics.  Transcendentals use the polynomial vector math of
:mod:`planner.lower.cpu.vecmath` (``exp``, ``tanh``, ``log``); ``sqrt`` is
``llvm.sqrt``.  Arithmetic carries the ``contract`` fast-math flag (FMA contraction: one
rounding instead of two) and division also ``arcp`` (``x / y`` may become
``x * (1 / y)``, within an ulp); a division by a value invariant along the vectorized
variable is emitted as that multiply, with the reciprocal hoisted, in every loop and
tail alike (one reciprocal per row, and an element's value does not depend on which
vector it falls in, e.g. on the output's alignment when stores are streamed).  Never
``nnan``/``ninf`` (masked attention rows rely on ``-inf``
and NaN propagates as in the interpreter) and never ``reassoc`` (reduction order is the
explicit one above).  ``max``/``min`` are ``llvm.maximum``/``llvm.minimum``
(NaN-propagating like numpy); a max reduction takes an element when it is greater or NaN
(one compare on its chain; ties between zeros keep the one met first, as numpy's do).
i32 division by zero gives 0 (the interpreter raises)
instead of trapping.  Buffers are 64-byte aligned; loads and stores assume only element
alignment (unaligned vector accesses cost nothing extra on aligned data).

``mma`` calls a small vectorized kernel for tiny products of unit-inner-stride operands
and otherwise the packed, register-blocked GEMM of :mod:`planner.lower.cpu.gemm`
(:func:`~planner.lower.cpu.gemm.emit_gemm_f32_strided`), directly on buffers (with
both their element strides) or on a view window in place (staged with its fill when it
is an edge tile).  A staging copy ``%stage[i, j] = %src[i, j]`` that the loop program
puts before an mma (for a column-major ``Bs``, say) is skipped and the mma packs
``%src`` through its strides.  The GEMM's packing scratch is allocated once per call of
the segment function (i.e. per worker), grown on demand and freed on return.  A k loop
whose iterations only accumulate one tile product of two view windows (directly or
through such copies: the tiled GEMMs) is one mma over the whole reduction
(:func:`~planner.lower.cpu.mma_sources.k_merge`): each panel packed once, C passed over
once per KC block, one GEMM call per output tile instead of one per k step.

Modules
-------
:mod:`~planner.lower.cpu.config` (the figures), :mod:`~planner.lower.cpu.abi` (buffer
placement, :class:`ModuleInfo`), :mod:`~planner.lower.cpu.builder` (types, builder
conveniences), :mod:`~planner.lower.cpu.context` (emitter state),
:mod:`~planner.lower.cpu.index_exprs`, :mod:`~planner.lower.cpu.memory`,
:mod:`~planner.lower.cpu.elements` (element expressions and the op tables),
:mod:`~planner.lower.cpu.nests`, :mod:`~planner.lower.cpu.mma` and
:mod:`~planner.lower.cpu.small_gemm`, each a layer of the segment-function emitter
:class:`_Fn` here; this module assembles the functions and the module.
"""

from __future__ import annotations

from collections.abc import Callable

import llvmlite.ir as ir

from planner.ir.expr import Expr, product
from planner.lower.cpu import workpool
from planner.lower.cpu.abi import ModuleInfo, placements
from planner.lower.cpu.builder import _mem_type
from planner.lower.cpu.config import CodegenConfig
from planner.lower.cpu.context import _ModuleContext
from planner.lower.cpu.llvm_helpers import I8P, I64, I64P, c64
from planner.lower.cpu.mma import _Mma
from planner.lower.cpu.prefetch import _Prefetch
from planner.lower.cpu.rows import clamp_rows, zero_extents
from planner.lower.cpu.zero_tiles import clamp_zero_tiles
from planner.lower.loops import program as lp

__all__ = ["CodegenConfig", "ModuleInfo", "emit_program", "placements"]


class _Fn(_Mma, _Prefetch):
    """Emits one segment function."""

    # ------------------------------------------------------------------ entry

    def emit(self) -> None:
        prog = self.cg.program
        begin, end, syms, views, strides, warena, garena, info = self.fn.args
        b = self.b
        for i, name in enumerate(prog.symbols):
            self.env[name] = b.load(b.gep(syms, [c64(i)]))
        for i, p in enumerate(prog.params):
            self.views[p.name] = b.load(b.gep(views, [c64(i)]), name=f"view.{p.name}")
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
                self.bases[buf.name] = b.gep(garena, [off], name=f"buf.{buf.name}")
            elif not own:
                continue
            elif where == "stack":
                n = buf.static_elements() or 0
                arr = b.alloca(ir.ArrayType(_mem_type(buf.dtype), max(n, 1)),
                               name=f"buf.{buf.name}")
                arr.align = 64
                self.bases[buf.name] = b.bitcast(arr, I8P)
            elif where == "worker":
                self.bases[buf.name] = b.gep(warena, [off], name=f"buf.{buf.name}")
            else:
                stride = b.load(b.gep(info, [c64(2 * idx + 1)]))
                per_instance.append((buf.name, b.gep(garena, [off]), stride))
        body = self.seg.body
        if self.cg.config.clamp_rows:  # rows no store writes; tile parts known to be 0
            body = clamp_zero_tiles(clamp_rows(self.seg, prog), self.seg, prog)
            self.zeros = zero_extents(body, self.seg, prog)
        with self.loop(begin, end, 1, "inst") as inst:
            self.bind(self.seg.vars, self.seg.extents, inst)
            for name, base, stride in per_instance:
                self.bases[name] = b.gep(base, [b.mul(inst, stride)], name=f"buf.{name}")
            self.body(body)
        self.end_streams()
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

    # ------------------------------------------------------------------ structure

    def loop_stmt(self, s: lp.Loop | lp.Parallel) -> None:
        if isinstance(s, lp.Loop):
            self.k_loop(s, lambda: self._loop(s))
        else:
            self._loop(s)

    def _loop(self, s: lp.Loop | lp.Parallel) -> None:
        n = self.expr(product(s.extents))
        with self.loop(c64(0), n, 1, s.label.replace(" ", "_")) as it:
            self.bind(s.vars, s.extents, it)
            self.body(s.body)

    def pipeline(self, s: lp.Pipeline) -> None:
        self.k_loop(s, lambda: self._pipeline(s))

    def _pipeline(self, s: lp.Pipeline) -> None:
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
    lp.Prefetch: _Fn.prefetch,
}


class _Module(_ModuleContext):
    """The module of a loop program: one function per segment."""

    def emit(self) -> ModuleInfo:
        names, pieces = [], []
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
            f = _Fn(self, seg, fn)
            f.emit()
            names.append(name)
            pieces.append(1 if f.keeps_packs else workpool.PIECES_PER_WORKER)
        return ModuleInfo(tuple(names),
                          tuple(self.placement[b.name] for b in self.program.buffers),
                          tuple(self.info_rank), tuple(pieces))


def emit_program(program: lp.LoopProgram, config: CodegenConfig | None = None
                 ) -> tuple[ir.Module, ModuleInfo]:
    """The LLVM module of ``program`` and the calling information for the runtime."""
    cg = _Module(program, config or CodegenConfig())
    info = cg.emit()
    return cg.module, info
