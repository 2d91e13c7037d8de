"""The numpy reference interpreter of the Tile IR: the semantic oracle.

Every backend and every plan is differentially tested against :func:`interpret`, so
this module states the meaning of each op as plainly as it can, vectorized per op
with numpy.  Plans (fusion, materialization, versions, pipeline stages) never change
what is computed; the interpreter therefore ignores them.

Symbols
    :func:`bind_symbols` binds kernel extents from the shapes of the arrays given
    for the view parameters (a view extent that is a plain symbol binds it; every
    extent is then checked, so ``A: [M, K]`` and ``B: [K, N]`` must agree on K).
    Explicit bindings fill in the rest and must agree with the arrays.

Arrays
    One array per view parameter, with the view's rank and exactly the numpy dtype of
    its element type (``DType.numpy``).  **bf16 is widened to float32**: bf16 views take
    float32 arrays, bf16 tiles are float32 arrays, and nothing is rounded to bf16.
    Writable views are copied (the caller's arrays are never mutated); the result is
    the final contents of every writable view.

Regions
    ``region.parallel`` runs every index combination of its axes sequentially, in
    row-major order, with ``%axis`` bound per instance.  Temporal loops (serial,
    pipeline, reduce) run their iterations in program order (row-major over several
    axes): pipeline stages, windows and intervals are scheduling properties, not
    semantics.  Carried values are the body's block arguments, fed by ``inits`` and
    replaced by the terminating ``yield``; the loop's results are the carried values
    after the last iteration, or the inits when it runs zero times.  A parallel region
    may carry the MemoryStates of ancestor Memories its instances write windows of
    (S16): every instance starts from the memory's current state, and the region's
    result is the joined state, the memory with every instance's windows written (the
    verifier proved them disjoint, so running the instances in turn is their meaning).

Views
    ``tile.load`` reads the window ``[offsets, offsets + shape)``; elements outside the
    view read ``fill`` (edge tiles; offsets may be negative or past the extent).
    ``tile.store`` writes the window; elements outside the view are dropped.  A window
    with an empty domain evaluates no offsets.

Memory (S9–S14)
    Each execution of ``memory.alloc`` creates fresh storage of
    ``layout.storage_elements(env)`` elements filled with poison (NaN for floats,
    ``INT32_MIN`` for i32, ``True`` for i1, which has no spare value), so data read
    from padding or before a store is visible as poison rather than zero (there is
    no implicit zero fill).  ``memory.store`` scatters the tile through
    ``layout.offsets(env)`` (evaluated with the environment of the alloc); a windowed
    one (``offsets``/``shape``) scatters it into just that window, which must lie inside
    the memory (S16; an empty window writes nothing); ``memory.load``
    gathers a dense copy: a snapshot that later stores do not change.  The layout
    must map into the storage and be injective (S13).  A MemoryState value is a
    reference to its memory's storage plus the store count it was defined at; using
    the state of another memory, or an old state after a later store, is an error
    (S15; the verifier rejects such IR).  An empty logical domain (any extent 0) has
    no address events: no layout arithmetic is evaluated (S14).  ``memory.copy_async``
    copies its window (the fill outside the source view) when it is issued and defines
    the next state; ``memory.wait`` is semantically a no-op, but until it runs a read of
    that memory (or a copy from it) raises S9.async-read, a store or copy into it
    S9.async-overwrite; a second wait raises S9.async-wait and a copy never waited by the
    end of the kernel S9.async-unwaited, the verifier's rules checked dynamically.

Tile ops
    Elementwise ops compute in the operand dtype (``f16`` in float16, ``bf16`` in
    float32).  ``div`` on i32 truncates toward zero and rejects division by zero.
    ``rsqrt(x) = 1 / sqrt(x)``; IEEE results (inf, NaN) are kept.  ``tile.cast``
    follows C: float to int truncates toward zero (NaN/out of range unspecified),
    anything to i1 is ``!= 0``.  ``tile.full`` may hold an ``Expr`` value, evaluated
    in the environment and converted to the dtype.  ``tile.broadcast`` maps input
    dim i to output dim ``dims[i]`` (extents must be equal) and repeats the rest.
    ``tile.reduce``: ``sum`` accumulates floats in float64 and rounds to the dtype
    once; ``max`` over an empty axis gives ``-inf`` (the dtype's minimum for ints);
    NaN propagates.  ``tile.mma`` is ``acc + a @ b`` computed in float32 (int64 for
    integer accumulators), rounded to the accumulator's dtype.

Errors
    Bad inputs and execution errors (shape mismatches the verifier would have caught,
    unbound symbols, out-of-range layouts) raise :class:`PlannerError` naming the op
    and its source location.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from planner.errors import PlannerError, error
from planner.ir import core
from planner.ir.core import BinaryFn, Block, Kernel, LoopOp, Op, ReduceFn, UnaryFn, Value
from planner.ir.dtypes import DType
from planner.ir.expr import BINARY_FOLD, Apply, Const, Expr, ExprOp, Sym, product_value
from planner.ir.layout import Layout, division_by_zero_message
from planner.ir.types import ViewType

__all__ = [
    "Allocation",
    "Interpreter",
    "bind_symbols",
    "interpret",
    "poison_value",
    "random_inputs",
]

_INPUT = "invalid-input"
_IR = "invalid-ir"


# --------------------------------------------------------------------------- symbols


def _views(kernel: Kernel) -> list[tuple[str, Value, ViewType]]:
    out = []
    for p in kernel.params:
        assert isinstance(p.type, ViewType), p.type
        out.append((p.name_hint or f"param{len(out)}", p, p.type))
    return out


def _check_binding(name: str, value: object) -> int:
    if name.startswith("%"):
        raise error(f"binding {name!r} names a region index, not a kernel symbol",
                    kind=_INPUT)
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise error(f"binding {name} = {value!r} is not an integer", kind=_INPUT)
    return int(value)


def bind_symbols(kernel: Kernel, arrays: Mapping[str, np.ndarray],
                 bindings: Mapping[str, int] | None = None) -> dict[str, int]:
    """Symbol values implied by the view arrays' shapes and explicit ``bindings``.

    A view extent that is a plain symbol is bound by the array's extent; then every
    extent of every view is evaluated and compared with its array.  Explicit bindings
    provide symbols no view binds and must agree with the arrays.  Any disagreement
    raises :class:`PlannerError` naming the view, the dim and both numbers.
    """
    env: dict[str, int] = {}
    origin: dict[str, str] = {}
    for name, value in (bindings or {}).items():
        env[name] = _check_binding(name, value)
        origin[name] = "the explicit bindings"
    views = _views(kernel)
    known = {name for name, _, _ in views}
    unknown = sorted(set(arrays) - known)
    if unknown:
        raise error(f"kernel {kernel.name!r} has no view named {', '.join(unknown)} "
                    f"(views: {', '.join(sorted(known))})", kernel.loc, kind=_INPUT)
    shapes: dict[str, tuple[int, ...]] = {}
    for name, _, vt in views:
        if name not in arrays:
            raise error(f"no array given for view {name!r} of kernel {kernel.name!r}",
                        kernel.loc, kind=_INPUT)
        shp = tuple(int(n) for n in np.shape(arrays[name]))
        if len(shp) != vt.rank:
            raise error(f"view {name!r} has rank {vt.rank} ({vt}), but its array has rank "
                        f"{len(shp)} (shape {shp})", kernel.loc, kind=_INPUT)
        shapes[name] = shp
        for d, ext in enumerate(vt.shape):
            if not isinstance(ext, Sym):
                continue
            if ext.name in env:
                if env[ext.name] != shp[d]:
                    raise error(f"view {name!r} dim {d} ({ext.name}) has extent {shp[d]}, but "
                                f"{ext.name} = {env[ext.name]} from {origin[ext.name]}",
                                kernel.loc, kind=_INPUT)
            else:
                env[ext.name] = shp[d]
                origin[ext.name] = f"view {name!r} dim {d}"
    for name, _, vt in views:
        for d, ext in enumerate(vt.shape):
            try:
                value = ext.evaluate(env)
            except KeyError as e:
                raise error(f"view {name!r} dim {d} has extent {ext}: symbol {e.args[0]} is "
                            "not bound by any plain view extent; pass it in bindings",
                            kernel.loc, kind=_INPUT) from None
            if value != shapes[name][d]:
                raise error(f"view {name!r} dim {d} ({ext}) has extent {shapes[name][d]}, but "
                            f"{ext} = {value} from the bindings", kernel.loc, kind=_INPUT)
    return env


def _view_shape(name: str, vt: ViewType, bindings: Mapping[str, int]) -> tuple[int, ...]:
    try:
        shp = tuple(e.evaluate(bindings) for e in vt.shape)
    except KeyError as e:
        raise error(f"view {name!r} ({vt}) needs symbol {e.args[0]}, which is not bound",
                    kind=_INPUT) from None
    if any(n < 0 for n in shp):
        raise error(f"view {name!r} ({vt}) has a negative extent {shp}", kind=_INPUT)
    return shp


def random_inputs(kernel: Kernel, bindings: Mapping[str, int], seed: int = 0
                  ) -> dict[str, np.ndarray]:
    """Random arrays for the const views, zeros for the writable ones.

    Floats are standard normal, i32 uniform in [-8, 8], i1 fair coin flips; each
    array has the view's numpy dtype (``DType.numpy``).
    """
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, _, vt in _views(kernel):
        shp = _view_shape(name, vt, bindings)
        dt = vt.dtype.numpy
        if not vt.readonly:
            out[name] = np.zeros(shp, dt)
        elif vt.dtype.is_float:
            out[name] = rng.standard_normal(shp).astype(dt)
        elif vt.dtype is DType.BOOL:
            out[name] = rng.integers(0, 2, shp).astype(dt)
        else:
            out[name] = rng.integers(-8, 9, shp).astype(dt)
    return out


def poison_value(dtype: DType) -> float | int | bool:
    """What fresh Memory storage holds: NaN, ``INT32_MIN`` or ``True`` (i1)."""
    if dtype.is_float:
        return float("nan")
    if dtype is DType.BOOL:
        return True
    return int(np.iinfo(dtype.numpy).min)


# --------------------------------------------------------------------------- expressions

_Env = dict[str, int]
_Fn = Callable[[_Env], int]


def _compile(e: Expr) -> _Fn:
    """A closure evaluating ``e`` exactly like ``Expr.evaluate`` (zero factors first)."""
    if isinstance(e, Const):
        v = e.value
        return lambda env: v
    if isinstance(e, Sym):
        name = e.name
        return lambda env: env[name]
    assert isinstance(e, Apply)
    fns = [_compile(a) for a in e.args]
    if e.op is ExprOp.MUL:
        if any(isinstance(a, Const) and a.value == 0 for a in e.args):
            return lambda env: 0
        by_arg = dict(zip(map(id, e.args), fns, strict=True))

        def zero_first(env: _Env) -> int:
            # a zero factor wins even when another cannot be evaluated (S14)
            return product_value(e.args, lambda a: by_arg[id(a)](env))

        if any(isinstance(a, Apply) for a in e.args):
            return zero_first

        def mul(env: _Env) -> int:
            out = 1
            try:
                for f in fns:
                    v = f(env)
                    if v == 0:
                        return 0
                    out *= v
            except KeyError:  # an unbound symbol: still 0 if another factor is
                return zero_first(env)
            return out

        return mul
    if e.op is ExprOp.ADD:
        if len(fns) == 2:
            f0, f1 = fns
            return lambda env: f0(env) + f1(env)
        return lambda env: sum(f(env) for f in fns)
    fold = BINARY_FOLD[e.op]
    a, b = fns
    return lambda env: fold(a(env), b(env))


# --------------------------------------------------------------------------- memory


@dataclass(frozen=True, slots=True)
class _Mapping:
    """A layout evaluated in one environment: storage size and element offsets."""

    size: int
    shape: tuple[int, ...]
    offsets: np.ndarray | None  # None for an empty domain (never evaluated, S14)


class Allocation:
    """The storage of one execution of a ``memory.alloc`` (a Memory value)."""

    __slots__ = ("in_flight", "mapping", "op", "storage", "stores")

    def __init__(self, op: core.AllocOp, mapping: _Mapping) -> None:
        self.op = op
        self.mapping = mapping
        self.storage = np.full(mapping.size, poison_value(op.dtype), op.dtype.numpy)
        self.stores = 0  # the number of stores so far: the version of the current state
        self.in_flight: _Token | None = None  # the asynchronous copy not yet waited


class _Token:
    """The completion token of one executed ``memory.copy_async``."""

    __slots__ = ("alloc", "op", "waited")

    def __init__(self, alloc: Allocation, op: core.CopyAsyncOp) -> None:
        self.alloc = alloc
        self.op = op
        self.waited = False


class _State:
    """A MemoryState value: its memory's storage and the store count it was defined at."""

    __slots__ = ("alloc", "version")

    def __init__(self, alloc: Allocation, version: int) -> None:
        self.alloc = alloc
        self.version = version


