"""The Python frontend: capture a tile kernel by tracing, mirroring the C++ spelling.

Why tracing and not AST capture: a kernel body is ordinary Python that runs once;
every DSL call appends a typed op to the current block and returns a handle.  This
keeps the frontend small and lets users factor kernels into helper functions,
loops over configs and conditionals on Python values, as in the seed's C++.

Tiles are *staged value variables promoted to SSA* (S1).  Rebinding a Python name
inside a temporal region (``acc = mma(a, b, acc)`` in a pipeline) is found when the
region closes: the region generator compares the caller frame's locals before and
after the body ran.  Each rebound name becomes a loop-carried block argument;
uses of the old value inside the body are redirected to that argument, the new
value is yielded, and the handle the name now holds is rebound to the region's
result, so code after the loop sees the value after the last iteration.  Memory
states are carried the same way through the Memory handle, which is stable (it is
movable, not copyable: ``copy.copy`` raises).  Limitation: two Python names bound
to one handle before a region cannot be told apart; rebind only one of them.  A
``parallel`` region carries the state of an ancestor's Memory its instances write (each
its own window: ``acc(coord(r0, 0), shape(t, n)).store(tile)``) the same way, and its
result is the joined state (S16, range-aware MemorySSA; the verifier proves the
instances' windows disjoint).

Every op records the user's file, line and 1-based column (the first frame outside
``planner``; the column comes from ``co_positions()`` of the frame's current
instruction).  Mistakes the DSL can see while tracing are refused at that position with
a :class:`PlannerError` whose message ends with the source line and a caret:

* storing a tile into a window ``Y(coord(...), shape(...))`` of another shape;
* a reduction axis outside ``[-rank, rank)`` (negative axes count from the end, as in
  numpy: ``axis=-1`` is the last);
* a view annotation with a bare int for its extents (``TensorView[f32, 2]``; the
  extents are spelled ``dims("M", "N")``);
* any other Python exception raised by the kernel body, located at the last traceback
  frame in the user's code.

An output (writable) view that the kernel never stores is not an error (the view keeps
what it held), but capture warns (:class:`DslWarning`) and ``planner run --check``
catches it against the example's numpy reference.
"""

from __future__ import annotations

import contextvars
import inspect
import itertools
import linecache
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from planner.errors import PlannerError, SourceLoc, error
from planner.ir import core
from planner.ir.core import (
    Axis,
    BinaryFn,
    Block,
    Kernel,
    LoopKind,
    Op,
    ReduceFn,
    ResourceClass,
    ResourceConstraint,
    UnaryFn,
    Value,
)
from planner.ir.dtypes import DType
from planner.ir.expr import Apply, Const, Expr, ExprOp, IntLike, add, as_expr, mul, sym
from planner.ir.expr import ceil_div as _ceil_div
from planner.ir.layout import Layout, XorSwizzle, dense, strided
from planner.ir.types import MemoryType, TileType, ViewType

_PLANNER_DIR = str(Path(__file__).resolve().parents[1])
#: The built-in examples are package data but user code: their frames are the user's.
_EXAMPLES_DIR = str(Path(_PLANNER_DIR) / "examples")


def _library_frame(filename: str) -> bool:
    return filename.startswith(_PLANNER_DIR) and not filename.startswith(_EXAMPLES_DIR)


