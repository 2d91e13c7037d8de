"""The LLVM vocabulary of the segment-function emitters: the register and memory types of
a dtype, element alignment, and :class:`_IR`, the builder conveniences they share."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import llvmlite.ir as ir

from planner.errors import error
from planner.ir.dtypes import DType
from planner.lower.cpu.jit import declare_intrinsic
from planner.lower.cpu.llvm_helpers import F32, I1, I8, I32, loop, smax, smin, splat

_KIND = "lowering"


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


def _align(t: ir.Type) -> int:
    if isinstance(t, ir.IntType):
        return max(1, t.width // 8)
    return 4


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
