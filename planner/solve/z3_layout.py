"""Injectivity and in-bounds proofs of a Memory layout, XOR swizzles included (S11, S13).

A :class:`~planner.ir.layout.Layout` maps a logical element ``u`` to::

    o(u)       = sum_i u_i * stride_i                     (strided offset, integers)
    phys(u)    = swizzle_n(... swizzle_1(o(u)))           (XOR, CUTLASS convention)
    storage    = round_up(1 + sum_i (extent_i - 1) * |stride_i|, 2**T)   (0 if empty)

where ``T`` is the largest swizzle block exponent ``bits + base + shift``.  Whole-tile
storage needs ``phys`` injective on the domain (S13), and every active event must
land in ``[0, storage)`` (S20: the composed access is total).

**Encoding.**  A swizzle only reads and writes bits below ``T``, so with
``o = q * 2**T + r`` (``0 ≤ r < 2**T``, floor semantics, also for a negative ``o``)
the physical offset is ``q * 2**T + swz(r)``.  ``q`` and the strided sum stay
unbounded z3 integers (cheap, even with symbolic extents and strides); only the
``T``-bit remainder ``r`` is a bit-vector, where XOR is native.  This is the "bit-vectors
only where XOR needs them" rule of the performance notes: a 64-bit bit-vector of the
whole offset makes symbolic products time out, an integer XOR does not exist.

**Strategy.**  Everything concrete and at most :data:`ENUMERATION_LIMIT` elements: numpy
enumeration (milliseconds, exact counterexample).  Otherwise z3 searches for a
counterexample under the symbols' bounds and reports ``unknown`` when it gives up.
For symbolic strides, the valid bounds ``0 ≤ u_i·s_i ≤ (e_i-1)·s_i`` (for ``s_i ≥ 0``)
are added as lemmas: they keep the in-bounds query linear in the product terms.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import z3

from planner.ir.expr import Const
from planner.ir.layout import Layout, XorSwizzle
from planner.solve.z3_exprs import SymbolSpace, check

#: Concrete layouts with at most this many elements are checked by enumeration.
ENUMERATION_LIMIT = 1 << 20
_ENUM_OFFSET_LIMIT = 1 << 62  # numpy int64 offsets stay exact below this


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of one layout property: proved, refuted (with a witness) or unknown."""

    status: str  # "proved" | "refuted" | "unknown"
    detail: str
    counterexample: dict[str, int] | None = None
    method: str = ""  # "enumeration" | "z3" | "trivial"


# --------------------------------------------------------------------------- helpers


def swizzle_block_bits(swizzles: tuple[XorSwizzle, ...]) -> int:
    """``T``: every swizzle permutes offsets inside aligned blocks of ``2**T``."""
    return max((sw.bits + sw.base + sw.shift for sw in swizzles), default=0)


def swizzle_bv(sw: XorSwizzle, r: z3.BitVecRef) -> z3.BitVecRef:
    """``r ^ ((r & (mask << (base + shift))) >> shift)`` on a bit-vector."""
    width = r.size()
    mask = (((1 << sw.bits) - 1) << (sw.base + sw.shift)) & ((1 << width) - 1)
    return r ^ z3.LShR(r & z3.BitVecVal(mask, width), sw.shift)


def concrete_layout(layout: Layout, space: SymbolSpace) -> tuple[list[int], list[int]] | None:
    """Extents and strides as integers when no free symbol remains, else None."""
    exprs = (*layout.shape, *layout.strides)
    if not space.is_concrete(exprs):
        return None
    return ([space.evaluate(e) for e in layout.shape],
            [space.evaluate(s) for s in layout.strides])


