"""Metal Shading Language from the loop program: the Metal backend's emitter.

The emitter prints one ``kernel void`` per planned kernel from the same target-neutral
:class:`~planner.lower.loops.program.LoopProgram` the CPU backend consumes.  Spellings
come from :mod:`planner.lower.metal.tables`; this module decides where every buffer
lives, which thread computes which element, and where the threads must meet.

Execution mapping
-----------------
* **Instances -> threadgroups.**  The kernel's parallel segment (a ``region.parallel``
  bound to ``AUTOMATIC``, which apple-m2 resolves to ``threadgroup``, or bound to
  ``threadgroup`` itself) becomes a 1-D grid with one threadgroup per instance; the
  group id is split row-major into the instance indices.  A kernel with no parallel
  runs as a grid of one group.  Nested parallels run their instances one after
  another inside the group (each instance spread over all threads, like the rest).
* **Elements -> threads.**  Every statement is spread over the ``threads_per_group``
  threads (default 64, two simdgroups) by *owner computes*: element ``l`` of the
  statement's destination (row-major linear index) is computed by thread
  ``l mod threads``, which loops ``l = tid, tid + threads, ...``.  A reduction gives
  each destination element to one thread, which folds the reduced axis in order; an
  ``mma`` is the same threadgroup-cooperative loop with ``k`` as the folded axis
  (each thread computes some output elements over ``k``).
* **Buffers (S17).**  Threadgroup memory is **one byte arena** per kernel, laid out
  as the plan accounts it: explicit Memory the plan puts in a shared-class resource
  (live for the whole instance), the plan's other threadgroup buffers (materialized
  edges, staging), the exchange areas and hoisted values below, whatever their element
  type, each at a byte offset aligned to the resource's alignment and each read through
  a typed ``threadgroup T*`` view.  When the buffers side by side fit the plan's peak
  for the resource (``plan.peaks``) each gets its own bytes (reuse would cost
  write-after-read barriers); otherwise buffers whose lifetimes do not overlap share
  bytes, packed so that the arena is at most that peak (the largest sum of bytes live
  at one statement is the bound every packing needs; first fit in several orders, then
  a bounded search).  Without a plan the bound is the resource's capacity.  A buffer
  is addressed through its layout: padding, strides and XOR swizzles in the index
  arithmetic, versions ``version_stride`` apart.
  A buffer in a private-class resource (virtual tiles, registers, and explicit Memory
  of a *descendant worker*: owned by a nested parallel that the execution binding puts
  below the threadgroup) is a set of
  **per-thread slices**: thread ``t`` holds exactly the elements it computes (element
  ``l`` at slot ``l / threads``), in a ``thread`` array of ``ceil(elements / threads)``
  slots per version.  (The group runs a nested parallel's instances one after another,
  so one set of slices holds the Memory of the instance that runs.)  Explicit Memory
  in private storage owned by the threadgroup-level parallel (or the kernel) is
  group-owned private and refused.  A per-thread slice never moves to threadgroup
  memory on its own:
  when a statement needs elements other threads hold (a reduction along a row, a
  broadcast, a transpose, an mma operand), the threads first *exchange* them: each
  publishes its slice into a threadgroup exchange area, a barrier follows, and the
  statement reads the exchange area.  This is the layout conversion GPU compilers do
  through shared memory; exchange areas live only around the statement and count
  against threadgroup capacity with everything else.  A buffer in a global-class
  resource (device memory) lives in this group's region of a device scratch buffer per
  element type, which the host allocates (``MslParam.role == "scratch"``).
* **Hoisting through broadcasts.**  A fused subexpression of a statement that does not
  depend on one of the statement's distributed variables (a producer fused into a
  broadcast: ``rsqrt(var[i] + eps)`` in ``y[i, j] = xc[i, j] * rsqrt(var[i] + eps)``)
  is computed once per element of its own index space, as the cost model prices it
  and as the CPU backend hoists it: a statement spread over the variables it depends
  on writes it into a threadgroup area, a barrier follows, and the statement reads
  the area.  Per-thread slices the subexpression reads along those variables are read
  by their owners there, so their exchange areas disappear.  If the hoisted areas
  would take the arena above the plan's peak (a plan with no threadgroup bytes to
  spare), each thread keeps the value instead while the variables it depends on stay
  the same: once per thread and source element rather than once per element (a note
  says so).
* **View windows** are read through masks (``ulong(index) < ulong(extent)``, the
  load's fill outside) and written under the same masks; a dimension whose window is
  the whole view is not masked.  An ``mma`` operand read from a view window is copied
  cooperatively into its staging buffer when the plan put the staging in threadgroup
  memory, else read in place under the mask.
* **Barriers.**  Every synchronization point of the plan becomes a uniform
  ``threadgroup_barrier``.  Beyond those, a barrier is placed before the first access
  that conflicts with an access since the last barrier: a read or write of a
  threadgroup (or written device) buffer that another thread may have written, or a
  write over what another thread may still read.  Accesses by the element's owner
  (same buffer shape, identity index) never conflict.  Loops are analysed to a fixed
  point, so the conflicts between one iteration's end and the next iteration's start
  (write-after-read on a reused buffer) get their barrier too.  Barriers are only
  placed between statements, so they are uniform: every thread reaches every barrier.
* **Pipelines (S18).**  A software-pipelined loop runs ``iterations + max lag`` time
  steps; stage ``s`` runs iteration ``t - lag(s)`` when it exists (the condition is
  uniform).  A buffer version is ``iteration mod versions``; two accesses in one time
  step whose versions differ provably (same ``mod`` expression, lags not congruent)
  do not conflict, which is what lets the load of iteration ``t`` overlap the
  compute of ``t - 1`` with one barrier per step.

Static sizes
------------
Metal threadgroup and thread arrays have static sizes, while extents stay symbolic in
the kernel (symbols are ``constant long&`` parameters).  A buffer whose size depends
on a symbol is sized for the plan's bindings (the bindings its capacity was planned
for); :meth:`MslKernel.check_bindings` refuses a run whose bindings need more, naming
the array and the bytes.

Refusals (never a silent change of owner or resource, S17): a target whose backend is
not Metal, a top-level parallel bound to another scope, explicit Memory with no home
(group-owned private), a resource class with no Metal placement, a threadgroup arena
(manual Memory, the plan's temporaries, exchange areas and hoisted values) larger than
the target's threadgroup memory, element types outside the subset (``f16``/``bf16``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from planner.catalog import Resource, Target
from planner.errors import PlannerError, error
from planner.ir import core
from planner.ir.core import Kernel, ReduceFn
from planner.ir.dtypes import DType
from planner.ir.expr import Apply, Const, Expr, ExprOp, Sym, add, ceil_div, mul, product
from planner.ir.layout import dense
from planner.ir.printer import Printer, PrintOptions, ValueNamer
from planner.ir.types import ViewType
from planner.lower.loops import program as lp
from planner.lower.metal import tables as tb
from planner.lower.metal.tables import Space
from planner.plan.decisions import MaterializationPlan, Status
from planner.realize.binding import ExecutionBinding, MemoryBinding, bind_execution
from planner.realize.temporaries import exchange_home

__all__ = ["DEFAULT_THREADS", "MslKernel", "MslParam", "SizeLimit", "emit_msl"]

_KIND = "lowering"
DEFAULT_THREADS = 64
_RULE = "S17"
_ZERO = Const(0)


# =========================================================================== results


@dataclass(frozen=True, slots=True)
class MslParam:
    """A ``[[buffer(n)]]`` parameter: a view (device pointer) or a symbol (``constant long&``)."""

    name: str  # the MSL identifier
    index: int  # its buffer slot; EmulatedKernel.run binds arguments in this order
    role: str  # "view" | "symbol" | "scratch"
    source: str  # the kernel's view or symbol name
    dtype: DType | None  # element type of a view or scratch buffer
    readonly: bool
    per_group: Expr | None = None  # scratch: elements per threadgroup


@dataclass(frozen=True, slots=True)
class SizeLimit:
    """A static array whose size was computed from the plan's bindings."""

    array: str  # the MSL array
    holds: str  # what it holds, for messages
    elements: Expr  # elements needed, over the kernel's symbols
    capacity: int  # elements it has
    itemsize: int


@dataclass(frozen=True, slots=True)
class MslKernel:
    """An emitted Metal kernel and what it takes to dispatch it."""

    source: str
    kernel_name: str
    params: tuple[MslParam, ...]
    threads_per_group: int
    instances: tuple[Expr, ...]  # the parallel segment's extents (one group per instance)
    sized_for: tuple[tuple[str, int], ...]  # the bindings static sizes were computed for
    limits: tuple[SizeLimit, ...]
    threadgroup_bytes: int  # threadgroup memory per group: the arena (at most the plan's peak)
    thread_bytes: int  # per-thread slices per thread
    notes: tuple[str, ...] = ()

    def check_bindings(self, bindings: Mapping[str, int]) -> None:
        """Refuse bindings that need more than an array was sized for (S17)."""
        over = []
        for lim in self.limits:
            need = lim.elements.evaluate(bindings)
            if need > lim.capacity:
                over.append(f"{lim.array} ({lim.holds}) needs {need * lim.itemsize:,} B, "
                            f"sized {lim.capacity * lim.itemsize:,} B")
        if over:
            planned = ", ".join(f"{k}={v}" for k, v in self.sized_for) or "none"
            raise error(f"{self.kernel_name}: static Metal arrays were sized for the plan's "
                        f"bindings ({planned}); these bindings need more: "
                        f"{'; '.join(over)} (plan the kernel for these bindings)",
                        rule=_RULE, kind=_KIND)

    def scratch_elements(self, param: MslParam, bindings: Mapping[str, int]) -> int:
        """Elements of a device scratch buffer for ``bindings`` (all groups' regions)."""
        assert param.per_group is not None
        groups = int(product(self.instances).evaluate(bindings))
        return groups * int(param.per_group.evaluate(bindings))

    def grid(self, bindings: Mapping[str, int]) -> tuple[int, int, int]:
        """Threadgroups to dispatch for ``bindings`` (one per parallel instance)."""
        self.check_bindings(bindings)
        return int(product(self.instances).evaluate(bindings)), 1, 1


