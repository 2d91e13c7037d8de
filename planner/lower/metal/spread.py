"""The spread program: what the emitter maps the loop program to, and the printer prints.

A :class:`_Work` is one statement spread over the group's threads by owner computes
(distributed variables, the loops each thread runs, an optional fold); :class:`_Loop`,
:class:`_Pipe` (its stages: :class:`_Stage`), :class:`_Sync` (a barrier) and
:class:`_Comment` hold the rest.  A :class:`_Home` says where a buffer lives: a typed
view into the threadgroup arena, per-thread slices, or a region of device scratch.
The helpers list the reads and buffers of a statement and walk the statements.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from planner.ir.core import ReduceFn
from planner.ir.dtypes import DType
from planner.ir.expr import Const, Expr
from planner.lower.loops import program as lp
from planner.lower.metal.tables import Space

_ZERO = Const(0)
_WHOLE = 1 << 62  # an end past every byte offset and statement position


@dataclass(frozen=True, slots=True)
class _Home:
    """Where a buffer lives in the kernel."""

    buffer: lp.Buffer
    space: Space
    array: str  # THREADGROUP: the buffer's typed view into the arena
    capacity: int  # elements of the array this buffer may use
    offset: int = 0  # THREADGROUP: first byte of the buffer in the arena
    slots: int = 0  # THREAD: elements per thread and version
    exchange: bool = False
    pooled: bool = False  # a compiler temporary: in the arena for its lifetime only
    base: Expr = _ZERO  # DEVICE: first element of the buffer in its group's region

    @property
    def nbytes(self) -> int:
        """Bytes the buffer takes (all versions; at least one element)."""
        return max(self.capacity, 1) * self.buffer.dtype.itemsize


@dataclass(frozen=True, slots=True)
class _Work:
    """One statement spread over the group: dest[dist] (= fold over serial of) value."""

    dist: tuple[tuple[str, Expr], ...]  # distributed variables (owner computes)
    serial: tuple[tuple[str, Expr], ...]  # loops each thread runs, outermost first
    dest: lp.BufWrite | lp.ViewWrite
    value: lp.Elem
    fold: ReduceFn | None = None
    init: lp.Elem | None = None  # the fold's start; None: the identity
    comment: str = ""
    #: subexpressions each thread keeps while the variables they depend on stay the same
    #: (``_Cached(k)`` in ``value`` reads the ``k``-th): (expression, its variables)
    cached: tuple[tuple[lp.Elem, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class _Cached(lp.Elem):
    """A per-thread cached subexpression of the statement (``_Work.cached[index]``)."""

    index: int
    dtype: DType


@dataclass(frozen=True, slots=True)
class _Sync:
    classes: frozenset[str]
    note: str


@dataclass(frozen=True, slots=True)
class _Loop:
    label: str
    vars: tuple[str, ...]
    extents: tuple[Expr, ...]
    body: tuple[_Node, ...]
    comment: str
    #: a nested parallel whose instances the group runs one after another: their windowed
    #: stores into an ancestor's Memory are proved disjoint (S16), so never a race
    instances: bool = False


@dataclass(frozen=True, slots=True)
class _Stage:
    name: str
    lag: int
    body: tuple[_Node, ...]
    lead: _Sync | None = None  # a barrier every time step runs, before the stage's guard


@dataclass(frozen=True, slots=True)
class _Pipe:
    label: str
    vars: tuple[str, ...]
    extents: tuple[Expr, ...]
    window: int
    stages: tuple[_Stage, ...]


@dataclass(frozen=True, slots=True)
class _Comment:
    text: str


_Node = _Work | _Sync | _Loop | _Pipe | _Comment


def _reads(w: _Work) -> list[lp.ViewRead | lp.BufRead]:
    out = list(lp.elem_reads(w.value))
    if w.init is not None:
        out.extend(lp.elem_reads(w.init))
    for e, _ in w.cached:
        out.extend(lp.elem_reads(e))
    return out


def _work_buffers(w: _Work) -> list[tuple[str, bool]]:
    """(buffer, is_write) for every buffer a statement touches."""
    out = [(w.dest.buffer, True)] if isinstance(w.dest, lp.BufWrite) else []
    out.extend((r.buffer, False) for r in _reads(w) if isinstance(r, lp.BufRead))
    return out


def _walk_works(nodes: Iterable[_Node]) -> Iterable[_Work]:
    for n in nodes:
        if isinstance(n, _Work):
            yield n
        elif isinstance(n, _Loop):
            yield from _walk_works(n.body)
        elif isinstance(n, _Pipe):
            for st in n.stages:
                yield from _walk_works(st.body)
