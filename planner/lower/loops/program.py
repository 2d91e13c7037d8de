"""The target-neutral loop program: what a MaterializationPlan means physically.

One program sits between a plan and every backend (the llvmlite CPU backend today, a
Metal emitter later).  It holds no LLVM or Metal types: only frozen dataclasses over the
IR's symbolic :class:`~planner.ir.expr.Expr` extents, so every size stays a run-time
value and one compiled program serves every shape.

The model
---------
* **Segments.**  Each top-level ``region.parallel`` becomes a *parallel segment*: its
  instances (the row-major product of its axes) are split across workers.  Other
  top-level ops form *serial segments* run once.  Segments run in order; the join
  between two segments is the only cross-worker barrier the CPU needs.
* **Buffers** are the physical home of a value: a name, element type, logical shape, a
  :class:`~planner.ir.layout.Layout` (padding, transposed strides and XOR swizzles live
  in the address arithmetic), the catalog resource it is placed in, a version count
  and a role (``materialized``, ``virtual``, ``memory`` for explicit Memory, ``carry``
  for loop-carried values, ``stage`` for operand staging, ``reduce`` / ``mma`` for
  results that always need storage).  Buffers are per instance of their segment.
* **Element expressions** (:class:`Elem`) compute one element of a tile at an index
  (a tuple of Exprs over nest variables ``i.0``, ``i.1``, ...).  Virtual and
  materialized edges read the producer's buffer.  A fused edge inlines the producer's
  expression into the consumer, reading the producer's own operands as their edges
  decided (a buffer, or their inlined expression).  A recomputed edge re-derives the
  producer's whole chain from the kernel's inputs, whatever the chain's edges decided:
  its loads are re-read from their views (a :class:`ViewRead` in the consumer's nest,
  e.g. softmax's ``x - max`` recomputed into ``exp`` reads ``X`` again even where ``x``
  is kept in local storage for ``max``), elementwise ops, broadcasts, transposes,
  ``full`` and ``iota`` are recomputed, and the values that cannot be recomputed
  (reductions, mma results, loop carries, Memory snapshots, values of another
  parallel instance, loads of views the kernel stores) are read as their own edges
  decided; ``planner.solve.costs`` prices the same chain.  Either way the producer is
  duplicated when several consumers inline it.  Transposes and broadcasts are index
  permutations, never data movement.
* **Statements.**  :class:`Nest` assigns an expression over an iteration space (the
  innermost variable is the one a backend vectorizes; a nest writing a transposed
  layout iterates so that its destination is unit-stride there);
  :class:`ReduceNest` reduces over its innermost variable; :class:`FusedNest` runs
  sibling nests over the same space as one loop (a producer and the reduction that
  reads it, one pass over the row instead of two; a nest may move before independent
  nests to join one, unless it writes registers, which would then be held longer than
  the plan counts); :class:`Mma` calls the backend's
  matrix multiply on row-major buffers, or in place on a view window when it lies
  inside the view (staged with its fill otherwise), other operands being staged;
  :class:`Loop`, :class:`Pipeline`, :class:`Parallel` are the temporal and
  nested-spatial structure; :class:`Barrier` marks the plan's sync points.
* **Masked edge tiles.**  A view read or write knows its window (the load's offsets and
  shape).  A nest whose windows all lie inside their views runs unmasked; otherwise the
  backend masks each element (reads outside a view give the load's ``fill``, writes
  outside are dropped), exactly like the reference interpreter.
* **Pipelines (S18).**  A pipeline loop whose stage cut is safe becomes a software
  pipeline: stage ``s`` runs iteration ``t - lag(s)`` at time step ``t`` with
  ``lag(s) = min(s, window - 1)``; a buffer written in one stage and read in a later
  one gets ``lag difference + 1`` iteration-local versions, addressed by ``iteration
  mod versions``.  The plan's version counts are followed: where it keeps fewer
  versions than that overlap needs (trading stalls for capacity), the lags are
  lowered until they suffice (no lag left: the loop runs in order, and the program
  says why); every buffer keeps at least the versions the plan counted.  A cut is
  unsafe when a stage reads a value carried from a later stage, when explicit Memory
  is read in a state from an earlier iteration or from outside the loop (a recurrence
  through outer Memory), when one Memory is stored in several stages, or when a view
  is stored before the last stage; such loops stay ordered and the program says why.
  Memory declared inside a temporal region is owned by the nearest spatial parallel
  (S7): its buffer is one per instance of the segment, created before the loop is
  scheduled, and a pipeline gives it versions like Memory declared outside.
* **Loop-carried values** live in a carry buffer with two versions (the current and
  the next iteration, rotated by parity), or one version when the update can be done
  in place: every read of the old value happens before the first write of the new one
  or, inside that write's own nest, at the same element (``acc = mma(a, b, acc)``).
  The carry buffer is where the plan keeps the carried value (a materialized use's
  resource, else registers); the yielded value is computed straight into it when the
  plan keeps that value in the same storage, else copied at the yield.
* **Buffers follow the plan's storage**: a value with a materialized edge lives in that
  resource; when it also has virtual edges it gets a register copy for them (the plan
  counts both), filled right after the value is computed.

:func:`build_loop_program` builds a program from a kernel and a plan;
``str(program)`` is the readable form printed by ``planner lower --emit loops``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from planner.catalog import Target
from planner.errors import PlannerError, error
from planner.ir import core
from planner.ir.core import (
    BinaryFn,
    Block,
    Kernel,
    LoopKind,
    LoopOp,
    Op,
    ParallelOp,
    ReduceFn,
    UnaryFn,
    Value,
)
from planner.ir.dtypes import DType
from planner.ir.expr import Const, Expr, Sym, add, ceil_div, mod, mul, product
from planner.ir.graph import dataflow_graph, edge_id, live_edges, node_names
from planner.ir.layout import Layout, XorSwizzle, dense
from planner.ir.printer import Printer, PrintOptions, ValueNamer, format_float
from planner.ir.types import MemoryType, StateType, TileType, ViewType
from planner.plan.decisions import (
    Decision,
    EdgePlan,
    LayoutChoice,
    MaterializationPlan,
    MemoryPlan,
    Status,
)
from planner.realize.binding import ExecutionBinding, bind_execution
from planner.realize.temporaries import temporary_home

__all__ = [
    "DEFAULT_RESOURCES",
    "Barrier",
    "Binary",
    "BufRead",
    "BufWrite",
    "Buffer",
    "Cast",
    "Elem",
    "FusedNest",
    "IndexOf",
    "Lit",
    "Loop",
    "LoopProgram",
    "Mma",
    "MmaBuf",
    "MmaView",
    "Nest",
    "Note",
    "Parallel",
    "Pipeline",
    "ReduceNest",
    "Segment",
    "Select",
    "Stage",
    "Stmt",
    "Unary",
    "ViewParam",
    "ViewRead",
    "ViewWrite",
    "Window",
    "build_loop_program",
    "dest_key",
    "elem_reads",
    "format_elem",
    "format_program",
    "fuse_siblings",
    "nest_var",
    "plan_edge_map",
    "walk_stmts",
]

_KIND = "lowering"

#: Resource names used when no target catalog is given (the x86-avx2 catalog's).
DEFAULT_RESOURCES = {"private": "registers", "shared": "local", "global": "dram"}


def nest_var(i: int) -> str:
    """The name of a nest's ``i``-th iteration variable (not a valid user symbol)."""
    return f"i.{i}"


def _vars(rank: int) -> tuple[Expr, ...]:
    return tuple(Sym(nest_var(i)) for i in range(rank))


# =========================================================================== elements


class Elem:
    """One element of a tile, as an expression tree (frozen subclasses below)."""

    __slots__ = ()
    dtype: DType


@dataclass(frozen=True, slots=True)
class Lit(Elem):
    """A constant element."""

    value: float | int | bool
    dtype: DType


@dataclass(frozen=True, slots=True)
class IndexOf(Elem):
    """The integer value of an index expression (``iota``, or ``full`` of an Expr)."""

    expr: Expr
    dtype: DType


@dataclass(frozen=True, slots=True)
class Window:
    """A load or store window of a view: elements outside the view are masked."""

    view: str
    offsets: tuple[Expr, ...]
    shape: tuple[Expr, ...]

    def __str__(self) -> str:
        dims = ", ".join(f"{o} +: {s}" for o, s in zip(self.offsets, self.shape, strict=True))
        return f"{self.view}[{dims}]"


@dataclass(frozen=True, slots=True)
class ViewRead(Elem):
    """``view[index]``; an index outside the view reads ``fill`` (masked edge tiles)."""

    view: str
    index: tuple[Expr, ...]
    fill: float
    dtype: DType
    window: Window


@dataclass(frozen=True, slots=True)
class BufRead(Elem):
    """``buffer<version>[index]`` through the buffer's layout."""

    buffer: str
    index: tuple[Expr, ...]
    version: Expr
    dtype: DType


@dataclass(frozen=True, slots=True)
class Unary(Elem):
    fn: UnaryFn
    x: Elem
    dtype: DType


@dataclass(frozen=True, slots=True)
class Binary(Elem):
    fn: BinaryFn
    a: Elem
    b: Elem
    dtype: DType  # i1 for comparisons


@dataclass(frozen=True, slots=True)
class Select(Elem):
    cond: Elem
    a: Elem
    b: Elem
    dtype: DType


@dataclass(frozen=True, slots=True)
class Cast(Elem):
    x: Elem
    dtype: DType


def elem_children(e: Elem) -> tuple[Elem, ...]:
    if isinstance(e, Unary | Cast):
        return (e.x,)
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    return ()


def elem_reads(e: Elem) -> Iterator[ViewRead | BufRead]:
    """Every view and buffer read in ``e`` (leaves, with repetition)."""
    if isinstance(e, ViewRead | BufRead):
        yield e
    for c in elem_children(e):
        yield from elem_reads(c)


_BINARY_SYMBOL = {BinaryFn.ADD: "+", BinaryFn.SUB: "-", BinaryFn.MUL: "*", BinaryFn.DIV: "/",
                  BinaryFn.LT: "<", BinaryFn.LE: "<=", BinaryFn.GT: ">", BinaryFn.GE: ">=",
                  BinaryFn.EQ: "=="}


def _idx(index: tuple[Expr, ...]) -> str:
    return ", ".join(map(str, index))


