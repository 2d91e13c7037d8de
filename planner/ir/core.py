"""The Tile IR data model: identity values, typed ops, blocks and the kernel.

Following xDSL/MLIR, ops and SSA values are identity objects (two ops are equal
only if they are the same op); types, layouts and expressions are frozen and
compared structurally.  Every op class declares its fields once in ``SPEC``
(operands, variadic operands, attributes, regions) so the printer, parser, JSON
form and verifier walk all ops generically, while each op still has typed fields.

Region ops bind loop indices as symbols (``%gm``) usable in offset expressions.
Loop-carried Tiles and MemoryStates are block arguments of the body, passed in
as ``inits`` and out through a terminating ``yield``; the region op's results are
the values after the last iteration (the inits when it runs zero times).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar

from planner.errors import UNKNOWN_LOC, SourceLoc
from planner.ir.dtypes import DType
from planner.ir.expr import Const, Expr, Sym
from planner.ir.layout import Layout
from planner.ir.types import IRType, MemoryType, StateType, TileType, TokenType, ViewType

_ids = itertools.count()


class Value:
    """An SSA value: an op result or a block argument.  Identity-compared."""

    __slots__ = ("_id", "name_hint", "owner", "type")

    def __init__(self, type: IRType, name_hint: str | None = None) -> None:
        self.type = type
        self.name_hint = name_hint
        self.owner: Op | Block | None = None
        self._id = next(_ids)

    def __repr__(self) -> str:
        return f"<Value {self.name_hint or self._id}: {self.type}>"


@dataclass(frozen=True, slots=True)
class Axis:
    """A named iteration axis with a symbolic extent (``axis("m", 64)``)."""

    name: str
    extent: Expr

    @property
    def index(self) -> Sym:
        """The symbol of this axis' index inside the region that iterates it."""
        return Sym(f"%{self.name}")

    def __str__(self) -> str:
        return f"{self.name} = {self.extent}"


class ResourceClass(Enum):
    """Resource-class constraints of ``memory(..., resource)`` (S5): not address spaces."""

    PRIVATE = "private"
    SHARED = "shared"
    CLUSTER = "cluster"
    GLOBAL = "global"
    TENSOR = "tensor"
    AUTO = "auto"


#: The spelling of a resource class a catalog defines (the catalog's ``name`` pattern).
CLASS_NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*"
_CLASS_NAME = re.compile(CLASS_NAME_PATTERN)
#: Built-in spellings, the seed's ``private_``/``global_``/``auto_`` included.
_BUILTIN_SPELLINGS: dict[str, ResourceClass] = {
    **{c.value: c for c in ResourceClass}, **{c.value + "_": c for c in ResourceClass}}


@dataclass(frozen=True, slots=True)
class ResourceConstraint:
    """The resource constraint of ``memory.alloc`` (S5, S6): a built-in class or a name.

    ``cls`` is a :class:`ResourceClass` member, or the name of a class that only a target
    catalog defines (``psum``); the IR never needs extending for one.  A string that
    spells a built-in class (``"shared"``, ``"private_"``, ``"auto"``) becomes that member,
    so equal constraints compare equal.  Whether a target defines a custom class is
    checked against its catalog by the proofs, not here.  ``value`` is the IR spelling.
    """

    cls: ResourceClass | str

    def __post_init__(self) -> None:
        cls = self.cls
        if isinstance(cls, ResourceClass):
            return
        if not isinstance(cls, str):
            raise TypeError(f"a resource class is a ResourceClass or a name, not {cls!r}")
        builtin = _BUILTIN_SPELLINGS.get(cls)
        if builtin is not None:
            object.__setattr__(self, "cls", builtin)
        elif _CLASS_NAME.fullmatch(cls) is None:
            raise ValueError(f"invalid resource class name {cls!r}: a class name is a letter "
                             "or '_' followed by letters, digits or '_'")

    @classmethod
    def of(cls, x: ResourceConstraint | ResourceClass | str) -> ResourceConstraint:
        """``x`` as a constraint (a constraint is returned as is)."""
        return x if isinstance(x, ResourceConstraint) else cls(x)

    @property
    def builtin(self) -> ResourceClass | None:
        """The built-in class, or None for a catalog-defined one."""
        return self.cls if isinstance(self.cls, ResourceClass) else None

    @property
    def is_custom(self) -> bool:
        """Whether this names a class only a catalog defines."""
        return not isinstance(self.cls, ResourceClass)

    @property
    def value(self) -> str:
        """The IR spelling: ``shared``, ``auto``, ``psum``."""
        return self.cls.value if isinstance(self.cls, ResourceClass) else self.cls

    def __str__(self) -> str:
        return self.value