# --------------------------------------------------------------------------- interpreter


class Interpreter:
    """Runs one kernel on numpy arrays; see the module docstring for the semantics.

    ``record_allocations`` keeps every executed ``memory.alloc``'s storage in
    :attr:`allocations` (to inspect padding and layouts in tests).
    """

    def __init__(self, kernel: Kernel, *, record_allocations: bool = False) -> None:
        self.kernel = kernel
        self.record_allocations = record_allocations
        self.allocations: list[Allocation] = []
        self._fns: dict[int, _Fn] = {}
        self._mappings: dict[tuple[int, tuple[int, ...]], _Mapping] = {}
        self._layout_syms: dict[int, tuple[str, ...]] = {}
        self.vals: dict[Value, object] = {}
        self.env: _Env = {}
        self.tokens: list[_Token] = []

    # ------------------------------------------------------------------ entry

    def run(self, arrays: Mapping[str, np.ndarray], bindings: Mapping[str, int] | None = None
            ) -> dict[str, np.ndarray]:
        """Executes the kernel; returns the final contents of the writable views."""
        env = bind_symbols(self.kernel, arrays, bindings)
        self.env = dict(env)
        self.vals = {}
        self.tokens = []
        outputs: dict[str, np.ndarray] = {}
        for name, p, vt in _views(self.kernel):
            arr = np.asarray(arrays[name])
            if arr.dtype != vt.dtype.numpy:
                note = " (bf16 is computed in float32)" if vt.dtype is DType.BF16 else ""
                raise error(f"view {name!r} ({vt}) needs a {vt.dtype.numpy} array{note}, "
                            f"got {arr.dtype}", self.kernel.loc, kind=_INPUT)
            if not vt.readonly:
                arr = np.array(arr, copy=True, order="C")
                outputs[name] = arr
            self.vals[p] = arr
        with np.errstate(all="ignore"):
            self._block(self.kernel.body)
        for tok in self.tokens:
            if not tok.waited:
                raise _fail(tok.op, f"the asynchronous copy into memory {_name(tok.alloc.op)} "
                                    "is never waited before the kernel ends",
                            "S9.async-unwaited")
        return outputs

    # ------------------------------------------------------------------ helpers

    def _eval(self, e: Expr) -> int:
        f = self._fns.get(id(e))
        if f is None:
            f = self._fns[id(e)] = _compile(e)
        return f(self.env)

    def _shape(self, exprs: tuple[Expr, ...], op: Op, what: str = "shape") -> tuple[int, ...]:
        out = tuple(self._eval(e) for e in exprs)
        if any(n < 0 for n in out):
            raise _fail(op, f"negative extent in {what} {list(out)}")
        return out

    def _block(self, block: Block) -> list[object] | None:
        """Runs ``block``; returns the values of its terminating yield, if any."""
        handlers = _HANDLERS
        for op in block.ops:
            if type(op) is core.YieldOp:
                return [self.vals[v] for v in op.values]
            try:
                handlers[type(op)](self, op)
            except PlannerError:
                raise
            except KeyError as e:
                raise _fail(op, _key_error(op, e)) from e
            except Exception as e:  # numpy and arithmetic errors, reported at the op
                raise _fail(op, f"{type(e).__name__}: {e}") from e
        return None

    def _tile(self, v: Value, op: Op) -> np.ndarray:
        x = self.vals.get(v)
        if not isinstance(x, np.ndarray):
            raise _fail(op, f"operand {v.name_hint or v._id} is not a tile value here "
                            f"(got {type(x).__name__})")
        return x

    # ------------------------------------------------------------------ views

    def _window(self, op: core.LoadOp | core.StoreOp, view: np.ndarray, shp: tuple[int, ...]
                ) -> tuple[tuple[slice, ...], tuple[slice, ...]] | None:
        """(view slices, tile slices) of the in-bounds part of a window, None if none."""
        if len(op.offsets) != view.ndim or len(shp) != view.ndim:
            raise _fail(op, f"window of rank {len(shp)} with {len(op.offsets)} offsets on a "
                            f"rank-{view.ndim} view")
        if 0 in shp:
            return None  # an empty domain: no offsets are evaluated (S14)
        vs, ts = [], []
        for off_e, n, ext in zip(op.offsets, shp, view.shape, strict=True):
            off = self._eval(off_e)
            lo, hi = max(off, 0), min(off + n, ext)
            if hi <= lo:
                return None
            vs.append(slice(lo, hi))
            ts.append(slice(lo - off, hi - off))
        return tuple(vs), tuple(ts)

    def _load(self, op: core.LoadOp) -> None:
        view = self.vals[op.view]
        assert isinstance(view, np.ndarray)
        shp = self._shape(op.shape, op)
        win = self._window(op, view, shp)
        if win is not None and all(s.stop - s.start == n for s, n in zip(win[1], shp,
                                                                            strict=True)):
            # Tiles are never mutated in place, so a window of a const view (never written)
            # can be shared; a writable view's window is copied before later stores.
            tile = view[win[0]]
            self.vals[op.result] = tile if op.view.type.readonly else tile.copy()
            return
        out = np.full(shp, _convert(op.fill, view.dtype, op, "fill"), view.dtype)
        if win is not None:
            out[win[1]] = view[win[0]]
        self.vals[op.result] = out

    def _store(self, op: core.StoreOp) -> None:
        view = self.vals[op.view]
        assert isinstance(view, np.ndarray)
        vt = op.view.type
        assert isinstance(vt, ViewType)
        if vt.readonly:
            raise _fail(op, f"store into const view {op.view.name_hint}", "S1")
        tile = self._tile(op.tile, op)
        if tile.dtype != view.dtype:
            raise _fail(op, f"storing a {tile.dtype} tile into a {view.dtype} view")
        win = self._window(op, view, tile.shape)
        if win is not None:
            view[win[0]] = tile[win[1]]

    # ------------------------------------------------------------------ tile ops

    def _full(self, op: core.FullOp) -> None:
        shp = self._shape(op.shape, op)
        value = self._eval(op.value) if isinstance(op.value, Expr) else op.value
        dt = op.dtype.numpy
        self.vals[op.result] = np.full(shp, _convert(value, dt, op, "value"), dt)

    def _iota(self, op: core.IotaOp) -> None:
        shp = self._shape(op.shape, op)
        if not 0 <= op.dim < len(shp):
            raise _fail(op, f"dim {op.dim} out of range for rank {len(shp)}")
        line = np.arange(shp[op.dim], dtype=np.int32)
        view = [1] * len(shp)
        view[op.dim] = shp[op.dim]
        self.vals[op.result] = np.broadcast_to(line.reshape(view), shp)

    def _unary(self, op: core.UnaryOp) -> None:
        x = self._tile(op.x, op)
        fn = op.fn
        if fn in (UnaryFn.NEG, UnaryFn.ABS):
            if x.dtype == np.bool_:
                raise _fail(op, f"{fn.value} of an i1 tile")
            out = np.negative(x) if fn is UnaryFn.NEG else np.abs(x)
        else:
            if x.dtype.kind != "f":
                raise _fail(op, f"{fn.value} needs a float tile, got {x.dtype}")
            out = _UNARY[fn](x)
        self.vals[op.result] = out.astype(x.dtype, copy=False)

    def _binary(self, op: core.BinaryOp) -> None:
        a, b = self._tile(op.lhs, op), self._tile(op.rhs, op)
        if a.shape != b.shape or a.dtype != b.dtype:
            raise _fail(op, f"{op.fn.value}: operands differ: {a.dtype}{list(a.shape)} vs "
                            f"{b.dtype}{list(b.shape)}")
        fn = op.fn
        if fn is BinaryFn.DIV and a.dtype.kind in "iu":
            out = _int_div(a, b)
        elif a.dtype == np.bool_ and fn in (BinaryFn.SUB, BinaryFn.DIV):
            raise _fail(op, f"{fn.value} of i1 tiles")
        else:
            out = _BINARY[fn](a, b)
        self.vals[op.result] = out if fn.is_compare else out.astype(a.dtype, copy=False)

    def _select(self, op: core.SelectOp) -> None:
        c, a, b = (self._tile(v, op) for v in (op.cond, op.a, op.b))
        if c.dtype != np.bool_ or not c.shape == a.shape == b.shape or a.dtype != b.dtype:
            raise _fail(op, f"needs a bool condition and equal tiles, got {c.dtype}"
                            f"{list(c.shape)}, {a.dtype}{list(a.shape)}, {b.dtype}"
                            f"{list(b.shape)}")
        self.vals[op.result] = np.where(c, a, b)

    def _cast(self, op: core.CastOp) -> None:
        x = self._tile(op.x, op)
        dt = op.dtype.numpy
        if dt == np.bool_:
            out = x != 0
        elif dt.kind in "iu" and x.dtype.kind == "f":
            out = np.trunc(x).astype(dt)
        else:
            out = x.astype(dt)
        self.vals[op.result] = out

    def _broadcast(self, op: core.BroadcastOp) -> None:
        x = self._tile(op.x, op)
        shp = self._shape(op.shape, op)
        dims = op.dims
        ok = (len(dims) == x.ndim and len(set(dims)) == len(dims)
              and all(0 <= d < len(shp) and shp[d] == x.shape[i] for i, d in enumerate(dims)))
        if not ok:
            raise _fail(op, f"cannot broadcast {list(x.shape)} to {list(shp)} with dims "
                            f"{list(dims)}")
        order = sorted(range(len(dims)), key=lambda i: dims[i])
        expanded = [1] * len(shp)
        for d, n in zip(dims, x.shape, strict=True):
            expanded[d] = n
        self.vals[op.result] = np.broadcast_to(np.transpose(x, order).reshape(expanded), shp)

    def _transpose(self, op: core.TransposeOp) -> None:
        x = self._tile(op.x, op)
        if sorted(op.perm) != list(range(x.ndim)):
            raise _fail(op, f"{list(op.perm)} is not a permutation of rank {x.ndim}")
        self.vals[op.result] = np.transpose(x, op.perm)

    def _slice(self, op: core.SliceOp) -> None:
        x = self._tile(op.x, op)
        lo = self._shape(op.offsets, op, "slice offsets")
        n = self._shape(op.shape, op, "slice extents")
        if len(lo) != x.ndim or any(a + b > e for a, b, e in zip(lo, n, x.shape, strict=True)):
            raise _fail(op, f"slice at {list(lo)} +: {list(n)} is outside the tile "
                            f"{list(x.shape)}", "S2")
        if any(n[d] != 1 for d in range(x.ndim) if d not in op.dims):
            raise _fail(op, f"dropped dims of the slice {list(n)} must have extent 1", "S2")
        window = x[tuple(slice(a, a + b) for a, b in zip(lo, n, strict=True))]
        self.vals[op.result] = window.reshape(tuple(n[d] for d in op.dims))

    def _reduce(self, op: core.ReduceOp) -> None:
        x = self._tile(op.x, op)
        if not 0 <= op.axis < x.ndim:
            raise _fail(op, f"axis {op.axis} out of range for rank {x.ndim}")
        if op.fn is ReduceFn.SUM:
            if x.dtype == np.bool_:
                out = np.any(x, axis=op.axis)
            else:
                acc = np.float64 if x.dtype.kind == "f" else np.int64
                out = np.sum(x, axis=op.axis, dtype=acc)
        else:
            out = np.max(x, axis=op.axis, initial=_lowest(x.dtype))
        self.vals[op.result] = np.asarray(out).astype(x.dtype, copy=False)

    def _mma(self, op: core.MmaOp) -> None:
        a, b, acc = (self._tile(v, op) for v in (op.a, op.b, op.acc))
        ok = (a.ndim == b.ndim == acc.ndim == 2 and a.shape[1] == b.shape[0]
              and acc.shape == (a.shape[0], b.shape[1]))
        if not ok:
            raise _fail(op, f"shapes {list(a.shape)} @ {list(b.shape)} + {list(acc.shape)} do "
                            "not form [m, k] @ [k, n] + [m, n]")
        ct = np.float32 if acc.dtype.kind == "f" else np.int64
        out = acc.astype(ct) + np.matmul(a.astype(ct, copy=False), b.astype(ct, copy=False))
        self.vals[op.result] = out.astype(acc.dtype, copy=False)

    # ------------------------------------------------------------------ memory

    def _mapping(self, layout: Layout, op: Op) -> _Mapping:
        syms = self._layout_syms.get(id(layout))
        if syms is None:
            names: set[str] = set()
            for e in (*layout.shape, *layout.strides):
                names |= e.symbols()
            syms = self._layout_syms[id(layout)] = tuple(sorted(names))
        key = (id(layout), tuple(self.env[s] for s in syms))
        m = self._mappings.get(key)
        if m is None:
            m = self._mappings[key] = _evaluate_layout(layout, self.env, op)
        return m

    def _alloc(self, op: core.AllocOp) -> None:
        alloc = Allocation(op, self._mapping(op.layout, op))
        if self.record_allocations:
            self.allocations.append(alloc)
        self.vals[op.memory] = alloc
        self.vals[op.initial_state] = _State(alloc, 0)

    def _state(self, op: core.MemStoreOp | core.MemLoadOp | core.CopyAsyncOp,
               memory: Value | None = None, state_value: Value | None = None) -> Allocation:
        alloc = self.vals.get(op.memory if memory is None else memory)
        state = self.vals.get(op.state if state_value is None else state_value)
        if not isinstance(alloc, Allocation) or not isinstance(state, _State):
            raise _fail(op, "operands are not a memory and a MemoryState")
        if state.alloc is not alloc:
            raise _fail(op, f"the state belongs to memory {_name(state.alloc.op)}, not "
                            f"{_name(alloc.op)}", "S15")
        if state.version != alloc.stores:
            raise _fail(op, f"stale state of memory {_name(alloc.op)}: it was defined by store "
                            f"#{state.version}, but {alloc.stores} stores have happened", "S15")
        return alloc

    def _mem_store(self, op: core.MemStoreOp) -> None:
        alloc = self._state(op)
        _check_not_in_flight(op, alloc)
        tile = self._tile(op.tile, op)
        m = alloc.mapping
        if op.windowed:
            self._store_window(op, alloc, tile)
        elif tile.shape != m.shape or tile.dtype != alloc.storage.dtype:
            raise _fail(op, f"storing a {tile.dtype}{list(tile.shape)} tile into memory "
                            f"{_name(alloc.op)} of {alloc.storage.dtype}{list(m.shape)}", "S10")
        elif m.offsets is not None:
            alloc.storage[m.offsets] = tile
        alloc.stores += 1
        self.vals[op.result] = _State(alloc, alloc.stores)

    def _store_window(self, op: core.MemStoreOp, alloc: Allocation, tile: np.ndarray) -> None:
        """Scatter ``tile`` into the window ``offsets`` +: ``shape`` only (S16)."""
        m = alloc.mapping
        shp = self._shape(op.shape, op, "window")
        if len(op.offsets) != len(m.shape) or len(shp) != len(m.shape):
            raise _fail(op, f"a window of rank {len(shp)} with {len(op.offsets)} offsets on "
                            f"memory {_name(alloc.op)} of rank {len(m.shape)}", "S16")
        if tile.shape != shp or tile.dtype != alloc.storage.dtype:
            raise _fail(op, f"storing a {tile.dtype}{list(tile.shape)} tile into a window "
                            f"{list(shp)} of memory {_name(alloc.op)} of "
                            f"{alloc.storage.dtype}", "S10")
        if 0 in shp or m.offsets is None:
            return  # an empty window writes nothing and evaluates no offsets (S14)
        lo = tuple(self._eval(o) for o in op.offsets)
        if any(a < 0 or a + n > ext for a, n, ext in zip(lo, shp, m.shape, strict=True)):
            span = " x ".join(f"[{a}, {a + n})" for a, n in zip(lo, shp, strict=True))
            raise _fail(op, f"the window {span} is outside memory {_name(alloc.op)} of shape "
                            f"{list(m.shape)}", "S16")
        window = tuple(slice(a, a + n) for a, n in zip(lo, shp, strict=True))
        alloc.storage[m.offsets[window]] = tile

    def _mem_load(self, op: core.MemLoadOp) -> None:
        alloc = self._state(op)
        self.vals[op.result] = _snapshot(op, alloc)

    def _copy_async(self, op: core.CopyAsyncOp) -> None:
        """Copies when issued (the wait is semantically a no-op), but tracks the token so
        a read, a write or a second wait out of order raises the verifier's rule."""
        alloc = self._state(op)
        _check_not_in_flight(op, alloc)
        if op.source_view is not None:
            src = self.vals[op.source_view]
            assert isinstance(src, np.ndarray)
        else:
            src_alloc = self._state(op, *op.source)
            src = _snapshot(op, src_alloc)
        shp = self._shape(op.shape, op)
        m = alloc.mapping
        if shp != m.shape:
            raise _fail(op, f"copying a window {list(shp)} into memory {_name(alloc.op)} of "
                            f"shape {list(m.shape)}", "S10")
        tile = np.full(shp, _convert(op.fill, src.dtype, op, "fill"), alloc.storage.dtype)
        win = self._window(op, src, shp)  # type: ignore[arg-type]
        if win is not None:
            tile[win[1]] = src[win[0]]
        if m.offsets is not None:
            alloc.storage[m.offsets] = tile
        alloc.stores += 1
        token = _Token(alloc, op)
        alloc.in_flight = token
        self.tokens.append(token)
        self.vals[op.new_state] = _State(alloc, alloc.stores)
        self.vals[op.token] = token

    def _wait(self, op: core.WaitOp) -> None:
        token = self.vals.get(op.token)
        if not isinstance(token, _Token):
            raise _fail(op, "the operand is not a copy token")
        if token.waited:
            raise _fail(op, f"the copy into memory {_name(token.alloc.op)} is waited twice",
                        "S9.async-wait")
        token.waited = True
        if token.alloc.in_flight is token:
            token.alloc.in_flight = None

    # ------------------------------------------------------------------ regions

    def _extents(self, op: core.ParallelOp | LoopOp) -> list[range]:
        return [range(n) for n in self._shape(tuple(a.extent for a in op.axes), op, "axes")]

    def _parallel(self, op: core.ParallelOp) -> None:
        """Runs the instances in turn.  A carried state (an ancestor Memory the instances
        write windows of, S16) is the memory's current state at the start of every
        instance, the instances' windows being disjoint; the result is the joined state,
        the memory with every instance's windows written."""
        names = [a.index.name for a in op.axes]
        env, vals = self.env, self.vals
        saved = {n: env[n] for n in names if n in env}
        body, args = op.body, op.body.args
        if len(args) != len(op.inits):
            raise _fail(op, f"{len(op.inits)} inits for {len(args)} carried block arguments")
        allocs = []
        for init in op.inits:
            state = vals.get(init)
            if not isinstance(state, _State):
                raise _fail(op, "a parallel region carries only MemoryStates", "S1")
            allocs.append(self._state(op, state.alloc.op.memory, init))
        for combo in itertools.product(*self._extents(op)):
            env.update(zip(names, combo, strict=True))
            vals.update((a, _State(alloc, alloc.stores))
                        for a, alloc in zip(args, allocs, strict=True))
            yielded = self._block(body)
            if len(yielded or ()) != len(args):
                raise _fail(op, f"the parallel body yields {len(yielded or ())} values for "
                                f"{len(args)} carried states")
        for n in names:
            env.pop(n, None)
        env.update(saved)
        for r, alloc in zip(op.results, allocs, strict=True):
            vals[r] = _State(alloc, alloc.stores)

    def _loop(self, op: LoopOp) -> None:
        names = [a.index.name for a in op.axes]
        env, vals = self.env, self.vals
        saved = {n: env[n] for n in names if n in env}
        carried = [vals[v] for v in op.inits]
        body, args = op.body, op.body.args
        if len(args) != len(carried):
            raise _fail(op, f"{len(op.inits)} inits for {len(args)} carried block arguments")
        for combo in itertools.product(*self._extents(op)):
            env.update(zip(names, combo, strict=True))
            vals.update(zip(args, carried, strict=True))
            yielded = self._block(body)
            if yielded is None:
                if args:
                    raise _fail(op, "the loop body ends without a yield of its carried values")
            elif len(yielded) != len(args):
                raise _fail(op, f"yield of {len(yielded)} values for {len(args)} carried")
            else:
                carried = yielded
        for n in names:
            env.pop(n, None)
        env.update(saved)
        for r, v in zip(op.results, carried, strict=True):
            vals[r] = v

    def _yield(self, op: core.YieldOp) -> None:
        raise _fail(op, "a yield outside the end of a loop body")


