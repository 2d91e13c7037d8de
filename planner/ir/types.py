"""IR types: tiles, views, memories, MemoryState tokens and async-copy tokens (S1, S9)."""

from __future__ import annotations

from dataclasses import dataclass

from planner.ir.dtypes import DType
from planner.ir.expr import Expr, product


@dataclass(frozen=True, slots=True)
class TileType:
    """An immutable value of ``dtype`` over a (possibly symbolic) index space."""

    dtype: DType
    shape: tuple[Expr, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    def num_elements(self) -> Expr:
        return product(self.shape)

    def __str__(self) -> str:
        dims = ", ".join(map(str, self.shape))
        return f"tile<[{dims}], {self.dtype}>"


@dataclass(frozen=True, slots=True)
class ViewType:
    """A kernel parameter: a TensorView onto external storage (row-major, strided)."""

    dtype: DType
    shape: tuple[Expr, ...]
    readonly: bool = False

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        dims = ", ".join(map(str, self.shape))
        ro = ", const" if self.readonly else ""
        return f"view<[{dims}], {self.dtype}{ro}>"


@dataclass(frozen=True, slots=True)
class MemoryType:
    """The stable identity of an explicit Memory allocation."""

    dtype: DType
    shape: tuple[Expr, ...]

    def __str__(self) -> str:
        dims = ", ".join(map(str, self.shape))
        return f"memory<[{dims}], {self.dtype}>"


@dataclass(frozen=True, slots=True)
class StateType:
    """A MemoryState token of some Memory with this element type and shape (S9).

    Same-typed states of different memories are distinguished by dataflow, which
    the verifier follows (S15), not by the type.
    """

    dtype: DType
    shape: tuple[Expr, ...]

    def __str__(self) -> str:
        dims = ", ".join(map(str, self.shape))
        return f"state<[{dims}], {self.dtype}>"


@dataclass(frozen=True, slots=True)
class TokenType:
    """The completion token of a ``memory.copy_async`` into a Memory of this element type
    and shape: the copied state becomes readable after ``memory.wait`` consumes it (S9)."""

    dtype: DType
    shape: tuple[Expr, ...]

    def __str__(self) -> str:
        dims = ", ".join(map(str, self.shape))
        return f"token<[{dims}], {self.dtype}>"


IRType = TileType | ViewType | MemoryType | StateType | TokenType

__all__ = ["IRType", "MemoryType", "StateType", "TileType", "TokenType", "ViewType"]
