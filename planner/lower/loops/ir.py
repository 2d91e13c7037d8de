"""The loop program's frozen data and its readable form.

Element expressions (:class:`Elem` and its kinds), buffers, statements, segments and the
whole :class:`LoopProgram`: frozen dataclasses over the IR's symbolic extents, with no
LLVM or Metal types.  :func:`format_program` is ``str(program)``, the text printed by
``planner lower --emit loops``.  What a program means (and how a plan becomes one) is
told in :mod:`planner.lower.loops.program`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from planner.ir.core import BinaryFn, ReduceFn, UnaryFn
from planner.ir.dtypes import DType
from planner.ir.expr import Const, Expr, ceil_div, mul, product
from planner.ir.layout import Layout
from planner.ir.printer import format_float
from planner.realize.storage import VERSION_ALIGN, align, version_stride_elements

__all__ = [
    "Barrier",
    "Binary",
    "BufRead",
    "BufWrite",
    "Buffer",
    "Cast",
    "Dest",
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
    "Prefetch",
    "ReduceNest",
    "Segment",
    "Select",
    "SquaresNest",
    "Stage",
    "Stmt",
    "Unary",
    "ViewParam",
    "ViewRead",
    "ViewWrite",
    "Window",
    "elem_children",
    "elem_reads",
    "format_elem",
    "format_program",
    "nest_var",
    "walk_stmts",
]


def nest_var(i: int) -> str:
    """The name of a nest's ``i``-th iteration variable (not a valid user symbol)."""
    return f"i.{i}"


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
    alignment: int = 1  # the resource's allocation granule (catalog ``alignment``)
    version_granule: int = VERSION_ALIGN  # bytes the version stride is a multiple of
    planned: str = ""  # the plan's buffer it realizes (PlannedBuffer.name)

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
        """Elements between versions: the storage rounded up to the version alignment."""
        per = version_stride_elements(self.dtype.itemsize, self.version_granule)
        return mul(ceil_div(self.storage_elements(), per), per)

    def total_elements(self) -> Expr:
        return mul(self.version_stride(), self.versions) if self.versions > 1 \
            else self.storage_elements()

    def footprint_bytes(self, env: Mapping[str, int], itemsize: int | None = None) -> int:
        """Bytes the buffer occupies in its resource at ``env``: every version, rounded up
        to the resource's alignment (the bytes the planner holds for it)."""
        item = self.dtype.itemsize if itemsize is None else itemsize
        if self.layout.is_empty(env):  # no address events: 0 bytes, strides unevaluated (S14)
            return 0
        self.layout.require_defined(env, f"buffer %{self.name}")
        return align(max(self.total_elements().evaluate(env), 0) * item, self.alignment)

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
    """A write of one buffer element.  ``offsets`` is the origin of the window a windowed
    ``memory.store`` fills (S16): ``index`` is then ``offsets`` plus the nest's variables;
    empty for a write of the whole buffer."""

    buffer: str
    index: tuple[Expr, ...]
    version: Expr
    offsets: tuple[Expr, ...] = ()

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
class SquaresNest(ReduceNest):
    """``dest[vars[:-1]] = sum over vars[-1] of (value - center)²`` in one pass over the
    row: ``center`` (invariant along the row) is evaluated after it, and the sum is
    ``m2 + n·(mean - center)²`` from the row's count ``n``, mean and centered sum of
    squares ``m2`` (Welford's update, per lane, merged by Chan's formula): two
    non-negative terms, so no cancellation whatever ``center`` is.  Only a part of a
    :class:`FusedNest`, after the reductions ``center`` reads (``fn`` is ``SUM``)."""

    center: Elem


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
class Prefetch(Stmt):
    """Ask the cache for ``window`` of a view ahead of its use (a prefetching copy engine,
    :mod:`planner.realize.copies`: the next copy's source); lines outside the view are
    not touched.  It never changes a result."""

    window: Window


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


def _fmt_squares(s: SquaresNest, pad: str, depth: int) -> list[str]:
    head = _fmt_reduce(s, pad, depth)[0]
    return [head, f"{pad}  {s.dest} = sum over {s.vars[-1]} of ({format_elem(s.value)} - "
                  f"{_operand_text(s.center)})^2  (one pass, center after the row)"]


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


def _fmt_prefetch(s: Prefetch, pad: str, depth: int) -> list[str]:
    return [f"{pad}prefetch {s.window}"]


_FORMAT: dict[type, Callable[..., list[str]]] = {
    Nest: _fmt_nest, ReduceNest: _fmt_reduce, SquaresNest: _fmt_squares, FusedNest: _fmt_fused,
    Mma: _fmt_mma, Loop: _fmt_loop, Pipeline: _fmt_pipeline, Parallel: _fmt_parallel,
    Barrier: _fmt_barrier, Note: _fmt_note, Prefetch: _fmt_prefetch,
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
