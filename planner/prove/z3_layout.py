"""Injectivity and in-bounds proofs of a Memory layout, XOR swizzles included (S11, S13).

A :class:`~planner.ir.layout.Layout` maps a logical element ``u`` to::

    o(u)     = sum_i u_i * stride_i                        (strided offset, integers)
    phys(u)  = swizzle_n(... swizzle_1(o(u)))              (XOR, CUTLASS convention)
    storage  = round_up(1 + sum_i (extent_i - 1) * |stride_i|, 2**T)   (0 if empty)

where ``T`` is the largest swizzle block exponent ``bits + base + shift`` (this is
:meth:`Layout.storage_elements`, the size capacity is charged for).  Whole-tile storage
needs ``phys`` injective on the domain (S13), and every active event must land in
``[0, storage)`` (S20: the composed access is total).

**Swizzles in bit-vectors.**  A swizzle only reads and writes bits below ``T``, so with
``o = q * 2**T + r`` (``0 ≤ r < 2**T``, floor semantics) ``phys = q * 2**T + swz(r)``.
:func:`symbolic_access` encodes exactly that: ``q`` and the strided sum are unbounded
z3 integers, only the ``T``-bit remainder is a bit-vector where XOR is native (the
performance notes: a 64-bit bit-vector of the whole offset times out on symbolic
products).  Faster still, :func:`prove_swizzle_bijective` proves once, in ``T``-bit
bit-vectors, that the swizzle chain permutes ``[0, 2**T)``.  Then

* ``phys`` is injective  ⇔  ``o`` is injective (same ``q``, bijective remainder), and
* ``phys`` in ``[0, storage)``  ⇔  ``o`` in ``[0, span)``, because ``storage`` rounds
  ``span`` up to a multiple of ``2**T``,

so both properties reduce to integer questions about the strided part.  When the
bijection cannot be proved the composed encoding is used directly.

**Strided part.**  In-bounds: ``0 ≤ o(u) < span`` for every ``u`` of a non-empty domain
iff every dimension with extent ≥ 2 has a non-negative stride (then ``span - 1`` is the
largest offset), and every divisor in the terms is non-zero: one small z3 query over
the symbols only.  Injectivity: the mixed-radix criterion (some order of the dimensions
in which each stride exceeds the reach ``sum (e_j - 1) s_j`` of the ones before) is
sufficient and is tried first, for orders guessed from sample symbol values; when it
does not hold, z3 searches for two distinct indices with one offset, which is exact.
Injectivity and sizes are asked where the map is defined (every divisor non-zero): a
zero divisor is the ``bounds`` proof's refutation.

**Empty domains (S14).**  A domain with a known zero extent (at the bindings) has no
address events: its strides are never translated nor evaluated, its storage is 0 and
both properties hold trivially, so ``ceildiv(64, N)`` at ``N = 0`` on a ``[4, N]``
domain is harmless.  On a non-empty domain the same division is an S14 error.

Concrete layouts of at most :data:`ENUMERATION_LIMIT` elements are enumerated with numpy
(milliseconds, exact).  Every z3 query runs under the caller's time limit and reports
``unknown`` when z3 gives up.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import z3

from planner.errors import UNKNOWN_LOC, Diagnostic, PlannerError, SourceLoc
from planner.ir.expr import Const, Expr
from planner.ir.layout import (
    Layout,
    XorSwizzle,
    concrete_offsets,
    division_by_zero_message,
    first_collision,
)
from planner.prove.z3_exprs import SymbolSpace, check

#: Concrete layouts with at most this many elements are checked by enumeration.
ENUMERATION_LIMIT = 1 << 20
_ENUM_OFFSET_LIMIT = 1 << 62  # numpy int64 offsets stay exact below this
_SAMPLE_VALUES = (64, 1000)  # symbol values used to guess a dimension order


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of one layout property: proved, refuted (with a witness) or unknown."""

    status: str  # "proved" | "refuted" | "unknown"
    detail: str
    counterexample: dict[str, int] | None = None
    method: str = ""  # "enumeration" | "criterion" | "z3" | "trivial"


def _unknown(solver: z3.Solver, time_limit_ms: int, what: str) -> Verdict:
    return Verdict("unknown", f"z3 gave up on {what} ({solver.reason_unknown()}) within "
                   f"{time_limit_ms} ms", None, "z3")