_HANDLERS: dict[type[Op], Callable[..., None]] = {
    core.LoadOp: Interpreter._load,
    core.StoreOp: Interpreter._store,
    core.FullOp: Interpreter._full,
    core.IotaOp: Interpreter._iota,
    core.UnaryOp: Interpreter._unary,
    core.BinaryOp: Interpreter._binary,
    core.SelectOp: Interpreter._select,
    core.CastOp: Interpreter._cast,
    core.BroadcastOp: Interpreter._broadcast,
    core.TransposeOp: Interpreter._transpose,
    core.SliceOp: Interpreter._slice,
    core.ReduceOp: Interpreter._reduce,
    core.MmaOp: Interpreter._mma,
    core.AllocOp: Interpreter._alloc,
    core.MemStoreOp: Interpreter._mem_store,
    core.MemLoadOp: Interpreter._mem_load,
    core.CopyAsyncOp: Interpreter._copy_async,
    core.WaitOp: Interpreter._wait,
    core.ParallelOp: Interpreter._parallel,
    core.LoopOp: Interpreter._loop,
    core.YieldOp: Interpreter._yield,
}


def interpret(kernel: Kernel, arrays: Mapping[str, np.ndarray],
              bindings: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """Runs ``kernel`` on ``arrays`` (one per view); returns the writable views' contents.

    Symbols are bound by :func:`bind_symbols`; the inputs are not mutated.
    """
    return Interpreter(kernel).run(arrays, bindings)


# --------------------------------------------------------------------------- op helpers


def _fail(op: Op, message: str, rule: str = "") -> PlannerError:
    return error(f"{op.SPEC.name}: {message}", op.loc, rule=rule, kind=_IR)


def _snapshot(op: Op, alloc: Allocation) -> np.ndarray:
    """A dense copy of ``alloc``'s current contents; a copy in flight cannot be read."""
    if alloc.in_flight is not None:
        raise _fail(op, f"reads memory {_name(alloc.op)} while an asynchronous copy into it "
                        "is in flight (before its wait)", "S9.async-read")
    m = alloc.mapping
    if m.offsets is None:
        return np.empty(m.shape, alloc.storage.dtype)
    return alloc.storage[m.offsets]  # a gathered copy: a snapshot


def _check_not_in_flight(op: Op, alloc: Allocation) -> None:
    if alloc.in_flight is not None:
        raise _fail(op, f"writes memory {_name(alloc.op)} while an asynchronous copy into it "
                        "is in flight (before its wait)", "S9.async-overwrite")


def _key_error(op: Op, e: KeyError) -> str:
    key = e.args[0] if e.args else None
    if isinstance(key, str):
        return f"unbound symbol {key}"
    if isinstance(key, Value):
        return f"operand {key.name_hint or key._id} is not defined before its use"
    if isinstance(key, type):
        return f"the interpreter has no semantics for {key.__name__}"
    return f"KeyError: {e}"


def _name(op: core.AllocOp) -> str:
    return op.memory.name_hint or f"%{op.memory._id}"


def _convert(value: float | int, dt: np.dtype, op: Op, what: str) -> float | int | bool:
    """``value`` as an element of ``dt``; integers need a finite integral value."""
    if dt.kind == "f":
        return float(value)
    if dt == np.bool_:
        return bool(value)
    f = float(value)
    if not np.isfinite(f) or f != int(f):
        raise _fail(op, f"{what} {value} is not representable in {dt}")
    info = np.iinfo(dt)
    if not info.min <= int(f) <= info.max:
        raise _fail(op, f"{what} {value} is out of range for {dt}")
    return int(f)


def _lowest(dt: np.dtype) -> float | int | bool:
    if dt.kind == "f":
        return -np.inf
    if dt == np.bool_:
        return False
    return int(np.iinfo(dt).min)


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C division: truncates toward zero; division by zero is an error."""
    if np.any(b == 0):
        raise ZeroDivisionError("integer division by zero")
    wide_a, wide_b = a.astype(np.int64), b.astype(np.int64)
    q = np.abs(wide_a) // np.abs(wide_b)
    return np.where((wide_a < 0) != (wide_b < 0), -q, q)


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return np.reciprocal(np.sqrt(x))


_UNARY: dict[UnaryFn, Callable[[np.ndarray], np.ndarray]] = {
    UnaryFn.EXP: np.exp,
    UnaryFn.LOG: np.log,
    UnaryFn.SQRT: np.sqrt,
    UnaryFn.RSQRT: _rsqrt,
    UnaryFn.TANH: np.tanh,
}

_BINARY: dict[BinaryFn, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    BinaryFn.ADD: np.add,
    BinaryFn.SUB: np.subtract,
    BinaryFn.MUL: np.multiply,
    BinaryFn.DIV: np.divide,
    BinaryFn.MAX: np.maximum,
    BinaryFn.MIN: np.minimum,
    BinaryFn.LT: np.less,
    BinaryFn.LE: np.less_equal,
    BinaryFn.GT: np.greater,
    BinaryFn.GE: np.greater_equal,
    BinaryFn.EQ: np.equal,
}


def _evaluate_layout(layout: Layout, env: Mapping[str, int], op: Op) -> _Mapping:
    """Storage size and offsets of ``layout``; checks bounds and injectivity (S13)."""
    bad = layout.undefined_terms(env)
    if bad:
        kind, _, e = bad[0]
        subject = (f"memory %{_name(op).lstrip('%')}" if isinstance(op, core.AllocOp)
                   else "the memory")
        raise _fail(op, division_by_zero_message(kind, e, subject, env), "S14")
    shp = tuple(e.evaluate(env) for e in layout.shape)
    if any(n < 0 for n in shp):
        raise _fail(op, f"negative extent in layout shape {list(shp)}")
    if 0 in shp:
        return _Mapping(0, shp, None)  # no address events: strides unevaluated (S14)
    size = layout.storage_elements(env)
    offsets = layout.offsets(env)
    lo, hi = int(offsets.min()), int(offsets.max())
    if lo < 0 or hi >= size:
        raise _fail(op, f"layout {layout} maps elements to offsets [{lo}, {hi}] outside its "
                        f"storage of {size} elements", "S11")
    counter = layout.injectivity_counterexample(env)
    if counter is not None:
        u, v, off = counter
        raise _fail(op, f"layout {layout} is not injective: elements {list(u)} and {list(v)} "
                        f"both map to offset {off}", "S13")
    return _Mapping(size, shp, offsets)