class UnaryFn(Enum):
    NEG = "neg"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    TANH = "tanh"
    ABS = "abs"

    @property
    def expensive(self) -> bool:
        """Transcendentals S4's ``expensive-only`` policy always preserves."""
        return self in (UnaryFn.EXP, UnaryFn.LOG, UnaryFn.SQRT, UnaryFn.RSQRT, UnaryFn.TANH)


class BinaryFn(Enum):
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    MAX = "max"
    MIN = "min"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    EQ = "eq"

    @property
    def is_compare(self) -> bool:
        return self in (BinaryFn.LT, BinaryFn.LE, BinaryFn.GT, BinaryFn.GE, BinaryFn.EQ)


class ReduceFn(Enum):
    SUM = "sum"
    MAX = "max"


class LoopKind(Enum):
    """Temporal/algebraic regions: never memory levels (S7)."""

    SERIAL = "serial"
    PIPELINE = "pipeline"
    REDUCE = "reduce"


@dataclass(frozen=True, slots=True)
class OpSpec:
    """Declarative description of an op class: its name, summary and field roles."""

    name: str
    summary: str
    operands: tuple[str, ...] = ()
    variadic: str | None = None  # one field holding a tuple of operands
    attrs: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    pure: bool = True
    #: properties the text and JSON forms leave out while they hold their default (a
    #: whole-Memory ``memory.store`` has no window), so older IR reads and prints as before
    optional: tuple[str, ...] = ()


class Block:
    """A straight-line list of ops with block arguments (loop-carried values)."""

    __slots__ = ("args", "ops", "parent")

    def __init__(self, args: list[Value] | None = None) -> None:
        self.args: list[Value] = list(args or [])
        for a in self.args:
            a.owner = self
        self.ops: list[Op] = []
        self.parent: Op | None = None

    def append(self, op: Op) -> Op:
        self.ops.append(op)
        op.parent = self
        return op

    def walk(self) -> Iterator[Op]:
        """Every op in this block and nested blocks, pre-order."""
        for op in self.ops:
            yield op
            for region in op.region_blocks():
                yield from region.walk()


@dataclass(eq=False)
class Op:
    """Base of all ops; subclasses declare ``SPEC`` and typed fields."""

    SPEC: ClassVar[OpSpec]
    results: list[Value] = field(default_factory=list, kw_only=True)
    loc: SourceLoc = field(default=UNKNOWN_LOC, kw_only=True)
    stage: str | None = field(default=None, kw_only=True)
    parent: Block | None = field(default=None, kw_only=True, repr=False)

    def __post_init__(self) -> None:
        if not self.results:
            self.results = [Value(t) for t in self.result_types()]
        for r in self.results:
            r.owner = self
        for name in self.SPEC.regions:
            getattr(self, name).parent = self

    def result_types(self) -> list[IRType]:
        """Result types implied by operands and attributes."""
        return []

    def operands(self) -> list[Value]:
        out = [getattr(self, n) for n in self.SPEC.operands]
        if self.SPEC.variadic:
            out.extend(getattr(self, self.SPEC.variadic))
        return out

    def replace_operand(self, old: Value, new: Value) -> None:
        for n in self.SPEC.operands:
            if getattr(self, n) is old:
                setattr(self, n, new)
        if self.SPEC.variadic:
            vals = getattr(self, self.SPEC.variadic)
            setattr(self, self.SPEC.variadic, tuple(new if v is old else v for v in vals))

    def region_blocks(self) -> list[Block]:
        return [getattr(self, n) for n in self.SPEC.regions]

    @property
    def result(self) -> Value:
        return self.results[0]

    def __hash__(self) -> int:
        return id(self)