# --------------------------------------------------------------------------- swizzles


def swizzle_block_bits(swizzles: Sequence[XorSwizzle]) -> int:
    """``T``: every swizzle permutes offsets inside aligned blocks of ``2**T``."""
    return max((sw.bits + sw.base + sw.shift for sw in swizzles), default=0)


def swizzle_bv(sw: XorSwizzle, r: z3.BitVecRef) -> z3.BitVecRef:
    """``r ^ ((r & (mask << (base + shift))) >> shift)`` on a bit-vector."""
    width = r.size()
    mask = (((1 << sw.bits) - 1) << (sw.base + sw.shift)) & ((1 << width) - 1)
    return r ^ z3.LShR(r & z3.BitVecVal(mask, width, r.ctx), sw.shift)


def apply_swizzles(swizzles: Sequence[XorSwizzle], offset: int) -> int:
    for sw in swizzles:
        offset = int(sw.apply(offset))
    return offset


@functools.lru_cache(maxsize=256)
def prove_swizzle_bijective(swizzles: tuple[XorSwizzle, ...], time_limit_ms: int = 2000
                            ) -> Verdict:
    """The swizzle chain permutes ``[0, 2**T)``: no two remainders collide (bit-vectors)."""
    t = swizzle_block_bits(swizzles)
    if t == 0:
        return Verdict("proved", "no swizzle", None, "trivial")
    ctx = z3.Context()  # a private context: this runs from any thread (see z3_exprs)
    a, b = z3.BitVecs("swz_a swz_b", t, ctx)
    fa, fb = a, b
    for sw in swizzles:
        fa, fb = swizzle_bv(sw, fa), swizzle_bv(sw, fb)
    s = z3.Solver(ctx=ctx)
    s.add(a != b, fa == fb)
    res = check(s, time_limit_ms)
    chain = " ∘ ".join(str(sw) for sw in reversed(swizzles))
    if res == z3.unsat:
        return Verdict("proved", f"{chain} permutes every aligned block of 2**{t} offsets "
                       f"({t}-bit bit-vector proof)", None, "z3")
    if res == z3.unknown:
        return _unknown(s, time_limit_ms, "the swizzle bijection")
    m = s.model()
    va, vb = m[a].as_long(), m[b].as_long()
    return Verdict("refuted", f"{chain} maps {va} and {vb} to the same offset",
                   {"r0": va, "r1": vb}, "z3")


# --------------------------------------------------------------------------- terms


def known_empty(layout: Layout, space: SymbolSpace) -> bool:
    """Some extent is 0 (or negative) at the bindings: the domain has no address events
    and its map arithmetic is never evaluated (S14).  Known zeros are recognized first;
    an extent that cannot be evaluated does not hide another one that is 0."""
    if any(e == Const(0) for e in layout.shape):
        return True
    for e in layout.shape:
        if not space.is_concrete([e]):
            continue
        try:
            if space.evaluate(e) <= 0:
                return True
        except ZeroDivisionError:
            continue
    return False


def undefined_terms(layout: Layout, space: SymbolSpace) -> list[tuple[str, int, Expr]]:
    """Extents and strides of a domain that is not known to be empty that divide by zero
    at the bindings (``("extent" | "stride", dim, expr)``); [] for an empty domain."""
    if known_empty(layout, space) or not space.bindings:
        return []
    return layout.undefined_terms(space.bindings)


def undefined_error(layout: Layout, space: SymbolSpace, subject: str,
                    loc: SourceLoc = UNKNOWN_LOC) -> PlannerError | None:
    """The S14 error of a layout whose non-empty domain's address map divides by zero at
    the bindings (None when it is defined): no proof about it is meaningful."""
    bad = undefined_terms(layout, space)
    if not bad:
        return None
    return PlannerError([Diagnostic(division_by_zero_message(kind, e, subject, space.bindings)
                                    + ": the address map of a non-empty logical domain "
                                    "must be defined", loc, "S14") for kind, _, e in bad],
                        kind="invalid-ir")