def concrete_storage(extents: list[int], strides: list[int],
                     swizzles: tuple[XorSwizzle, ...]) -> int:
    """Storage elements of a concrete layout, padding and swizzle blocks included."""
    if any(e <= 0 for e in extents):
        return 0
    span = 1 + sum((e - 1) * abs(s) for e, s in zip(extents, strides, strict=True))
    block = 1 << swizzle_block_bits(swizzles)
    return -(-span // block) * block


def storage_term(layout: Layout, space: SymbolSpace) -> z3.ArithRef:
    """The storage size in elements as a z3 term (0 when the domain may be empty)."""
    exts = [space.to_z3(e) for e in layout.shape]
    strides = [space.to_z3(s) for s in layout.strides]
    span = 1 + z3.Sum([(e - 1) * z3.If(s >= 0, s, -s) for e, s in zip(exts, strides,
                                                                      strict=True)] or [0])
    block = 1 << swizzle_block_bits(layout.swizzles)
    rounded = span if block == 1 else ((span + (block - 1)) / block) * block
    nonempty = z3.And([e > 0 for e in exts]) if exts else z3.BoolVal(True)
    return z3.If(nonempty, rounded, 0)


@dataclass
class _Access:
    """z3 terms of one symbolic logical index and its physical offset."""

    index: list[z3.ArithRef]
    offset: z3.ArithRef
    facts: list[z3.BoolRef]


def symbolic_access(layout: Layout, space: SymbolSpace, tag: str) -> _Access:
    """A fresh logical index ``tag[i]`` in the domain and its physical offset."""
    exts = [space.to_z3(e) for e in layout.shape]
    strides = [space.to_z3(s) for s in layout.strides]
    index = [z3.Int(f"{space.prefix}{tag}{i}") for i in range(layout.rank)]
    facts: list[z3.BoolRef] = []
    products = []
    for u, e, s, s_expr in zip(index, exts, strides, layout.strides, strict=True):
        facts += [u >= 0, u < e]
        p = u * s
        products.append(p)
        if not isinstance(space.substitute(s_expr), Const):
            # Valid lemmas (monotonicity of u * s on the domain) that keep z3 linear.
            facts.append(z3.Implies(s >= 0, z3.And(p >= 0, p <= (e - 1) * s)))
            facts.append(z3.Implies(s < 0, z3.And(p <= 0, p >= (e - 1) * s)))
    strided = z3.Sum(products) if products else z3.IntVal(0)
    t = swizzle_block_bits(layout.swizzles)
    if t == 0:
        return _Access(index, strided, facts)
    q = z3.Int(f"{space.prefix}{tag}_q")
    r = z3.BitVec(f"{space.prefix}{tag}_r", t)
    facts.append(strided == q * (1 << t) + z3.BV2Int(r))
    for sw in layout.swizzles:
        r = swizzle_bv(sw, r)
    return _Access(index, q * (1 << t) + z3.BV2Int(r), facts)


def _index_cex(prefix: str, values: list[int]) -> dict[str, int]:
    return {f"{prefix}{i}": v for i, v in enumerate(values)}


# --------------------------------------------------------------------------- injectivity


def prove_injective(layout: Layout, space: SymbolSpace, time_limit_ms: int = 2000) -> Verdict:
    """Distinct logical elements never share a storage offset (S13)."""
    conc = concrete_layout(layout, space)
    if conc is not None and any(e <= 0 for e in conc[0]):
        return Verdict("proved", "empty domain: no address events (S14)", None, "trivial")
    if conc is not None and _enumerable(*conc):
        return _enumerate_injective(layout, *conc)
    return _z3_injective(layout, space, time_limit_ms)


def _enumerable(extents: list[int], strides: list[int]) -> bool:
    n = 1
    for e in extents:
        n *= max(e, 0)
    reach = sum(max(e - 1, 0) * abs(s) for e, s in zip(extents, strides, strict=True))
    return n <= ENUMERATION_LIMIT and reach < _ENUM_OFFSET_LIMIT


def _offsets(layout: Layout, extents: list[int], strides: list[int]) -> np.ndarray:
    out = np.zeros(extents, dtype=np.int64)
    for axis, (n, st) in enumerate(zip(extents, strides, strict=True)):
        view = [1] * len(extents)
        view[axis] = n
        out = out + (np.arange(n, dtype=np.int64) * st).reshape(view)
    for sw in layout.swizzles:
        out = sw.apply(out)
    return out


def _enumerate_injective(layout: Layout, extents: list[int], strides: list[int]) -> Verdict:
    offs = _offsets(layout, extents, strides)
    flat = offs.reshape(-1)
    n = flat.size
    if n >= 2:
        order = np.argsort(flat, kind="stable")
        dup = np.nonzero(flat[order][1:] == flat[order][:-1])[0]
        if dup.size:
            a, b = int(order[dup[0]]), int(order[dup[0] + 1])
            ua = [int(x) for x in np.unravel_index(a, offs.shape)]
            ub = [int(x) for x in np.unravel_index(b, offs.shape)]
            cex = {**_index_cex("u", ua), **_index_cex("v", ub), "offset": int(flat[a])}
            return Verdict("refuted", f"elements {ua} and {ub} both map to storage offset "
                           f"{int(flat[a])}", cex, "enumeration")
    return Verdict("proved", f"all {n:,} elements map to distinct offsets", None,
                   "enumeration")


def _z3_injective(layout: Layout, space: SymbolSpace, time_limit_ms: int) -> Verdict:
    a = symbolic_access(layout, space, "u")
    b = symbolic_access(layout, space, "v")
    s = z3.Solver()
    s.add(*a.facts, *b.facts)
    s.add(z3.Or([x != y for x, y in zip(a.index, b.index, strict=True)] or [False]))
    s.add(a.offset == b.offset)
    s.add(*space.constraints())
    res = check(s, time_limit_ms)
    if res == z3.unsat:
        return Verdict("proved", "z3: no two distinct elements share an offset for any "
                       "symbol values within bounds", None, "z3")
    if res == z3.unknown:
        return Verdict("unknown", f"z3 gave up ({s.reason_unknown()}) within "
                       f"{time_limit_ms} ms", None, "z3")
    m = s.model()
    ua = [m.eval(x, model_completion=True).as_long() for x in a.index]
    ub = [m.eval(x, model_completion=True).as_long() for x in b.index]
    off = m.eval(a.offset, model_completion=True).as_long()
    syms = space.model_values(m)
    cex = {**syms, **_index_cex("u", ua), **_index_cex("v", ub), "offset": off}
    where = _symbols_text(syms)
    return Verdict("refuted", f"elements {ua} and {ub} both map to storage offset {off}"
                   f"{where}", cex, "z3")


# --------------------------------------------------------------------------- bounds


def prove_in_bounds(layout: Layout, space: SymbolSpace, time_limit_ms: int = 2000) -> Verdict:
    """Every element of the domain lands in ``[0, storage)`` and every term is defined."""
    conc = concrete_layout(layout, space)
    if conc is not None and any(e <= 0 for e in conc[0]):
        return Verdict("proved", "empty domain: no address events (S14)", None, "trivial")
    if conc is not None and _enumerable(*conc):
        return _enumerate_in_bounds(layout, *conc)
    return _z3_in_bounds(layout, space, time_limit_ms)


def _enumerate_in_bounds(layout: Layout, extents: list[int], strides: list[int]) -> Verdict:
    offs = _offsets(layout, extents, strides)
    storage = concrete_storage(extents, strides, layout.swizzles)
    flat = offs.reshape(-1)
    lo, hi = int(flat.argmin()), int(flat.argmax())
    for pos, bad in ((lo, flat[lo] < 0), (hi, flat[hi] >= storage)):
        if bad:
            u = [int(x) for x in np.unravel_index(pos, offs.shape)]
            off = int(flat[pos])
            cex = {**_index_cex("u", u), "offset": off, "storage": storage}
            return Verdict("refuted", f"element {u} maps to offset {off}, outside the storage "
                           f"[0, {storage})", cex, "enumeration")
    return Verdict("proved", f"offsets of all {flat.size:,} elements lie in [0, {storage})",
                   None, "enumeration")


def _z3_in_bounds(layout: Layout, space: SymbolSpace, time_limit_ms: int) -> Verdict:
    a = symbolic_access(layout, space, "u")
    storage = storage_term(layout, space)
    s = z3.Solver()
    s.add(*a.facts, *space.constraints())
    s.add(z3.Or(a.offset < 0, a.offset >= storage, z3.Not(space.nonzero_divisors())))
    res = check(s, time_limit_ms)
    if res == z3.unsat:
        return Verdict("proved", "z3: every element lands in [0, storage) for all symbol "
                       "values within bounds", None, "z3")
    if res == z3.unknown:
        return Verdict("unknown", f"z3 gave up ({s.reason_unknown()}) within "
                       f"{time_limit_ms} ms", None, "z3")
    m = s.model()
    u = [m.eval(x, model_completion=True).as_long() for x in a.index]
    syms = space.model_values(m)
    if any(m.eval(d == 0, model_completion=True) for d in space.divisors):
        return Verdict("refuted", f"a divisor in the layout may be zero{_symbols_text(syms)}:"
                       " the address map is not total", syms, "z3")
    off = m.eval(a.offset, model_completion=True).as_long()
    size = m.eval(storage, model_completion=True).as_long()
    cex = {**syms, **_index_cex("u", u), "offset": off, "storage": size}
    return Verdict("refuted", f"element {u} maps to offset {off}, outside the storage "
                   f"[0, {size}){_symbols_text(syms)}", cex, "z3")


def _symbols_text(values: dict[str, int]) -> str:
    if not values:
        return ""
    return " when " + ", ".join(f"{k}={v}" for k, v in sorted(values.items()))


__all__ = [
    "ENUMERATION_LIMIT",
    "Verdict",
    "concrete_layout",
    "concrete_storage",
    "prove_in_bounds",
    "prove_injective",
    "storage_term",
    "swizzle_block_bits",
    "swizzle_bv",
    "symbolic_access",
]
