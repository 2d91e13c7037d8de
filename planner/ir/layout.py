"""Layouts: the local address map ``L`` of an explicit Memory (S11–S13).

A :class:`Layout` maps a logical element ``u`` of a ``shape`` to a storage offset::

    linearize(L(u)) = swizzle_n(... swizzle_1(sum_i u_i * stride_i))

Strides are in elements and may be symbolic; padding is a stride larger than the
dense one, a transpose is a permutation of strides, and a composed XOR swizzle
(CUTLASS ``Swizzle<B, M, S>`` convention) permutes offsets inside aligned blocks.
The layout never changes the logical shape; it only decides where elements live.
Storage size (what capacity is charged, padding included) is the span of the
strided map rounded up to the swizzles' block size.

Concrete checks enumerate offsets with numpy; symbolic proofs live in
``planner.prove.proofs``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from planner.errors import UNKNOWN_LOC, Diagnostic, PlannerError, SourceLoc
from planner.ir.expr import Apply, Const, Expr, ExprOp, IntLike, add, as_expr, emin, mul, product


@dataclass(frozen=True, slots=True)
class XorSwizzle:
    """``offset ^ ((offset & (mask << (base + shift))) >> shift)``, mask = 2**bits - 1."""

    bits: int
    base: int
    shift: int

    def __post_init__(self) -> None:
        if self.bits < 0 or self.base < 0 or self.shift < 0:
            raise ValueError(f"swizzle parameters must be non-negative, got {self}")
        if self.bits and self.shift < self.bits:
            raise ValueError(f"swizzle shift {self.shift} must be >= bits {self.bits} "
                             "(the XOR source and target bit ranges overlap)")

    @property
    def block(self) -> int:
        """Offsets are permuted only inside aligned blocks of this many elements."""
        return 1 << (self.bits + self.base + self.shift)

    def apply(self, offset: np.ndarray | int) -> np.ndarray | int:
        mask = ((1 << self.bits) - 1) << (self.base + self.shift)
        return offset ^ ((offset & mask) >> self.shift)

    def __str__(self) -> str:
        return f"xor({self.bits}, {self.base}, {self.shift})"


def concrete_offsets(extents: Sequence[int], strides: Sequence[int],
                     swizzles: Sequence[XorSwizzle]) -> np.ndarray:
    """Storage offset of every element of a concrete layout, as an int64 array."""
    out = np.zeros(extents, dtype=np.int64)
    for axis, (n, st) in enumerate(zip(extents, strides, strict=True)):
        view = [1] * len(extents)
        view[axis] = n
        out = out + (np.arange(n, dtype=np.int64) * st).reshape(view)
    for sw in swizzles:
        out = sw.apply(out)
    return out


def first_collision(offs: np.ndarray
                    ) -> tuple[tuple[int, ...], tuple[int, ...], int] | None:
    """Two distinct indices of ``offs`` holding the same offset (the first pair in
    offset order) and that offset, or None when all offsets differ."""
    flat = offs.reshape(-1)
    if flat.size < 2:
        return None
    order = np.argsort(flat, kind="stable")
    dup = np.nonzero(flat[order][1:] == flat[order][:-1])[0]
    if dup.size == 0:
        return None
    a, b = int(order[dup[0]]), int(order[dup[0] + 1])
    return (tuple(int(x) for x in np.unravel_index(a, offs.shape)),
            tuple(int(x) for x in np.unravel_index(b, offs.shape)), int(flat[a]))


@dataclass(frozen=True, slots=True)
class Layout:
    """A strided, optionally swizzled map from a logical shape to storage offsets."""

    shape: tuple[Expr, ...]
    strides: tuple[Expr, ...]
    swizzles: tuple[XorSwizzle, ...] = ()
    planned: bool = False  # True: dense default the planner may replace (S12)

    def __post_init__(self) -> None:
        if len(self.shape) != len(self.strides):
            raise ValueError(f"layout rank mismatch: shape has {len(self.shape)} extents, "
                             f"stride has {len(self.strides)}")
        for i, s in enumerate(self.strides):
            if isinstance(s, Const) and s.value < 0:
                raise ValueError(f"layout stride {i} is {s.value}: strides must be >= 0 "
                                 "(reorder dimensions with a transpose instead)")

    @property
    def rank(self) -> int:
        return len(self.shape)

    def num_elements(self) -> Expr:
        return product(self.shape)

    def linear(self, index: Sequence[IntLike]) -> Expr:
        """The strided offset of a symbolic index (swizzles not applied)."""
        return add(*(mul(i, s) for i, s in zip(index, self.strides, strict=True)))

    def span(self) -> Expr:
        """Storage elements covered: ``1 + sum((extent - 1) * stride)``; 0 if empty (S14).

        When a stride divides and an extent is symbolic, the sum is multiplied by the
        guard ``min(e, 1)`` of each symbolic extent (1 on a non-empty domain, 0 on an
        empty one): evaluating the span at bindings that empty the domain meets that
        known zero factor first, so a stride such as ``ceildiv(64, N)`` at ``N = 0`` is
        never evaluated.
        """
        n = self.num_elements()
        if n == Const(0):
            return Const(0)
        body = add(1, *(mul(add(e, -1), s) for e, s in zip(self.shape, self.strides,
                                                            strict=True)))
        if not any(_divides(s) for s in self.strides):
            return body
        guard = [emin(e, 1) for e in self.shape if not isinstance(e, Const)]
        return mul(*guard, body) if guard else body

    def is_empty(self, env: Mapping[str, int]) -> bool:
        """Whether the logical domain has no elements under ``env`` (S14).

        Known zero extents are recognized first; then every extent that can be
        evaluated is: one that is 0 (or negative) makes the domain empty even when
        another extent cannot be evaluated (an unbound symbol, a zero divisor).
        Strides are never looked at.
        """
        if any(e == Const(0) for e in self.shape):
            return True
        for e in self.shape:
            try:
                v = e.evaluate(env)
            except (KeyError, ZeroDivisionError):
                continue
            if v <= 0:
                return True
        return False

    def undefined_terms(self, env: Mapping[str, int]) -> list[tuple[str, int, Expr]]:
        """The extents and strides that divide by zero under ``env``, as
        ``("extent" | "stride", dim, expr)`` (S14).

        Bound symbols are substituted (so a partly bound expression counts when the
        division by a bound zero folds).  Strides of an empty domain are unreachable map
        arithmetic and never looked at; an extent that divides by zero is reported
        unless another extent makes the domain empty.
        """
        if self.is_empty(env):
            return []
        out: list[tuple[str, int, Expr]] = []
        for kind, exprs in (("extent", self.shape), ("stride", self.strides)):
            for i, e in enumerate(exprs):
                try:
                    e.substitute(env)
                except ZeroDivisionError:
                    out.append((kind, i, e))
        return out

    def require_defined(self, env: Mapping[str, int], subject: str | None = None,
                        loc: SourceLoc = UNKNOWN_LOC) -> None:
        """Raise the S14 :class:`PlannerError` listing every extent or stride of a
        non-empty domain that divides by zero at ``env`` (see :meth:`undefined_terms`);
        ``subject`` names the owner (default: the layout itself)."""
        bad = self.undefined_terms(env)
        if bad:
            what = subject or str(self)
            raise PlannerError([Diagnostic(division_by_zero_message(kind, e, what, env)
                                           + ": the address map of a non-empty logical "
                                           "domain must be defined", loc, "S14")
                                for kind, _, e in bad], kind="invalid-ir")

    def storage_elements(self, env: Mapping[str, int]) -> int:
        """Concrete storage size in elements, padding and swizzle blocks included.

        An empty domain needs 0 elements, and its strides are never evaluated (S14):
        a stride that divides by an extent of the empty domain is unreachable map
        arithmetic.  On a non-empty domain a zero divisor raises the S14
        :class:`PlannerError` of :meth:`require_defined`.
        """
        if self.is_empty(env):
            return 0
        self.require_defined(env)
        extents = [e.evaluate(env) for e in self.shape]
        strides = [s.evaluate(env) for s in self.strides]
        span = 1 + sum((e - 1) * abs(s) for e, s in zip(extents, strides, strict=True))
        for sw in self.swizzles:
            span = -(-span // sw.block) * sw.block
        return span

    def offsets(self, env: Mapping[str, int]) -> np.ndarray:
        """Storage offset of every logical element, as an int64 array of the shape.

        An empty domain gives an empty array without evaluating a stride (S14).
        """
        self.require_defined(env)
        extents = [e.evaluate(env) for e in self.shape]
        if any(n <= 0 for n in extents):
            return np.zeros([max(n, 0) for n in extents], dtype=np.int64)
        return concrete_offsets(extents, [s.evaluate(env) for s in self.strides],
                                self.swizzles)

    def injectivity_counterexample(self, env: Mapping[str, int]
                                   ) -> tuple[tuple[int, ...], tuple[int, ...], int] | None:
        """Two distinct logical indices with the same offset, or None when injective."""
        return first_collision(self.offsets(env))

    def with_swizzle(self, sw: XorSwizzle) -> Layout:
        return Layout(self.shape, self.strides, (*self.swizzles, sw), self.planned)

    def __str__(self) -> str:
        shape = ", ".join(map(str, self.shape))
        strides = ", ".join(map(str, self.strides))
        text = f"[{shape}] stride [{strides}]"
        for sw in self.swizzles:
            text += f" {sw}"
        if self.planned:
            text += " planned"
        return f"layout<{text}>"


def _divides(e: Expr) -> bool:
    """Whether evaluating ``e`` divides (floordiv, mod or ceildiv anywhere in it)."""
    if isinstance(e, Apply):
        return e.op in (ExprOp.FLOORDIV, ExprOp.MOD, ExprOp.CEIL_DIV) or any(
            _divides(a) for a in e.args)
    return False


def division_by_zero_message(kind: str, expr: Expr, subject: str,
                             env: Mapping[str, int]) -> str:
    """``division by zero evaluating stride 4 * ceildiv(N, N) of memory %m at N=0``."""
    at = ", ".join(f"{k}={env[k]}" for k in sorted(expr.symbols()) if k in env)
    return (f"division by zero evaluating {kind} {expr} of {subject}"
            + (f" at {at}" if at else ""))


def row_major_strides(shape: Sequence[IntLike]) -> tuple[Expr, ...]:
    strides: list[Expr] = []
    acc: Expr = Const(1)
    for e in reversed(shape):
        strides.append(acc)
        acc = mul(acc, e)
    return tuple(reversed(strides))


def dense(shape: Sequence[IntLike], planned: bool = True) -> Layout:
    """Row-major dense storage; ``planned`` marks it replaceable by the planner."""
    exts = tuple(as_expr(e) for e in shape)
    return Layout(exts, row_major_strides(exts), (), planned)


def strided(shape: Sequence[IntLike], strides: Sequence[IntLike],
            swizzles: Sequence[XorSwizzle] = ()) -> Layout:
    return Layout(tuple(as_expr(e) for e in shape), tuple(as_expr(s) for s in strides),
                  tuple(swizzles))