def format_elem(e: Elem) -> str:
    """Infix text of an element expression (fully parenthesized inner operations)."""
    if isinstance(e, Lit):
        v = e.value
        if e.dtype.is_float:
            f = float(v)
            return str(f) if math.isinf(f) or math.isnan(f) else format_float(f)
        return str(v).lower()
    if isinstance(e, IndexOf):
        return f"({e.expr})"
    if isinstance(e, ViewRead):
        return f"{e.view}[{_idx(e.index)}]"
    if isinstance(e, BufRead):
        ver = "" if e.version == Const(0) else f"<{e.version}>"
        return f"%{e.buffer}{ver}[{_idx(e.index)}]"
    if isinstance(e, Unary):
        return f"{e.fn.value}({format_elem(e.x)})"
    if isinstance(e, Binary):
        a, b = _operand_text(e.a), _operand_text(e.b)
        sym = _BINARY_SYMBOL.get(e.fn)
        return f"{a} {sym} {b}" if sym else f"{e.fn.value}({format_elem(e.a)}, {format_elem(e.b)})"
    if isinstance(e, Select):
        return f"select({format_elem(e.cond)}, {format_elem(e.a)}, {format_elem(e.b)})"
    if isinstance(e, Cast):
        return f"cast<{e.dtype}>({format_elem(e.x)})"
    raise TypeError(type(e).__name__)


def _operand_text(e: Elem) -> str:
    text = format_elem(e)
    return f"({text})" if isinstance(e, Binary) and e.fn in _BINARY_SYMBOL else text


# =========================================================================== buffers


@dataclass(frozen=True, slots=True)
class Buffer:
    """Storage for one value, Memory or temporary, per instance of its segment."""

    name: str
    dtype: DType
    layout: Layout  # logical shape -> storage offsets (padding, strides, swizzles)
    resource: str  # catalog resource name
    resource_class: str  # its class: private, shared, global, ... (placement on a backend)
    versions: int = 1
    role: str = "materialized"
    edges: tuple[str, ...] = ()  # plan edge ids this buffer realizes
    note: str = ""

    @property
    def shape(self) -> tuple[Expr, ...]:
        return self.layout.shape

    def storage_elements(self) -> Expr:
        """Elements of one version: the layout's span rounded up to its swizzle blocks."""
        span = self.layout.span()
        for sw in self.layout.swizzles:
            span = mul(ceil_div(span, sw.block), sw.block)
        return span

    def version_stride(self) -> Expr:
        """Elements between versions: the storage rounded up to 64 bytes."""
        per = max(1, 64 // self.dtype.itemsize)
        return mul(ceil_div(self.storage_elements(), per), per)

    def total_elements(self) -> Expr:
        return mul(self.version_stride(), self.versions) if self.versions > 1 \
            else self.storage_elements()

    def static_elements(self) -> int | None:
        """Total elements when the size is a constant, else None."""
        return self.total_elements().const_value()

    def __str__(self) -> str:
        shape = ", ".join(map(str, self.shape))
        strides = ", ".join(map(str, self.layout.strides))
        lay = f"stride [{strides}]" + "".join(f" {sw}" for sw in self.layout.swizzles)
        text = (f"%{self.name}: {self.dtype}[{shape}] in {self.resource} {lay} "
                f"x{self.versions}  {self.role}")
        if self.edges:
            text += "  (" + "; ".join(self.edges) + ")"
        if self.note:
            text += f"  -- {self.note}"
        return text


# =========================================================================== statements


class Stmt:
    """A statement of the loop program (frozen subclasses below)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class BufWrite:
    buffer: str
    index: tuple[Expr, ...]
    version: Expr

    def __str__(self) -> str:
        ver = "" if self.version == Const(0) else f"<{self.version}>"
        return f"%{self.buffer}{ver}[{_idx(self.index)}]"


@dataclass(frozen=True, slots=True)
class ViewWrite:
    """A store into a view window; elements outside the view are dropped."""

    view: str
    index: tuple[Expr, ...]
    window: Window

    def __str__(self) -> str:
        return f"{self.view}[{_idx(self.index)}]"


Dest = BufWrite | ViewWrite


def _windows(dest: Dest | None, value: Elem) -> tuple[Window, ...]:
    out: dict[Window, None] = {}
    for r in elem_reads(value):
        if isinstance(r, ViewRead):
            out.setdefault(r.window, None)
    if isinstance(dest, ViewWrite):
        out.setdefault(dest.window, None)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Nest(Stmt):
    """``for vars < extents: dest = value`` (the last variable is unit-stride)."""

    vars: tuple[str, ...]
    extents: tuple[Expr, ...]
    dest: Dest
    value: Elem

    @property
    def windows(self) -> tuple[Window, ...]:
        """View windows touched: when all lie inside their views no element is masked."""
        return _windows(self.dest, self.value)


@dataclass(frozen=True, slots=True)
class ReduceNest(Stmt):
    """``dest[vars[:-1]] = fn over vars[-1] of value`` (a reduction over the last axis)."""

    vars: tuple[str, ...]
    extents: tuple[Expr, ...]
    fn: ReduceFn
    dest: BufWrite
    value: Elem

    @property
    def windows(self) -> tuple[Window, ...]:
        return _windows(None, self.value)


@dataclass(frozen=True, slots=True)
class FusedNest(Stmt):
    """Sibling nests over the same iteration space run as one loop, part by part at each
    point (a value read at the point it was just written is forwarded, not reloaded);
    reductions among the parts are written after their row."""

    vars: tuple[str, ...]
    extents: tuple[Expr, ...]
    parts: tuple[Nest | ReduceNest, ...]

    @property
    def windows(self) -> tuple[Window, ...]:
        out: dict[Window, None] = {}
        for p in self.parts:
            for w in p.windows:
                out.setdefault(w, None)
        return tuple(out)


@dataclass(frozen=True, slots=True)
class MmaBuf:
    """An mma operand read directly from a buffer (row-major, unit inner stride)."""

    buffer: str
    version: Expr

    def __str__(self) -> str:
        ver = "" if self.version == Const(0) else f"<{self.version}>"
        return f"%{self.buffer}{ver}"


@dataclass(frozen=True, slots=True)
class MmaView:
    """An mma operand read from a view window: passed in place when the window lies
    inside the view, else copied with ``fill`` into the ``staging`` buffer."""

    window: Window
    fill: float
    staging: str

    def __str__(self) -> str:
        return f"{self.window} (in place when inside, else staged in %{self.staging})"


@dataclass(frozen=True, slots=True)
class Mma(Stmt):
    """``c (+)= a @ b`` with a: [m, k], b: [k, n], c: [m, n] (accumulate or overwrite)."""

    c: MmaBuf
    a: MmaBuf | MmaView
    b: MmaBuf | MmaView
    m: Expr
    n: Expr
    k: Expr
    accumulate: bool


@dataclass(frozen=True, slots=True)
class Loop(Stmt):
    """A temporal loop over the row-major product of ``extents``, in order."""

    label: str
    kind: str
    vars: tuple[str, ...]
    extents: tuple[Expr, ...]
    body: tuple[Stmt, ...]
    note: str = ""


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    lag: int  # this stage runs iteration t - lag at time step t
    body: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class Pipeline(Stmt):
    """A software-pipelined loop: at time step ``t`` stage ``s`` runs iteration
    ``t - s.lag`` when it exists (prologue and epilogue are the out-of-range steps)."""

    label: str
    vars: tuple[str, ...]
    extents: tuple[Expr, ...]
    window: int
    stages: tuple[Stage, ...]


@dataclass(frozen=True, slots=True)
class Parallel(Stmt):
    """A nested spatial region, executed by the instance that reaches it."""

    label: str
    vars: tuple[str, ...]
    extents: tuple[Expr, ...]
    body: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class Barrier(Stmt):
    """The plan's synchronization between a write and its reads (a catalog sync rule)."""

    rule: str
    scope: str
    note: str = ""


@dataclass(frozen=True, slots=True)
class Note(Stmt):
    text: str


@dataclass(frozen=True, slots=True)
class Segment:
    """A top-level part of the kernel: parallel instances or one serial run."""

    label: str
    parallel: bool
    vars: tuple[str, ...]
    extents: tuple[Expr, ...]
    body: tuple[Stmt, ...]
    buffers: tuple[str, ...]  # buffers owned per instance (per run) of this segment

    def instances(self) -> Expr:
        return product(self.extents)


@dataclass(frozen=True, slots=True)
class ViewParam:
    name: str
    dtype: DType
    shape: tuple[Expr, ...]
    readonly: bool


@dataclass(frozen=True, slots=True)
class LoopProgram:
    """The whole lowered kernel; ``str()`` is its readable form."""

    kernel: str
    target: str
    params: tuple[ViewParam, ...]
    symbols: tuple[str, ...]  # kernel symbols, bound at run time
    buffers: tuple[Buffer, ...]
    segments: tuple[Segment, ...]
    notes: tuple[str, ...] = ()
    plan_hash: str = ""

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)

    def param(self, name: str) -> ViewParam:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def __str__(self) -> str:
        return format_program(self)


# =========================================================================== printing


def format_program(p: LoopProgram) -> str:
    lines = [f"loop program {p.kernel}  target {p.target}"]
    views = ", ".join(f"{v.name}: {v.dtype}[{', '.join(map(str, v.shape))}]"
                      + (" const" if v.readonly else "") for v in p.params)
    lines.append(f"  views    {views}")
    lines.append(f"  symbols  {', '.join(p.symbols) or '-'}")
    for n in p.notes:
        lines.append(f"  note     {n}")
    for seg in p.segments:
        if seg.parallel:
            axes = ", ".join(f"{v} < {e}" for v, e in zip(seg.vars, seg.extents, strict=True))
            lines.append(f"  parallel {seg.label}: {axes}  (instances split across workers)")
        else:
            lines.append(f"  serial {seg.label}")
        owned = {b.name: b for b in p.buffers if b.name in seg.buffers}
        for name in seg.buffers:
            lines.append(f"    buffer {owned[name]}")
        lines.extend(_format_body(seg.body, 2))
    return "\n".join(lines) + "\n"


def _loop_head(vars_: tuple[str, ...], extents: tuple[Expr, ...]) -> str:
    return ", ".join(f"{v} < {e}" for v, e in zip(vars_, extents, strict=True))


def _format_body(body: tuple[Stmt, ...], depth: int) -> list[str]:
    out: list[str] = []
    for s in body:
        out.extend(_FORMAT[type(s)](s, "  " * depth, depth))
    return out


def _fmt_nest(s: Nest, pad: str, depth: int) -> list[str]:
    head = f"{pad}nest {_loop_head(s.vars, s.extents) or '(scalar)'}"
    if s.windows:
        head += "  edge-masked " + ", ".join(map(str, s.windows))
    return [head, f"{pad}  {s.dest} = {format_elem(s.value)}"]


def _fmt_reduce(s: ReduceNest, pad: str, depth: int) -> list[str]:
    head = f"{pad}nest {_loop_head(s.vars, s.extents)}"
    if s.windows:
        head += "  edge-masked " + ", ".join(map(str, s.windows))
    return [head, f"{pad}  {s.dest} = {s.fn.value} over {s.vars[-1]} of {format_elem(s.value)}"]