# =========================================================================== internal


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
    hoisted: bool = False  # a subexpression computed once per element of its own space

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


@dataclass(frozen=True, slots=True)
class _Access:
    """One buffer access of a statement, for barrier placement."""

    key: str  # array or view
    buffer: str  # the buffer (or view) it belongs to
    lo: int
    hi: int
    cls: str  # resource class whose memory flag orders it
    write: bool
    aligned: bool  # by the element's owner thread
    version: Expr
    loop: str | None  # the loop whose iteration the version counts
    shift: int  # iterations (time steps) before the current one


@dataclass(frozen=True, slots=True)
class _LoopCtx:
    label: str
    vars: frozenset[str]
    lag: int


_WHOLE = 1 << 62
_ARENA_BYTES = "tg_bytes_"  # the arena's bytes (emitter locals end with "_")


# =========================================================================== helpers


def _modulus(v: Expr) -> int | None:
    if isinstance(v, Apply) and v.op is ExprOp.MOD and isinstance(v.args[1], Const):
        return v.args[1].value
    return None


def _may_alias(p: _Access, a: _Access) -> bool:
    """Whether two accesses may touch the same version of their buffer."""
    if p.buffer != a.buffer:
        return True  # two buffers sharing arena bytes
    if isinstance(p.version, Const) and isinstance(a.version, Const):
        return p.version == a.version
    if p.version == a.version and p.loop is not None and p.loop == a.loop:
        m = _modulus(p.version)
        if m:
            return (p.shift - a.shift) % m == 0
    return True


def _conflict(p: _Access, a: _Access) -> bool:
    owner = p.aligned and a.aligned and p.buffer == a.buffer  # both by the element's owner
    return (p.key == a.key and p.lo < a.hi and a.lo < p.hi and (p.write or a.write)
            and not owner and _may_alias(p, a))


def _normalize(a: _Access) -> _Access:
    m = _modulus(a.version)
    return dataclasses.replace(a, shift=a.shift % m if m else 0)


def _dedupe(accs: Iterable[_Access]) -> list[_Access]:
    return list(dict.fromkeys(accs))


_REBUILD: dict[type, Callable[[lp.Elem, list[lp.Elem]], lp.Elem]] = {
    lp.Unary: lambda e, k: dataclasses.replace(e, x=k[0]),
    lp.Cast: lambda e, k: dataclasses.replace(e, x=k[0]),
    lp.Binary: lambda e, k: dataclasses.replace(e, a=k[0], b=k[1]),
    lp.Select: lambda e, k: dataclasses.replace(e, cond=k[0], a=k[1], b=k[2]),
}


def _map_reads(e: lp.Elem, f: Callable[[lp.BufRead], lp.Elem]) -> lp.Elem:
    """``e`` with every buffer read replaced by ``f(read)``."""
    if isinstance(e, lp.BufRead):
        return f(e)
    kids = lp.elem_children(e)
    if not kids:
        return e
    return _REBUILD[type(e)](e, [_map_reads(k, f) for k in kids])


def _replace_elems(e: lp.Elem, swap: Mapping[lp.Elem, lp.Elem]) -> lp.Elem:
    """``e`` with every subexpression equal to a key of ``swap`` replaced."""
    found = swap.get(e)
    if found is not None:
        return found
    kids = lp.elem_children(e)
    if not kids:
        return e
    return _REBUILD[type(e)](e, [_replace_elems(k, swap) for k in kids])


def _reads(w: _Work) -> list[lp.ViewRead | lp.BufRead]:
    out = list(lp.elem_reads(w.value))
    if w.init is not None:
        out.extend(lp.elem_reads(w.init))
    for e, _ in w.cached:
        out.extend(lp.elem_reads(e))
    return out


def _vars(n: int) -> tuple[str, ...]:
    return tuple(lp.nest_var(i) for i in range(n))


class _Namer:
    """Unique MSL identifiers from IR names (``%acc_1`` -> ``acc_1``, ``i.0`` -> ``i_0``)."""

    def __init__(self) -> None:
        self.used: set[str] = set(tb.RESERVED)

    def new(self, base: str, prefix: str = "") -> str:
        text = re.sub(r"[^A-Za-z0-9_]", "", base.replace(".", "_").lstrip("%"))
        text = re.sub(r"_+", "_", text).strip("_") or "v"
        if prefix:
            text = prefix + text
        elif text[0].isdigit():
            text = "v" + text
        name, i = text, 1
        while name in self.used:
            name, i = f"{text}_{i}", i + 1
        self.used.add(name)
        return name


def _fail(message: str, rule: str = _RULE) -> PlannerError:
    return error(message, rule=rule, kind=_KIND)


# =========================================================================== pre-checks


def _check_target(target: Target) -> None:
    backend = target.backend.value if target.backend is not None else None
    if backend != "metal":
        raise _fail(f"target {target.name} has backend {backend or 'none'}: the Metal "
                    "emitter lowers only targets whose catalog says backend: metal",
                    rule="backend")


def _memory_bytes(op: core.AllocOp, env: Mapping[str, int]) -> int | None:
    try:
        return op.layout.storage_elements(env) * op.dtype.itemsize
    except KeyError:
        return None


def _memory_name(op: core.AllocOp) -> str:
    return f"%{op.memory.name_hint}" if op.memory.name_hint else "a Memory"