def _tile(v: Value) -> TileType:
    if not isinstance(v.type, TileType):
        raise TypeError(f"expected a tile operand, got {v.type}")
    return v.type


def _view(v: Value) -> ViewType:
    if not isinstance(v.type, ViewType):
        raise TypeError(f"expected a view operand, got {v.type}")
    return v.type


def _memory(v: Value) -> MemoryType:
    if not isinstance(v.type, MemoryType):
        raise TypeError(f"expected a memory operand, got {v.type}")
    return v.type


# --------------------------------------------------------------------------- tile ops


@dataclass(eq=False)
class LoadOp(Op):
    SPEC = OpSpec("tile.load", "load a window of a view; elements outside the view read `fill`",
                  operands=("view",), attrs=("offsets", "shape", "fill"))
    view: Value
    offsets: tuple[Expr, ...]
    shape: tuple[Expr, ...]
    fill: float = 0.0

    def result_types(self) -> list[IRType]:
        return [TileType(_view(self.view).dtype, self.shape)]


@dataclass(eq=False)
class StoreOp(Op):
    SPEC = OpSpec("tile.store", "store a tile into a window of a view; outside parts are dropped",
                  operands=("view", "tile"), attrs=("offsets",), pure=False)
    view: Value
    tile: Value
    offsets: tuple[Expr, ...]


@dataclass(eq=False)
class FullOp(Op):
    SPEC = OpSpec("tile.full", "a tile with every element equal to `value`",
                  attrs=("shape", "dtype", "value"))
    shape: tuple[Expr, ...]
    dtype: DType
    value: float | Expr

    def result_types(self) -> list[IRType]:
        return [TileType(self.dtype, self.shape)]


@dataclass(eq=False)
class IotaOp(Op):
    SPEC = OpSpec("tile.iota", "the index along `dim` of each element", attrs=("shape", "dim"))
    shape: tuple[Expr, ...]
    dim: int

    def result_types(self) -> list[IRType]:
        return [TileType(DType.I32, self.shape)]


@dataclass(eq=False)
class UnaryOp(Op):
    SPEC = OpSpec("tile.unary", "elementwise unary function", operands=("x",), attrs=("fn",))
    fn: UnaryFn
    x: Value

    def result_types(self) -> list[IRType]:
        return [_tile(self.x)]


@dataclass(eq=False)
class BinaryOp(Op):
    SPEC = OpSpec("tile.binary", "elementwise binary function of two same-shaped tiles",
                  operands=("lhs", "rhs"), attrs=("fn",))
    fn: BinaryFn
    lhs: Value
    rhs: Value

    def result_types(self) -> list[IRType]:
        t = _tile(self.lhs)
        return [TileType(DType.BOOL, t.shape) if self.fn.is_compare else t]


@dataclass(eq=False)
class SelectOp(Op):
    SPEC = OpSpec("tile.select", "elementwise `cond ? a : b`", operands=("cond", "a", "b"))
    cond: Value
    a: Value
    b: Value

    def result_types(self) -> list[IRType]:
        return [_tile(self.a)]


@dataclass(eq=False)
class CastOp(Op):
    SPEC = OpSpec("tile.cast", "elementwise conversion to `dtype`", operands=("x",),
                  attrs=("dtype",))
    x: Value
    dtype: DType

    def result_types(self) -> list[IRType]:
        return [TileType(self.dtype, _tile(self.x).shape)]


@dataclass(eq=False)
class BroadcastOp(Op):
    SPEC = OpSpec("tile.broadcast", "input dim i becomes output dim dims[i]; others repeat",
                  operands=("x",), attrs=("shape", "dims"))
    x: Value
    shape: tuple[Expr, ...]
    dims: tuple[int, ...]

    def result_types(self) -> list[IRType]:
        return [TileType(_tile(self.x).dtype, self.shape)]