def _fmt_fused(s: FusedNest, pad: str, depth: int) -> list[str]:
    head = f"{pad}nest {_loop_head(s.vars, s.extents)}  (fused)"
    if s.windows:
        head += "  edge-masked " + ", ".join(map(str, s.windows))
    return [head, *(line for p in s.parts for line in _FORMAT[type(p)](p, pad, depth)[1:])]


def _fmt_mma(s: Mma, pad: str, depth: int) -> list[str]:
    op = "+=" if s.accumulate else "="
    return [f"{pad}mma [{s.m} x {s.k}] @ [{s.k} x {s.n}]: {s.c} {op} {s.a} @ {s.b}"]


def _fmt_loop(s: Loop, pad: str, depth: int) -> list[str]:
    note = f"  -- {s.note}" if s.note else ""
    return [f"{pad}loop {s.kind} {s.label}: {_loop_head(s.vars, s.extents)}{note}",
            *_format_body(s.body, depth + 1)]


def _fmt_pipeline(s: Pipeline, pad: str, depth: int) -> list[str]:
    out = [f"{pad}pipeline {s.label}: {_loop_head(s.vars, s.extents)}  window {s.window}, "
           f"time steps t < iterations + {max(st.lag for st in s.stages)}"]
    for st in s.stages:
        out.append(f"{pad}  stage {st.name}: iteration t - {st.lag}")
        out.extend(_format_body(st.body, depth + 2))
    return out


def _fmt_parallel(s: Parallel, pad: str, depth: int) -> list[str]:
    return [f"{pad}parallel {s.label}: {_loop_head(s.vars, s.extents)}  (in this instance)",
            *_format_body(s.body, depth + 1)]


def _fmt_barrier(s: Barrier, pad: str, depth: int) -> list[str]:
    note = f"  -- {s.note}" if s.note else ""
    return [f"{pad}barrier {s.rule} ({s.scope}){note}"]


def _fmt_note(s: Note, pad: str, depth: int) -> list[str]:
    return [f"{pad}-- {s.text}"]


_FORMAT: dict[type, Callable[..., list[str]]] = {
    Nest: _fmt_nest, ReduceNest: _fmt_reduce, FusedNest: _fmt_fused, Mma: _fmt_mma, Loop: _fmt_loop,
    Pipeline: _fmt_pipeline, Parallel: _fmt_parallel, Barrier: _fmt_barrier, Note: _fmt_note,
}


# =========================================================================== tree helpers


def walk_stmts(body: tuple[Stmt, ...]) -> Iterator[Stmt]:
    """Every statement, pre-order, descending into loops, stages and parallels (the
    parts of a :class:`FusedNest` are reached through its ``parts``)."""
    for s in body:
        yield s
        if isinstance(s, Loop | Parallel):
            yield from walk_stmts(s.body)
        elif isinstance(s, Pipeline):
            for st in s.stages:
                yield from walk_stmts(st.body)


def _substitute(obj: object, env: Mapping[str, Expr]) -> object:
    """``obj`` with symbols replaced in every Expr it holds (frozen trees rebuilt)."""
    if isinstance(obj, Expr):
        return obj.substitute(env)
    if isinstance(obj, tuple):
        return tuple(_substitute(x, env) for x in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type) and not isinstance(
            obj, Layout):
        changes = {f.name: _substitute(getattr(obj, f.name), env)
                   for f in dataclasses.fields(obj)}
        return dataclasses.replace(obj, **changes)
    return obj


def _stmt_reads(s: Stmt) -> Iterator[BufRead]:
    if isinstance(s, FusedNest):
        for p in s.parts:
            yield from _stmt_reads(p)
    elif isinstance(s, Nest | ReduceNest):
        for r in elem_reads(s.value):
            if isinstance(r, BufRead):
                yield r
    elif isinstance(s, Mma):
        for o in (s.a, s.b):
            if isinstance(o, MmaBuf):
                yield BufRead(o.buffer, (), o.version, DType.F32)
        if s.accumulate:
            yield BufRead(s.c.buffer, (), s.c.version, DType.F32)


def _stmt_writes(s: Stmt) -> Iterator[tuple[str, Expr]]:
    if isinstance(s, FusedNest):
        for p in s.parts:
            yield from _stmt_writes(p)
    elif isinstance(s, Nest | ReduceNest) and isinstance(s.dest, BufWrite):
        yield s.dest.buffer, s.dest.version
    elif isinstance(s, Mma):
        yield s.c.buffer, s.c.version


# =========================================================================== plan edges


EdgeKey = tuple[int, int, int]  # (id(value), id(consumer op), operand index)


def _edge_ids(kernel: Kernel, namer: ValueNamer) -> list[tuple[str, EdgeKey]]:
    """Each live edge's planner id (:func:`planner.ir.graph.edge_id`) and its key."""
    g = dataflow_graph(kernel)
    node_name = node_names(g, namer.names)
    out = []
    for u, w, k in live_edges(g):
        d = g.edges[u, w, k]
        key = (id(d["value"]), id(d["consumer"]), d["operand"])
        out.append((edge_id(node_name, u, w, d["operand"]), key))
    return out


def plan_edge_map(kernel: Kernel, plan: MaterializationPlan | None,
                  namer: ValueNamer | None = None) -> dict[EdgeKey, EdgePlan]:
    """The plan's decision for each (value, consumer, operand) of ``kernel``.

    Edges are matched by their ids (``producer -> consumer#operand`` over the dataflow
    graph's node names); a plan whose ids do not match is matched in program order when
    it has exactly one decision per edge.  Raises when the plan is for another kernel.
    """
    if plan is None:
        return {}
    if plan.status is Status.INFEASIBLE:
        why = "; ".join(plan.explanation) or "no explanation given"
        raise error(f"cannot lower an infeasible plan for {plan.kernel!r}: {why}",
                    kernel.loc, kind=_KIND)
    if namer is None:
        namer = ValueNamer()
        Printer(PrintOptions(locations=False), namer).print_kernel(kernel)
    ids = _edge_ids(kernel, namer)
    by_id = {e.edge_id: e for e in plan.edges}
    out = {key: by_id[eid] for eid, key in ids if eid in by_id}
    if len(out) == len(ids):
        return out
    if len(plan.edges) == len(ids):
        return {key: e for (_, key), e in zip(ids, plan.edges, strict=True)}
    missing = [eid for eid, _ in ids if eid not in by_id][:3]
    raise error(f"plan for {plan.kernel!r} does not match kernel {kernel.name!r}: "
                f"{len(plan.edges)} edge decisions for {len(ids)} edges (no decision for "
                f"{', '.join(missing)})", kernel.loc, kind=_KIND)


# =========================================================================== the builder

_INLINABLE = (core.LoadOp, core.FullOp, core.IotaOp, core.UnaryOp, core.BinaryOp,
              core.SelectOp, core.CastOp, core.BroadcastOp, core.TransposeOp, core.MemLoadOp)
#: Ops a recomputation re-derives (``planner.solve.costs.is_recomputable_kind``): a
#: Memory snapshot, a reduction, an mma result or a loop carry stops the chain.
_REDERIVABLE = tuple(c for c in _INLINABLE if c is not core.MemLoadOp)
_DECIDED = object()  # _Builder.mode outside a recomputation
_STORING = (Decision.VIRTUAL, Decision.MATERIALIZED)
_REDUCE_IDENTITY = {ReduceFn.SUM: 0.0, ReduceFn.MAX: float("-inf")}
_REDUCE_COMBINE = {ReduceFn.SUM: BinaryFn.ADD, ReduceFn.MAX: BinaryFn.MAX}


@dataclass
class _BufRef:
    """Where a value's buffer is: name and the version expression of its writer/readers."""

    name: str
    version: Expr


@dataclass
class _PipeInfo:
    """A legal software-pipeline schedule: each body op's stage and each stage's lag."""

    stage_of: dict[Op, int]
    lags: tuple[int, ...]


@dataclass
class _Carry:
    buffer: str
    cur: Sym
    nxt: Sym
    stage: int


@dataclass
class _Ctx:
    """The statement list being filled."""

    out: list[Stmt]


