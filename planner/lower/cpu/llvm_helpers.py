"""llvmlite builder helpers shared by the LLVM emitters (``cpu_codegen``, ``llvm_gemm``).

Only what both emitters write the same way lives here: the scalar types, the i64
constant, the counted ``for`` loop over signed i64, signed min/max, the vector splat,
internal helper functions, get-or-declare of external functions and the in-register
W×W transpose.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import llvmlite.ir as ir

__all__ = [
    "F32",
    "F32P",
    "I1",
    "I8",
    "I8P",
    "I32",
    "I64",
    "I64P",
    "c64",
    "declare_function",
    "internal",
    "loop",
    "smax",
    "smin",
    "splat",
    "transpose",
]

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F32 = ir.FloatType()
I8P = I8.as_pointer()
I64P = I64.as_pointer()
F32P = F32.as_pointer()


def c64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


@contextmanager
def loop(
    b: ir.IRBuilder, start: ir.Value, stop: ir.Value, step: int | ir.Value, name: str
) -> Iterator[ir.Value]:
    """``for (i = start; i < stop; i += step)`` (signed i64); yields the induction var."""
    fn = b.function
    pre = b.block
    hdr = fn.append_basic_block(f"{name}.hdr")
    body = fn.append_basic_block(f"{name}.body")
    end = fn.append_basic_block(f"{name}.end")
    b.branch(hdr)
    b.position_at_end(hdr)
    i = b.phi(I64, name=name)
    i.add_incoming(start, pre)
    b.cbranch(b.icmp_signed("<", i, stop), body, end)
    b.position_at_end(body)
    yield i
    step_v = c64(step) if isinstance(step, int) else step
    nxt = b.add(i, step_v, name=f"{name}.next", flags=["nsw"])
    i.add_incoming(nxt, b.block)
    b.branch(hdr)
    b.position_at_end(end)


def smin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


def smax(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed(">", x, y), x, y)


def splat(b: ir.IRBuilder, x: ir.Value, w: int) -> ir.Value:
    """``<w x T>`` with every lane ``x`` (a one-lane vector needs no shuffle)."""
    vt = ir.VectorType(x.type, w)
    v = b.insert_element(ir.Constant(vt, ir.Undefined), x, ir.Constant(I32, 0))
    if w == 1:
        return v
    return b.shuffle_vector(v, ir.Constant(vt, ir.Undefined),
                            ir.Constant(ir.VectorType(I32, w), [0] * w))


def internal(fn: ir.Function, inline: bool = True) -> ir.Function:
    """Mark ``fn`` an internal, nounwind helper (always inlined unless ``inline=False``)."""
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    if inline:
        fn.attributes.add("alwaysinline")
    return fn


def declare_function(module: ir.Module, name: str, fnty: ir.FunctionType) -> ir.Function:
    """The function ``name`` of ``module``, declared with ``fnty`` on first use."""
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, fnty, name=name)


def transpose(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """Transpose a W×W matrix held as W vectors (W a power of two): log2(W) rounds, each
    exchanging h×h blocks between rows i and i + h with two shuffles per row pair."""
    w = len(rows)
    rows = list(rows)
    mask_t = ir.VectorType(I32, w)
    h = w // 2
    while h >= 1:
        first = [x for blk in range(w // (2 * h)) for x in
                 [*(blk * 2 * h + j for j in range(h)), *(w + blk * 2 * h + j for j in range(h))]]
        second = [x + h for x in first]
        for i in range(w):
            if i & h:
                continue
            x, y = rows[i], rows[i + h]
            rows[i] = b.shuffle_vector(x, y, ir.Constant(mask_t, first))
            rows[i + h] = b.shuffle_vector(x, y, ir.Constant(mask_t, second))
        h //= 2
    return rows