@dataclass(eq=False)
class TransposeOp(Op):
    SPEC = OpSpec("tile.transpose", "output dim i is input dim perm[i]", operands=("x",),
                  attrs=("perm",))
    x: Value
    perm: tuple[int, ...]

    def result_types(self) -> list[IRType]:
        t = _tile(self.x)
        if sorted(self.perm) != list(range(t.rank)):
            raise TypeError(f"{list(self.perm)} is not a permutation of rank {t.rank}")
        return [TileType(t.dtype, tuple(t.shape[p] for p in self.perm))]


@dataclass(eq=False)
class SliceOp(Op):
    SPEC = OpSpec("tile.slice", "the window `offsets` +: `shape` of x; input dims not in "
                  "`dims` have extent 1 and are dropped", operands=("x",),
                  attrs=("offsets", "shape", "dims"))
    x: Value
    offsets: tuple[Expr, ...]
    shape: tuple[Expr, ...]  # the window's extent in every input dim
    dims: tuple[int, ...]  # the input dims the result keeps, in order

    def result_types(self) -> list[IRType]:
        t = _tile(self.x)
        if len(self.offsets) != t.rank or len(self.shape) != t.rank:
            raise TypeError(f"a slice of a rank-{t.rank} tile needs {t.rank} offsets and "
                            f"extents, got {len(self.offsets)} and {len(self.shape)}")
        if list(self.dims) != sorted(set(self.dims)) or not all(0 <= d < t.rank
                                                                for d in self.dims):
            raise TypeError(f"kept dims {list(self.dims)} are not increasing input dims "
                            f"of a rank-{t.rank} tile")
        return [TileType(t.dtype, tuple(self.shape[d] for d in self.dims))]

    def source_index(self, idx: tuple[Expr, ...]) -> tuple[Expr, ...]:
        """The input element that result element ``idx`` reads."""
        at = dict(zip(self.dims, idx, strict=True))
        return tuple(o + at[d] if d in at else o for d, o in enumerate(self.offsets))


@dataclass(eq=False)
class ReduceOp(Op):
    SPEC = OpSpec("tile.reduce", "reduce over `axis`, removing it", operands=("x",),
                  attrs=("fn", "axis"))
    fn: ReduceFn
    x: Value
    axis: int

    def result_types(self) -> list[IRType]:
        t = _tile(self.x)
        return [TileType(t.dtype, t.shape[: self.axis] + t.shape[self.axis + 1:])]


@dataclass(eq=False)
class MmaOp(Op):
    SPEC = OpSpec("tile.mma", "acc + a @ b for a: [m, k], b: [k, n], acc: [m, n]",
                  operands=("a", "b", "acc"))
    a: Value
    b: Value
    acc: Value

    def result_types(self) -> list[IRType]:
        _tile(self.a), _tile(self.b)
        return [_tile(self.acc)]


# --------------------------------------------------------------------------- memory ops


@dataclass(eq=False)
class AllocOp(Op):
    SPEC = OpSpec("memory.alloc",
                  "an explicit Memory per instance of `owner`; results: memory, initial state",
                  attrs=("dtype", "layout", "resource", "owner"), pure=False)
    dtype: DType
    layout: Layout  # typed and replaceable (S12)
    resource: ResourceConstraint  # a ResourceClass or a class name is accepted and wrapped
    owner: str  # label of the nearest spatial parallel, or "kernel" (S5, S7)

    def __post_init__(self) -> None:
        self.resource = ResourceConstraint.of(self.resource)
        super().__post_init__()

    def result_types(self) -> list[IRType]:
        return [MemoryType(self.dtype, self.layout.shape),
                StateType(self.dtype, self.layout.shape)]

    @property
    def memory(self) -> Value:
        return self.results[0]

    @property
    def initial_state(self) -> Value:
        return self.results[1]