class _Builder:
    def __init__(self, kernel: Kernel, plan: MaterializationPlan | None,
                 target: Target | None, binding: ExecutionBinding | None = None) -> None:
        self.kernel = kernel
        self.plan = plan
        self.target = target
        if binding is None and target is not None:
            binding = bind_execution(kernel, target, dict(plan.bindings) if plan else None)
        self.binding = binding
        if self.binding is not None and self.binding.problems:
            p = self.binding.problems[0]
            raise error(f"{p.subject}: {p.detail}; the lowering does not re-bind or re-own "
                        "it", p.loc, rule=p.rule, kind=_KIND)
        namer = ValueNamer()
        Printer(PrintOptions(locations=False), namer).print_kernel(kernel)
        self.namer = namer
        self.edges = plan_edge_map(kernel, plan, namer)
        self.uses: dict[Value, list[tuple[Op, int]]] = {}
        self.parent_op: dict[Op, Op | None] = {}
        self.block_of: dict[Op, Block] = {}
        self._index_ops(kernel.body, None)
        self.buffers: dict[str, Buffer] = {}
        self.buf_of: dict[Value, _BufRef] = {}
        self.reg_of: dict[Value, _BufRef] = {}  # register copies for virtual edges
        self.mem_buf: dict[Value, str] = {}  # memory value -> buffer name
        self.mem_versioned: dict[str, dict[LoopOp, int]] = {}
        self.value_versioned: dict[Value, tuple[LoopOp, int]] = {}
        self.segment_buffers: list[str] = []
        self.notes: list[str] = []
        self.pipes: dict[LoopOp, _PipeInfo | str] = {}
        self.loop_stack: list[LoopOp] = []
        self.pending_barriers: list[Barrier] = []
        self._temp = 0
        self.stored_views = {op.view for op in kernel.walk() if isinstance(op, core.StoreOp)}
        # _DECIDED, or the owner (a ParallelOp, None at the root) of the recomputation
        # whose chain is being re-derived
        self.mode: object = _DECIDED
        self._stages: dict[tuple[str, LoopOp, Value], set[int]] = {}

    # ------------------------------------------------------------------ analysis

    def _index_ops(self, block: Block, parent: Op | None) -> None:
        for op in block.ops:
            self.parent_op[op] = parent
            self.block_of[op] = block
            for i, v in enumerate(op.operands()):
                self.uses.setdefault(v, []).append((op, i))
            for b in op.region_blocks():
                self._index_ops(b, op)

    def name(self, v: Value) -> str:
        return self.namer[v]

    def edge(self, v: Value, consumer: Op, operand: int) -> EdgePlan | None:
        return self.edges.get((id(v), id(consumer), operand))

    def decision(self, v: Value, consumer: Op, operand: int) -> Decision:
        e = self.edge(v, consumer, operand)
        return e.decision if e is not None else Decision.VIRTUAL

    def producer(self, v: Value) -> Op | None:
        return v.owner if isinstance(v.owner, Op) else None

    def inlinable(self, v: Value) -> bool:
        op = self.producer(v)
        if not isinstance(op, _INLINABLE):
            return False
        if isinstance(op, core.LoadOp | core.MemLoadOp):
            return self._snapshot_safe(op)
        return True

    def _snapshot_safe(self, op: core.LoadOp | core.MemLoadOp) -> bool:
        """A read of mutable storage may be inlined only where no store can intervene:
        all uses in the same block, no store to the same storage in between."""
        source = op.view if isinstance(op, core.LoadOp) else op.memory
        if isinstance(op, core.LoadOp):
            vt = source.type
            assert isinstance(vt, ViewType)
            if vt.readonly:
                return True
        block = self.block_of[op]
        pos = block.ops.index(op)
        last = pos
        for user, _ in self.uses.get(op.result, []):
            top = user
            while top is not None and self.block_of.get(top) is not block:
                top = self.parent_op.get(top)
            if top is None:
                return False
            if self.parent_op.get(user) is not None and top is not user:
                return False  # used inside a nested region: may run after later stores
            last = max(last, block.ops.index(top))
        for other in block.ops[pos + 1:last]:
            for o in [other, *(x for b in other.region_blocks() for x in b.walk())]:
                if isinstance(o, core.StoreOp) and o.view is source:
                    return False
                if isinstance(o, core.MemStoreOp) and o.memory is source:
                    return False
        return True

    def buffered(self, v: Value) -> bool:
        """Whether ``v`` is computed once into a buffer (some edge virtual/materialized,
        or a value that always needs storage)."""
        if not isinstance(v.type, TileType):
            return False
        if not self.inlinable(v):
            return True
        return any(self.decision(v, c, i) in _STORING for c, i in self.uses.get(v, []))

    def reads_buffer(self, v: Value, consumer: Op, operand: int) -> bool:
        """Whether this use reads ``v``'s buffer (else it inlines ``v``'s expression)."""
        if not self.inlinable(v):
            return True
        return self.decision(v, consumer, operand) in _STORING

    def owner(self, op: Op) -> Op | None:
        """The nearest enclosing parallel region of ``op`` (None: the kernel root)."""
        cur = self.parent_op.get(op)
        while cur is not None and not isinstance(cur, ParallelOp):
            cur = self.parent_op.get(cur)
        return cur

    def rederivable(self, v: Value, owner: Op | None) -> bool:
        """Whether a recomputation owned by ``owner`` re-derives ``v`` (else ``v`` stops
        the chain and is read as its edge decided): a load of a view no op stores, or an
        elementwise op, broadcast, transpose, full or iota, of the same parallel
        instance (``planner.solve.costs.recompute_chain``)."""
        op = self.producer(v)
        if not isinstance(op, _REDERIVABLE) or not self.inlinable(v):
            return False
        if isinstance(op, core.LoadOp) and op.view in self.stored_views:
            return False
        return self.owner(op) is owner

    def recomputes(self, v: Value, consumer: Op, operand: int) -> bool:
        """Whether this use re-derives ``v``'s chain from the loads (a recomputed edge)."""
        return (not self.reads_buffer(v, consumer, operand)
                and self.decision(v, consumer, operand) is Decision.RECOMPUTED
                and self.rederivable(v, self.owner(consumer)))

    # ------------------------------------------------------------------ resources

    def resource_for_class(self, cls: str) -> tuple[str, str]:
        t = self.target
        if t is not None:
            found = t.resources_for_class(cls)
            if found:
                return found[0].name, cls
        return DEFAULT_RESOURCES.get(cls, cls), cls

    def resource_class(self, name: str) -> str:
        t = self.target
        if t is not None:
            try:
                return t.resource(name).resource_class
            except PlannerError:
                pass
        for cls, res in DEFAULT_RESOURCES.items():
            if res == name:
                return cls
        raise error(f"plan places a buffer in resource {name!r}, unknown on target "
                    f"{self._target_name()}", kind=_KIND)

    def _target_name(self) -> str:
        if self.target is not None:
            return str(self.target.name)
        return self.plan.target if self.plan is not None else "host"

    def private_capacity(self) -> int:
        t = self.target
        if t is not None:
            for r in t.resources_for_class("private"):
                if r.capacity is not None:
                    return int(r.capacity)
        return 512

    def temp_resource(self, shape: tuple[Expr, ...], dtype: DType, op: Op) -> tuple[str, str]:
        """The home of a compiler temporary used by ``op`` (the rule the planner priced:
        :func:`planner.realize.temporaries.temporary_home`)."""
        n = product(shape).const_value()
        if self.binding is None:  # no target: registers when they fit, else local storage
            if n is not None and n * dtype.itemsize <= self.private_capacity():
                return self.resource_for_class("private")
            return self.resource_for_class("shared")
        scope = self.binding.context(op).scope
        nbytes = n * dtype.itemsize if n is not None else 0
        res = temporary_home(self.binding.target, scope, nbytes, n is not None)
        if res is None:
            raise error(f"a {dtype} temporary of {nbytes:,} B used at scope {scope} has no "
                        f"home on {self.binding.target.name}: no resource serving {scope} "
                        "that it may write and read has room for it", op.loc, rule="S17",
                        kind=_KIND)
        return res.name, res.resource_class

    def new_buffer(self, base: str, dtype: DType, layout: Layout, resource: tuple[str, str],
                   role: str, edges: tuple[str, ...] = (), note: str = "",
                   versions: int = 1) -> str:
        name = base
        i = 0
        while name in self.buffers:
            name, i = f"{base}.{i}", i + 1
        self.buffers[name] = Buffer(name, dtype, layout, resource[0], resource[1], versions,
                                    role, edges, note)
        self.segment_buffers.append(name)
        return name

    def temp_name(self, base: str) -> str:
        self._temp += 1
        return f"{base}.t{self._temp}"

    # ------------------------------------------------------------------ value buffers

    def layout_for(self, shape: tuple[Expr, ...], choice: LayoutChoice | None,
                   allow_swizzle: bool) -> tuple[Layout, str]:
        lay = dense(shape, planned=True)
        if choice is None or choice.kind == "dense" or not shape:
            return lay, ""
        if choice.kind == "padded":
            strides: list[Expr] = []
            acc: Expr = Const(1)
            for i, e in enumerate(reversed(shape)):
                strides.append(acc)
                acc = mul(acc, add(e, choice.pad) if i == 0 else e)
            return Layout(shape, tuple(reversed(strides)), (), True), ""
        if choice.kind == "swizzled" and choice.swizzle is not None:
            if not allow_swizzle:
                return lay, f"{choice} not applicable to an mma operand: dense"
            return lay.with_swizzle(XorSwizzle(*choice.swizzle)), ""
        return lay, ""

    def value_buffer(self, v: Value) -> _BufRef:
        """Create the buffer of a buffered value from its edges' decisions."""
        ref = self.buf_of.get(v)
        if ref is not None:
            return ref
        t = v.type
        assert isinstance(t, TileType)
        edges = [self.edge(v, c, i) for c, i in self.uses.get(v, [])]
        mat = next((e for e in edges if e is not None
                    and e.decision is Decision.MATERIALIZED), None)
        ids = tuple(e.edge_id for e in edges if e is not None and e.decision in _STORING)
        producer = self.producer(v)
        is_mma = isinstance(producer, core.MmaOp)
        if mat is not None and mat.resource is not None:
            resource = (mat.resource, self.resource_class(mat.resource))
            layout, note = self.layout_for(t.shape, mat.layout, allow_swizzle=not is_mma)
            kind = "materialized"
        else:
            resource = self.resource_for_class("private")
            layout, note = dense(t.shape, planned=True), ""
            kind = ("virtual" if ids else "reduce" if isinstance(producer, core.ReduceOp)
                    else "mma" if is_mma else "virtual")
        if is_mma and self._mma_needs_dense(layout):
            layout, note = dense(t.shape, planned=True), "mma accumulators are row-major"
        # The versions the pipeline needs, and at least those the plan counted (it may
        # keep more than an ordered loop uses: the lowering follows the plan).
        versions = max([self.value_versioned[v][1] if v in self.value_versioned else 1]
                       + [e.versions for e in edges if e is not None
                          and e.decision in _STORING])
        name = self.new_buffer(self.name(v), t.dtype, layout, resource, kind, ids, note,
                               versions)
        ref = _BufRef(name, self.version_expr(v, versions))
        self.buf_of[v] = ref
        virtual = tuple(e.edge_id for e in edges if e is not None
                        and e.decision is Decision.VIRTUAL)
        if mat is not None and virtual:
            # The plan keeps the value in registers for its virtual edges and in the
            # buffer for its materialized ones: a register copy, as the planner counts.
            reg = self.new_buffer(f"{name}.r", t.dtype, dense(t.shape, planned=True),
                                  self.resource_for_class("private"), "virtual", virtual,
                                  "register copy for the virtual edges", versions)
            self.reg_of[v] = _BufRef(reg, ref.version)
        self._barrier_for(name, edges)
        return ref

    def copy_to_registers(self, v: Value, ctx: _Ctx) -> None:
        """After ``v``'s buffer is written: fill its register copy, if it has one."""
        reg = self.reg_of.get(v)
        ref = self.buf_of.get(v)
        if reg is None or ref is None:
            return
        t = v.type
        assert isinstance(t, TileType)
        idx = _vars(t.rank)
        ctx.out.append(Nest(tuple(map(str, idx)), t.shape, BufWrite(reg.name, idx, reg.version),
                            BufRead(ref.name, idx, ref.version, t.dtype)))

    def _mma_needs_dense(self, layout: Layout) -> bool:
        return bool(layout.swizzles) or (bool(layout.strides)
                                         and layout.strides[-1] != Const(1))

    def _barrier_for(self, name: str, edges: list[EdgePlan | None]) -> None:
        for e in edges:
            if e is not None and e.decision is Decision.MATERIALIZED and e.sync:
                self.pending_barriers.append(Barrier(e.sync, self._sync_scope(e.sync),
                                                     f"%{name} written, then read"))
                return

    def _sync_scope(self, rule: str) -> str:
        t = self.target
        if t is not None:
            for r in t.resources:
                for s in r.sync:
                    if s.name == rule:
                        return str(s.scope)
        return "?"

    def version_expr(self, v: Value, versions: int) -> Expr:
        if versions <= 1 or v not in self.value_versioned:
            return Const(0)
        loop, _ = self.value_versioned[v]
        return mod(_linear_iteration(loop), versions)

    # ------------------------------------------------------------------ element exprs

    def read(self, v: Value, idx: tuple[Expr, ...], consumer: Op, operand: int) -> Elem:
        """The element of ``v`` at ``idx`` as seen by this use.

        A fused use inlines ``v``, reading its operands as their edges decided; a
        recomputed use re-derives ``v`` and its chain (operands, transitively, up to
        the loads, re-read from their views) whatever their edges decided, reading the
        values that stop the chain (reductions, mma results, loop carries, Memory
        snapshots) as their own edges decided."""
        if self.mode is not _DECIDED:
            if self.rederivable(v, self.mode):  # type: ignore[arg-type]
                return self.inline(v, idx)
            return self._in_mode(_DECIDED, lambda: self._read_decided(v, idx, consumer,
                                                                        operand))
        if self.recomputes(v, consumer, operand):
            return self._in_mode(self.owner(consumer), lambda: self.inline(v, idx))
        return self._read_decided(v, idx, consumer, operand)

    def _in_mode(self, mode: object, fn: Callable[[], Elem]) -> Elem:
        saved, self.mode = self.mode, mode
        try:
            return fn()
        finally:
            self.mode = saved

    def _read_decided(self, v: Value, idx: tuple[Expr, ...], consumer: Op, operand: int
                      ) -> Elem:
        t = v.type
        assert isinstance(t, TileType), t
        if self.reads_buffer(v, consumer, operand):
            ref = self.buf_of.get(v)
            if ref is None:
                raise error(f"lowering: {self.name(v)} is read before it is computed",
                            consumer.loc, kind=_KIND)
            if v in self.reg_of and self.decision(v, consumer, operand) is Decision.VIRTUAL:
                ref = self.reg_of[v]
            return BufRead(ref.name, idx, ref.version, t.dtype)
        return self.inline(v, idx)

    def inline(self, v: Value, idx: tuple[Expr, ...]) -> Elem:
        op = self.producer(v)
        assert op is not None
        return _INLINE[type(op)](self, op, idx)

    def _inline_load(self, op: core.LoadOp, idx: tuple[Expr, ...]) -> Elem:
        vt = op.view.type
        assert isinstance(vt, ViewType)
        name = self.name(op.view)
        index = tuple(add(o, i) for o, i in zip(op.offsets, idx, strict=True))
        return ViewRead(name, index, op.fill, vt.dtype, Window(name, op.offsets, op.shape))

    def _inline_full(self, op: core.FullOp, idx: tuple[Expr, ...]) -> Elem:
        if isinstance(op.value, Expr):
            return IndexOf(op.value, op.dtype)
        return Lit(_convert_literal(op.value, op.dtype), op.dtype)

    def _inline_iota(self, op: core.IotaOp, idx: tuple[Expr, ...]) -> Elem:
        return IndexOf(idx[op.dim], DType.I32)

    def _inline_unary(self, op: core.UnaryOp, idx: tuple[Expr, ...]) -> Elem:
        x = self.read(op.x, idx, op, 0)
        return Unary(op.fn, x, x.dtype)

    def _inline_binary(self, op: core.BinaryOp, idx: tuple[Expr, ...]) -> Elem:
        a, b = self.read(op.lhs, idx, op, 0), self.read(op.rhs, idx, op, 1)
        return Binary(op.fn, a, b, DType.BOOL if op.fn.is_compare else a.dtype)

    def _inline_select(self, op: core.SelectOp, idx: tuple[Expr, ...]) -> Elem:
        c = self.read(op.cond, idx, op, 0)
        a, b = self.read(op.a, idx, op, 1), self.read(op.b, idx, op, 2)
        return Select(c, a, b, a.dtype)

    def _inline_cast(self, op: core.CastOp, idx: tuple[Expr, ...]) -> Elem:
        return Cast(self.read(op.x, idx, op, 0), op.dtype)

    def _inline_broadcast(self, op: core.BroadcastOp, idx: tuple[Expr, ...]) -> Elem:
        return self.read(op.x, tuple(idx[d] for d in op.dims), op, 0)

    def _inline_transpose(self, op: core.TransposeOp, idx: tuple[Expr, ...]) -> Elem:
        src: list[Expr] = [Const(0)] * len(op.perm)
        for i, p in enumerate(op.perm):
            src[p] = idx[i]
        return self.read(op.x, tuple(src), op, 0)

    def _inline_memload(self, op: core.MemLoadOp, idx: tuple[Expr, ...]) -> Elem:
        mt = op.memory.type
        assert isinstance(mt, MemoryType)
        name = self.mem_buf[op.memory]
        return BufRead(name, idx, self.memory_version(name), mt.dtype)

    def memory_version(self, name: str) -> Expr:
        """Version of a Memory inside the innermost pipeline that rotates it, else 0."""
        loops = self.mem_versioned.get(name, {})
        for loop in reversed(self.loop_stack):
            if loop in loops:
                return mod(_linear_iteration(loop), loops[loop])
        return Const(0)

    # ------------------------------------------------------------------ generation

    def build(self) -> LoopProgram:
        segments: list[Segment] = []
        serial: list[Op] = []

        def flush() -> None:
            if serial:
                segments.append(self._serial_segment(list(serial), len(segments)))
                serial.clear()

        for op in self.kernel.body.ops:
            if isinstance(op, ParallelOp):
                flush()
                segments.append(self._parallel_segment(op))
            else:
                serial.append(op)
        flush()
        params = []
        for p in self.kernel.params:
            vt = p.type
            assert isinstance(vt, ViewType)
            params.append(ViewParam(self.name(p), vt.dtype, vt.shape, vt.readonly))
        segments = [dataclasses.replace(seg, body=fuse_siblings(seg.body, self._in_registers))
                    for seg in segments]
        symbols = self._symbols(segments, params)
        target = self._target_name()
        return LoopProgram(self.kernel.name, target, tuple(params), tuple(symbols),
                           tuple(self.buffers.values()), tuple(segments), tuple(self.notes),
                           self.plan.content_hash if self.plan is not None else "")

    def _begin_segment(self) -> None:
        self.segment_buffers = []
        self.loop_stack: list[LoopOp] = []
        self.pending_barriers: list[Barrier] = []

    def _parallel_segment(self, op: ParallelOp) -> Segment:
        self._begin_segment()
        body = self._gen_block(op.body)
        return Segment(op.label, True, tuple(a.index.name for a in op.axes),
                       tuple(a.extent for a in op.axes), tuple(body),
                       tuple(self.segment_buffers))

    def _serial_segment(self, ops: list[Op], n: int) -> Segment:
        self._begin_segment()
        ctx = _Ctx([])
        for op in ops:
            self._gen_op(op, ctx)
        return Segment(f"root{n}", False, (), (), tuple(ctx.out), tuple(self.segment_buffers))

    def _gen_block(self, block: Block) -> list[Stmt]:
        ctx = _Ctx([])
        for op in block.ops:
            self._gen_op(op, ctx)
        return ctx.out

    def _gen_op(self, op: Op, ctx: _Ctx) -> None:
        gen = _GENERATE.get(type(op))
        if gen is None:
            raise error(f"lowering: no loop-program rule for {op.SPEC.name}", op.loc,
                        kind=_KIND)
        before = len(self.pending_barriers)
        gen(self, op, ctx)
        if len(self.pending_barriers) > before:
            ctx.out.extend(self.pending_barriers[before:])
            del self.pending_barriers[before:]

    def _emit_value(self, op: Op, ctx: _Ctx) -> None:
        """An inlinable op: computed into its buffer when some edge stores it."""
        v = op.result
        if not self.buffered(v):
            return
        ref = self.value_buffer(v)
        t = v.type
        assert isinstance(t, TileType)
        idx = _vars(t.rank)
        ctx.out.append(self._dest_order(Nest(tuple(map(str, idx)), t.shape,
                                             BufWrite(ref.name, idx, ref.version),
                                             self.inline(v, idx))))
        self.copy_to_registers(v, ctx)

    def _emit_reduce(self, op: core.ReduceOp, ctx: _Ctx) -> None:
        ref = self.value_buffer(op.result)
        xt = op.x.type
        assert isinstance(xt, TileType)
        rank = xt.rank
        idx = _vars(rank)
        out_idx = idx[: op.axis] + idx[op.axis + 1:]
        value = self.read(op.x, idx, op, 0)
        dest = BufWrite(ref.name, out_idx, ref.version)
        if op.axis == rank - 1:
            ctx.out.append(ReduceNest(tuple(map(str, idx)), xt.shape, op.fn, dest, value))
            self.copy_to_registers(op.result, ctx)
            return
        # Reduction over an outer axis: initialize, then accumulate along the inner axis.
        ot = op.result.type
        assert isinstance(ot, TileType)
        oidx = _vars(ot.rank)
        ctx.out.append(Nest(tuple(map(str, oidx)), ot.shape, BufWrite(ref.name, oidx,
                                                                         ref.version),
                            Lit(_convert_literal(_REDUCE_IDENTITY[op.fn], xt.dtype),
                                xt.dtype)))
        acc = BufRead(ref.name, out_idx, ref.version, xt.dtype)
        ctx.out.append(Nest(tuple(map(str, idx)), xt.shape, dest,
                            Binary(_REDUCE_COMBINE[op.fn], acc, value, xt.dtype)))
        self.copy_to_registers(op.result, ctx)

    def _emit_mma(self, op: core.MmaOp, ctx: _Ctx) -> None:
        at, bt = op.a.type, op.b.type
        assert isinstance(at, TileType) and isinstance(bt, TileType)
        if at.dtype is not DType.F32:
            raise error(f"lowering: mma on {at.dtype} tiles is not supported (f32 only)",
                        op.loc, kind=_KIND)
        m, k = at.shape
        n = bt.shape[1]
        ref = self.value_buffer(op.result)
        a = self._mma_operand(op.a, op, 0, (m, k), ctx)
        b = self._mma_operand(op.b, op, 1, (k, n), ctx)
        idx = _vars(2)
        acc = self.read(op.acc, idx, op, 2)
        c = MmaBuf(ref.name, ref.version)
        if isinstance(acc, Lit) and acc.value == 0:
            accumulate = False
        else:
            accumulate = True
            if acc != BufRead(ref.name, idx, ref.version, DType.F32):
                ctx.out.append(Nest(tuple(map(str, idx)), (m, n),
                                    BufWrite(ref.name, idx, ref.version), acc))
        ctx.out.append(Mma(c, a, b, m, n, k, accumulate))
        self.copy_to_registers(op.result, ctx)

    def _mma_operand(self, v: Value, op: core.MmaOp, operand: int,
                     shape: tuple[Expr, Expr], ctx: _Ctx) -> MmaBuf | MmaView:
        idx = _vars(2)
        e = self.read(v, idx, op, operand)
        if isinstance(e, BufRead) and e.index == idx:
            lay = self.buffers[e.buffer].layout
            if not self._mma_needs_dense(lay):
                return MmaBuf(e.buffer, e.version)
        if isinstance(e, ViewRead) and e.index == tuple(
                add(o, i) for o, i in zip(e.window.offsets, idx, strict=True)) \
                and e.window.shape == shape:
            stage = self.new_buffer(self.temp_name(f"{self.name(v)}.stage"), DType.F32,
                                    dense(shape), self.temp_resource(shape, DType.F32, op),
                                    "stage", note="edge tiles of the view window")
            return MmaView(e.window, e.fill, stage)
        stage = self.new_buffer(self.temp_name(f"{self.name(v)}.stage"), DType.F32,
                                dense(shape), self.temp_resource(shape, DType.F32, op), "stage",
                                note="mma operand staging")
        ctx.out.append(Nest(tuple(map(str, idx)), shape, BufWrite(stage, idx, Const(0)), e))
        return MmaBuf(stage, Const(0))

    def _emit_store(self, op: core.StoreOp, ctx: _Ctx) -> None:
        tt = op.tile.type
        assert isinstance(tt, TileType)
        idx = _vars(tt.rank)
        name = self.name(op.view)
        dest = ViewWrite(name, tuple(add(o, i) for o, i in zip(op.offsets, idx, strict=True)),
                         Window(name, op.offsets, tt.shape))
        ctx.out.append(Nest(tuple(map(str, idx)), tt.shape, dest,
                            self.read(op.tile, idx, op, 1)))

    def _hoist_allocs(self, block: Block) -> None:
        """Create the buffers of Memory declared in a temporal region before the region
        is scheduled (S7): the nearest spatial parallel owns them (one buffer per instance
        of the segment, like Memory declared at its top); the loop contributes only the
        lifetime and, in a pipeline, the versions :meth:`_assign_versions` gives them."""
        for o in block.ops:
            if isinstance(o, core.AllocOp):
                self._emit_alloc(o, _Ctx([]))
            elif isinstance(o, LoopOp):
                self._hoist_allocs(o.body)

    def _emit_alloc(self, op: core.AllocOp, ctx: _Ctx) -> None:
        if op.memory in self.mem_buf:
            return  # hoisted out of the temporal region that declares it
        planned = self._memory_plan(op)
        if planned is not None and planned.resource:
            resource = (planned.resource, self.resource_class(planned.resource))
        else:
            resource = self._memory_resource(op)
        name = self.new_buffer(self.name(op.memory), op.dtype, op.layout, resource, "memory",
                               note=f"explicit Memory ({op.resource.value}) owned by "
                                    f"{op.owner}, declared layout",
                               versions=planned.versions if planned is not None else 1)
        self.mem_buf[op.memory] = name

    def _memory_plan(self, op: core.AllocOp) -> MemoryPlan | None:
        if self.plan is None:
            return None
        want = "%" + self.name(op.memory)
        return next((m for m in self.plan.memories if m.name == want), None)

    def _memory_resource(self, op: core.AllocOp) -> tuple[str, str]:
        if self.binding is None:
            cls = op.resource.value
            return self.resource_for_class("shared" if cls == "auto" else cls)
        mb = self.binding.memory(op)
        res = mb.home
        if res is None:
            raise error(f"Memory {self.name(op.memory)} ({op.resource.value}, owned by "
                        f"{op.owner} at scope {mb.owner_scope}) has no legal home on target "
                        f"{self.binding.target.name}", op.loc, rule="S17", kind=_KIND)
        return res.name, res.resource_class

    def _emit_mem_store(self, op: core.MemStoreOp, ctx: _Ctx) -> None:
        tt = op.tile.type
        assert isinstance(tt, TileType)
        name = self.mem_buf[op.memory]
        idx = _vars(tt.rank)
        ctx.out.append(self._dest_order(Nest(tuple(map(str, idx)), tt.shape,
                                             BufWrite(name, idx, self.memory_version(name)),
                                             self.read(op.tile, idx, op, 2))))

    def _in_registers(self, nest: Nest | ReduceNest) -> bool:
        d = nest.dest
        return isinstance(d, BufWrite) and self.buffers[d.buffer].resource_class == "private"

    def _dest_order(self, nest: Nest) -> Nest:
        """Put the destination's unit-stride dimension innermost (a transposed layout is
        then written contiguously and read with gathers, which are cheaper than
        scatters)."""
        assert isinstance(nest.dest, BufWrite)
        lay = self.buffers[nest.dest.buffer].layout
        rank = len(nest.vars)
        if lay.swizzles or rank < 2 or lay.strides[-1] == Const(1):
            return nest
        unit = [d for d, st in enumerate(lay.strides) if st == Const(1)]
        if not unit:
            return nest
        order = [d for d in range(rank) if d != unit[0]] + [unit[0]]
        return dataclasses.replace(nest, vars=tuple(nest.vars[d] for d in order),
                                   extents=tuple(nest.extents[d] for d in order))

    def _emit_parallel(self, op: ParallelOp, ctx: _Ctx) -> None:
        inner = _Ctx([])
        for o in op.body.ops:
            self._gen_op(o, inner)
        ctx.out.append(Parallel(op.label, tuple(a.index.name for a in op.axes),
                                tuple(a.extent for a in op.axes), tuple(inner.out)))

    def _emit_yield(self, op: core.YieldOp, ctx: _Ctx) -> None:
        raise error("lowering: region.yield outside a loop body", op.loc, kind=_KIND)

    # ------------------------------------------------------------------ loops

    def _emit_loop(self, op: LoopOp, ctx: _Ctx) -> None:
        self._hoist_allocs(op.body)
        pipe = self._pipeline_info(op)
        carries = self._carries(op, pipe)
        for i, (init, c) in enumerate(zip(op.inits, carries, strict=True)):
            if c is None:
                continue
            t = init.type
            assert isinstance(t, TileType)
            idx = _vars(t.rank)
            ctx.out.append(Nest(tuple(map(str, idx)), t.shape,
                                BufWrite(c.buffer, idx, Const(0)), self.read(init, idx, op, i)))
        for arg, c in zip(op.body.args, carries, strict=True):
            if c is not None:
                self.buf_of[arg] = _BufRef(c.buffer, c.cur)
        in_place: set[str] = set()
        self.loop_stack.append(op)
        try:
            if isinstance(pipe, _PipeInfo):
                stage_lists: list[list[Stmt]] = [[] for _ in op.stages]
                for o in op.body.ops:
                    if isinstance(o, core.YieldOp):
                        self._gen_yield(o, carries, stage_lists)
                    else:
                        self._gen_op(o, _Ctx(stage_lists[pipe.stage_of[o]]))
                bodies = [self._finish_carries(tuple(s), carries, op, si, in_place)
                          for si, s in enumerate(stage_lists)]
            else:
                body: list[Stmt] = []
                for o in op.body.ops:
                    if isinstance(o, core.YieldOp):
                        self._gen_yield(o, carries, [body])
                    else:
                        self._gen_op(o, _Ctx(body))
                bodies = [self._finish_carries(tuple(body), carries, op, None, in_place)]
        finally:
            self.loop_stack.pop()
        trip = product(tuple(a.extent for a in op.axes))
        vars_ = tuple(a.index.name for a in op.axes)
        extents = tuple(a.extent for a in op.axes)
        for r, c in zip(op.results, carries, strict=True):
            if c is not None:
                final = Const(0) if c.buffer in in_place else mod(trip, 2)
                self.buf_of[r] = _BufRef(c.buffer, final)
        if isinstance(pipe, _PipeInfo):
            stages = tuple(Stage(name, lag, body)
                           for name, lag, body in zip(op.stages, pipe.lags, bodies,
                                                      strict=True))
            ctx.out.append(Pipeline(op.label, vars_, extents, op.window, stages))
        else:
            note = pipe if isinstance(pipe, str) else ""
            ctx.out.append(Loop(op.label, op.kind.value, vars_, extents, bodies[0], note))

    def _carries(self, op: LoopOp, pipe: _PipeInfo | str) -> list[_Carry | None]:
        out: list[_Carry | None] = []
        term = op.body.ops[-1] if op.body.ops else None
        yields = term.values if isinstance(term, core.YieldOp) else ()
        for i, arg in enumerate(op.body.args):
            t = arg.type
            if not isinstance(t, TileType):
                out.append(None)
                continue
            edges = [self.edge(op.inits[i], op, i)]
            if i < len(yields):
                edges.append(self.edge(yields[i], term, i))  # type: ignore[arg-type]
            # The carry's buffer is where the plan keeps the carried value itself (its
            # uses in the body and after the loop), as the planner counts it.
            resource = self._storage([self.edge(v, c, j) for v in (arg, op.results[i])
                                      for c, j in self.uses.get(v, [])])
            ids = tuple(e.edge_id for e in edges if e is not None)
            name = self.new_buffer(self.name(arg), t.dtype, dense(t.shape, planned=True),
                                   resource, "carry", ids, versions=2)
            cur, nxt = Sym(f"{name}.cur"), Sym(f"{name}.next")
            stage = 0
            if isinstance(pipe, _PipeInfo) and i < len(yields):
                y = yields[i]
                p = self.producer(y)
                stage = pipe.stage_of.get(p, len(op.stages) - 1) if p is not None \
                    else len(op.stages) - 1
            c = _Carry(name, cur, nxt, stage)
            out.append(c)
            if i < len(yields):
                self._alias_yield(op, yields[i], c, yields)
        return out

    def _storage(self, edges: list[EdgePlan | None]) -> tuple[str, str]:
        """The resource of a value's one buffer: where its first materialized edge puts
        it, else registers (the planner's storage of a value)."""
        mat = next((e for e in edges if e is not None
                    and e.decision is Decision.MATERIALIZED and e.resource), None)
        if mat is not None and mat.resource is not None:
            return mat.resource, self.resource_class(mat.resource)
        return self.resource_for_class("private")

    def _alias_yield(self, op: LoopOp, y: Value, c: _Carry, yields: tuple[Value, ...]
                     ) -> None:
        """Compute a yielded buffered value directly into the carry's next version, when
        the plan keeps both in the same storage (else the yield copies)."""
        p = self.producer(y)
        if p is None or self.block_of.get(p) is not op.body or isinstance(p, LoopOp):
            return
        if sum(1 for x in yields if x is y) != 1 or y in self.buf_of:
            return
        if not self.buffered(y) or y in self.value_versioned:
            return
        edges = [self.edge(y, u, j) for u, j in self.uses.get(y, [])]
        if self._storage(edges)[0] != self.buffers[c.buffer].resource or (
                {Decision.VIRTUAL, Decision.MATERIALIZED}
                <= {e.decision for e in edges if e is not None}):
            return
        self.buf_of[y] = _BufRef(c.buffer, c.nxt)

    def _gen_yield(self, op: core.YieldOp, carries: list[_Carry | None],
                   stage_lists: list[list[Stmt]]) -> None:
        for i, (y, c) in enumerate(zip(op.values, carries, strict=True)):
            if c is None:
                continue
            ref = self.buf_of.get(y)
            if ref is not None and ref.name == c.buffer and ref.version == c.nxt:
                continue
            t = y.type
            assert isinstance(t, TileType)
            idx = _vars(t.rank)
            target = stage_lists[c.stage if len(stage_lists) > 1 else 0]
            target.append(Nest(tuple(map(str, idx)), t.shape, BufWrite(c.buffer, idx, c.nxt),
                               self.read(y, idx, op, i)))

    def _finish_carries(self, body: tuple[Stmt, ...], carries: list[_Carry | None],
                        op: LoopOp, stage: int | None, in_place: set[str]) -> tuple[Stmt, ...]:
        """Decide in place vs ping-pong for each carry, substitute its versions."""
        env: dict[str, Expr] = {}
        it = _linear_iteration(op)
        for c in carries:
            if c is None or (stage is not None and c.stage != stage):
                continue
            if _in_place_ok(body, c):
                in_place.add(c.buffer)
                self.buffers[c.buffer] = dataclasses.replace(
                    self.buffers[c.buffer], versions=1, note="updated in place")
                env[c.cur.name] = Const(0)
                env[c.nxt.name] = Const(0)
            else:
                env[c.cur.name] = mod(it, 2)
                env[c.nxt.name] = mod(add(it, 1), 2)
        if not env:
            return body
        out = _substitute(body, env)
        assert isinstance(out, tuple)
        # Version placeholders may also sit in buffer references of later values.
        for v, ref in self.buf_of.items():
            if isinstance(ref.version, Expr) and ref.version.symbols() & env.keys():
                self.buf_of[v] = _BufRef(ref.name, ref.version.substitute(env))
        return tuple(s for s in out if not _self_copy(s))

    # ------------------------------------------------------------------ pipelines

    def _pipeline_info(self, op: LoopOp) -> _PipeInfo | str:
        cached = self.pipes.get(op)
        if cached is not None:
            return cached
        info = self._analyze_pipeline(op)
        if isinstance(info, _PipeInfo):
            info = self._fit_to_plan(op, info)
        self.pipes[op] = info
        if isinstance(info, _PipeInfo):
            self._assign_versions(op, info)
        elif info and op.kind is LoopKind.PIPELINE:
            self.notes.append(f"pipeline {op.label} ordered: {info}")
        return info

    def _analyze_pipeline(self, op: LoopOp) -> _PipeInfo | str:
        if op.kind is not LoopKind.PIPELINE:
            return ""
        if len(op.stages) < 2:
            return "no stages to overlap"
        if op.window < 2:
            return "window 1"
        body = [o for o in op.body.ops if not isinstance(o, core.YieldOp)]
        stage_of: dict[Op, int] = {}
        cur = 0
        for o in body:
            if o.stage in op.stages:
                cur = op.stages.index(o.stage)
            stage_of[o] = cur
            for inner in (x for b in o.region_blocks() for x in b.walk()):
                stage_of[inner] = cur
        defined = {r: o for o in body for r in o.results}
        for o in body:
            for used in self._used_values(o):
                d = defined.get(used)
                if d is not None and stage_of[d] > stage_of[o]:
                    return (f"{o.SPEC.name} in stage {op.stages[stage_of[o]]} uses a value "
                            f"of the later stage {op.stages[stage_of[d]]}")
        last = len(op.stages) - 1
        for o in body:
            for x in [o, *(y for b in o.region_blocks() for y in b.walk())]:
                if isinstance(x, core.StoreOp) and stage_of[o] != last:
                    return f"a view is stored in stage {op.stages[stage_of[o]]} (not the last)"
        term = op.body.ops[-1] if op.body.ops else None
        yields = term.values if isinstance(term, core.YieldOp) else ()
        for i, arg in enumerate(op.body.args):
            users = {stage_of[self._top(u, op)] for u, _ in self.uses.get(arg, [])
                     if not isinstance(u, core.YieldOp)}
            if isinstance(arg.type, StateType):
                reason = self._state_carry_problem(op, i, arg, stage_of)
                if reason:
                    return reason
                continue
            y = yields[i] if i < len(yields) else None
            p = defined.get(y) if y is not None else None
            if p is not None:
                users.add(stage_of[p])
            if len(users) > 1:
                return (f"carried value {self.name(arg)} is used in stages "
                        f"{', '.join(op.stages[s] for s in sorted(users))} (a recurrence "
                        "across the cut)")
        for o in body:
            for x in [o, *(y for b in o.region_blocks() for y in b.walk())]:
                if isinstance(x, core.MemLoadOp):
                    src = self.producer(x.state)
                    if src is None or not isinstance(src, core.MemStoreOp) \
                            or self._top_or_none(src, op) is None:
                        return (f"Memory {self.name(x.memory)} is read in a state from an "
                                "earlier iteration or from outside the loop (a recurrence "
                                "through outer Memory)")
        stores: dict[Value, set[int]] = {}
        for o in body:
            for x in [o, *(y for b in o.region_blocks() for y in b.walk())]:
                if isinstance(x, core.MemStoreOp):
                    stores.setdefault(x.memory, set()).add(stage_of[o])
        for memv, st in stores.items():
            if len(st) > 1:
                return f"Memory {self.name(memv)} is stored in several stages"
        lags = tuple(min(s, op.window - 1) for s in range(len(op.stages)))
        return _PipeInfo(stage_of, lags)

    def _fit_to_plan(self, op: LoopOp, info: _PipeInfo) -> _PipeInfo | str:
        """Lower stage lags until the versions the plan keeps of every buffer suffice.

        The plan may keep fewer versions than the full overlap wants (it prices the
        exposed latency as stalls and counts only those versions against capacity); the
        stages then overlap less, and not at all when every lag drops to zero (the loop
        runs in order)."""
        if self.plan is None:
            return info
        needs: list[tuple[int, set[int], int, str]] = []  # writer, readers, versions, what
        for o in (o for o in op.body.ops if not isinstance(o, core.YieldOp)):
            w = info.stage_of[o]
            for v in o.results:
                if not isinstance(v.type, TileType) or not self.buffered(v):
                    continue
                planned = [e.versions for c, i in self.uses.get(v, [])
                           if (e := self.edge(v, c, i)) is not None and e.decision in _STORING]
                if planned:
                    needs.append((w, self._buffer_read_stages(v, op, info), max(planned),
                                  "%" + self.name(v)))
            for x in [o, *(y for b in o.region_blocks() for y in b.walk())]:
                if not isinstance(x, core.MemStoreOp):
                    continue
                alloc = self.producer(x.memory)
                mp = self._memory_plan(alloc) if isinstance(alloc, core.AllocOp) else None
                if mp is None:
                    continue
                reads: set[int] = set()
                for r, _ in self.uses.get(x.result, []):
                    if isinstance(r, core.MemLoadOp):
                        reads |= self._eval_stages(r.result, op, info)
                needs.append((w, reads, mp.versions, mp.name))
        lags = list(info.lags)
        short: list[str] = []
        changed = True
        while changed:
            changed = False
            for w, reads, k, what in needs:
                for r in sorted(reads):
                    if lags[r] - lags[w] > k - 1:
                        lags[r] = lags[w] + k - 1
                        for earlier in range(r):  # lags never decrease along the stages
                            lags[earlier] = min(lags[earlier], lags[r])
                        short.append(what)
                        changed = True
        if tuple(lags) == info.lags:
            return info
        if not any(lags):
            return (f"the plan keeps fewer versions of {', '.join(dict.fromkeys(short))} "
                    "than overlapping its stages needs")
        return _PipeInfo(info.stage_of, tuple(lags))

    def _state_carry_problem(self, op: LoopOp, i: int, arg: Value,
                             stage_of: dict[Op, int]) -> str:
        for u, _ in self.uses.get(arg, []):
            if isinstance(u, core.MemLoadOp):
                return (f"Memory {self.name(u.memory)} is read in the state carried from the "
                        "previous iteration (a recurrence through outer Memory)")
        if self.uses.get(op.results[i]):
            return f"the final state of Memory carried as {self.name(arg)} is used after the loop"
        return ""

    def _top(self, op: Op, loop: LoopOp) -> Op:
        top = self._top_or_none(op, loop)
        assert top is not None
        return top

    def _top_or_none(self, op: Op, loop: LoopOp) -> Op | None:
        """The op of ``loop``'s body that is or contains ``op``."""
        cur: Op | None = op
        while cur is not None and self.parent_op.get(cur) is not loop:
            cur = self.parent_op.get(cur)
        return cur

    def _used_values(self, op: Op) -> list[Value]:
        vals = list(op.operands())
        for b in op.region_blocks():
            for x in b.walk():
                vals.extend(x.operands())
        return vals

    def _assign_versions(self, op: LoopOp, info: _PipeInfo) -> None:
        """Iteration-local versions for buffers written in one stage, read in a later one."""
        body = [o for o in op.body.ops if not isinstance(o, core.YieldOp)]
        for o in body:
            lag_w = info.lags[info.stage_of[o]]
            for v in o.results:
                if not isinstance(v.type, TileType) or not self.buffered(v):
                    continue
                span = max((info.lags[s] - lag_w
                            for s in self._buffer_read_stages(v, op, info)), default=0)
                if span > 0:
                    self.value_versioned[v] = (op, span + 1)
            for x in [o, *(y for b in o.region_blocks() for y in b.walk())]:
                if not isinstance(x, core.MemStoreOp):
                    continue
                span = 0
                for r, _ in self.uses.get(x.result, []):
                    if isinstance(r, core.MemLoadOp):
                        for s in self._eval_stages(r.result, op, info):
                            span = max(span, info.lags[s] - lag_w)
                if span > 0:
                    name = self.mem_buf[x.memory]
                    alloc = self.producer(x.memory)
                    planned = self._memory_plan(alloc) if isinstance(alloc, core.AllocOp) \
                        else None
                    versions = max(span + 1, planned.versions if planned is not None else 1)
                    self.mem_versioned.setdefault(name, {})[op] = versions
                    buf = self.buffers[name]
                    self.buffers[name] = dataclasses.replace(
                        buf, versions=max(buf.versions, versions))

    def _stage_of_use(self, v: Value, c: Op, loop: LoopOp, info: _PipeInfo) -> int | None:
        """The stage evaluating consumer ``c`` of ``v`` (None outside the loop)."""
        top = self._top_or_none(c, loop)
        if top is None:
            return None
        if isinstance(c, core.YieldOp):  # the carry copy runs in its producer's stage
            p = self.producer(v)
            return info.stage_of.get(p, len(info.lags) - 1) if p is not None \
                else len(info.lags) - 1
        return info.stage_of[top]

    # Where expressions are evaluated, per stage.  Each use of ``w`` by consumer ``c``
    # runs where ``c``'s statements run, in ``c``'s mode: *decided* (``c`` computed at home
    # or inlined into a fused consumer) or *re-derived* (``c`` is in a recomputed chain).
    # A decided ``c`` reads ``w``'s buffer, inlines it (fused) or re-derives it (a
    # recomputed edge); a re-derived ``c`` re-derives ``w`` too when ``w`` is rederivable,
    # else reads it as its edge decided.

    def _buffer_read_stages(self, v: Value, loop: LoopOp, info: _PipeInfo) -> set[int]:
        """Stages in which ``v``'s buffer is read (through inlined consumers)."""
        return self._stages_of("buffer", v, loop, info)

    def _eval_stages(self, w: Value, loop: LoopOp, info: _PipeInfo) -> set[int]:
        """Stages where ``w``'s defining expression is evaluated (decided or re-derived)."""
        return (self._stages_of("decided", w, loop, info)
                | self._stages_of("rederived", w, loop, info))

    def _stages_of(self, what: str, w: Value, loop: LoopOp, info: _PipeInfo) -> set[int]:
        key = (what, loop, w)
        if key not in self._stages:
            self._stages[key] = set()  # (the dataflow is acyclic within an iteration)
            self._stages[key] = self._compute_stages(what, w, loop, info)
        return self._stages[key]

    def _compute_stages(self, what: str, w: Value, loop: LoopOp, info: _PipeInfo
                        ) -> set[int]:
        out: set[int] = set()
        p = self.producer(w)
        if what == "decided" and p is not None and self.buffered(w):
            top = self._top_or_none(p, loop)
            if top is not None:
                out.add(info.stage_of[top])
        for c, i in self.uses.get(w, []):
            buffer, recomputed = self.reads_buffer(w, c, i), self.recomputes(w, c, i)
            inline = not buffer and not recomputed
            if {"buffer": buffer, "decided": inline, "rederived": recomputed}[what]:
                out |= self._consumer_stages("decided", w, c, loop, info)
            follows = self.rederivable(w, self.owner(c))  # re-derived with c
            if {"buffer": buffer and not follows, "decided": not buffer and not follows,
                    "rederived": follows}[what]:
                out |= self._consumer_stages("rederived", w, c, loop, info)
        return out

    def _consumer_stages(self, mode: str, w: Value, c: Op, loop: LoopOp, info: _PipeInfo
                         ) -> set[int]:
        """Stages of the statements evaluating ``c`` in ``mode`` (decided, rederived)."""
        if isinstance(c, _INLINABLE):
            return self._stages_of(mode, c.result, loop, info)
        if mode == "rederived":
            return set()
        s = self._stage_of_use(w, c, loop, info)
        return set() if s is None else {s}

    # ------------------------------------------------------------------ symbols

    def _symbols(self, segments: list[Segment], params: list[ViewParam]) -> list[str]:
        seen: dict[str, None] = {s: None for s in self.kernel.symbols()}
        bound: set[str] = set()
        for seg in segments:
            bound |= set(seg.vars)
            for s in walk_stmts(seg.body):
                bound |= set(_stmt_vars(s))
        found: set[str] = set()
        for obj in [*segments, *self.buffers.values()]:
            found |= _free_symbols(obj)
        for p in params:
            for e in p.shape:
                found |= e.symbols()
        for s in sorted(found - bound):
            if not s.startswith("%") and not s.startswith("i."):
                seen.setdefault(s, None)
        unbound = sorted(s for s in found - bound - set(seen))
        if unbound:
            raise error(f"lowering: index symbols {', '.join(unbound)} are used outside the "
                        "regions that bind them", self.kernel.loc, kind=_KIND)
        return list(seen)