def concrete_layout(layout: Layout, space: SymbolSpace) -> tuple[list[int], list[int]] | None:
    """Extents and strides as integers when no free symbol remains, else None.

    The strides of a known-empty domain are never evaluated (S14): they are reported
    as 0, and so is an extent that cannot be evaluated beside a zero one.  A stride
    that divides by zero on a non-empty domain raises ZeroDivisionError.
    """
    exprs = (*layout.shape, *layout.strides)
    if known_empty(layout, space) and space.is_concrete(layout.shape):
        return ([_value_or_zero(e, space) for e in layout.shape], [0] * layout.rank)
    if not space.is_concrete(exprs):
        return None
    return ([space.evaluate(e) for e in layout.shape],
            [space.evaluate(s) for s in layout.strides])


def concrete_storage(extents: Sequence[int], strides: Sequence[int],
                     swizzles: Sequence[XorSwizzle]) -> int:
    """Storage elements of a concrete layout, padding and swizzle blocks included."""
    if any(e <= 0 for e in extents):
        return 0
    span = 1 + sum((e - 1) * abs(s) for e, s in zip(extents, strides, strict=True))
    block = 1 << swizzle_block_bits(swizzles)
    return -(-span // block) * block


def _value_or_zero(e: Expr, space: SymbolSpace) -> int:
    try:
        return space.evaluate(e)
    except ZeroDivisionError:
        return 0


def storage_term(layout: Layout, space: SymbolSpace) -> z3.ArithRef:
    """The storage size in elements as a z3 term (0 when the domain may be empty).

    A known-empty domain is 0 without translating a stride (known zero factors first,
    S14).  A non-empty domain whose extents or strides divide by zero at the bindings
    raises the S14 :class:`PlannerError` of :func:`undefined_error`.  Where symbol
    values make one of the layout's divisors zero the term is 0 as well: that point
    has no defined address map (z3's ``x / 0`` is an arbitrary value, not a size), and
    the ``bounds`` proof refutes its totality instead.
    """
    if known_empty(layout, space):
        return space.int_val(0)
    err = undefined_error(layout, space, str(layout))
    if err is not None:
        raise err
    first = len(space.divisors)
    exts = [space.to_z3(e) for e in layout.shape]
    strides = [space.to_z3(s) for s in layout.strides]
    defined = [d != 0 for d in space.divisors[first:]]
    span = 1 + z3.Sum([(e - 1) * z3.If(s >= 0, s, -s)
                       for e, s in zip(exts, strides, strict=True)] or [space.int_val(0)])
    block = 1 << swizzle_block_bits(layout.swizzles)
    rounded = span if block == 1 else ((span + (block - 1)) / block) * block
    return z3.If(z3.And(_nonempty(exts, space), *defined), rounded, 0)


def _nonempty(exts: list[z3.ArithRef], space: SymbolSpace) -> z3.BoolRef:
    return z3.And([e > 0 for e in exts]) if exts else space.bool_val(True)


@dataclass
class SymbolicAccess:
    """z3 terms of one logical index in the domain and its composed physical offset."""

    index: list[z3.ArithRef]
    offset: z3.ArithRef
    facts: list[z3.BoolRef]


def symbolic_access(layout: Layout, space: SymbolSpace, tag: str,
                    swizzled: bool = True) -> SymbolicAccess:
    """A fresh index ``tag0, tag1, ...`` in the domain and ``phys`` (or ``o``) of it."""
    exts = [space.to_z3(e) for e in layout.shape]
    strides = [space.to_z3(s) for s in layout.strides]
    index = [space.int_var(f"{tag}{i}") for i in range(layout.rank)]
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
    strided = z3.Sum(products) if products else space.int_val(0)
    t = swizzle_block_bits(layout.swizzles) if swizzled else 0
    if t == 0:
        return SymbolicAccess(index, strided, facts)
    q = space.int_var(f"{tag}_q")
    r = z3.BitVec(f"!{space.prefix}{tag}_r", t, space.ctx)
    facts.append(strided == q * (1 << t) + z3.BV2Int(r))
    for sw in layout.swizzles:
        r = swizzle_bv(sw, r)
    return SymbolicAccess(index, q * (1 << t) + z3.BV2Int(r), facts)


def _index_cex(prefix: str, values: Sequence[int]) -> dict[str, int]:
    return {f"{prefix}{i}": int(v) for i, v in enumerate(values)}


def _symbols_text(values: dict[str, int]) -> str:
    if not values:
        return ""
    return " when " + ", ".join(f"{k}={v}" for k, v in sorted(values.items()))


def _evals(m: z3.ModelRef, terms: Sequence[z3.ArithRef]) -> list[int]:
    return [m.eval(x, model_completion=True).as_long() for x in terms]


# --------------------------------------------------------------------------- injectivity


def prove_injective(layout: Layout, space: SymbolSpace, time_limit_ms: int = 2000) -> Verdict:
    """Distinct logical elements never share a storage offset (S13)."""
    conc, small = _concrete_cases(layout, space, _enumerate_injective)
    if small is not None:
        return small
    swz = prove_swizzle_bijective(layout.swizzles, time_limit_ms)
    if swz.status != "proved":
        return _z3_injective(layout, space, time_limit_ms, swizzled=True)
    note = "" if not layout.swizzles else f"; {swz.detail}"
    if conc is not None:
        order = _concrete_criterion_order(*conc)
        if order is not None:
            return Verdict("proved", "strides in order of dims "
                           f"{list(order)} each exceed the reach of the smaller ones{note}",
                           None, "criterion")
    else:
        verdict = _symbolic_criterion(layout, space, time_limit_ms)
        if verdict is not None:
            return Verdict("proved", verdict + note, None, "criterion")
    out = _z3_injective(layout, space, time_limit_ms, swizzled=False)
    return Verdict(out.status, out.detail + (note if out.status == "proved" else ""),
                   out.counterexample, out.method)


def _concrete_cases(
    layout: Layout, space: SymbolSpace,
    enumerate_: Callable[[Layout, list[int], list[int]], Verdict],
) -> tuple[tuple[list[int], list[int]] | None, Verdict | None]:
    """The concrete extents and strides (None when symbolic), and the verdict when they
    give an empty domain or one small enough for ``enumerate_``."""
    if known_empty(layout, space):
        return None, Verdict("proved", "empty domain: no address events (S14)", None,
                             "trivial")
    bad = undefined_terms(layout, space)
    if bad:
        kind, _, e = bad[0]
        at = {k: space.bindings[k] for k in sorted(e.symbols()) if k in space.bindings}
        return None, Verdict("refuted", division_by_zero_message(kind, e, str(layout),
                                                                 space.bindings)
                             + ": the address map is not total (S14)", at, "trivial")
    conc = concrete_layout(layout, space)
    if conc is not None and _enumerable(*conc):
        return conc, enumerate_(layout, *conc)
    return conc, None


def _enumerable(extents: Sequence[int], strides: Sequence[int]) -> bool:
    n = 1
    for e in extents:
        n *= max(e, 0)
    reach = sum(max(e - 1, 0) * abs(s) for e, s in zip(extents, strides, strict=True))
    return n <= ENUMERATION_LIMIT and reach < _ENUM_OFFSET_LIMIT


def _enumerate_injective(layout: Layout, extents: list[int], strides: list[int]) -> Verdict:
    offs = concrete_offsets(extents, strides, layout.swizzles)
    collision = first_collision(offs)
    if collision is not None:
        ua, ub, off = collision
        return _collision(list(ua), list(ub), off, {}, "enumeration")
    return Verdict("proved", f"all {offs.size:,} elements map to distinct offsets", None,
                   "enumeration")


def _concrete_criterion_order(extents: list[int], strides: list[int]) -> tuple[int, ...] | None:
    dims = sorted((i for i, e in enumerate(extents) if e >= 2), key=lambda i: strides[i])
    reach = 0
    for i in dims:
        if strides[i] < 0 or strides[i] <= reach:
            return None
        reach += (extents[i] - 1) * strides[i]
    return tuple(dims)


def _criterion(exts: list[z3.ArithRef], strides: list[z3.ArithRef],
               order: Sequence[int], space: SymbolSpace) -> z3.BoolRef:
    parts, reach = [space.bool_val(True)], space.int_val(0)
    for i in order:
        parts.append(z3.Or(exts[i] <= 1, z3.And(strides[i] >= 0, strides[i] > reach)))
        reach = reach + (exts[i] - 1) * strides[i]
    return z3.Or(z3.Not(_nonempty(exts, space)), z3.And(parts))


def _guess_orders(layout: Layout, space: SymbolSpace) -> list[tuple[int, ...]]:
    free = space.free_symbols((*layout.shape, *layout.strides))
    orders: list[tuple[int, ...]] = [tuple(reversed(range(layout.rank)))]
    for value in _SAMPLE_VALUES:
        env = dict(space.bindings)
        for name in free:
            lo, hi = space.bounds.get(name, space.default_bounds)
            env[name] = min(max(value, lo), hi)
        try:
            vals = [space.substitute(s).evaluate(env) for s in layout.strides]
        except (KeyError, ZeroDivisionError):
            continue
        orders.append(tuple(sorted(range(layout.rank), key=lambda i, v=vals: v[i])))
    return list(dict.fromkeys(orders))


def _symbolic_criterion(layout: Layout, space: SymbolSpace, time_limit_ms: int) -> str | None:
    exts = [space.to_z3(e) for e in layout.shape]
    strides = [space.to_z3(s) for s in layout.strides]
    for order in _guess_orders(layout, space):
        s = space.solver()
        # only where the map is defined: a zero divisor is the bounds proof's refutation
        s.add(*space.constraints(), space.nonzero_divisors(),
              z3.Not(_criterion(exts, strides, order, space)))
        if check(s, max(1, time_limit_ms // 4)) == z3.unsat:
            return (f"z3: for all symbol values within bounds, the strides in order of dims "
                    f"{list(order)} each exceed the reach of the smaller ones")
    return None


def _z3_injective(layout: Layout, space: SymbolSpace, time_limit_ms: int,
                  swizzled: bool) -> Verdict:
    a = symbolic_access(layout, space, "u", swizzled)
    b = symbolic_access(layout, space, "v", swizzled)
    s = space.solver()
    s.add(*a.facts, *b.facts, *space.constraints())
    s.add(space.nonzero_divisors())  # a zero divisor is the bounds proof's refutation (S14)
    s.add(z3.Or([x != y for x, y in zip(a.index, b.index, strict=True)]
                or [space.bool_val(False)]))
    s.add(a.offset == b.offset)
    res = check(s, time_limit_ms)
    if res == z3.unsat:
        return Verdict("proved", "z3: no two distinct elements share an offset for any "
                       "symbol values within bounds", None, "z3")
    if res == z3.unknown:
        return _unknown(s, time_limit_ms, "injectivity")
    m = s.model()
    ua, ub = _evals(m, a.index), _evals(m, b.index)
    syms = space.model_values(m)
    off = m.eval(a.offset, model_completion=True).as_long()
    if not swizzled:
        off = apply_swizzles(layout.swizzles, off)
    return _collision(ua, ub, off, syms, "z3")


def _collision(ua: list[int], ub: list[int], off: int, syms: dict[str, int],
               method: str) -> Verdict:
    cex = {**syms, **_index_cex("u", ua), **_index_cex("v", ub), "offset": off}
    return Verdict("refuted", f"elements {ua} and {ub} both map to storage offset {off}"
                   f"{_symbols_text(syms)}", cex, method)


# --------------------------------------------------------------------------- bounds


def prove_in_bounds(layout: Layout, space: SymbolSpace, time_limit_ms: int = 2000) -> Verdict:
    """Every element of the domain lands in ``[0, storage)`` and every term is defined."""
    conc, small = _concrete_cases(layout, space, _enumerate_in_bounds)
    if small is not None:
        return small
    swz = prove_swizzle_bijective(layout.swizzles, time_limit_ms)
    if swz.status != "proved":
        return _z3_in_bounds_composed(layout, space, time_limit_ms)
    if conc is not None and all(s >= 0 for e, s in zip(*conc, strict=True) if e >= 2):
        size = concrete_storage(*conc, layout.swizzles)
        return Verdict("proved", f"strides are non-negative, so offsets lie in [0, {size:,})",
                       None, "criterion")
    return _z3_in_bounds_strided(layout, space, time_limit_ms)


def _enumerate_in_bounds(layout: Layout, extents: list[int], strides: list[int]) -> Verdict:
    offs = concrete_offsets(extents, strides, layout.swizzles)
    storage = concrete_storage(extents, strides, layout.swizzles)
    flat = offs.reshape(-1)
    lo, hi = int(flat.argmin()), int(flat.argmax())
    for pos, bad in ((lo, flat[lo] < 0), (hi, flat[hi] >= storage)):
        if bad:
            u = [int(x) for x in np.unravel_index(pos, offs.shape)]
            return _outside_storage(u, int(flat[pos]), storage, {}, "enumeration")
    return Verdict("proved", f"offsets of all {flat.size:,} elements lie in [0, {storage})",
                   None, "enumeration")


def _z3_in_bounds_strided(layout: Layout, space: SymbolSpace, time_limit_ms: int) -> Verdict:
    exts = [space.to_z3(e) for e in layout.shape]
    strides = [space.to_z3(s) for s in layout.strides]
    storage = storage_term(layout, space)
    negative = [z3.And(e >= 2, s < 0) for e, s in zip(exts, strides, strict=True)]
    s = space.solver()
    s.add(*space.constraints(), _nonempty(exts, space))
    s.add(z3.Or(*negative, z3.Not(space.nonzero_divisors())))
    res = check(s, time_limit_ms)
    if res == z3.unsat:
        return Verdict("proved", "z3: for all symbol values within bounds every stride of an "
                       "extent ≥ 2 is non-negative, so offsets lie in [0, storage)", None, "z3")
    if res == z3.unknown:
        return _unknown(s, time_limit_ms, "in-bounds")
    m = s.model()
    syms = space.model_values(m)
    bad = [i for i, c in enumerate(negative) if z3.is_true(m.eval(c, model_completion=True))]
    if not bad or not z3.is_true(m.eval(space.nonzero_divisors(), model_completion=True)):
        return _not_total(syms)
    u = [0] * layout.rank
    u[bad[0]] = _evals(m, [exts[bad[0]] - 1])[0]
    off = apply_swizzles(layout.swizzles, _evals(m, [(exts[bad[0]] - 1) * strides[bad[0]]])[0])
    return _outside_storage(u, off, _evals(m, [storage])[0], syms, "z3")


def _z3_in_bounds_composed(layout: Layout, space: SymbolSpace, time_limit_ms: int) -> Verdict:
    a = symbolic_access(layout, space, "u")
    storage = storage_term(layout, space)
    s = space.solver()
    s.add(*a.facts, *space.constraints())
    s.add(z3.Or(a.offset < 0, a.offset >= storage, z3.Not(space.nonzero_divisors())))
    res = check(s, time_limit_ms)
    if res == z3.unsat:
        return Verdict("proved", "z3: every element lands in [0, storage) for all symbol "
                       "values within bounds", None, "z3")
    if res == z3.unknown:
        return _unknown(s, time_limit_ms, "in-bounds")
    m = s.model()
    u = _evals(m, a.index)
    syms = space.model_values(m)
    if not z3.is_true(m.eval(space.nonzero_divisors(), model_completion=True)):
        return _not_total(syms)
    off, size = _evals(m, [a.offset, storage])
    return _outside_storage(u, off, size, syms, "z3")


def _not_total(syms: dict[str, int]) -> Verdict:
    return Verdict("refuted", f"a divisor in the layout may be zero{_symbols_text(syms)}:"
                   " the address map is not total", syms, "z3")


def _outside_storage(u: list[int], off: int, size: int, syms: dict[str, int],
                     method: str) -> Verdict:
    cex = {**syms, **_index_cex("u", u), "offset": off, "storage": size}
    return Verdict("refuted", f"element {u} maps to offset {off}, outside the storage "
                   f"[0, {size}){_symbols_text(syms)}", cex, method)


def layout_exprs(layout: Layout) -> tuple[Expr, ...]:
    """Every expression the layout's address map evaluates."""
    return (*layout.shape, *layout.strides)


__all__ = [
    "ENUMERATION_LIMIT",
    "SymbolicAccess",
    "Verdict",
    "apply_swizzles",
    "concrete_layout",
    "concrete_storage",
    "known_empty",
    "layout_exprs",
    "prove_in_bounds",
    "prove_injective",
    "prove_swizzle_bijective",
    "storage_term",
    "swizzle_block_bits",
    "swizzle_bv",
    "symbolic_access",
    "undefined_error",
    "undefined_terms",
]
