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

from planner.ir.expr import Const, Expr, IntLike, add, as_expr, mul, product


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
        """Storage elements covered: ``1 + sum((extent - 1) * stride)``; 0 if empty (S14)."""
        n = self.num_elements()
        if n == Const(0):
            return Const(0)
        return add(1, *(mul(add(e, -1), s) for e, s in zip(self.shape, self.strides,
                                                            strict=True)))

    def storage_elements(self, env: Mapping[str, int]) -> int:
        """Concrete storage size in elements, padding and swizzle blocks included."""
        if self.num_elements().evaluate(env) == 0:
            return 0
        strides = [s.evaluate(env) for s in self.strides]
        extents = [e.evaluate(env) for e in self.shape]
        span = 1 + sum((e - 1) * abs(s) for e, s in zip(extents, strides, strict=True))
        for sw in self.swizzles:
            span = -(-span // sw.block) * sw.block
        return span

    def offsets(self, env: Mapping[str, int]) -> np.ndarray:
        """Storage offset of every logical element, as an int64 array of the shape."""
        return concrete_offsets([e.evaluate(env) for e in self.shape],
                                [s.evaluate(env) for s in self.strides], self.swizzles)

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