def _stmt_vars(s: Stmt) -> tuple[str, ...]:
    if isinstance(s, Nest | ReduceNest | FusedNest | Loop | Pipeline | Parallel):
        return s.vars
    return ()


def _free_symbols(obj: object) -> set[str]:
    if isinstance(obj, Expr):
        return set(obj.symbols())
    if isinstance(obj, tuple):
        out: set[str] = set()
        for x in obj:
            out |= _free_symbols(x)
        return out
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = set()
        for f in dataclasses.fields(obj):
            out |= _free_symbols(getattr(obj, f.name))
        return out
    return set()


def _linear_iteration(loop: LoopOp) -> Expr:
    """The row-major linear iteration number of ``loop`` from its axis symbols."""
    it: Expr = Const(0)
    for a in loop.axes:
        it = add(mul(it, a.extent), a.index)
    return it


def _convert_literal(value: float, dtype: DType) -> float | int | bool:
    if dtype.is_float:
        return float(value)
    if dtype is DType.BOOL:
        return bool(value)
    return int(value)


def _self_copy(s: Stmt) -> bool:
    return (isinstance(s, Nest) and isinstance(s.dest, BufWrite)
            and s.value == BufRead(s.dest.buffer, s.dest.index, s.dest.version, s.value.dtype))


def _in_place_ok(body: tuple[Stmt, ...], c: _Carry) -> bool:
    """Whether the carry's old value is dead at its first overwrite: the first statement
    writing the next version is a nest or mma of the body itself, reads the old version
    at most elementwise (same index as it writes), and nothing after it reads it."""
    first = next((i for i, s in enumerate(body)
                  if any(b == c.buffer and ver == c.nxt
                         for x in walk_stmts((s,)) for b, ver in _stmt_writes(x))), None)
    if first is None:
        return True
    w = body[first]
    if not isinstance(w, Nest | ReduceNest | Mma):
        return False
    identity = tuple(Sym(v) for v in w.vars) if isinstance(w, Nest) else None
    if any(r.buffer == c.buffer and r.version == c.cur and r.index != identity
           for r in _stmt_reads(w)):
        return False
    return not any(r.buffer == c.buffer and r.version == c.cur
                   for r in (x for s in walk_stmts(body[first + 1:]) for x in _stmt_reads(s)))


