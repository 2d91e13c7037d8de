"""``mma`` statements: the small kernel or the packed GEMM on buffers or view windows
(edge tiles clamped to the view, or staged with their fill), the per-worker packing
scratch and pack caches (packed blocks of read-only views shared by the instances of one
segment call), and the copies an mma packs through instead (:mod:`.mma_sources`)."""

from __future__ import annotations

from collections.abc import Callable

import llvmlite.ir as ir

from planner.ir.dtypes import DType
from planner.ir.expr import Const, Sym, add
from planner.lower.cpu.config import MMA_CALLS_SYMBOL, MMA_WORK_SYMBOL
from planner.lower.cpu.gemm import (
    buffer_pool,
    cache_table_i64,
    emit_free_cache,
    emit_scratch_floats,
)
from planner.lower.cpu.llvm_helpers import (
    F32P,
    I1,
    I8,
    I8P,
    I32,
    I64,
    I64P,
    c64,
)
from planner.lower.cpu.mma_sources import ViewCopies, k_merge, staging_forwards, view_copies
from planner.lower.cpu.nests import _Nests
from planner.lower.loops import program as lp


class _Mma(_Nests):
    """Emits the mma statements of a segment function."""

    #: The segment's view copies (found on the first :meth:`forwarded_copies`).
    view_sources: ViewCopies | None = None
    #: The segment's pack caches (A, B; i64* tables), made on the first packed mma.
    pack_tables: tuple[ir.Value, ir.Value] | None = None
    #: Whether a packed mma of the segment may keep packed blocks of a read-only view
    #: across instances (its tile not statically small): the runtime then splits the
    #: segment into one contiguous piece per thread (``ModuleInfo.pieces``) where it
    #: has more than a few instances per thread (:func:`.workpool.piece_count`).
    keeps_packs: bool = False

    def mma(self, s: lp.Mma, in_place: bool = False) -> None:
        """``c (+)= a @ b`` on the part of the tile that the operands define.

        An edge tile runs remainder-sized work: a view operand whose fill is 0 and whose
        window starts inside the view is read in place and clamps the product to the
        rows/columns it holds (m and k for ``a``, k and n for ``b``; beyond them its
        elements are 0 and add nothing). Elements of ``c`` outside the clamped block are
        what the full product gives them: kept when accumulating, zeroed otherwise.
        A Memory operand written only by a copy from a view is packed from the view in
        the same way (:func:`~.mma_sources.view_copies`). ``in_place``: every view
        window of ``s`` is known to start inside its view (no staging code)."""
        m, n, k = self.expr(s.m), self.expr(s.n), self.expr(s.k)
        c_ptr, ldc, _ = self.mma_buffer(s.c)
        srcs = self.view_sources.sources if self.view_sources is not None else {}
        copies = (srcs.get((id(s), 0)), srcs.get((id(s), 1)))
        a_ptr, rsa, csa, a_rows, a_cols, a_keep = self.mma_operand(s.a, m, k, copies[0],
                                                                    in_place)
        b_ptr, rsb, csb, b_rows, b_cols, b_keep = self.mma_operand(s.b, k, n, copies[1],
                                                                    in_place)
        b = self.b
        zeros = [self.zeros.get((id(s), o.buffer, o.version))
                 if isinstance(o, lp.MmaBuf) and cp is None else None
                 for o, cp in zip((s.a, s.b), copies, strict=True)]
        clamping = any(_clamps(o) or (cp is not None and cp.value.fill == 0.0)  # type: ignore[attr-defined]
                       for o, cp in zip((s.a, s.b), copies, strict=True))
        if zeros[0] is not None:  # a buffer tile known to be 0 past these rows/columns
            a_rows = _smin(b, a_rows, self.expr(zeros[0][0]))
            a_cols = _smin(b, a_cols, self.expr(zeros[0][1]))
        if zeros[1] is not None:
            b_rows = _smin(b, b_rows, self.expr(zeros[1][0]))
            b_cols = _smin(b, b_cols, self.expr(zeros[1][1]))
        me, ke, ne = _smin(b, m, a_rows), _smin(b, _smin(b, k, a_cols), b_rows), _smin(b, n, b_cols)
        if not s.accumulate and (clamping or any(z is not None for z in zeros)):
            clamped = b.or_(b.icmp_signed("<", me, m), b.icmp_signed("<", ne, n))
            with b.if_then(clamped, likely=False):  # zero c: a K == 0 product
                b.call(self.cg.small_gemm(), [m, n, c64(0), a_ptr, rsa, b_ptr, rsb, c_ptr,
                                              ldc, ir.Constant(I32, 0)])
        acc = ir.Constant(I32, int(s.accumulate))
        work = b.mul(b.mul(me, ne), ke)
        if self.cg.config.count_work:
            b.atomic_rmw("add", self.work_counter(), work, "monotonic")
            b.atomic_rmw("add", self.work_counter(MMA_CALLS_SYMBOL), c64(1), "monotonic")
        small = b.icmp_signed("<=", work, c64(self.cg.config.small_mma))
        dims = [d.value if isinstance(d, Const) else None for d in (s.m, s.n, s.k)]
        static_small = None not in dims and \
            dims[0] * dims[1] * dims[2] <= self.cg.config.small_mma  # type: ignore[operator]
        if not static_small and not all(isinstance(x, ir.Constant) and not x.constant
                                        for x in (a_keep, b_keep)):
            self.keeps_packs = True
        unit = b.and_(b.icmp_signed("==", csa, c64(1)), b.icmp_signed("==", csb, c64(1)))
        with b.if_else(b.and_(small, unit)) as (then, other):
            with then:
                b.call(self.cg.small_gemm(),
                       [me, ne, ke, a_ptr, rsa, b_ptr, rsb, c_ptr, ldc, acc])
            with other:
                scratch = self.gemm_scratch(ne)
                atab, btab = self.pack_caches()
                null = ir.Constant(I64P, None)
                cached = self.cg.module.get_global(f"{self.cg.sgemm().name}_cached")
                b.call(cached, [me, ne, ke, a_ptr, rsa, csa, b_ptr, rsb, csb, c_ptr, ldc, acc,
                                scratch, b.select(a_keep, atab, null),
                                b.select(b_keep, btab, null)])

    def work_counter(self, name: str = MMA_WORK_SYMBOL) -> ir.GlobalVariable:
        """The module's multiply-add counter, or (``MMA_CALLS_SYMBOL``) its counter of
        mma executions (``CodegenConfig.count_work``)."""
        mod = self.cg.module
        if name not in mod.globals:
            g = ir.GlobalVariable(mod, I64, name)
            g.initializer = c64(0)
        return mod.globals[name]

    def k_loop(self, s: lp.Loop | lp.Pipeline, emit: Callable[[], None]) -> None:
        """A loop (``emit``s it) or, when its iterations only accumulate one tile
        product over k (:func:`~.mma_sources.k_merge`), the one mma over the whole
        reduction where its merged windows start inside their views, else the loop."""
        got = k_merge(s, self.cg.program, self.view_sources) \
            if self.cg.config.merge_k and self.view_sources is not None else None
        if got is None:
            emit()
            return
        b = self.b
        inside: ir.Value = ir.Constant(I1, 1)
        for win in got.windows:
            for off in win.offsets:
                inside = b.and_(inside, b.icmp_signed(">=", self.expr(off), c64(0)))
        with b.if_else(inside, likely=True) as (then, other):
            with then:
                self.mma(got.mma, in_place=True)
            with other:
                emit()

    def gemm_scratch(self, n: ir.Value) -> ir.Value:
        """Packing scratch for an mma with ``n`` columns: one buffer per call of the
        segment function (one per worker), grown on demand, taken from and given back on
        return to the module's buffer pool (:func:`~.gemm.buffer_pool`)."""
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
            pool = buffer_pool(mod, count_allocs=self.cg.config.count_work)
            b.call(pool.give, [b.bitcast(b.load(ptr), I8P), b.mul(b.load(cap), c64(4))])
            b.store(ir.Constant(F32P, None), ptr)
            raw = b.call(pool.take, [b.mul(need, c64(4)), cap])  # need*4: a multiple of 64
            b.store(b.bitcast(raw, F32P), ptr)
            b.store(b.sdiv(b.load(cap), c64(4)), cap)  # take stored bytes
        return b.load(ptr)

    def pack_caches(self) -> tuple[ir.Value, ir.Value]:
        """The segment call's pack caches (A blocks, B panels) for the packed GEMM
        (:func:`~.gemm.emit_gemm_f32_strided`'s ``_cached`` entry point): zeroed tables
        on the stack, filled by the mmas of every instance the call runs, so that an
        instance packs what an earlier one already packed from the same read-only view
        (same address, strides and extents) only once; their buffers go back to the
        module's buffer pool on return (:meth:`free_scratch`). Nothing writes a read-only
        view while a segment runs, so a matching key means the same values."""
        if self.pack_tables is None:
            b = self.b
            with b.goto_block(self.entry):
                if self.entry.instructions:
                    b.position_before(self.entry.instructions[0])
                tabs = []
                for which in ("a", "b"):
                    n = cache_table_i64(which)
                    arr = b.alloca(ir.ArrayType(I64, n), name=f"gemm.cache.{which}")
                    arr.align = 64
                    memset = self.cg.module.declare_intrinsic("llvm.memset", [I8P, I64])
                    b.call(memset, [b.bitcast(arr, I8P), ir.Constant(I8, 0), c64(8 * n),
                                    ir.Constant(I1, 0)])
                    tabs.append(b.bitcast(arr, I64P))
            self.pack_tables = (tabs[0], tabs[1])
        return self.pack_tables

    def free_scratch(self) -> None:
        """Give the scratch and the pack caches' buffers back to the module's buffer pool
        (:func:`~.gemm.buffer_pool`: kept for the next call, within its budget)."""
        if self.scratch is not None:
            b = self.b
            give = buffer_pool(self.cg.module, count_allocs=self.cg.config.count_work).give
            b.call(give, [b.bitcast(b.load(self.scratch[0]), I8P),
                          b.mul(b.load(self.scratch[1]), c64(4))])
        if self.pack_tables is not None:
            for which, tab in zip(("a", "b"), self.pack_tables, strict=True):
                emit_free_cache(self.b, tab, which)

    def mma_buffer(self, o: lp.MmaBuf) -> tuple[ir.Value, ir.Value, ir.Value]:
        """Pointer, row stride and column stride (elements) of a buffer operand."""
        o = self.mma_forward.get(o.buffer, o)
        buf = self.cg.program.buffer(o.buffer)
        strides = buf.layout.strides
        return (self.buffer_ptr(o.buffer, o.version), self.expr(strides[0]),
                self.expr(strides[1]))

    def mma_operand(self, o: lp.MmaBuf | lp.MmaView, rows: ir.Value, cols: ir.Value,
                    copy: lp.Nest | None = None, in_place: bool = False
                    ) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value, ir.Value, ir.Value]:
        """Pointer, row stride and column stride (elements) of an mma operand of
        ``rows`` × ``cols``, the rows and columns of it that the product must read
        (all of them, except for a clamped view window: see :meth:`mma`), and an i1:
        whether the operand is read in place from a read-only view (its packed blocks
        may be kept across instances: :meth:`pack_caches`). ``copy``: the view copy that
        wrote the operand's Memory, read from its view instead. ``in_place``: a view
        window (fill 0) known to start inside the view."""
        if isinstance(o, lp.MmaBuf) and copy is None:
            return (*self.mma_buffer(o), rows, cols, ir.Constant(I1, 0))
        b = self.b
        if in_place and isinstance(o, lp.MmaView) and copy is None and o.fill == 0.0:
            win = o.window
            shape = self.cg.program.param(win.view).shape
            offs = [self.expr(x) for x in win.offsets]
            valid = [_smax(b, c64(0), _smin(b, n, b.sub(self.expr(e), x)))
                     for n, e, x in zip((rows, cols), shape, offs, strict=True)]
            ptr = b.gep(self.view_ptr(win.view), [self.expr(self.view_offset(win.view,
                                                                             win.offsets))])
            readonly = int(self.cg.program.param(win.view).readonly)
            return (ptr, self.env[self.cg.stride_sym(win.view, 0)], c64(1), valid[0],
                    valid[1], ir.Constant(I1, readonly))
        if copy is not None:
            win, fill = copy.value.window, copy.value.fill  # type: ignore[attr-defined]
        else:
            win, fill = o.window, o.fill  # type: ignore[union-attr]
        stride0 = self.env[self.cg.stride_sym(win.view, 0)]
        if fill == 0.0:  # clamp to the view: in place whenever the window starts inside
            shape = self.cg.program.param(win.view).shape
            offs = [self.expr(x) for x in win.offsets]
            inside = b.and_(b.icmp_signed(">=", offs[0], c64(0)),
                            b.icmp_signed(">=", offs[1], c64(0)))
            valid = [_smax(b, c64(0), _smin(b, n, b.sub(self.expr(e), x)))
                     for n, e, x in zip((rows, cols), shape, offs, strict=True)]
        else:
            inside = self.windows_inside((win,))
            valid = [rows, cols]
        with b.if_else(inside) as (then, other):
            with then:
                off = self.expr(self.view_offset(win.view, win.offsets))
                p_in = b.gep(self.view_ptr(win.view), [off])
                blk_in = b.block
            with other:
                if copy is not None:  # the copy as the program has it, then its Memory
                    self.nest_body(copy, (copy,), edge=True)
                    dest = copy.dest
                    p_out, ld_out, cs_out = self.mma_buffer(
                        lp.MmaBuf(dest.buffer, dest.version))  # type: ignore[union-attr]
                else:
                    p_out, ld_out = self.stage_window(win, fill, o.staging)  # type: ignore[union-attr]
                    cs_out = c64(1)
                blk_out = b.block
        readonly = int(self.cg.program.param(win.view).readonly)
        pairs = [(F32P, p_in, p_out), (I64, stride0, ld_out),
                 (I1, ir.Constant(I1, readonly), ir.Constant(I1, 0))]
        if copy is not None:
            pairs.append((I64, c64(1), cs_out))
        phis = []
        for ty, x_in, x_out in pairs:
            phi = b.phi(ty)
            phi.add_incoming(x_in, blk_in)
            phi.add_incoming(x_out, blk_out)
            phis.append(phi)
        if copy is None:
            phis.append(c64(1))
        out = []
        for v, full in zip(valid, (rows, cols), strict=True):
            if v is full:
                out.append(full)
                continue
            phi = b.phi(I64)
            phi.add_incoming(v, blk_in)
            phi.add_incoming(full, blk_out)
            out.append(phi)
        return phis[0], phis[1], phis[3], out[0], out[1], phis[2]

    def stage_window(self, win: lp.Window, fill: float, staging: str
                     ) -> tuple[ir.Value, ir.Value]:
        """Copy ``win`` (``fill`` outside the view) into the row-major ``staging``
        buffer: its pointer and row stride."""
        idx = tuple(Sym(lp.nest_var(i)) for i in range(2))
        read = lp.ViewRead(win.view, tuple(add(o_, i) for o_, i in
                                           zip(win.offsets, idx, strict=True)),
                           fill, DType.F32, win)
        copy = lp.Nest((lp.nest_var(0), lp.nest_var(1)), win.shape,
                       lp.BufWrite(staging, idx, Const(0)), read)
        self.nest_body(copy, (copy,), edge=True)
        return self.buffer_ptr(staging, Const(0)), self.expr(win.shape[1])

    def forwarded_copies(self, stmts: tuple[lp.Stmt, ...]
                         ) -> tuple[set[int], dict[int, dict[str, lp.MmaBuf]]]:
        """Copies of ``stmts`` no code is emitted for (see :mod:`.mma_sources`): the
        indices of staging copies an mma skips and of view copies into a Memory an mma
        packs from the view instead, and per mma index its staging substitutions.
        The first call (the segment's body) finds the segment's view copies."""
        if self.view_sources is None:
            self.view_sources = view_copies(stmts, self.cg.program, self.seg)
        skip, subst = staging_forwards(stmts, self.cg.program)
        skip |= {i for i, s in enumerate(stmts) if id(s) in self.view_sources.skip}
        return skip, subst


def _smin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return x if x is y else b.select(b.icmp_signed("<", x, y), x, y)


def _smax(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed(">", x, y), x, y)


def _clamps(o: lp.MmaBuf | lp.MmaView) -> bool:
    """Whether the operand may clamp the product (a view window with fill 0)."""
    return isinstance(o, lp.MmaView) and o.fill == 0.0
