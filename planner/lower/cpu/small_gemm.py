"""The small vectorized mma kernel: ``C (+)= A @ B`` for tiny products of unit-inner-stride
operands, where packing for the register-blocked GEMM would cost more than it saves."""

from __future__ import annotations

import llvmlite.ir as ir

from planner.lower.cpu.builder import _IR, _vec
from planner.lower.cpu.jit import declare_intrinsic
from planner.lower.cpu.llvm_helpers import F32, F32P, I32, I64, c64, internal


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