def fuse_siblings(body: tuple[Stmt, ...],
                  pinned: Callable[[Nest | ReduceNest], bool] | None = None
                  ) -> tuple[Stmt, ...]:
    """Merge consecutive nests over the same iteration space (see :class:`FusedNest`).

    A nest joins the previous one when it reads what the previous parts wrote only at
    the point being computed (forwarded) and never a reduction they produce, and when
    neither side writes what the other reads.  It may also move before independent
    nests to join an earlier one, unless ``pinned(nest)`` (the builder pins nests that
    write registers: moving one earlier would hold its registers over the nests it
    passes, which the plan's capacity does not count)."""
    out: list[Stmt] = []
    for s in body:
        s = _fuse_inside(s, pinned)
        target = None
        if isinstance(s, Nest | ReduceNest):
            # Look back over nests independent of ``s`` (it may move before them).
            hops = 0 if pinned is not None and pinned(s) else len(out)
            for j in range(len(out) - 1, max(-1, len(out) - 2 - hops), -1):
                if _fusable(out[j], s):
                    target = j
                    break
                if not _independent(out[j], s):
                    break
        if target is None:
            out.append(s)
            continue
        prev = out[target]
        parts = prev.parts if isinstance(prev, FusedNest) else (prev,)
        out[target] = FusedNest(s.vars, s.extents, (*parts, s))  # type: ignore[union-attr]
    return tuple(out)