def _check_memories(kernel: Kernel, plan: MaterializationPlan | None, target: Target,
                    env: Mapping[str, int], binding: ExecutionBinding) -> None:
    """S17 on explicit Memory: a home of the requested class at the owner's scope, and
    group memory within capacity (checked before the plan, which may be infeasible)."""
    placed = {m.name: m.resource for m in plan.memories} if plan is not None else {}
    versions = {m.name: m.versions for m in plan.memories} if plan is not None else {}
    per_home: dict[str, list[tuple[str, int, int]]] = {}
    for op in kernel.body.walk():
        if not isinstance(op, core.AllocOp):
            continue
        name = _memory_name(op)
        mb = binding.memory(op)
        owner, cls = mb.owner_scope, mb.resource_class
        nbytes = _memory_bytes(op, env)
        size = f"{nbytes:,} B" if nbytes is not None else "a size the plan does not bind"
        res = mb.home_named(placed.get(name))
        if res is None:
            homes = ", ".join(f"{r.name} (per {r.instance_scope})"
                              for r in target.resources_for_class(cls)) or "none"
            raise _fail(f"Memory {name} ({cls}, {size}) is owned by {op.owner} at scope "
                        f"{owner}, but {cls} storage on {target.name} is {homes}: no {cls} "
                        f"resource serves a {owner}, and the Metal backend does not change "
                        "the owner or the resource")
        if res.resource_class not in tb.PLACEMENT:
            raise _fail(f"Memory {name} ({size}) resolves to {res.name} (class "
                        f"{res.resource_class}), which has no place in an emitted Metal "
                        f"kernel (placed: {', '.join(tb.PLACEMENT)})")
        if nbytes is not None and res.capacity is not None:
            aligned = -(-nbytes // res.alignment) * res.alignment
            per_home.setdefault(res.name, []).append((name, aligned, versions.get(name, 1)))
    for res_name, items in per_home.items():
        res = target.resource(res_name)
        total = sum(b * n for _, b, n in items)
        if res.capacity is not None and total > res.capacity:
            parts = " + ".join(f"{nm} {b:,} B" if n == 1 else f"{nm} {n} x {b:,} B"
                               for nm, b, n in items)
            raise _fail(f"explicit Memory does not fit {res_name}: {parts} = {total:,} B > "
                        f"{res_name} capacity {res.capacity:,} B per {res.instance_scope}")


# =========================================================================== the emitter


class _Emitter:
    def __init__(self, kernel: Kernel, program: lp.LoopProgram, target: Target,
                 env: Mapping[str, int], threads: int, binding: ExecutionBinding,
                 plan: MaterializationPlan | None = None) -> None:
        if not 1 <= threads <= 1024:
            raise _fail(f"threads_per_group {threads} is outside Metal's 1..1024",
                        rule="msl-dispatch")
        if len(program.segments) != 1:
            raise _fail(f"kernel {program.kernel} has {len(program.segments)} top-level "
                        "segments: the Metal backend emits one dispatch (one kernel void) per "
                        "kernel, so everything must sit in one top-level parallel",
                        rule="msl-dispatch")
        self.kernel = kernel
        self.program = program
        self.target = target
        self.binding = binding
        self.env = dict(env)
        self.threads = threads
        self.segment = program.segments[0]
        self.names = _Namer()
        self.homes: dict[str, _Home] = {}
        self.limits: list[SizeLimit] = []
        self.notes: list[str] = []
        self.scratch: dict[DType, tuple[str, Expr]] = {}  # dtype -> (param, per group)
        self.arena = ""  # the threadgroup arena ("" when the kernel needs none)
        self.arena_bytes = 0
        self.arena_shared = False  # whether buffers share arena bytes by lifetime
        self.arena_peak: tuple[int, int] | None = None  # (statement, bytes live there)
        #: arena buffer -> (bytes, [first, last] statement it is live)
        self.arena_items: dict[str, tuple[int, tuple[int, int]]] = {}
        res = self._threadgroup_resource()
        #: The plan's peak for threadgroup memory: the arena never needs more.
        self.planned_peak: int | None = None
        if plan is not None and res is not None:
            self.planned_peak = next((p.peak_bytes for p in plan.peaks
                                      if p.resource == res.name), 0)
        self.hoisting = True  # broadcast subexpressions into threadgroup memory (else cached)
        self.cached_exprs = 0  # broadcast subexpressions each thread caches instead
        self._memory_names: dict[str, MemoryBinding] | None = None
        self.counter = 0
        self.views = {p.name: p for p in program.params}
        self.nonneg_symbols = {e.name for p in program.params for e in p.shape
                               if isinstance(e, Sym)}
        self._check_scope()

    # ------------------------------------------------------------------ mapping

    def _check_scope(self) -> None:
        seg = self.segment
        if not seg.parallel:
            return
        scope = self.binding.parallel_scope.get(seg.label)
        group = self.target.default_parallel_scope
        if scope is not None and scope != group:
            raise _fail(f"parallel {seg.label} is bound to scope {scope}: the Metal backend "
                        f"maps a top-level parallel to threadgroups (bind it to AUTOMATIC or "
                        f"{group})", rule="msl-dispatch")

    def static(self, e: Expr, what: str) -> int:
        """``e`` at the bindings the plan was made for (a Metal array has a static size)."""
        missing = sorted(e.symbols() - self.env.keys())
        if missing:
            raise _fail(f"{what} has {e} elements: a Metal array needs a static size, and "
                        f"the plan does not bind {', '.join(missing)}")
        return e.evaluate(self.env)

    def limit(self, array: str, what: str, e: Expr, capacity: int, itemsize: int) -> None:
        """Remember that ``e`` elements must fit ``capacity`` at run time."""
        if not e.is_const:
            self.limits.append(SizeLimit(array, what, e, capacity, itemsize))

    def place_buffers(self) -> None:
        for name in self.segment.buffers:
            buf = self.program.buffer(name)
            if buf.dtype in tb.UNSUPPORTED_DTYPES:
                raise _fail(f"buffer %{name} is {buf.dtype}: "
                            f"{tb.UNSUPPORTED_DTYPES[buf.dtype]}", rule="msl-subset")
            space = tb.PLACEMENT.get(buf.resource_class)
            what = f"%{name}: {buf.dtype}[{', '.join(map(str, buf.shape))}]"
            if space is None:
                raise _fail(f"{what} is placed in {buf.resource} (class {buf.resource_class}),"
                            f" which has no place in an emitted Metal kernel (placed: "
                            f"{', '.join(tb.PLACEMENT)})")
            if space is Space.THREAD and buf.role == "memory":
                self._check_private_memory(buf, what)
            size = buf.dtype.itemsize
            if space is Space.DEVICE:
                self.homes[name] = _Home(buf, space, "", 0)  # placed by place_device
            elif space is Space.THREADGROUP:
                memory = buf.role == "memory"  # a fixed occupant, else a pooled temporary
                array = self.names.new(name, "tg_")
                cap = self.static(buf.total_elements(), what)
                self.limit(array, what, buf.total_elements(), cap, size)
                self.homes[name] = _Home(buf, space, array, cap, pooled=not memory)
            else:
                array = self.names.new(name, "r_")
                slots = max(1, -(-self.static(product(buf.shape), what) // self.threads))
                self.limit(array, what, product(buf.shape), slots * self.threads, size)
                self.homes[name] = _Home(buf, space, array, slots * buf.versions, slots=slots)

    def _memory_binding(self, buf: lp.Buffer) -> MemoryBinding | None:
        """The execution binding's record of the explicit Memory ``buf`` realizes."""
        if self._memory_names is None:
            namer = ValueNamer()
            Printer(PrintOptions(locations=False), namer).print_kernel(self.kernel)
            self._memory_names = {namer[mb.alloc.memory]: mb
                                  for mb in self.binding.memory_bindings()}
        return self._memory_names.get(buf.name)

    def _check_private_memory(self, buf: lp.Buffer, what: str) -> None:
        """S17: private Memory of a descendant worker is per-thread storage; private
        Memory owned by the group (or the kernel) has no per-thread meaning: refused."""
        mb = self._memory_binding(buf)
        seg = self.segment
        group = self.binding.scope_of(seg.label) if seg.parallel else self.binding.root
        if mb is not None and mb.owner_scope != group \
                and self.target.is_ancestor_or_self(group, mb.owner_scope):
            return
        owner = f"{mb.owner} at scope {mb.owner_scope}" if mb is not None else "the group"
        raise _fail(f"Memory {what} is group-owned private storage (owned by {owner}, the "
                    f"{group} level): Metal private storage is per thread (S17 refuses "
                    "group-owned private; declare it inside a nested parallel bound below "
                    f"{group}, or give it a shared resource)")

    def place_device(self) -> None:
        """Device-class buffers: one region per threadgroup of a scratch buffer per type,
        sized symbolically (no static limit), each buffer on a 64-byte boundary."""
        for name, h in list(self.homes.items()):
            if h.space is not Space.DEVICE:
                continue
            dt = h.buffer.dtype
            array, used = self.scratch.get(dt, ("", Const(0)))
            array = array or self.names.new(f"scratch_{dt.value}")
            step = max(1, 64 // dt.itemsize)
            self.scratch[dt] = (array, add(used, mul(ceil_div(h.buffer.total_elements(), step),
                                                     step)))
            self.homes[name] = dataclasses.replace(h, array=array, base=used)

    # ------------------------------------------------------------------ conversion

    def convert(self, body: Iterable[lp.Stmt]) -> list[_Node]:
        out: list[_Node] = []
        for s in body:
            out.extend(_CONVERT[type(s)](self, s))
        return out

    def _nest(self, s: lp.Nest) -> list[_Node]:
        ext = dict(zip(s.vars, s.extents, strict=True))
        if isinstance(s.dest, lp.ViewWrite):
            dist = tuple(zip(s.vars, s.extents, strict=True))
        else:
            dist = self._dest_vars(s.dest, ext)
        serial = tuple((v, ext[v]) for v in s.vars if v not in dict(dist))
        return self._with_exchanges(_Work(dist, serial, s.dest, s.value,
                                          comment=self._describe(s.dest)))

    def _reduce(self, s: lp.ReduceNest) -> list[_Node]:
        ext = dict(zip(s.vars, s.extents, strict=True))
        dist = self._dest_vars(s.dest, ext)
        serial = tuple((v, ext[v]) for v in s.vars if v not in dict(dist))
        return self._with_exchanges(_Work(dist, serial, s.dest, s.value, s.fn,
                                          comment=f"{self._describe(s.dest)} = {s.fn.value} "
                                                  f"over {s.vars[-1]}"))

    def _fused(self, s: lp.FusedNest) -> list[_Node]:
        """Sibling nests fused for the CPU run here one after another: each part is
        spread over the threads by its own destination."""
        return [n for p in s.parts for n in _CONVERT[type(p)](self, p)]

    def _dest_vars(self, dest: lp.BufWrite, ext: Mapping[str, Expr]
                   ) -> tuple[tuple[str, Expr], ...]:
        names = [i.name for i in dest.index if isinstance(i, Sym) and i.name in ext]
        buf = self.program.buffer(dest.buffer)
        dist = tuple((v, ext[v]) for v in names)
        if len(names) != len(dest.index) or len(set(names)) != len(names) \
                or tuple(e for _, e in dist) != buf.shape:
            raise _fail(f"lowering to Metal: a write to %{dest.buffer} at "
                        f"[{', '.join(map(str, dest.index))}] is not one element per "
                        "iteration of its destination", rule="msl-lowering")
        return dist

    def _mma(self, s: lp.Mma) -> list[_Node]:
        i, j, k = (Sym(v) for v in _vars(3))
        pre: list[_Work] = []
        a = self._mma_operand(s.a, (i, k), (s.m, s.k), pre)
        b = self._mma_operand(s.b, (k, j), (s.k, s.n), pre)
        prod = lp.Binary(core.BinaryFn.MUL, a, b, DType.F32)
        c_idx = (i, j)
        init = (lp.BufRead(s.c.buffer, c_idx, s.c.version, DType.F32) if s.accumulate
                else lp.Lit(0.0, DType.F32))
        work = _Work(((i.name, s.m), (j.name, s.n)), ((k.name, s.k),),
                     lp.BufWrite(s.c.buffer, c_idx, s.c.version), prod, ReduceFn.SUM, init,
                     comment=f"mma [{s.m} x {s.k}] @ [{s.k} x {s.n}] into %{s.c.buffer}, "
                             "each thread computes its output elements over k")
        self._dest_vars(work.dest, {i.name: s.m, j.name: s.n})
        out: list[_Node] = []
        for w in pre:
            out.extend(self._with_exchanges(w))
        out.extend(self._with_exchanges(work))
        return out

    def _mma_operand(self, o: lp.MmaBuf | lp.MmaView, idx: tuple[Expr, Expr],
                     shape: tuple[Expr, Expr], pre: list[_Work]) -> lp.Elem:
        if isinstance(o, lp.MmaBuf):
            return lp.BufRead(o.buffer, idx, o.version, DType.F32)
        view = self.views[o.window.view]
        home = self.homes[o.staging]
        if home.space is not Space.THREAD:
            sv = tuple(Sym(v) for v in _vars(2))
            read = lp.ViewRead(view.name, tuple(add(off, x) for off, x in
                                                zip(o.window.offsets, sv, strict=True)),
                               o.fill, view.dtype, o.window)
            pre.append(_Work(tuple(zip(_vars(2), shape, strict=True)), (),
                             lp.BufWrite(o.staging, sv, Const(0)), read,
                             comment=f"cooperative copy of {o.window} into %{o.staging}"))
            return lp.BufRead(o.staging, idx, Const(0), DType.F32)
        return lp.ViewRead(view.name, tuple(add(off, x) for off, x in
                                            zip(o.window.offsets, idx, strict=True)),
                           o.fill, view.dtype, o.window)

    def _loop(self, s: lp.Loop) -> list[_Node]:
        note = f"loop {s.kind} {s.label}" + (f" ({s.note})" if s.note else "")
        return [_Loop(s.label, s.vars, s.extents, tuple(self.convert(s.body)), note)]

    def _pipeline(self, s: lp.Pipeline) -> list[_Node]:
        stages = tuple(_Stage(st.name, st.lag, tuple(self.convert(st.body)))
                       for st in s.stages)
        return [_Pipe(s.label, s.vars, s.extents, s.window, stages)]

    def _parallel(self, s: lp.Parallel) -> list[_Node]:
        note = f"nested parallel {s.label}: its instances one after another in this group"
        return [_Loop(s.label, s.vars, s.extents, tuple(self.convert(s.body)), note)]

    def _barrier(self, s: lp.Barrier) -> list[_Node]:
        classes = tb.SYNC_RULE_CLASSES.get(s.rule)
        if classes is None:
            raise _fail(f"the plan synchronizes with {s.rule!r}, which has no Metal spelling "
                        f"(known: {', '.join(tb.SYNC_RULE_CLASSES)})", rule="S21")
        return [_Sync(frozenset(classes), f"plan: {s.rule}" + (f", {s.note}" if s.note
                                                                else ""))]

    def _note(self, s: lp.Note) -> list[_Node]:
        return [_Comment(s.text)]

    def _describe(self, dest: lp.BufWrite | lp.ViewWrite) -> str:
        if isinstance(dest, lp.ViewWrite):
            return f"store {dest.window}"
        buf = self.program.buffer(dest.buffer)
        return f"%{buf.name} ({buf.role})"

    # ------------------------------------------------------------------ exchanges

    def aligned(self, w: _Work, r: lp.BufRead) -> bool:
        """Whether ``r`` reads, in every iteration, the element its thread owns."""
        buf = self.homes[r.buffer].buffer
        return (r.index == tuple(Sym(v) for v, _ in w.dist)
                and buf.shape == tuple(e for _, e in w.dist))

    def _with_exchanges(self, w: _Work) -> list[_Node]:
        """Hoist ``w``'s broadcast subexpressions, then publish per-thread slices that
        each statement reads away from their owners."""
        pre, w = self._hoist(w)
        return [n for x in (*pre, w) for n in self._exchanged(x)]

    # ------------------------------------------------------------------ hoisting

    def _hoist(self, w: _Work) -> tuple[list[_Work], _Work]:
        """Statements computing ``w``'s broadcast subexpressions once per element of
        their own index space, and ``w`` reading them (see the module doc).

        A subexpression is hoisted when it computes something (an operator over at
        least one read) and does not depend on one of ``w``'s distributed variables; the
        largest such subexpressions are taken.  It must not read what ``w`` writes."""
        res = self._group_home()
        ext = dict((*w.dist, *w.serial))
        order = [v for v, _ in (*w.dist, *w.serial)]
        dist = frozenset(v for v, _ in w.dist)
        dest = w.dest.buffer if isinstance(w.dest, lp.BufWrite) else w.dest.view
        roots: dict[lp.Elem, frozenset[str]] = {}

        def worth(e: lp.Elem, deps: frozenset[str] | None) -> bool:
            return (deps is not None and bool(deps) and bool(dist - deps)
                    and isinstance(e, lp.Unary | lp.Binary | lp.Select | lp.Cast)
                    and any(True for _ in lp.elem_reads(e)))

        def visit(e: lp.Elem) -> frozenset[str] | None:  # its variables; None: not hoistable
            kids = lp.elem_children(e)
            deps = [visit(k) for k in kids]
            mine: frozenset[str] | None
            if isinstance(e, lp.BufRead | lp.ViewRead):
                name = e.buffer if isinstance(e, lp.BufRead) else e.view
                syms = {s for i in e.index for s in i.symbols()}
                if isinstance(e, lp.BufRead):
                    syms |= e.version.symbols()
                mine = None if name == dest else frozenset(syms & ext.keys())
            elif isinstance(e, lp.IndexOf):
                mine = frozenset(e.expr.symbols() & ext.keys())
            elif isinstance(e, lp.Lit):
                mine = frozenset()
            else:
                mine = None if any(d is None for d in deps) else frozenset().union(*deps)
            if not worth(e, mine):
                for k, d in zip(kids, deps, strict=True):
                    if worth(k, d):
                        assert d is not None
                        roots.setdefault(k, d)
            return mine

        top = visit(w.value)
        if worth(w.value, top):
            assert top is not None
            roots[w.value] = top
        if not roots:
            return [], w
        if not self.hoisting or res is None:
            return [], self._cache(w, roots, order)
        base = dest if isinstance(w.dest, lp.BufWrite) else f"{dest}.store"
        pre: list[_Work] = []
        swap: dict[lp.Elem, lp.Elem] = {}
        for root, deps in roots.items():
            vars_ = tuple(v for v in order if v in deps)
            shape = tuple(ext[v] for v in vars_)
            self.counter += 1
            name = f"{base}.h{self.counter}"
            text = lp.format_elem(root)
            buf = lp.Buffer(name, root.dtype, dense(shape), res.name, res.resource_class,
                            role="hoisted", note=f"{text}, once per [{', '.join(vars_)}]")
            n = self.static(product(shape), f"hoisted {text}")
            view = self.names.new(name, "tg_")
            self.limit(view, f"hoisted {text}", product(shape), n, root.dtype.itemsize)
            self.homes[name] = _Home(buf, Space.THREADGROUP, view, n, pooled=True,
                                     hoisted=True)
            idx = tuple(Sym(v) for v in vars_)
            pre.append(_Work(tuple(zip(vars_, shape, strict=True)), (),
                             lp.BufWrite(name, idx, Const(0)), root,
                             comment=f"hoisted out of the broadcast: {text} once per "
                                     f"[{', '.join(vars_)}]"))
            swap[root] = lp.BufRead(name, idx, Const(0), root.dtype)
        return pre, dataclasses.replace(w, value=_replace_elems(w.value, swap))

    def _cache(self, w: _Work, roots: Mapping[lp.Elem, frozenset[str]],
               order: list[str]) -> _Work:
        """Without room in threadgroup memory: each thread keeps the value of a broadcast
        subexpression while the variables it depends on stay the same (once per thread
        and source element instead of once per element; only over distributed ones)."""
        dist = {v for v, _ in w.dist}
        swap: dict[lp.Elem, lp.Elem] = {}
        cached: list[tuple[lp.Elem, tuple[str, ...]]] = []
        for root, deps in roots.items():
            if deps <= dist:
                swap[root] = _Cached(len(cached), root.dtype)
                cached.append((root, tuple(v for v in order if v in deps)))
        if not cached:
            return w
        self.cached_exprs += len(cached)
        return dataclasses.replace(w, value=_replace_elems(w.value, swap),
                                   cached=tuple(cached))

    def _exchanged(self, w: _Work) -> list[_Node]:
        """Publish per-thread slices that ``w`` reads away from their owners."""
        wanted: dict[tuple[str, Expr], str] = {}
        out: list[_Node] = []
        for r in _reads(w):
            if not isinstance(r, lp.BufRead) or self.homes[r.buffer].space is not Space.THREAD:
                continue
            if self.aligned(w, r) or (r.buffer, r.version) in wanted:
                continue
            src = self.homes[r.buffer].buffer
            self.counter += 1
            xname = f"{src.name}.x{self.counter}"
            xbuf = lp.Buffer(xname, src.dtype, dense(src.shape), "exchange", "shared",
                             role="exchange", note=f"exchange of %{src.name}")
            n = self.static(product(src.shape), f"exchange of %{src.name}")
            view = self.names.new(xname, "tg_")
            self.limit(view, f"exchange of %{src.name}", product(src.shape), n,
                       src.dtype.itemsize)
            self.homes[xname] = _Home(xbuf, Space.THREADGROUP, view, n, exchange=True,
                                      pooled=True)
            wanted[(r.buffer, r.version)] = xname
            idx = tuple(Sym(v) for v in _vars(len(src.shape)))
            out.append(_Work(tuple(zip(_vars(len(src.shape)), src.shape, strict=True)), (),
                             lp.BufWrite(xname, idx, Const(0)),
                             lp.BufRead(src.name, idx, r.version, src.dtype),
                             comment=f"exchange: every thread publishes its slice of "
                                     f"%{src.name}"))
        if not wanted:
            return [w]

        def swap(r: lp.BufRead) -> lp.Elem:
            x = wanted.get((r.buffer, r.version))
            if x is None or self.aligned(w, r):
                return r
            return lp.BufRead(x, r.index, Const(0), r.dtype)

        init = _map_reads(w.init, swap) if w.init is not None else None
        cached = tuple((_map_reads(e, swap), deps) for e, deps in w.cached)
        out.append(dataclasses.replace(w, value=_map_reads(w.value, swap), init=init,
                                       cached=cached))
        return out

    # ------------------------------------------------------------------ capacity

    def assign_arena(self, nodes: list[_Node]) -> None:
        """Give every threadgroup buffer its bytes in the arena (see the module doc).

        Side by side when that fits the plan's peak (no reuse, so no write-after-read
        barriers); otherwise buffers whose lifetimes do not overlap share bytes.  Explicit
        Memory is live for the whole instance, a temporary from the first to the last
        statement that touches it (over whole loops where its value crosses a back edge,
        :func:`_lifetimes`)."""
        homes = {n: h for n, h in self.homes.items() if h.space is Space.THREADGROUP}
        self.arena, self.arena_bytes, self.arena_shared = "", 0, False
        self.arena_peak, self.arena_items = None, {}
        if not homes:
            return
        align = self._threadgroup_alignment()
        live = _lifetimes(nodes, self.homes)
        items = {n: (_round_up(h.nbytes, align),
                     live.get(n, (0, _WHOLE)) if h.pooled else (0, _WHOLE))
                 for n, h in homes.items()}
        bound = self.arena_bound()
        apart = sum(size for size, _ in items.values())
        self.arena_shared = bound is not None and apart > bound
        offsets, total = _pack(items, bound) if self.arena_shared else _side_by_side(items)
        self.arena = "tg_arena_"
        self.arena_bytes = _round_up(total, tb.ARENA_GRANULE)
        self.arena_peak = _live_peak(items)
        self.arena_items = items
        for n, off in offsets.items():
            self.homes[n] = dataclasses.replace(self.homes[n], offset=off)

    def arena_bound(self) -> int | None:
        """Bytes the arena may take: the plan's peak (and never the resource's capacity
        more; a plan made for a bigger target), else the capacity."""
        res = self._threadgroup_resource()
        bounds = [b for b in (self.planned_peak, res.capacity if res is not None else None)
                  if b is not None]
        return min(bounds) if bounds else None

    def _arena_story(self) -> str:
        """What is live together where the arena is fullest, for messages."""
        if self.arena_peak is None:
            return "nothing"
        point, live_bytes = self.arena_peak
        parts = []
        for h in sorted((self.homes[n] for n in self.arena_items),
                        key=lambda h: (h.offset, h.buffer.name)):
            size, (lo, hi) = self.arena_items[h.buffer.name]
            if lo <= point <= hi:
                parts.append(f"{_what(h)} {size:,} B")
        text = (f"{parts[0]} live" if len(parts) == 1
                else " + ".join(parts) + f" = {live_bytes:,} B live together")
        if self.arena_shared and self.arena_bytes > live_bytes:
            text += f", packed into {self.arena_bytes:,} B"
        return text

    def check_capacity(self) -> tuple[int, int]:
        """S17: manual Memory and compiler temporaries together within threadgroup memory
        (and, a note otherwise, within the plan's peak)."""
        res = self._threadgroup_resource()
        total = self.arena_bytes
        if total and res is not None and res.capacity is not None and total > res.capacity:
            raise _fail(f"threadgroup memory does not fit {res.name}: the arena needs "
                        f"{total:,} B > capacity {res.capacity:,} B per {res.instance_scope} "
                        f"({self._arena_story()}; each rounded to "
                        f"{self._threadgroup_alignment()} B; manual Memory and compiler "
                        "temporaries count together)")
        if total and self.planned_peak is not None and total > self.planned_peak:
            where = res.name if res is not None else "threadgroup memory"
            self.notes.append(f"the threadgroup arena takes {total:,} B, more than the plan's "
                              f"peak of {self.planned_peak:,} B for {where} "
                              f"({self._arena_story()})")
        per_thread = sum(h.capacity * h.buffer.dtype.itemsize for h in self.homes.values()
                         if h.space is Space.THREAD)
        regs = self.target.resources_for_class("private")
        cap = regs[0].capacity if regs else None
        if cap is not None and per_thread > cap:
            self.notes.append(f"per-thread slices hold {per_thread:,} B per thread, more than "
                              f"{regs[0].name} ({cap:,} B): the Metal compiler will spill")
        return total, per_thread

    def _threadgroup_alignment(self) -> int:
        res = self._threadgroup_resource()
        return res.alignment if res is not None else 16

    def _threadgroup_resource(self) -> Resource | None:
        found = self.target.resources_for_class("shared")
        return found[0] if found else None

    def _group_home(self) -> Resource | None:
        """Where the threads of a group share compiler temporaries (hoisted values): the
        realization's exchange home for the group's scope, when it is group memory."""
        seg = self.segment
        scope = self.binding.scope_of(seg.label) if seg.parallel else self.binding.root
        res = exchange_home(self.target, scope)
        if res is None or tb.PLACEMENT.get(res.resource_class) is not Space.THREADGROUP:
            return None
        return res

    # ------------------------------------------------------------------ barriers

    def accesses(self, w: _Work, loops: tuple[_LoopCtx, ...]) -> list[_Access]:
        out: list[_Access] = []

        def note(name: str, version: Expr, write: bool, aligned: bool) -> None:
            if name in self.views:
                if self.views[name].readonly:
                    return
                key, lo, hi, cls = f"view {name}", 0, _WHOLE, "global"
            else:
                h = self.homes[name]
                if h.space is Space.THREAD:
                    return
                if h.space is Space.DEVICE:
                    key, lo, hi, cls = f"%{name}", 0, _WHOLE, "global"
                else:  # byte ranges of the one arena: buffers may share bytes
                    key, lo, hi, cls = self.arena, h.offset, h.offset + h.nbytes, "shared"
                aligned = aligned and not h.exchange
                name = f"%{name}"
            loop, shift = None, 0
            for ctx in reversed(loops):
                if ctx.vars & version.symbols():
                    loop, shift = ctx.label, ctx.lag
                    break
            out.append(_normalize(_Access(key, name, lo, hi, cls, write, aligned, version,
                                          loop, shift)))

        if isinstance(w.dest, lp.BufWrite):
            note(w.dest.buffer, w.dest.version, True, True)
        else:
            note(w.dest.view, Const(0), True, False)
        for r in _reads(w):
            if isinstance(r, lp.BufRead):
                note(r.buffer, r.version, False, self.aligned(w, r))
            else:
                note(r.view, Const(0), False, False)
        writes = [a for a in out if a.write]
        for a in out:
            if not a.write and any(_conflict(x, a) for x in writes):
                raise _fail(f"lowering to Metal: a statement ({w.comment}) reads {a.buffer} "
                            "away from the owner while writing it: no barrier can order that",
                            rule="msl-lowering")
        return out

    def place_barriers(self, nodes: Iterable[_Node], pending: list[_Access],
                       loops: tuple[_LoopCtx, ...]) -> tuple[list[_Node], list[_Access]]:
        out: list[_Node] = []
        for n in nodes:
            if isinstance(n, _Work):
                accs = self.accesses(n, loops)
                hits = [p for p in pending if any(_conflict(p, a) for a in accs)]
                if hits:
                    keys = ", ".join(dict.fromkeys(p.buffer for p in hits))
                    out.append(_Sync(frozenset(p.cls for p in hits),
                                     f"other threads' accesses to {keys}"))
                    pending = []
                pending = _dedupe([*pending, *accs])
                out.append(n)
            elif isinstance(n, _Sync):
                if out and isinstance(out[-1], _Sync):
                    prev = out.pop()
                    assert isinstance(prev, _Sync)
                    n = _Sync(prev.classes | n.classes, f"{prev.note}; {n.note}")
                out.append(n)
                pending = []
            elif isinstance(n, _Loop):
                ctx = _LoopCtx(n.label, frozenset(n.vars), 0)
                body, pending = self._fixpoint(
                    n.label, pending, lambda p, c=ctx, b=n.body: self.place_barriers(
                        b, p, (*loops, c)))
                out.append(dataclasses.replace(n, body=tuple(body)))
            elif isinstance(n, _Pipe):
                stages, pending = self._fixpoint(
                    n.label, pending, lambda p, pipe=n: self._place_stages(pipe, p, loops))
                out.append(dataclasses.replace(n, stages=tuple(stages)))
            else:
                out.append(n)
        return out, pending

    def _place_stages(self, n: _Pipe, pending: list[_Access], loops: tuple[_LoopCtx, ...]
                      ) -> tuple[list[_Stage], list[_Access]]:
        """Stages run under a (uniform) guard and may be skipped in the prologue and
        epilogue: a barrier at a stage's start is hoisted before the guard, so every time
        step runs it; what a stage leaves pending joins what was pending before it."""
        stages = []
        for st in n.stages:
            ctx = _LoopCtx(n.label, frozenset(n.vars), st.lag)
            body, exit_ = self.place_barriers(st.body, pending, (*loops, ctx))
            lead = None
            if body and isinstance(body[0], _Sync):
                lead, body, pending = body[0], body[1:], []
            stages.append(dataclasses.replace(st, body=tuple(body), lead=lead))
            pending = _dedupe([*exit_, *pending])
        return stages, pending

    def _fixpoint(self, label: str, pending: list[_Access],
                  run: Callable[[list[_Access]], tuple[list, list[_Access]]]
                  ) -> tuple[list, list[_Access]]:
        """Place barriers in a loop body, the next iteration's conflicts included."""
        carried: list[_Access] = []
        for _ in range(16):
            body, exit_ = run(_dedupe([*pending, *carried]))
            wrapped = [_normalize(dataclasses.replace(a, shift=a.shift + 1))
                       if a.loop == label else a for a in exit_]
            grown = _dedupe([*carried, *wrapped])
            if len(grown) == len(carried):
                break
            carried = grown
        after = [dataclasses.replace(a, loop=None, shift=0) if a.loop == label else a
                 for a in [*exit_, *pending]]
        return body, _dedupe(after)

    # ------------------------------------------------------------------ emission

    def spread(self) -> list[_Node]:
        """The segment as spread statements; only the buffers they touch keep a home."""
        nodes = self.convert(self.segment.body)
        used = {b for w in _walk_works(nodes) for b, _ in _work_buffers(w)}
        self.homes = {k: h for k, h in self.homes.items() if k in used}
        return nodes

    def emit(self) -> MslKernel:
        self.place_buffers()
        placed_limits = len(self.limits)
        nodes = self.spread()
        self.place_device()
        self.assign_arena(nodes)
        bound = self.arena_bound()
        hoists = [h for h in self.homes.values() if h.hoisted]
        if hoists and bound is not None and self.arena_bytes > bound:
            # the hoisted values do not fit beside the plan's buffers: each thread keeps
            # them instead (unless that is no smaller: the peak is exceeded anyway)
            kept = (nodes, self.homes, list(self.limits), self.arena, self.arena_bytes,
                    self.arena_shared, self.arena_peak, self.arena_items)
            self.homes = {k: h for k, h in self.homes.items()
                          if not (h.exchange or h.hoisted)}
            del self.limits[placed_limits:]
            self.hoisting = False
            nodes = self.spread()
            self.assign_arena(nodes)
            if self.arena_bytes < kept[4]:
                rest = len(hoists) - self.cached_exprs
                self.notes.append(
                    f"{self.cached_exprs} broadcast subexpressions are kept per thread "
                    "(evaluated once per thread and source element, not once per source "
                    "element)" + (f", {rest} evaluated per element" if rest > 0 else "")
                    + f": hoisting them into threadgroup memory would take the arena above "
                    f"{bound:,} B")
            else:
                (nodes, self.homes, self.limits, self.arena, self.arena_bytes,
                 self.arena_shared, self.arena_peak, self.arena_items) = kept
        tg_bytes, thread_bytes = self.check_capacity()
        nodes, _ = self.place_barriers(nodes, [], ())
        printer = _Printer(self)
        params = printer.params()
        source = printer.source(nodes, params, tg_bytes, thread_bytes)
        return MslKernel(source, printer.kernel_name, tuple(params), self.threads,
                         self.segment.extents if self.segment.parallel else (),
                         tuple(sorted(self.env.items())), tuple(self.limits), tg_bytes,
                         thread_bytes, tuple(self.notes))


# =========================================================================== printing


class _Printer:
    """Prints the mapped program as MSL (spellings from :mod:`msl_tables`)."""

    def __init__(self, em: _Emitter) -> None:
        self.em = em
        self.names = em.names
        self.kernel_name = self.names.new(em.program.kernel)
        self.sym_names: dict[str, str] = {}
        self.depth = 0

    # ------------------------------------------------------------------ names

    def sym(self, name: str) -> str:
        found = self.sym_names.get(name)
        if found is None:
            found = self.names.new(name)
            self.sym_names[name] = found
        return found

    def params(self) -> list[MslParam]:
        out: list[MslParam] = []
        for p in self.em.program.params:
            out.append(MslParam(self.sym(p.name), len(out), "view", p.name, p.dtype,
                                p.readonly))
        for dt, (array, per_group) in self.em.scratch.items():
            out.append(MslParam(array, len(out), "scratch", f"device scratch ({dt})", dt,
                                False, per_group))
        for s in self.em.program.symbols:
            out.append(MslParam(self.sym(s), len(out), "symbol", s, None, True))
        return out

    # ------------------------------------------------------------------ expressions

    def nonneg(self, e: Expr) -> bool:
        if isinstance(e, Const):
            return e.value >= 0
        if isinstance(e, Sym):
            return e.name.startswith(("%", "i.")) or e.name in self.em.nonneg_symbols
        assert isinstance(e, Apply)
        return all(self.nonneg(a) for a in e.args)

    def expr(self, e: Expr) -> str:
        if isinstance(e, Const):
            return str(e.value) if e.value >= 0 else f"({e.value})"
        if isinstance(e, Sym):
            return self.sym(e.name)
        assert isinstance(e, Apply)
        if e.op is ExprOp.ADD:
            text = self.expr(e.args[0])
            for a in e.args[1:]:
                neg = _negated(a)
                text += f" - {self.expr(neg)}" if neg is not None else f" + {self.expr(a)}"
            return f"({text})"
        if e.op is ExprOp.MUL:
            return "(" + " * ".join(self.expr(a) for a in e.args) + ")"
        table = tb.EXPR_NONNEG if all(self.nonneg(a) for a in e.args) else tb.EXPR_GENERAL
        return table[e.op].format(a=self.expr(e.args[0]), b=self.expr(e.args[1]))

    def index(self, e: Expr) -> str:
        """An index expression without its outer parentheses."""
        text = self.expr(e)
        return text[1:-1] if text.startswith("(") and _balanced(text[1:-1]) else text

    # ------------------------------------------------------------------ elements

    def elem(self, e: lp.Elem, w: _Work) -> str:
        return _ELEM[type(e)](self, e, w)

    def _lit(self, e: lp.Lit, w: _Work) -> str:
        return tb.literal(e.value, e.dtype)

    def _indexof(self, e: lp.IndexOf, w: _Work) -> str:
        return tb.CAST.format(t=_scalar(e.dtype), x=self.index(e.expr))

    def _viewread(self, e: lp.ViewRead, w: _Work) -> str:
        view = self.em.views[e.view]
        access = f"{self.sym(view.name)}[{self.index(_row_major(e.index, view.shape))}]"
        mask = self.mask(e.index, e.window, view)
        if not mask:
            return access
        return f"({mask} ? {access} : {tb.literal(e.fill, view.dtype)})"

    def _bufread(self, e: lp.BufRead, w: _Work) -> str:
        return self.buffer_ref(e.buffer, e.index, e.version, w)

    def _unary(self, e: lp.Unary, w: _Work) -> str:
        tmpl = tb.UNARY.get((e.fn, tb.kind_of(e.x.dtype)))
        if tmpl is None:
            raise _fail(f"{e.fn.value} of {e.x.dtype} has no Metal spelling",
                        rule="msl-subset")
        return tmpl.format(x=self.elem(e.x, w))

    def _binary(self, e: lp.Binary, w: _Work) -> str:
        tmpl = tb.BINARY.get((e.fn, tb.kind_of(e.a.dtype)))
        if tmpl is None:
            raise _fail(f"{e.fn.value} of {e.a.dtype} has no Metal spelling",
                        rule="msl-subset")
        return tmpl.format(a=self.elem(e.a, w), b=self.elem(e.b, w))

    def _select(self, e: lp.Select, w: _Work) -> str:
        return f"({self.elem(e.cond, w)} ? {self.elem(e.a, w)} : {self.elem(e.b, w)})"

    def _cast(self, e: lp.Cast, w: _Work) -> str:
        return tb.CAST.format(t=_scalar(e.dtype), x=self.elem(e.x, w))

    def buffer_ref(self, name: str, index: tuple[Expr, ...], version: Expr, w: _Work) -> str:
        h = self.em.homes[name]
        buf = h.buffer
        if h.space is Space.THREAD:
            if tuple(index) != tuple(Sym(v) for v, _ in w.dist):
                raise _fail(f"internal: per-thread slice %{name} read away from its owner",
                            rule="msl-lowering")
            slot = f"l_ / {self.em.threads}"
            if buf.versions > 1:
                slot = f"{self.index(mul(version, h.slots))} + {slot}"
            return f"{h.array}[{slot}]"
        linear = buf.layout.linear(index)
        text = self.expr(linear)
        for sw in buf.layout.swizzles:
            mask = ((1 << sw.bits) - 1) << (sw.base + sw.shift)
            text = f"pl_swizzle({_strip(text)}, {mask}, {sw.shift})"
        base: Expr = _ZERO  # a threadgroup buffer's view starts at its first byte
        array = h.array
        if h.space is Space.DEVICE:
            base, array = h.base, _group_pointer(buf.dtype)
        if buf.versions > 1:
            base = add(base, mul(version, buf.version_stride()))
        if base != Const(0):
            text = f"{self.index(base)} + {_strip(text)}"
        return f"{array}[{_strip(text)}]"

    def mask(self, index: tuple[Expr, ...], window: lp.Window, view: lp.ViewParam) -> str:
        conds = []
        for d, (i, ext) in enumerate(zip(index, view.shape, strict=True)):
            if window.offsets[d] == Const(0) and window.shape[d] == ext:
                continue  # the window spans the view in this dimension
            conds.append(f"ulong({self.index(i)}) < ulong({self.index(ext)})")
        return " && ".join(conds)

    # ------------------------------------------------------------------ statements

    def source(self, nodes: list[_Node], params: list[MslParam], tg_bytes: int,
               thread_bytes: int) -> str:
        em = self.em
        body: list[str] = []
        body.append("  const long tid_ = long(tid_pos_);")
        body.append("  const long gid_ = long(tg_pos_);")
        seg = em.segment
        if seg.parallel:
            body.extend(self.decompose("gid_", seg.vars, seg.extents, "  "))
        for dt, (array, per_group) in em.scratch.items():
            body.append(f"  device {_scalar(dt)}* {_group_pointer(dt)} = {array} + gid_ * "
                        f"{self.expr(per_group)};  // this group's region of {array}")
        decls = self.declarations()
        main = self.nodes(nodes, "  ")
        text_main = "\n".join(main)
        header = self.header(tg_bytes, thread_bytes)
        sig = self.signature(params)
        kernel = "\n".join([*sig, *body, *decls, *main, "}"])
        helpers = self.helpers(text_main + "\n".join(body))
        return "\n".join([*header, "#include <metal_stdlib>", "using namespace metal;", "",
                          *helpers, kernel]) + "\n"

    def header(self, tg_bytes: int, thread_bytes: int) -> list[str]:
        em = self.em
        seg = em.segment
        lines = [f"// {em.program.kernel} for {em.target.name}: emitted by planner from the "
                 "loop program"]
        if em.program.plan_hash:
            lines.append(f"// plan {em.program.plan_hash[:16]}")
        if seg.parallel:
            axes = ", ".join(f"{v} < {e}" for v, e in zip(seg.vars, seg.extents, strict=True))
            lines.append(f"// one threadgroup per instance of {seg.label} ({axes}); "
                         f"{em.threads} threads per threadgroup")
        else:
            lines.append(f"// a grid of one threadgroup of {em.threads} threads")
        sized = ", ".join(f"{k}={v}" for k, v in sorted(em.env.items())) or "-"
        lines.append(f"// threadgroup memory {tg_bytes:,} B per group; per-thread slices "
                     f"{thread_bytes:,} B per thread; static sizes for {sized}")
        for n in em.notes:
            lines.append(f"// note: {n}")
        for n in em.program.notes:
            lines.append(f"// note: {n}")
        return [*lines, ""]

    def helpers(self, text: str) -> list[str]:
        used: list[str] = []
        for name in tb.HELPERS:
            if re.search(rf"\b{name}\(", text):
                for dep in tb.HELPER_DEPENDS.get(name, ()):
                    if dep not in used:
                        used.append(dep)
                if name not in used:
                    used.append(name)
        ordered = [n for n in tb.HELPERS if n in used]
        return [*(tb.HELPERS[n] for n in ordered), ""] if ordered else []

    def signature(self, params: list[MslParam]) -> list[str]:
        decls = []
        for p in params:
            if p.role == "view":
                assert p.dtype is not None
                decls.append(tb.VIEW_PARAM[p.readonly].format(t=_scalar(p.dtype), name=p.name,
                                                              index=p.index))
            elif p.role == "scratch":
                assert p.dtype is not None
                decls.append(tb.SCRATCH_PARAM.format(t=_scalar(p.dtype), name=p.name,
                                                     index=p.index))
            else:
                decls.append(tb.SYMBOL_PARAM.format(name=p.name, index=p.index))
        decls.extend(f"{t} {n} [[{a}]]" for t, n, a in tb.POSITION_PARAMS)
        head = f"kernel void {self.kernel_name}("
        pad = " " * len(head)
        lines = [head + decls[0] + ("," if len(decls) > 1 else ") {")]
        for i, d in enumerate(decls[1:], start=1):
            lines.append(pad + d + ("," if i < len(decls) - 1 else ") {"))
        return lines

    def declarations(self) -> list[str]:
        em = self.em
        lines: list[str] = []
        for h in em.homes.values():
            if h.space is Space.THREADGROUP:
                continue
            if h.space is Space.DEVICE:
                lines.append(f"  // {_describe_buffer(h.buffer)}: in {h.array}, this group's "
                             f"region from {h.base}")
                continue
            lines.append(f"  // {_describe_buffer(h.buffer)}: per-thread slice, {h.slots} of "
                         "each version per thread")
            lines.append("  " + tb.ARRAY_DECL[h.space].format(t=_scalar(h.buffer.dtype),
                                                              name=h.array,
                                                              n=max(h.capacity, 1)))
        if em.arena:
            lines.extend(self.arena())
        return lines

    def arena(self) -> list[str]:
        """The threadgroup arena, its map (byte ranges) and one typed view per buffer."""
        em = self.em
        how = ("sharing bytes when their lifetimes do not overlap" if em.arena_shared
               else "side by side")
        peak = (f" (the plan's peak: {em.planned_peak:,} B)" if em.planned_peak is not None
                else "")
        lines = [f"  // threadgroup memory: one arena of {em.arena_bytes:,} B{peak}, buffers "
                 f"at byte offsets, {how}:"]
        members = sorted((em.homes[n] for n in em.arena_items),
                         key=lambda h: (h.offset, h.buffer.name))
        for h in members:
            what = _what(h) if h.exchange or h.hoisted else _describe_buffer(h.buffer)
            lines.append(f"  //   [{h.offset}, {h.offset + h.nbytes}) {what}")
        lines.append("  " + tb.ARENA_DECL.format(name=em.arena,
                                                 n=max(1, em.arena_bytes // tb.ARENA_GRANULE)))
        lines.append("  " + tb.ARENA_BYTES.format(name=_ARENA_BYTES, arena=em.arena))
        for h in members:
            lines.append("  " + tb.ARENA_VIEW.format(t=_scalar(h.buffer.dtype), name=h.array,
                                                     bytes=_ARENA_BYTES, offset=h.offset))
        return lines

    def nodes(self, nodes: Iterable[_Node], ind: str) -> list[str]:
        out: list[str] = []
        for n in nodes:
            out.extend(_NODE[type(n)](self, n, ind))
        return out

    def _sync(self, n: _Sync, ind: str) -> list[str]:
        flags = " | ".join(tb.MEM_FLAGS[c] for c in sorted(n.classes, key=_flag_order))
        return [f"{ind}{tb.BARRIER.format(flags=flags)}  // {n.note}"]

    def _comment(self, n: _Comment, ind: str) -> list[str]:
        return [f"{ind}// {n.text}"]

    def _loop(self, n: _Loop, ind: str) -> list[str]:
        it = f"it{self.depth}_"
        self.depth += 1
        trip = self.expr(product(n.extents))
        lines = [f"{ind}// {n.comment}",
                 f"{ind}for (long {it} = 0; {it} < {_strip(trip)}; ++{it}) {{"]
        lines.extend(self.decompose(it, n.vars, n.extents, ind + "  "))
        lines.extend(self.nodes(n.body, ind + "  "))
        self.depth -= 1
        return [*lines, f"{ind}}}"]

    def _pipe(self, n: _Pipe, ind: str) -> list[str]:
        t, it = f"t{self.depth}_", f"it{self.depth}_"
        self.depth += 1
        trip = _strip(self.expr(product(n.extents)))
        lag = max(st.lag for st in n.stages)
        lines = [f"{ind}// pipeline {n.label}: window {n.window}; stage s runs iteration "
                 "t - lag(s) at time step t",
                 f"{ind}for (long {t} = 0; {t} < {trip} + {lag}; ++{t}) {{"]
        inner = ind + "  "
        for st in n.stages:
            cond = f"{it} < {trip}" if st.lag == 0 else f"{it} >= 0 && {it} < {trip}"
            if st.lead is not None:
                lines.extend(self._sync(st.lead, inner))
            lines.append(f"{inner}{{  // stage {st.name}: iteration t - {st.lag}")
            lines.append(f"{inner}  const long {it} = {t} - {st.lag};")
            lines.append(f"{inner}  if ({cond}) {{")
            lines.extend(self.decompose(it, n.vars, n.extents, inner + "    "))
            lines.extend(self.nodes(st.body, inner + "    "))
            lines.append(f"{inner}  }}")
            lines.append(f"{inner}}}")
        self.depth -= 1
        return [*lines, f"{ind}}}"]

    def _work(self, w: _Work, ind: str) -> list[str]:
        inner = ind + "  "
        body: list[str] = []
        if w.fold is not None:
            kind = tb.kind_of(w.value.dtype)
            init = (tb.REDUCE_IDENTITY[(w.fold, kind)] if w.init is None
                    else self.elem(w.init, w))
            body.append(f"{inner}{_scalar(w.value.dtype)} acc_ = {init};")
        deep = inner
        for v, e in w.serial:  # each thread's own loops, outermost first
            body.append(f"{deep}for (long {self.sym(v)} = 0; {self.sym(v)} < "
                        f"{self.index(e)}; ++{self.sym(v)}) {{")
            deep += "  "
        if w.fold is None:
            body.extend(self.store(w, self.elem(w.value, w), deep))
        else:
            step = tb.REDUCE_COMBINE[(w.fold, kind)].format(acc="acc_",
                                                            x=self.elem(w.value, w))
            body.append(f"{deep}acc_ = {step};")
        for _ in w.serial:
            deep = deep[:-2]
            body.append(f"{deep}}}")
        if w.fold is not None:
            body.extend(self.store(w, "acc_", inner))
        ext = dict(w.dist)
        keep: list[str] = []  # per-thread caches: recompute when the key changes
        for k, (e, deps) in enumerate(w.cached):
            key = self.index(_row_major(tuple(Sym(v) for v in deps),
                                        tuple(ext[v] for v in deps)))
            keep.append(f"{inner}if ({key} != hk{k}_) {{ hk{k}_ = {key}; hc{k}_ = "
                        f"{self.elem(e, w)}; }}")
        body = [*keep, *body]
        text = "\n".join(body)
        dist_vars = tuple(v for v, _ in w.dist)
        decomp = [ln for ln, v in zip(self.decompose("l_", dist_vars,
                                                     tuple(e for _, e in w.dist), inner),
                                      dist_vars, strict=True)
                  if re.search(rf"\b{self.sym(v)}\b", text)]
        total = _strip(self.expr(product(tuple(e for _, e in w.dist))))
        head = [f"{ind}// {w.comment}"] if w.comment else []
        loop = [f"{ind}for (long l_ = tid_; l_ < {total}; l_ += {self.em.threads}) {{",
                *decomp, *body, f"{ind}}}"]
        if not w.cached:
            return [*head, *loop]
        what = "; ".join(f"{lp.format_elem(e)} while [{', '.join(deps)}] stays the same"
                         for e, deps in w.cached)
        decls = [f"{ind}  {_scalar(e.dtype)} hc{k}_ = {tb.literal(0, e.dtype)};\n"
                 f"{ind}  long hk{k}_ = -1;" for k, (e, _) in enumerate(w.cached)]
        return [*head, f"{ind}{{  // each thread keeps {what}", *decls,
                *(f"  {ln}" for ln in loop), f"{ind}}}"]

    def _cached(self, e: _Cached, w: _Work) -> str:
        return f"hc{e.index}_"

    def store(self, w: _Work, value: str, ind: str) -> list[str]:
        d = w.dest
        if isinstance(d, lp.BufWrite):
            return [f"{ind}{self.buffer_ref(d.buffer, d.index, d.version, w)} = {value};"]
        view = self.em.views[d.view]
        access = f"{self.sym(view.name)}[{self.index(_row_major(d.index, view.shape))}]"
        mask = self.mask(d.index, d.window, view)
        if not mask:
            return [f"{ind}{access} = {value};"]
        return [f"{ind}if ({mask}) {{", f"{ind}  {access} = {value};", f"{ind}}}"]

    def decompose(self, lin: str, vars_: tuple[str, ...], extents: tuple[Expr, ...],
                  ind: str) -> list[str]:
        """``const long v = ...;`` for each variable of the row-major split of ``lin``."""
        out = []
        for j, v in enumerate(vars_):
            inner = product(extents[j + 1:])
            q = lin if inner == Const(1) else f"{lin} / {self.expr(inner)}"
            if j > 0:
                q = f"{q if q == lin else f'({q})'} % {self.expr(extents[j])}"
            out.append(f"{ind}const long {self.sym(v)} = {q};")
        return out



#: Loop-program statement -> its conversion into spread statements.
_CONVERT: dict[type, Callable[[_Emitter, Any], list[_Node]]] = {
    lp.Nest: _Emitter._nest, lp.ReduceNest: _Emitter._reduce, lp.FusedNest: _Emitter._fused,
    lp.Mma: _Emitter._mma, lp.Loop: _Emitter._loop, lp.Pipeline: _Emitter._pipeline,
    lp.Parallel: _Emitter._parallel, lp.Barrier: _Emitter._barrier, lp.Note: _Emitter._note,
}
#: Element expression -> its printer.
_ELEM: dict[type, Callable[[_Printer, Any, _Work], str]] = {
    lp.Lit: _Printer._lit, lp.IndexOf: _Printer._indexof, lp.ViewRead: _Printer._viewread,
    lp.BufRead: _Printer._bufread, lp.Unary: _Printer._unary, lp.Binary: _Printer._binary,
    lp.Select: _Printer._select, lp.Cast: _Printer._cast, _Cached: _Printer._cached,
}
#: Spread statement -> its printer.
_NODE: dict[type, Callable[[_Printer, Any, str], list[str]]] = {
    _Work: _Printer._work, _Sync: _Printer._sync, _Loop: _Printer._loop,
    _Pipe: _Printer._pipe, _Comment: _Printer._comment,
}


def _describe_buffer(b: lp.Buffer) -> str:
    shape = ", ".join(map(str, b.shape))
    lay = ""
    if b.layout.strides != dense(b.shape).strides or b.layout.swizzles:
        lay = " stride [" + ", ".join(map(str, b.layout.strides)) + "]" + "".join(
            f" {sw}" for sw in b.layout.swizzles)
    ver = f" x{b.versions}" if b.versions > 1 else ""
    return f"%{b.name}: {b.dtype}[{shape}]{lay}{ver}, {b.role} in {b.resource}"


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


def _lifetimes(nodes: list[_Node], homes: Mapping[str, _Home]) -> dict[str, tuple[int, int]]:
    """[first, last] statement positions of each pooled buffer, over whole loops when its
    value may cross a loop's back edge (read before written in the body, several
    versions, used inside and outside, or first written in a nested loop or a stage)."""
    records: dict[str, list[tuple[int, bool, tuple[int, ...]]]] = {}
    spans: dict[int, tuple[int, int]] = {}
    loops: set[int] = set()
    pos = 0
    next_id = 0

    def walk(body: Iterable[_Node], stack: tuple[int, ...]) -> None:
        nonlocal pos, next_id
        for n in body:
            if isinstance(n, _Work):
                pos += 1
                for name, write in _work_buffers(n):
                    if homes[name].pooled:
                        records.setdefault(name, []).append((pos, write, stack))
            elif isinstance(n, _Loop | _Pipe):
                sid, next_id = next_id, next_id + 1
                loops.add(sid)
                start = pos + 1
                if isinstance(n, _Loop):
                    walk(n.body, (*stack, sid))
                for st in n.stages if isinstance(n, _Pipe) else ():
                    stage_id, next_id = next_id, next_id + 1
                    walk(st.body, (*stack, sid, stage_id))
                spans[sid] = (start, pos)

    walk(nodes, ())
    out: dict[str, tuple[int, int]] = {}
    for name, recs in records.items():
        lo, hi = min(r[0] for r in recs), max(r[0] for r in recs)
        first = min(recs)
        for sid in {s for r in recs for s in r[2] if s in loops}:
            inside = all(sid in r[2] for r in recs)
            depth = first[2].index(sid) if sid in first[2] else -1
            direct = first[2][depth + 1:]  # a pipeline's stage, or nothing for a loop
            same = all(r[2][depth + 1:] == direct for r in recs) if inside else False
            definite = first[1] and inside and len(direct) <= 1 and same
            if not definite or homes[name].buffer.versions > 1:
                lo, hi = min(lo, spans[sid][0]), max(hi, spans[sid][1])
        out[name] = (lo, hi)
    return out


_Items = Mapping[str, tuple[int, tuple[int, int]]]  # buffer -> (bytes, [first, last])
_PACK_SEARCH_NODES = 20_000


def _round_up(n: int, step: int) -> int:
    return -(-n // max(1, step)) * max(1, step)


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def _live_peak(items: _Items) -> tuple[int, int]:
    """(statement, bytes) where the buffers live at once take the most bytes: the least
    any packing of ``items`` needs."""
    best = (0, 0)
    for lo in sorted({life[0] for _, life in items.values()}):
        held = sum(size for size, life in items.values() if life[0] <= lo <= life[1])
        if held > best[1]:
            best = (lo, held)
    return best


def _side_by_side(items: _Items) -> tuple[dict[str, int], int]:
    """Every buffer its own bytes: explicit Memory (live throughout) first."""
    offsets: dict[str, int] = {}
    off = 0
    for name in sorted(items, key=lambda n: (items[n][1] != (0, _WHOLE), -items[n][0], n)):
        offsets[name] = off
        off += items[name][0]
    return offsets, off


def _first_fit(items: _Items, order: Iterable[str]) -> tuple[dict[str, int], int]:
    placed: dict[str, int] = {}
    end = 0
    for name in order:
        size, life = items[name]
        busy = sorted((placed[m], placed[m] + items[m][0]) for m in placed
                      if _overlap(life, items[m][1]))
        off = 0
        for o, e in busy:
            if off + size <= o:
                break
            off = max(off, e)
        placed[name] = off
        end = max(end, off + size)
    return placed, end


def _spread_fit(items: _Items, order: Iterable[str], bound: int
                ) -> tuple[dict[str, int], int] | None:
    """Within ``bound`` bytes, each buffer on bytes no other buffer uses where there is
    room (sharing bytes costs write-after-read barriers), else first fit by lifetime."""
    placed: dict[str, int] = {}
    end = 0
    for name in order:
        size, life = items[name]
        if end + size <= bound:
            off = end
        else:  # reuse the bytes of the buffers that died longest ago
            busy = [(placed[m], placed[m] + items[m][0]) for m in placed
                    if _overlap(life, items[m][1])]
            best: tuple[int, int] | None = None
            for cand in sorted({0, *(placed[m] + items[m][0] for m in placed)}):
                if cand + size > bound:
                    break
                if any(cand < e and o < cand + size for o, e in busy):
                    continue
                recent = max((items[m][1][1] for m in placed if placed[m] < cand + size
                              and cand < placed[m] + items[m][0]), default=-1)
                if best is None or recent < best[0]:
                    best = (recent, cand)
            if best is None:
                return None
            off = best[1]
        placed[name] = off
        end = max(end, off + size)
    return placed, end


def _pack(items: _Items, bound: int | None = None) -> tuple[dict[str, int], int]:
    """Byte offsets such that buffers live at the same statement never overlap, and the
    arena they need (sizes are multiples of the alignment, so offsets are too).

    The largest sum of bytes live at one statement bounds every packing from below (the
    plan's peak counts exactly that); first fit in a few orders usually reaches it,
    else a bounded depth-first search over placements on top of earlier buffers tries
    to.  Packing intervals optimally is NP-hard, so the bound is not always reached.
    With room below ``bound``, buffers are first spread over bytes of their own."""
    if bound is not None:
        for key in (lambda n: (items[n][1][0], -items[n][0], n),
                    lambda n: (-items[n][0], items[n][1], n)):
            spread = _spread_fit(items, sorted(items, key=key), bound)
            if spread is not None:
                return spread
    lower = _live_peak(items)[1]
    orders = (lambda n: (-items[n][0], items[n][1], n),
              lambda n: (items[n][1][0], -items[n][0], n),
              lambda n: (items[n][1][0] - items[n][1][1], -items[n][0], n),
              lambda n: (-items[n][0] * (min(items[n][1][1], 1 << 20) - items[n][1][0] + 1),
                         n))
    best = min((_first_fit(items, sorted(items, key=key)) for key in orders),
               key=lambda r: r[1])
    if best[1] <= lower:
        return best
    order = sorted(items, key=orders[0])
    found = [best[1], dict(best[0])]
    visited = 0

    def search(i: int, placed: dict[str, int], end: int) -> None:
        nonlocal visited
        if i == len(order):
            found[:] = [end, dict(placed)]
            return
        name = order[i]
        size, life = items[name]
        others = [(placed[m], placed[m] + items[m][0]) for m in placed
                  if _overlap(life, items[m][1])]
        for off in sorted({0, *(e for _, e in others)}):
            if off + size >= found[0] or visited >= _PACK_SEARCH_NODES:
                return
            if all(off + size <= o or e <= off for o, e in others):
                visited += 1
                placed[name] = off
                search(i + 1, placed, max(end, off + size))
                del placed[name]
                if found[0] <= lower:
                    return

    search(0, {}, 0)
    offsets, end = found[1], found[0]
    assert isinstance(offsets, dict) and isinstance(end, int)
    return offsets, end


def _what(h: _Home) -> str:
    """A buffer of the arena, for messages and the declarations' map."""
    b = h.buffer
    if h.exchange:
        return f"exchange area for the per-thread slices of %{b.name.rsplit('.x', 1)[0]}"
    if h.hoisted:
        return f"%{b.name}: {b.note}"
    ver = f" ({b.versions} versions)" if b.versions > 1 else ""
    return f"%{b.name}{ver}"


def _group_pointer(dtype: DType) -> str:
    return f"group_{dtype.value}_"


def _flag_order(cls: str) -> int:
    return list(tb.MEM_FLAGS).index(cls)


def _scalar(dtype: DType) -> str:
    found = tb.MSL_SCALAR.get(dtype)
    if found is None:
        reason = tb.UNSUPPORTED_DTYPES.get(dtype, "no MSL spelling")
        raise _fail(f"element type {dtype}: {reason}", rule="msl-subset")
    return found


def _row_major(index: tuple[Expr, ...], shape: tuple[Expr, ...]) -> Expr:
    terms = [mul(i, product(shape[d + 1:])) for d, i in enumerate(index)]
    return add(0, *terms)


def _negated(e: Expr) -> Expr | None:
    if isinstance(e, Const) and e.value < 0:
        return Const(-e.value)
    if isinstance(e, Apply) and e.op is ExprOp.MUL and isinstance(e.args[0], Const) \
            and e.args[0].value < 0:
        return mul(-e.args[0].value, *e.args[1:])
    return None


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def _strip(text: str) -> str:
    return text[1:-1] if text.startswith("(") and text.endswith(")") and _balanced(
        text[1:-1]) else text


# =========================================================================== entry point


def emit_msl(kernel: Kernel, plan: MaterializationPlan | None, target: Target, *,
             threads_per_group: int = DEFAULT_THREADS,
             sizes: Mapping[str, int] | None = None) -> MslKernel:
    """Lower ``kernel`` under ``plan`` to one Metal ``kernel void`` (see the module doc).

    ``sizes`` are the bindings static arrays are sized for (default: the plan's).
    Raises :class:`PlannerError` naming the rule, the objects and the bytes when the
    target cannot honour a constraint.
    """
    _check_target(target)
    for p in kernel.params:
        vt = p.type
        if isinstance(vt, ViewType) and vt.dtype in tb.UNSUPPORTED_DTYPES:
            raise _fail(f"view {p.name_hint} is {vt.dtype}: {tb.UNSUPPORTED_DTYPES[vt.dtype]}",
                        rule="msl-subset")
    env: dict[str, int] = dict(plan.bindings) if plan is not None else {}
    env.update(sizes or {})
    binding = bind_execution(kernel, target, env)
    _check_memories(kernel, plan, target, env, binding)
    if plan is not None and plan.status is Status.INFEASIBLE:
        raise _fail(f"the plan for {kernel.name} on {target.name} is infeasible: "
                    + "; ".join(plan.explanation or ("no explanation",)), rule="infeasible")
    program = lp.build_loop_program(kernel, plan, target, binding)
    return _Emitter(kernel, program, target, env, threads_per_group, binding, plan).emit()