@dataclass(eq=False)
class MemStoreOp(Op):
    """Write a tile into a Memory; defines its next MemoryState (S9).

    Without ``offsets``/``shape`` the tile is the whole Memory.  With them it is the
    window ``offsets`` +: ``shape`` (the tile's shape), which must lie inside the Memory;
    the elements outside the window keep the reaching state's values.  A windowed store
    is what lets the instances of a child ``parallel`` write an ancestor's Memory: each
    instance writes its own window, proved disjoint from every other instance's, and
    the parallel joins their states into one (S16, range-aware MemorySSA; see
    :class:`ParallelOp`).
    """

    SPEC = OpSpec("memory.store", "write a tile into the whole memory, or into the window "
                  "`offsets` +: `shape`; defines the next MemoryState (S9, S16)",
                  operands=("memory", "state", "tile"), attrs=("offsets", "shape"),
                  pure=False, optional=("offsets", "shape"))
    memory: Value
    state: Value
    tile: Value
    offsets: tuple[Expr, ...] = ()
    shape: tuple[Expr, ...] = ()

    def result_types(self) -> list[IRType]:
        mt = _memory(self.memory)
        return [StateType(mt.dtype, mt.shape)]

    @property
    def windowed(self) -> bool:
        """Whether this store writes a window rather than the whole Memory."""
        return bool(self.offsets or self.shape)

    def window(self) -> tuple[tuple[Expr, ...], tuple[Expr, ...]]:
        """The written window as (offsets, shape); the whole Memory when not windowed."""
        if self.windowed:
            return self.offsets, self.shape
        shape = _memory(self.memory).shape
        return tuple(Const(0) for _ in shape), shape


@dataclass(eq=False)
class MemLoadOp(Op):
    SPEC = OpSpec("memory.load", "an immutable dense snapshot of the reaching state",
                  operands=("memory", "state"))
    memory: Value
    state: Value

    def result_types(self) -> list[IRType]:
        mt = _memory(self.memory)
        return [TileType(mt.dtype, mt.shape)]


@dataclass(eq=False)
class CopyAsyncOp(Op):
    """Start copying a window into the whole of ``memory`` (S9, asynchronous copies).

    ``source`` is ``(view,)`` — the window ``offsets`` +: ``shape`` of a view, elements
    outside it read ``fill`` as ``tile.load`` does — or ``(memory, state)``: the window of
    another Memory's reaching state.  The window's shape is the destination's.  Results:
    the destination's next MemoryState, readable only after ``memory.wait`` on the token.
    """

    SPEC = OpSpec("memory.copy_async",
                  "start copying the window `offsets` +: `shape` of a view or a Memory state "
                  "into the memory; results: its next state (readable only after "
                  "memory.wait), the completion token",
                  operands=("memory", "state"), variadic="source",
                  attrs=("offsets", "shape", "fill"), pure=False)
    memory: Value
    state: Value
    source: tuple[Value, ...]
    offsets: tuple[Expr, ...]
    shape: tuple[Expr, ...]
    fill: float = 0.0

    def result_types(self) -> list[IRType]:
        mt = _memory(self.memory)
        src = self.source[0].type if self.source else None
        if isinstance(src, MemoryType):
            if len(self.source) != 2 or not isinstance(self.source[1].type, StateType):
                raise TypeError("a Memory source is a memory and one of its states")
        elif not isinstance(src, ViewType) or len(self.source) != 1:
            raise TypeError("the source must be a view, or a memory and one of its states")
        return [StateType(mt.dtype, mt.shape), TokenType(mt.dtype, mt.shape)]

    @property
    def source_view(self) -> Value | None:
        """The source view, or None for a Memory source."""
        return self.source[0] if isinstance(self.source[0].type, ViewType) else None

    @property
    def new_state(self) -> Value:
        return self.results[0]

    @property
    def token(self) -> Value:
        return self.results[1]


@dataclass(eq=False)
class WaitOp(Op):
    SPEC = OpSpec("memory.wait", "wait for an asynchronous copy; its state becomes readable",
                  operands=("token",), pure=False)
    token: Value