def _independent(t: Stmt, s: Nest | ReduceNest) -> bool:
    """Whether ``s`` may be moved before the nest ``t`` (no dependence either way)."""
    if not isinstance(t, Nest | ReduceNest | FusedNest):
        return False
    parts = t.parts if isinstance(t, FusedNest) else (t,)
    t_writes = {dest_key(p) for p in parts}
    t_reads = set().union(*(_read_keys(p) for p in parts))
    mine = dest_key(s)
    return not (t_writes & _read_keys(s)) and mine not in t_writes and mine not in t_reads


def _fuse_inside(s: Stmt, pinned: Callable[[Nest | ReduceNest], bool] | None) -> Stmt:
    if isinstance(s, Loop | Parallel):
        return dataclasses.replace(s, body=fuse_siblings(s.body, pinned))
    if isinstance(s, Pipeline):
        return dataclasses.replace(s, stages=tuple(
            dataclasses.replace(st, body=fuse_siblings(st.body, pinned)) for st in s.stages))
    return s


def dest_key(p: Nest | ReduceNest) -> tuple[str, str]:
    d = p.dest
    return ("buf", d.buffer) if isinstance(d, BufWrite) else ("view", d.view)


def _read_keys(p: Nest | ReduceNest) -> set[tuple[str, str]]:
    return {("buf", r.buffer) if isinstance(r, BufRead) else ("view", r.view)
            for r in elem_reads(p.value)}