def _user_frame() -> FrameType | None:
    frame = sys._getframe(1)
    while frame is not None and _library_frame(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def _column(code: Any, lasti: int) -> int:
    """1-based start column of the instruction at byte offset ``lasti`` (0: unknown)."""
    if lasti < 0:
        return 0
    try:
        pos = next(itertools.islice(code.co_positions(), lasti // 2, None), None)
    except (AttributeError, ValueError):
        return 0
    return pos[2] + 1 if pos is not None and pos[2] is not None else 0


def _frame_loc(frame: FrameType) -> SourceLoc:
    return SourceLoc(frame.f_code.co_filename, frame.f_lineno,
                     _column(frame.f_code, frame.f_lasti))


def _user_loc() -> SourceLoc:
    frame = _user_frame()
    if frame is None:
        return SourceLoc("<python>", 0)
    return _frame_loc(frame)


def _excerpt(loc: SourceLoc) -> str:
    """The source line of ``loc`` and a caret under its column ("" when unreadable)."""
    src = linecache.getline(loc.file, loc.line).rstrip("\n") if loc.line > 0 else ""
    if not src.strip():
        return ""
    if not loc.col:
        return src
    lead = "".join(c if c == "\t" else " " for c in src[: loc.col - 1])
    return f"{src}\n{lead}^"


def _user_error(message: str, loc: SourceLoc | None = None, rule: str = "") -> PlannerError:
    """A PlannerError at the user's position, its message ending with the source excerpt."""
    loc = _user_loc() if loc is None else loc
    excerpt = _excerpt(loc)
    return error(f"{message}\n{excerpt}" if excerpt else message, loc, rule=rule)


class DslWarning(UserWarning):
    """A kernel the DSL captured but that is probably wrong (an output never stored)."""


# --------------------------------------------------------------------------- tracer state


class _Tracer:
    """The builder stack of one kernel capture."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.memories: list[Memory] = []
        self.stage: str | None = None
        self.parallel_labels: list[str] = []
        self.labels: set[str] = set()

    @property
    def block(self) -> Block:
        return self.blocks[-1]

    def emit(self, op: Op) -> Op:
        frame = _user_frame()
        _name_bound_tiles(frame)
        op.loc = _frame_loc(frame) if frame is not None else SourceLoc("<python>", 0)
        op.stage = self.stage
        self.block.append(op)
        return op

    def unique_label(self, base: str) -> str:
        label, n = base, 1
        while label in self.labels:
            n += 1
            label = f"{base}_{n}"
        self.labels.add(label)
        return label


_TRACER: contextvars.ContextVar[_Tracer | None] = contextvars.ContextVar("tracer", default=None)


def _tracer() -> _Tracer:
    t = _TRACER.get()
    if t is None:
        raise error("tile operations can only be used inside a @tile_kernel function",
                    _user_loc(), rule="S1")
    return t


def _name_bound_tiles(frame: FrameType | None) -> None:
    """Gives each unnamed Tile bound to a local of the user's code its local's name.

    Scans ``frame`` and the user frames that called it (the kernel function and the helpers
    it is inside), outermost first, so a Tile passed to a helper keeps the caller's name.
    Called before every op is emitted and when a region closes, so a value is named after
    the assignment that binds it and before the next one can rebind the name: ``x = exp(x)``
    names the old and the new value ``x`` (the printer makes them ``%x`` and ``%x_0``).  A
    helper's local that is returned and never bound by its caller stays unnamed.
    """
    frames: list[FrameType] = []
    while frame is not None and not _library_frame(frame.f_code.co_filename):
        frames.append(frame)
        frame = frame.f_back
    for f in reversed(frames):
        for name, v in f.f_locals.items():
            if (isinstance(v, (Tile, Token)) and v.value.name_hint is None
                    and not name.startswith("_")):
                v.value.name_hint = name


def _emit(op: Op) -> Op:
    return _tracer().emit(op)


# --------------------------------------------------------------------------- shapes


def axis(name: str, extent: IntLike) -> Axis:
    """A named iteration axis (``axis("m", cfg.block_m)``)."""
    return Axis(name, as_expr(extent))


def ceil_div(a: IntLike, b: IntLike) -> Expr:
    return _ceil_div(a, b)


@dataclass(frozen=True, slots=True)
class Shape:
    """``shape(m, k)``: extents given as axes or integer expressions."""

    dims: tuple[Axis | Expr, ...]

    @property
    def extents(self) -> tuple[Expr, ...]:
        return tuple(d.extent if isinstance(d, Axis) else d for d in self.dims)

    @property
    def axes(self) -> tuple[Axis, ...]:
        out = []
        for d in self.dims:
            if not isinstance(d, Axis):
                raise error("a region's shape must be made of named axes", _user_loc())
            out.append(d)
        return tuple(out)


def shape(*dims: Axis | IntLike) -> Shape:
    return Shape(tuple(d if isinstance(d, Axis) else as_expr(d) for d in dims))


def coord(*offsets: IntLike) -> tuple[Expr, ...]:
    return tuple(as_expr(o) for o in offsets)


def stride(*strides: IntLike) -> tuple[Expr, ...]:
    return tuple(as_expr(s) for s in strides)


def _extents(s: Shape | Sequence[IntLike]) -> tuple[Expr, ...]:
    return s.extents if isinstance(s, Shape) else tuple(as_expr(e) for e in s)


def layout(s: Shape, strides: Sequence[IntLike], *swizzles: XorSwizzle) -> Layout:
    """``layout(shape(m, k), stride(block_k + 1, 1))``: an explicit local address map."""
    try:
        return strided(_extents(s), strides, swizzles)
    except ValueError as exc:
        raise error(str(exc), _user_loc(), rule="S11") from None


def swizzle(bits: int, base: int, shift: int) -> XorSwizzle:
    try:
        return XorSwizzle(bits, base, shift)
    except ValueError as exc:
        raise error(str(exc), _user_loc(), rule="S11") from None


class mem:
    """Resource-class constraints (S5); ``mem.custom("psum")`` names a catalog's own (S6)."""

    private_ = ResourceConstraint(ResourceClass.PRIVATE)
    shared = ResourceConstraint(ResourceClass.SHARED)
    cluster = ResourceConstraint(ResourceClass.CLUSTER)
    global_ = ResourceConstraint(ResourceClass.GLOBAL)
    tensor = ResourceConstraint(ResourceClass.TENSOR)
    auto_ = ResourceConstraint(ResourceClass.AUTO)

    @staticmethod
    def custom(name: str) -> ResourceConstraint:
        """A class only a target catalog defines (its ``classes:``), e.g. ``psum``.

        Whether the target defines it is checked with the target (``planner check
        --target``); a built-in spelling gives the built-in class.
        """
        return _constraint(name)


def _constraint(x: object) -> ResourceConstraint:
    try:
        return ResourceConstraint.of(x)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise error(str(exc), _user_loc(), rule="S6") from None


class exec_:
    AUTOMATIC = "AUTOMATIC"


# --------------------------------------------------------------------------- tiles


class Tile:
    """A staged value variable; ``value`` is its current SSA value."""

    __slots__ = ("value",)

    def __init__(self, value: Value) -> None:
        self.value = value

    @property
    def type(self) -> TileType:
        assert isinstance(self.value.type, TileType)
        return self.value.type

    @property
    def shape(self) -> tuple[Expr, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    def _binary(self, fn: BinaryFn, other: Tile | float, reverse: bool = False) -> Tile:
        rhs = other if isinstance(other, Tile) else full(self.shape, other, self.dtype)
        a, b = (rhs, self) if reverse else (self, rhs)
        return _binary(fn, a, b)

    def __getitem__(self, key: object) -> Tile:
        """A static slice: ``h[:, j:j + t]`` (start and stop are integers or kernel
        expressions, step 1); an integer index keeps extent 1 and drops the dim
        (``h[0]`` of a ``[4, 8]`` tile is ``[8]``).  Missing trailing dims are whole."""
        items = key if isinstance(key, tuple) else (key,)
        rank = self.type.rank
        if len(items) > rank:
            raise _user_error(f"a rank-{rank} tile [{', '.join(map(str, self.shape))}] "
                              f"indexed with {len(items)} subscripts")
        items = items + (slice(None),) * (rank - len(items))
        offsets: list[Expr] = []
        sizes: list[Expr] = []
        kept: list[int] = []
        for d, (it, extent) in enumerate(zip(items, self.shape, strict=True)):
            if isinstance(it, slice):
                if it.step not in (None, 1):
                    raise _user_error(f"slice step {it.step!r} in dim {d}: only step 1 "
                                      "(a contiguous window) is supported")
                start = as_expr(0 if it.start is None else _index(it.start, d))
                stop = extent if it.stop is None else as_expr(_index(it.stop, d))
                offsets.append(start)
                sizes.append(_difference(stop, start))
                kept.append(d)
            else:
                offsets.append(as_expr(_index(it, d)))
                sizes.append(as_expr(1))
        for d, (o, n, extent) in enumerate(zip(offsets, sizes, self.shape, strict=True)):
            o_, n_, e_ = o.const_value(), n.const_value(), extent.const_value()
            if n_ is not None and n_ < 0:
                raise _user_error(f"slice of dim {d} has negative extent {n} "
                                  f"({o} to {o + n})", rule="S1")
            if None not in (o_, n_, e_) and o_ + n_ > e_:  # type: ignore[operator]
                raise _user_error(f"slice [{o}, {o + n}) of dim {d} is outside the tile's "
                                  f"extent {extent}", rule="S1")
        if kept == list(range(rank)) and all(o.const_value() == 0 for o in offsets) and all(
                _same_extent(n, e) for n, e in zip(sizes, self.shape, strict=True)):
            return self
        return _new(core.SliceOp(self.value, tuple(offsets), tuple(sizes), tuple(kept)))

    def __add__(self, o: Tile | float) -> Tile:
        return self._binary(BinaryFn.ADD, o)

    def __radd__(self, o: float) -> Tile:
        return self._binary(BinaryFn.ADD, o, True)

    def __sub__(self, o: Tile | float) -> Tile:
        return self._binary(BinaryFn.SUB, o)

    def __rsub__(self, o: float) -> Tile:
        return self._binary(BinaryFn.SUB, o, True)

    def __mul__(self, o: Tile | float) -> Tile:
        return self._binary(BinaryFn.MUL, o)

    def __rmul__(self, o: float) -> Tile:
        return self._binary(BinaryFn.MUL, o, True)

    def __truediv__(self, o: Tile | float) -> Tile:
        return self._binary(BinaryFn.DIV, o)

    def __rtruediv__(self, o: float) -> Tile:
        return self._binary(BinaryFn.DIV, o, True)

    def __neg__(self) -> Tile:
        return _unary(UnaryFn.NEG, self)

    def __lt__(self, o: Tile | float) -> Tile:
        return self._binary(BinaryFn.LT, o)

    def __le__(self, o: Tile | float) -> Tile:
        return self._binary(BinaryFn.LE, o)

    def __gt__(self, o: Tile | float) -> Tile:
        return self._binary(BinaryFn.GT, o)

    def __ge__(self, o: Tile | float) -> Tile:
        return self._binary(BinaryFn.GE, o)

    def __bool__(self) -> bool:
        raise error("a Tile has no Python truth value: use where(cond, a, b)", _user_loc())


def _linear_terms(e: Expr) -> dict[Expr, int]:
    """``e`` as {term: coefficient} over its top-level sum (the constant under Const(1))."""
    out: dict[Expr, int] = {}
    for t in e.args if isinstance(e, Apply) and e.op is ExprOp.ADD else (e,):
        coeff, rest = 1, t
        if isinstance(t, Const):
            coeff, rest = t.value, Const(1)
        elif isinstance(t, Apply) and t.op is ExprOp.MUL and isinstance(t.args[0], Const):
            coeff = t.args[0].value
            rest = t.args[1] if len(t.args) == 2 else Apply(ExprOp.MUL, t.args[1:])
        out[rest] = out.get(rest, 0) + coeff
    return out


def _difference(stop: Expr, start: Expr) -> Expr:
    """``stop - start`` with like terms cancelled, so ``(j + 4) - j`` is the extent 4."""
    terms = _linear_terms(stop)
    for t, c in _linear_terms(start).items():
        terms[t] = terms.get(t, 0) - c
    return add(*(mul(c, t) for t, c in terms.items() if c))


def _index(value: object, dim: int) -> IntLike:
    """A subscript: a non-negative int or a kernel expression (no Python wrap-around)."""
    if isinstance(value, bool) or not isinstance(value, int | Expr):
        raise _user_error(f"subscript {value!r} in dim {dim}: expected an integer or a kernel "
                          "expression (a Tile cannot index: use where(...) to select)")
    if isinstance(value, int) and value < 0:
        raise _user_error(f"negative subscript {value} in dim {dim}: tiles do not wrap "
                          "around; write the position from the start")
    return value


def _new(op: Op) -> Tile:
    return Tile(_emit(op).result)


def _check_same_shape(what: str, a: Tile, b: Tile) -> None:
    if a.shape != b.shape:
        raise error(f"{what}: operand shapes differ: [{', '.join(map(str, a.shape))}] vs "
                    f"[{', '.join(map(str, b.shape))}] (use broadcast)", _user_loc())


def _unary(fn: UnaryFn, x: Tile) -> Tile:
    return _new(core.UnaryOp(fn, x.value))


def _binary(fn: BinaryFn, a: Tile, b: Tile) -> Tile:
    # a rank-0 operand (a view element ``w[j]``) is broadcast to the other's shape
    if a.type.rank == 0 and b.type.rank > 0:
        a = broadcast(a, b.shape, ())
    elif b.type.rank == 0 and a.type.rank > 0:
        b = broadcast(b, a.shape, ())
    _check_same_shape(fn.value, a, b)
    return _new(core.BinaryOp(fn, a.value, b.value))


def exp(x: Tile) -> Tile:
    return _unary(UnaryFn.EXP, x)


def log(x: Tile) -> Tile:
    return _unary(UnaryFn.LOG, x)


def sqrt(x: Tile) -> Tile:
    return _unary(UnaryFn.SQRT, x)


def rsqrt(x: Tile) -> Tile:
    return _unary(UnaryFn.RSQRT, x)


def tanh(x: Tile) -> Tile:
    return _unary(UnaryFn.TANH, x)


def abs_(x: Tile) -> Tile:
    return _unary(UnaryFn.ABS, x)


def maximum(a: Tile, b: Tile | float) -> Tile:
    return a._binary(BinaryFn.MAX, b)


def minimum(a: Tile, b: Tile | float) -> Tile:
    return a._binary(BinaryFn.MIN, b)


def where(cond: Tile, a: Tile, b: Tile | float) -> Tile:
    rhs = b if isinstance(b, Tile) else full(a.shape, b, a.dtype)
    _check_same_shape("where", a, rhs)
    return _new(core.SelectOp(cond.value, a.value, rhs.value))


def cast(x: Tile, dtype: DType) -> Tile:
    return _new(core.CastOp(x.value, dtype))


def _reduce_axis(what: str, x: Tile, axis: int) -> int:
    """``axis`` in ``[-rank, rank)``; a negative one counts from the end (numpy's rule)."""
    rank = x.type.rank
    if isinstance(axis, bool) or not isinstance(axis, int) or not -rank <= axis < rank:
        valid = f"-{rank}..{rank - 1}" if rank else "none: a rank-0 tile has no axes"
        raise _user_error(f"{what}(axis={axis!r}) on a rank-{rank} tile "
                          f"[{', '.join(map(str, x.shape))}]: the axis must be in "
                          f"[-{rank}, {rank}) (valid: {valid})")
    return axis % rank


def reduce_sum(x: Tile, axis: int) -> Tile:
    """Sum over ``axis``, in ``[-rank, rank)`` (negative counts from the end)."""
    return _new(core.ReduceOp(ReduceFn.SUM, x.value, _reduce_axis("reduce_sum", x, axis)))


def reduce_max(x: Tile, axis: int) -> Tile:
    """Maximum over ``axis``, in ``[-rank, rank)`` (negative counts from the end)."""
    return _new(core.ReduceOp(ReduceFn.MAX, x.value, _reduce_axis("reduce_max", x, axis)))


def broadcast(x: Tile, to: Shape | Sequence[IntLike], dims: Sequence[int]) -> Tile:
    """Input dim i becomes output dim ``dims[i]``; the other output dims repeat."""
    return _new(core.BroadcastOp(x.value, _extents(to), tuple(dims)))


def transpose(x: Tile, perm: Sequence[int] = (1, 0)) -> Tile:
    return _new(core.TransposeOp(x.value, tuple(perm)))


def mma(a: Tile, b: Tile, acc: Tile) -> Tile:
    """``acc + a @ b``."""
    return _new(core.MmaOp(a.value, b.value, acc.value))


def iota(s: Shape | Sequence[IntLike], dim: int) -> Tile:
    return _new(core.IotaOp(_extents(s), dim))


def full(s: Shape | Sequence[IntLike], value: float | IntLike, dtype: DType = DType.F32
         ) -> Tile:
    """A constant tile; ``value`` may be a symbolic integer (e.g. a view extent)."""
    val: float | Expr = value if isinstance(value, Expr) else float(value)
    return _new(core.FullOp(_extents(s), dtype, val))


class _DTypeIndexed:
    """``zeros[f32](shape(m, n))`` mirrors ``zeros<float>(shape(m, n))``."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._fn = fn

    def __getitem__(self, dtype: DType) -> Callable[..., Any]:
        return lambda *a, **k: self._fn(*a, dtype=dtype, **k)

    def __call__(self, *a: Any, **k: Any) -> Any:
        return self._fn(*a, **k)


zeros = _DTypeIndexed(lambda s, dtype=DType.F32: full(s, 0.0, dtype))


# --------------------------------------------------------------------------- views


class SubView:
    """``C(coord(m0, n0), shape(m, n))``: a window of a view."""

    def __init__(self, view: TensorView, offsets: tuple[Expr, ...], extents: tuple[Expr, ...]
                 ) -> None:
        self.view, self.offsets, self.extents = view, offsets, extents

    def load(self, fill: float = 0.0) -> Tile:
        return self.view._load(self.offsets, self.extents, fill)

    def store(self, tile: Tile) -> None:
        """Store ``tile``, whose shape must be the window's declared shape."""
        if len(tile.shape) != len(self.extents) or any(
                not _same_extent(a, b) for a, b in zip(tile.shape, self.extents, strict=False)):
            name = self.view.value.name_hint or "view"
            raise _user_error(
                f"store of a tile of shape [{', '.join(map(str, tile.shape))}] into a window "
                f"of {name} declared with shape [{', '.join(map(str, self.extents))}]: the "
                "shapes must match (declare the window with the tile's shape)")
        self.view._store(self.offsets, tile)


def _same_extent(a: Expr, b: Expr) -> bool:
    return a == b or str(a) == str(b)


class TensorView:
    """A kernel parameter; annotate as ``TensorView[const(f32), dims("M", "K")]``."""

    def __init__(self, value: Value) -> None:
        self.value = value

    @property
    def type(self) -> ViewType:
        assert isinstance(self.value.type, ViewType)
        return self.value.type

    def extent(self, dim: int) -> Expr:
        return self.type.shape[dim]

    def __class_getitem__(cls, item: Any) -> ViewSpec:
        dtype, *dims = item if isinstance(item, tuple) else (item,)
        if len(dims) == 1 and isinstance(dims[0], tuple):
            dims = list(dims[0])
        elif any(isinstance(d, int) for d in dims):
            dt = (f"const({dtype.dtype.value})" if isinstance(dtype, _Const)
                  else getattr(dtype, "value", repr(dtype)))
            given = ", ".join(map(repr, dims))
            raise _user_error(
                f"TensorView[{dt}, {given}]: the extents of a view are spelled dims(...), "
                f"one per dimension, e.g. TensorView[{dt}, dims(\"M\", \"N\")] (a bare "
                f"int is not a rank; a fixed extent is dims({given}))")
        readonly = isinstance(dtype, _Const)
        base = dtype.dtype if isinstance(dtype, _Const) else dtype
        return ViewSpec(base, tuple(as_expr(d) if not isinstance(d, str) else sym(d)
                                    for d in dims), readonly)

    def __getitem__(self, key: object) -> Tile:
        """``X[coord(...), shape(...)]`` loads a window; ``w[j]`` / ``w[i, j]`` (one integer
        or kernel expression per dim) reads one element as a rank-0 tile, which an
        elementwise op broadcasts to its other operand's shape.  Both read the fill 0.0
        outside the view."""
        if isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], Shape):
            offsets, s = key
            return self._load(tuple(offsets), _extents(s), 0.0)
        items = key if isinstance(key, tuple) else (key,)
        if any(isinstance(it, slice) for it in items):
            raise _user_error(f"view {self.value.name_hint}: load a window with "
                              "X[coord(...), shape(...)], then slice the tile")
        at = tuple(as_expr(_index(it, d)) for d, it in enumerate(items))
        self._check_rank(len(at))
        window = self._load(at, (as_expr(1),) * len(at), 0.0)
        return _new(core.SliceOp(window.value, (as_expr(0),) * len(at), (as_expr(1),) * len(at),
                                 ()))

    def __call__(self, offsets: tuple[Expr, ...], s: Shape) -> SubView:
        return SubView(self, tuple(offsets), _extents(s))

    def _check_rank(self, n: int) -> None:
        if n != self.type.rank:
            raise error(f"view {self.value.name_hint} has rank {self.type.rank}, "
                        f"indexed with {n} coordinates", _user_loc())

    def _load(self, offsets: tuple[Expr, ...], extents: tuple[Expr, ...], fill: float) -> Tile:
        self._check_rank(len(offsets))
        return _new(core.LoadOp(self.value, offsets, extents, fill))

    def _store(self, offsets: tuple[Expr, ...], tile: Tile) -> None:
        self._check_rank(len(offsets))
        if self.type.readonly:
            raise error(f"cannot store into const view {self.value.name_hint}", _user_loc())
        _emit(core.StoreOp(self.value, tile.value, offsets))


def dims(*extents: str | IntLike) -> tuple[Expr, ...]:
    """The extents of a view parameter: ``TensorView[f32, dims("M", "K")]``.

    A name becomes a kernel symbol bound from the argument's shape.
    """
    return tuple(sym(e) if isinstance(e, str) else as_expr(e) for e in extents)


@dataclass(frozen=True, slots=True)
class _Const:
    dtype: DType


def const(dtype: DType) -> _Const:
    """``TensorView[const(f32), ...]`` mirrors ``TensorView<const float, R>``."""
    return _Const(dtype)


@dataclass(frozen=True, slots=True)
class ViewSpec:
    dtype: DType
    shape: tuple[Expr, ...]
    readonly: bool


# --------------------------------------------------------------------------- memory


class Memory:
    """An explicit Memory handle: stable identity, movable, not copyable (S10)."""

    def __init__(self, alloc: core.AllocOp) -> None:
        self.alloc = alloc
        self.state: Value = alloc.initial_state

    @property
    def value(self) -> Value:
        return self.alloc.memory

    def _name_from_caller(self) -> None:
        """Take the Python name the user gave this Memory as the printer's name hint."""
        if self.value.name_hint is None and (frame := _user_frame()) is not None:
            for name, v in frame.f_locals.items():
                if v is self:
                    self.value.name_hint = name
                    self.alloc.initial_state.name_hint = f"{name}_init"
                    break

    def store(self, tile: Tile) -> None:
        """The only mutation: defines the next MemoryState."""
        mt = self.value.type
        assert isinstance(mt, MemoryType)
        if tile.shape != mt.shape or tile.dtype != mt.dtype:
            raise error(f"store of {tile.type} into {mt}: shape and element type must match",
                        _user_loc(), rule="S10")
        self._emit_store(tile, (), ())

    def __call__(self, offsets: tuple[Expr, ...], s: Shape) -> MemoryWindow:
        """``acc(coord(r0, 0), shape(t, n))``: a window of this Memory, to ``.store()`` a
        tile into (each instance of a child parallel writing its own window, S16) or to
        ``copy_async`` from."""
        return MemoryWindow(self, tuple(as_expr(o) for o in offsets), _extents(s))

    def _emit_store(self, tile: Tile, offsets: tuple[Expr, ...], extents: tuple[Expr, ...]
                    ) -> None:
        self._name_from_caller()
        op = _emit(core.MemStoreOp(self.value, self.state, tile.value, offsets, extents))
        op.result.name_hint = self.value.name_hint
        self.state = op.result

    def load(self) -> Tile:
        """An immutable snapshot of the current state."""
        self._name_from_caller()
        return _new(core.MemLoadOp(self.value, self.state))

    def copy_async(self, src: SubView | Tile | Memory | MemoryWindow,
                   fill: float | None = None) -> Token:
        """Start copying ``src`` into this Memory; returns the completion token.

        ``src`` is a view window (``A(coord(...), shape(...))``, or ``A[coord(...),
        shape(...)]`` whose load is folded into the copy) or another Memory (its current
        state, whole).  The window's shape must be this Memory's.  The state it defines
        is readable only after ``token.wait()`` (S9.async); elements outside the view read
        ``fill`` (default: the folded load's fill, else 0.0).
        """
        mt = self.value.type
        assert isinstance(mt, MemoryType)
        t = _tracer()
        if isinstance(src, Tile):
            load = src.value.owner
            frame = _user_frame()
            bound = frame is not None and any(isinstance(v, Tile) and v.value is src.value
                                              for v in frame.f_locals.values())
            if (not isinstance(load, core.LoadOp) or not t.block.ops
                    or t.block.ops[-1] is not load or bound):
                raise _user_error(
                    "copy_async copies a view window or a Memory: pass A(coord(...), "
                    "shape(...)) or A[coord(...), shape(...)] directly (a computed Tile is "
                    "written with store)", rule="S9.async")
            t.block.ops.pop()  # the window load becomes the copy's source
            view, offsets, extents = load.view, load.offsets, load.shape
            fill_value = load.fill if fill is None else fill
            source: tuple[Value, ...] = (view,)
            src_dtype = load.view.type.dtype  # type: ignore[union-attr]
        elif isinstance(src, SubView):
            src.view._check_rank(len(src.offsets))
            offsets, extents = src.offsets, src.extents
            fill_value = 0.0 if fill is None else fill
            source = (src.view.value,)
            src_dtype = src.view.type.dtype
        elif isinstance(src, Memory | MemoryWindow):
            whole = src if isinstance(src, Memory) else src.memory
            smt = whole.value.type
            assert isinstance(smt, MemoryType)
            whole._name_from_caller()
            if isinstance(src, MemoryWindow):
                src.check_rank()
                offsets, extents = src.offsets, src.extents
            else:
                offsets, extents = tuple(as_expr(0) for _ in smt.shape), smt.shape
            fill_value = 0.0 if fill is None else fill
            source = (whole.value, whole.state)
            src_dtype = smt.dtype
        else:
            raise _user_error(f"copy_async of {type(src).__name__}: the source is a view "
                              "window or a Memory", rule="S9.async")
        if len(extents) != len(mt.shape) or src_dtype != mt.dtype or any(
                not _same_extent(a, b) for a, b in zip(extents, mt.shape, strict=False)):
            raise _user_error(
                f"copy_async of a {src_dtype} window [{', '.join(map(str, extents))}] into "
                f"{mt}: shape and element type must match the Memory", rule="S10")
        self._name_from_caller()
        op = _emit(core.CopyAsyncOp(self.value, self.state, source, tuple(offsets),
                                    tuple(extents), float(fill_value)))
        assert isinstance(op, core.CopyAsyncOp)
        op.new_state.name_hint = self.value.name_hint
        self.state = op.new_state
        return Token(op.token)

    def __copy__(self) -> Memory:
        raise TypeError("Memory is movable, not copyable (S10): borrow it by reference")

    def __deepcopy__(self, memo: dict[int, Any]) -> Memory:
        raise TypeError("Memory is movable, not copyable (S10): borrow it by reference")


class MemoryWindow:
    """``acc(coord(r0, 0), shape(t, n))``: the window ``offsets`` +: ``extents`` of a Memory.

    ``.store(tile)`` writes the tile into just the window (``memory.store`` with
    ``offsets``/``shape``).  Inside a child ``parallel`` this is how the instances write
    an ancestor's Memory: the verifier proves each instance's window disjoint from every
    other instance's and inside the Memory (S16), and after the region the Memory holds
    all the windows (the region joins the instances' states into one).
    """

    __slots__ = ("extents", "memory", "offsets")

    def __init__(self, memory: Memory, offsets: tuple[Expr, ...], extents: tuple[Expr, ...]
                 ) -> None:
        self.memory, self.offsets, self.extents = memory, offsets, extents

    def check_rank(self) -> None:
        mt = self.memory.value.type
        assert isinstance(mt, MemoryType)
        if len(self.offsets) != len(mt.shape) or len(self.extents) != len(mt.shape):
            raise _user_error(f"a window of {len(self.offsets)} offsets and "
                              f"{len(self.extents)} extents on rank-{len(mt.shape)} memory "
                              f"{mt}: give one offset and one extent per dim", rule="S16")

    def store(self, tile: Tile) -> None:
        """Store ``tile``, whose shape must be the window's and dtype the Memory's."""
        mt = self.memory.value.type
        assert isinstance(mt, MemoryType)
        self.check_rank()
        if tile.dtype != mt.dtype or len(tile.shape) != len(self.extents) or any(
                not _same_extent(a, b) for a, b in zip(tile.shape, self.extents, strict=True)):
            raise _user_error(
                f"store of {tile.type} into a window [{', '.join(map(str, self.extents))}] of "
                f"{mt}: the tile's shape must be the window's declared shape and its element "
                "type the Memory's", rule="S10")
        self.memory._emit_store(tile, self.offsets, self.extents)


class Token:
    """The completion token of ``Memory.copy_async``; ``tok.wait()`` makes the copied
    state readable.  Rebound inside a temporal region (a copy issued for the next
    iteration) it is carried like a Tile; a token already waited when the region opens
    is not carried (the body's copy is then a same-iteration one)."""

    __slots__ = ("value", "waited")

    def __init__(self, value: Value) -> None:
        self.value = value
        self.waited = False

    def wait(self) -> None:
        _emit(core.WaitOp(self.value))
        self.waited = True

    def __bool__(self) -> bool:
        raise error("a copy token has no Python truth value: call tok.wait()", _user_loc())


def _memory(spec: Layout | Shape,
            resource: ResourceConstraint | ResourceClass | str = mem.auto_,
            dtype: DType = DType.F32) -> Memory:
    lay = spec if isinstance(spec, Layout) else dense(_extents(spec))
    constraint = _constraint(resource)
    t = _tracer()
    owner = t.parallel_labels[-1] if t.parallel_labels else "kernel"
    m = Memory(t.emit(core.AllocOp(dtype, lay, constraint, owner)))
    t.memories.append(m)
    return m


memory = _DTypeIndexed(_memory)


# --------------------------------------------------------------------------- regions


class _RegionCapture:
    """Opens a region block; on close finds rebound Tiles and Memory states."""

    def __init__(self, op: core.ParallelOp | core.LoopOp, frame: FrameType | None) -> None:
        self.op, self.frame = op, frame
        t = _tracer()
        self.before_tiles = self._tile_locals()
        self.waited_before = {n for n, (h, _) in self.before_tiles.items()
                              if isinstance(h, Token) and h.waited}
        self.before_states = {id(m): m.state for m in t.memories}
        self.memories_before = list(t.memories)
        t.emit(op)
        t.blocks.append(op.body)
        self.saved_stage = t.stage
        t.stage = None

    def _tile_locals(self) -> dict[str, tuple[Tile, Value]]:
        if self.frame is None:
            return {}
        _name_bound_tiles(self.frame)
        return {n: (v, v.value) for n, v in self.frame.f_locals.items()
                if isinstance(v, (Tile, Token))}

    def close(self) -> None:
        t = _tracer()
        t.blocks.pop()
        t.stage = self.saved_stage
        after = self._tile_locals()
        # A token waited before the region opened is not carried: a copy issued and
        # waited inside the body under the same name is a same-iteration copy.
        rebound = [(n, after[n][0], old) for n, (_, old) in self.before_tiles.items()
                   if n in after and after[n][1] is not old and n not in self.waited_before]
        changed = [m for m in self.memories_before if m.state is not self.before_states[id(m)]]
        if isinstance(self.op, core.ParallelOp):
            self._close_parallel(rebound, changed)
        else:
            self._close_loop(rebound, changed)
        t.memories = self.memories_before

    def _close_parallel(self, rebound: list[tuple[str, Tile, Value]],
                        changed: list[Memory]) -> None:
        for name, _, _ in rebound:
            raise error(f"Tile {name!r} defined outside parallel region {self.op.label!r} is "
                        "rebound inside it: spatial instances cannot carry values; declare it "
                        "inside the region", self.op.loc, rule="S1")
        # An ancestor Memory written inside: each instance starts from the state before the
        # region (a block argument) and yields its last one; the region's result is the
        # joined state (S16).  The verifier proves the instances' windows disjoint.
        carried = [(self.before_states[id(m)], m.state) for m in changed]
        results = self._carry(carried, [m.value.name_hint for m in changed])
        for m, res in zip(changed, results, strict=True):
            m.state = res

    def _carry(self, carried: list[tuple[Value, Value]], hints: list[str | None]
               ) -> list[Value]:
        """Make ``carried`` (init outside, final inside) block arguments of the region,
        yielded at its end; returns the region's results."""
        op = self.op
        args = []
        for (init, _), hint in zip(carried, hints, strict=True):
            arg = Value(init.type, hint)
            arg.owner = op.body
            args.append(arg)
            _replace_uses(op.body, init, arg)
        op.body.args = args
        op.inits = tuple(init for init, _ in carried)
        if carried or isinstance(op, core.LoopOp):
            op.body.append(core.YieldOp(tuple(final for _, final in carried), loc=op.loc))
        op.results = [Value(a.type, a.name_hint) for a in args]
        for r in op.results:
            r.owner = op
        return op.results

    def _close_loop(self, rebound: list[tuple[str, Tile, Value]], changed: list[Memory]) -> None:
        carried: list[tuple[Value, Value]] = []  # (init outside, final inside)
        for name, handle, old in rebound:
            old.name_hint = old.name_hint or name
            carried.append((old, handle.value))
        for m in changed:
            carried.append((self.before_states[id(m)], m.state))
        hints = [init.name_hint for init, _ in carried[:len(rebound)]]
        hints += [m.value.name_hint for m in changed]
        results = self._carry(carried, hints)
        for (name, handle, _), res in zip(rebound, results, strict=False):
            handle.value = res
            res.name_hint = name
        for m, res in zip(changed, results[len(rebound):], strict=True):
            m.state = res


def _replace_uses(block: Block, old: Value, new: Value) -> None:
    for op in block.walk():
        op.replace_operand(old, new)


class Nest:
    """The instance of a region: ``nest.index(gm)``, ``nest.pipeline(...)``."""

    def __init__(self, op: core.ParallelOp | core.LoopOp) -> None:
        self.op = op

    def index(self, ax: Axis | None = None) -> Expr:
        axes = self.op.axes
        if ax is None:
            if len(axes) != 1:
                raise error("index() needs an axis in a multi-axis region", _user_loc())
            return axes[0].index
        if ax not in axes:
            raise error(f"axis {ax.name!r} is not iterated by region {self.op.label!r}",
                        _user_loc())
        return ax.index

    def stage(self, name: str) -> None:
        """Marks the following ops as pipeline stage ``name``."""
        op = self.op
        if not isinstance(op, core.LoopOp) or op.kind is not LoopKind.PIPELINE:
            raise error("stage() is only meaningful inside a pipeline region", _user_loc())
        if name not in op.stages:
            op.stages = (*op.stages, name)
        _tracer().stage = name

    def pipeline(self, s: Shape, window: int = 1, interval: int = 1) -> Iterator[Nest]:
        return _loop(LoopKind.PIPELINE, s, window, interval, _caller())

    def serial(self, s: Shape) -> Iterator[Nest]:
        return _loop(LoopKind.SERIAL, s, 1, 1, _caller())

    def reduce(self, s: Shape) -> Iterator[Nest]:
        return _loop(LoopKind.REDUCE, s, 1, 1, _caller())


def _caller() -> FrameType | None:
    return _user_frame()


def _region(op: core.ParallelOp | core.LoopOp, frame: FrameType | None) -> Iterator[Nest]:
    capture = _RegionCapture(op, frame)
    t = _tracer()
    if isinstance(op, core.ParallelOp):
        t.parallel_labels.append(op.label)
    try:
        yield Nest(op)
    finally:
        if isinstance(op, core.ParallelOp):
            t.parallel_labels.pop()
    capture.close()


def parallel(s: Shape, scope: str = exec_.AUTOMATIC) -> Iterator[Nest]:
    """``for nest in parallel(shape(gm, gn), scope)``: spatial instances (an owner, S5)."""
    axes = s.axes
    label = _tracer().unique_label("_".join(a.name for a in axes))
    return _region(core.ParallelOp(label, axes, scope), _caller())


def _loop(kind: LoopKind, s: Shape, window: int, interval: int, frame: FrameType | None
          ) -> Iterator[Nest]:
    axes = s.axes
    if window < 1 or interval < 1:
        raise error(f"pipeline window and interval must be >= 1, got window={window}, "
                    f"interval={interval}", _user_loc(), rule="S18")
    label = _tracer().unique_label("_".join(a.name for a in axes))
    return _region(core.LoopOp(kind, label, axes, (), window, interval), frame)


def pipeline(s: Shape, window: int = 1, interval: int = 1) -> Iterator[Nest]:
    return _loop(LoopKind.PIPELINE, s, window, interval, _caller())


def serial(s: Shape) -> Iterator[Nest]:
    return _loop(LoopKind.SERIAL, s, 1, 1, _caller())


def reduce(s: Shape) -> Iterator[Nest]:
    return _loop(LoopKind.REDUCE, s, 1, 1, _caller())


# --------------------------------------------------------------------------- kernels


def tile_kernel(name: str) -> Callable[[Callable[..., None]], Kernel]:
    """Capture ``fn`` as a :class:`Kernel`; parameters are annotated TensorViews."""

    def capture(fn: Callable[..., None]) -> Kernel:
        sig = inspect.signature(fn)
        hints = fn.__annotations__
        params: list[Value] = []
        handles: list[TensorView] = []
        for pname in sig.parameters:
            spec = hints.get(pname)
            if isinstance(spec, str):
                spec = _eval_annotation(fn, pname, spec)
            if not isinstance(spec, ViewSpec):
                raise error(f"parameter {pname!r} of kernel {name!r} must be annotated as "
                            "TensorView[dtype, extents...]", _loc_of(fn))
            v = Value(ViewType(spec.dtype, spec.shape, spec.readonly), pname)
            params.append(v)
            handles.append(TensorView(v))
        tracer = _Tracer()
        body = Block()
        tracer.blocks.append(body)
        token = _TRACER.set(tracer)
        try:
            fn(*handles)
        except PlannerError:
            raise
        except Exception as exc:
            loc = _raise_loc(exc) or _loc_of(fn)
            raise _user_error(f"kernel {name!r} raised {type(exc).__name__}: {exc}",
                              loc) from exc
        finally:
            _TRACER.reset(token)
        kernel = Kernel(name, params, body, _loc_of(fn))
        _warn_unstored(kernel)
        return kernel

    return capture


def _loc_of(fn: Callable[..., Any]) -> SourceLoc:
    code = fn.__code__
    return SourceLoc(code.co_filename, code.co_firstlineno)


def _raise_loc(exc: BaseException) -> SourceLoc | None:
    """Where ``exc`` was raised in the user's code: the traceback's last user frame."""
    tb, found = exc.__traceback__, None
    while tb is not None:
        if not _library_frame(tb.tb_frame.f_code.co_filename):
            found = SourceLoc(tb.tb_frame.f_code.co_filename, tb.tb_lineno,
                              _column(tb.tb_frame.f_code, tb.tb_lasti))
        tb = tb.tb_next
    return found


def _eval_annotation(fn: Callable[..., Any], pname: str, text: str) -> Any:
    """A string annotation (``from __future__ import annotations``), evaluated now;
    a DSL error in it is located at the annotation in the user's source."""
    try:
        return eval(text, fn.__globals__)
    except PlannerError as exc:
        loc = _annotation_loc(fn, pname) or _loc_of(fn)
        d = exc.diagnostics[0]
        message = d.message.split("\n", 1)[0]
        raise _user_error(message, loc, d.rule) from None


def _annotation_loc(fn: Callable[..., Any], pname: str) -> SourceLoc | None:
    import ast
    import textwrap

    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    src = "".join(lines)
    dedent = len(lines[0]) - len(lines[0].lstrip())
    try:
        tree = ast.parse(textwrap.dedent(src))
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.arg == pname and node.annotation is not None:
            ann = node.annotation
            return SourceLoc(fn.__code__.co_filename, first + ann.lineno - 1,
                             ann.col_offset + dedent + 1)
    return None


def _warn_unstored(kernel: Kernel) -> None:
    from planner.ir.verify import unstored_outputs

    for d in unstored_outputs(kernel):
        warnings.warn_explicit(d.message, DslWarning, d.loc.file, d.loc.line)


f32, f16, bf16, i32 = DType.F32, DType.F16, DType.BF16, DType.I32
