"""The small vectorized mma kernel: ``C (+)= A @ B`` for small products of unit-inner-stride
operands, read in place (no packing): the packed GEMM's copies cost more than they save
while B (k × n) stays in cache.

Register blocked like a GEMM micro-kernel: a block of :data:`ROWS` rows of C by
:data:`VECS` vectors is held in registers across the whole k loop (each step loads the
block's B vectors once and broadcasts one A element per row), so C is read and written
once per block, not once per multiply-add. Rows past the last full row block run in smaller
blocks (4, 2, 1); columns past the last full vector block run the same block with masked loads
of B and masked loads/stores of C (only that block pays for masks); when they fit in one
vector, a pass of :data:`NARROW_ROWS`-row blocks one vector wide runs them (a 13-column
edge tile runs 16 columns of multiply-adds, not 32, with as many accumulators).
"""

from __future__ import annotations

from collections.abc import Callable

import llvmlite.ir as ir

from planner.lower.cpu.builder import _IR, _vec
from planner.lower.cpu.jit import declare_intrinsic, masked_load_store
from planner.lower.cpu.llvm_helpers import F32, F32P, I32, I64, c64, internal

#: Rows of C per register block; the rows past the last full block run in blocks of
#: :data:`REST_ROWS` (at most one each: 64 rows are 10 blocks of 6 and one of 4).
ROWS = 6
REST_ROWS = (4, 2, 1)
#: Vectors of C per register block row: ROWS * VECS accumulators, VECS B vectors.
VECS = 2
#: Rows of the one-vector block of the last columns (as many accumulators as a full
#: block: FMA latency is hidden by independent chains), then blocks of NARROW_REST_ROWS.
NARROW_ROWS = ROWS * VECS
NARROW_REST_ROWS = (8, 4, 2, 1)


def _emit_small_gemm(module: ir.Module, name: str, w: int) -> ir.Function:
    """``C (+)= A @ B`` (``acc`` != 0 accumulates) for small tiles, register blocked."""
    fnty = ir.FunctionType(ir.VoidType(), [I64, I64, I64, F32P, I64, F32P, I64, F32P, I64,
                                           I32])
    fn = internal(ir.Function(module, fnty, name=name), inline=False)
    m, n, k, a, lda, bm, ldb, c, ldc, acc = fn.args
    h = _IR(ir.IRBuilder(fn.append_basic_block("entry")))
    b = h.b
    vt = _vec(F32, w)
    mload, mstore = masked_load_store(module, vt)
    fma = declare_intrinsic(module, "llvm.fma", [vt], vt, [vt, vt, vt])
    zero = ir.Constant(vt, [0.0] * w)
    four = ir.Constant(I32, 4)
    accumulate = b.icmp_signed("!=", acc, ir.Constant(I32, 0))
    regs = [[b.alloca(vt, name=f"c{r}.{v}") for v in range(VECS)]
            for r in range(max(ROWS, NARROW_ROWS))]
    cursors = (b.alloca(I64, name="rows.done"), b.alloca(I64, name="narrow.done"))
    blk = w * VECS
    nfull = b.mul(b.sdiv(n, c64(blk)), c64(blk))

    def vptr(p: ir.Value, off: ir.Value) -> ir.Value:
        return b.bitcast(b.gep(p, [off]), vt.as_pointer())

    def load(p: ir.Value, mask: ir.Value | None) -> ir.Value:
        if mask is None:
            return b.load(p, align=4)
        return b.call(mload, [p, four, mask, zero])

    def tile(i0: ir.Value, rows: int, j0: ir.Value, masked: bool, vecs: int = VECS) -> None:
        """The ``rows`` × ``vecs`` vector block of C at (i0, j0), k steps in registers."""
        masks: list[ir.Value | None] = [None] * vecs
        if masked:
            left = h.splat(b.sub(n, j0), w)
            masks = [b.icmp_signed("<", ir.Constant(_vec(I64, w), [v * w + t for t in range(w)]),
                                   left) for v in range(vecs)]
        crows = [b.gep(c, [b.add(b.mul(b.add(i0, c64(r)), ldc), j0)]) for r in range(rows)]
        with b.if_else(accumulate) as (then, otherwise):  # C is not read when overwritten
            with then:
                for r in range(rows):
                    for v in range(vecs):
                        b.store(load(vptr(crows[r], c64(v * w)), masks[v]), regs[r][v])
            with otherwise:
                for r in range(rows):
                    for v in range(vecs):
                        b.store(zero, regs[r][v])
        arows = [b.gep(a, [b.mul(b.add(i0, c64(r)), lda)]) for r in range(rows)]
        with h.loop(c64(0), k, 1, "p") as p:
            brow = b.gep(bm, [b.add(b.mul(p, ldb), j0)])
            bv = [load(vptr(brow, c64(v * w)), masks[v]) for v in range(vecs)]
            for r in range(rows):
                av = h.splat(b.load(b.gep(arows[r], [p]), align=4), w)
                for v in range(vecs):
                    b.store(b.call(fma, [av, bv[v], b.load(regs[r][v])]), regs[r][v])
        for r in range(rows):
            for v in range(vecs):
                out, cp = b.load(regs[r][v]), vptr(crows[r], c64(v * w))
                if masks[v] is None:
                    b.store(out, cp, align=4)
                else:
                    b.call(mstore, [out, cp, four, masks[v]])

    left = b.sub(n, nfull)

    def row_block(i0: ir.Value, rows: int) -> None:
        with h.loop(c64(0), nfull, blk, "j") as j0:
            tile(i0, rows, j0, False)
        with b.if_then(b.icmp_signed(">", left, c64(w))):
            tile(i0, rows, nfull, True)

    def narrow_block(i0: ir.Value, rows: int) -> None:
        tile(i0, rows, nfull, True, vecs=1)

    _row_blocks(h, m, ROWS, REST_ROWS, row_block, cursors[0])
    with b.if_then(b.and_(b.icmp_signed(">", left, c64(0)),
                          b.icmp_signed("<=", left, c64(w)))):
        _row_blocks(h, m, NARROW_ROWS, NARROW_REST_ROWS, narrow_block, cursors[1])
    b.ret_void()
    return fn


def _row_blocks(h: _IR, m: ir.Value, rows: int, rest: tuple[int, ...],
                block: Callable[[ir.Value, int], None], cursor: ir.Value) -> None:
    """``block(i0, r)`` over the ``m`` rows: blocks of ``rows``, then at most one block
    of each size in ``rest`` (largest first) while that many rows are left (``cursor``:
    an i64 slot for the rows done)."""
    b = h.b
    mfull = b.mul(b.sdiv(m, c64(rows)), c64(rows))
    with h.loop(c64(0), mfull, rows, "i") as i0:
        block(i0, rows)
    b.store(mfull, cursor)
    for r in rest:
        i0 = b.load(cursor)
        with b.if_then(b.icmp_signed(">=", b.sub(m, i0), c64(r))):
            block(i0, r)
            b.store(b.add(i0, c64(r)), cursor)