#: The async-copy ops, which planning and lowering do not know yet (see planner.ir.graph).
ASYNC_COPY_OPS: tuple[type[Op], ...] = (CopyAsyncOp, WaitOp)

#: The ops that define a Memory's next state by writing it (a store, a copy into it).
MEMORY_WRITE_OPS: tuple[type[Op], ...] = (MemStoreOp, CopyAsyncOp)


# --------------------------------------------------------------------------- regions


@dataclass(eq=False)
class ParallelOp(Op):
    """Spatial instances over ``axes``, bound to ``scope`` (an owner, S5).

    ``inits`` are the reaching MemoryStates of ancestor Memories that the instances
    write windows of (S16, range-aware MemorySSA).  Every instance starts from the
    same state (its block argument) and ends with a ``region.yield`` of its last state;
    the instances write disjoint windows, so the region's result is one joined state:
    the init with every instance's windows written.  A parallel that writes no
    ancestor Memory has no inits, block arguments, yield or results.
    """

    SPEC = OpSpec("region.parallel", "spatial instances over `axes`, bound to `scope`; "
                  "carried ancestor MemoryStates are joined into the results (S16)",
                  variadic="inits", attrs=("label", "axes", "scope"), regions=("body",),
                  pure=False)
    label: str
    axes: tuple[Axis, ...]
    scope: str  # "AUTOMATIC" or a target scope name
    inits: tuple[Value, ...] = ()
    body: Block = field(default_factory=Block)

    def result_types(self) -> list[IRType]:
        return [v.type for v in self.inits]


@dataclass(eq=False)
class LoopOp(Op):
    SPEC = OpSpec("region.loop", "a temporal region (serial, pipeline, reduce) with carries",
                  variadic="inits",
                  attrs=("kind", "label", "axes", "window", "interval", "stages"),
                  regions=("body",), pure=False)
    kind: LoopKind
    label: str
    axes: tuple[Axis, ...]
    inits: tuple[Value, ...] = ()
    window: int = 1
    interval: int = 1
    stages: tuple[str, ...] = ()
    body: Block = field(default_factory=Block)

    def result_types(self) -> list[IRType]:
        return [v.type for v in self.inits]


@dataclass(eq=False)
class YieldOp(Op):
    SPEC = OpSpec("region.yield", "the carried values for the next iteration",
                  variadic="values", pure=False)
    values: tuple[Value, ...] = ()


OP_CLASSES: tuple[type[Op], ...] = (
    LoadOp, StoreOp, FullOp, IotaOp, UnaryOp, BinaryOp, SelectOp, CastOp, BroadcastOp,
    TransposeOp, SliceOp, ReduceOp, MmaOp, AllocOp, MemStoreOp, MemLoadOp, CopyAsyncOp, WaitOp,
    ParallelOp, LoopOp, YieldOp,
)
OPS_BY_NAME: dict[str, type[Op]] = {c.SPEC.name: c for c in OP_CLASSES}


@dataclass(eq=False)
class Kernel:
    """A tile kernel: named view parameters and a body block."""

    name: str
    params: list[Value]
    body: Block
    loc: SourceLoc = UNKNOWN_LOC
    #: the configuration the instance was made with (a sweep point: ``{"block_m": 64,
    #: "resource": "shared"}``); printed in the kernel header, kept by both IR forms
    config: dict[str, int | str] = field(default_factory=dict)

    def walk(self) -> Iterator[Op]:
        return self.body.walk()

    def symbols(self) -> list[str]:
        """Extent symbols of the parameters, in first-use order."""
        seen: dict[str, None] = {}
        for p in self.params:
            assert isinstance(p.type, ViewType)
            for e in p.type.shape:
                for s in sorted(e.symbols()):
                    seen.setdefault(s, None)
        return list(seen)

    def param(self, name: str) -> Value:
        for p in self.params:
            if p.name_hint == name:
                return p
        raise KeyError(name)