def _fusable(prev: Stmt, s: Nest | ReduceNest) -> bool:
    if not isinstance(prev, Nest | ReduceNest | FusedNest) or not s.vars:
        return False
    if prev.vars != s.vars or prev.extents != s.extents:
        return False
    parts = prev.parts if isinstance(prev, FusedNest) else (prev,)
    identity = tuple(Sym(v) for v in s.vars)
    written = {dest_key(p): p for p in parts}
    for r in elem_reads(s.value):
        key = ("buf", r.buffer) if isinstance(r, BufRead) else ("view", r.view)
        w = written.get(key)
        if w is None:
            continue
        if not (isinstance(w, Nest) and isinstance(r, BufRead) and isinstance(w.dest, BufWrite)
                and r.index == identity == w.dest.index and r.version == w.dest.version):
            return False
    mine = dest_key(s)
    return mine not in written and all(mine not in _read_keys(p) for p in parts)


_INLINE: dict[type, Callable[[_Builder, Op, tuple[Expr, ...]], Elem]] = {
    core.LoadOp: _Builder._inline_load,
    core.FullOp: _Builder._inline_full,
    core.IotaOp: _Builder._inline_iota,
    core.UnaryOp: _Builder._inline_unary,
    core.BinaryOp: _Builder._inline_binary,
    core.SelectOp: _Builder._inline_select,
    core.CastOp: _Builder._inline_cast,
    core.BroadcastOp: _Builder._inline_broadcast,
    core.TransposeOp: _Builder._inline_transpose,
    core.MemLoadOp: _Builder._inline_memload,
}

_GENERATE: dict[type, Callable[[_Builder, Op, _Ctx], None]] = {
    **{cls: _Builder._emit_value for cls in _INLINABLE},
    core.ReduceOp: _Builder._emit_reduce,
    core.MmaOp: _Builder._emit_mma,
    core.StoreOp: _Builder._emit_store,
    core.AllocOp: _Builder._emit_alloc,
    core.MemStoreOp: _Builder._emit_mem_store,
    core.ParallelOp: _Builder._emit_parallel,
    core.LoopOp: _Builder._emit_loop,
    core.YieldOp: _Builder._emit_yield,
}


def build_loop_program(kernel: Kernel, plan: MaterializationPlan | None = None,
                       target: Target | None = None,
                       binding: ExecutionBinding | None = None) -> LoopProgram:
    """Lower ``kernel`` under ``plan`` to a loop program.

    ``target`` is a :class:`planner.catalog.Target` (resource names and classes, sync
    rules, the home of explicit Memory); without it the x86-avx2 resource names are used.
    Edges the plan does not mention are treated as virtual.
    """
    return _Builder(kernel, plan, target, binding).build()


