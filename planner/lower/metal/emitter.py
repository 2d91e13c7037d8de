"""Metal Shading Language from the loop program: the Metal backend's emitter.

The emitter prints one ``kernel void`` per planned kernel from the same target-neutral
:class:`~planner.lower.loops.program.LoopProgram` the CPU backend consumes.  Spellings
come from :mod:`planner.lower.metal.tables`; the emitter decides where every buffer
lives, which thread computes which element, and where the threads must meet.  This
module is its entry point (:func:`emit_msl`) and maps statements onto threads and
buffers; the other jobs have a module each: :mod:`~planner.lower.metal.spread` (the
mapped program), :mod:`~planner.lower.metal.arena` (threadgroup bytes),
:mod:`~planner.lower.metal.barriers` (conflicts and barriers),
:mod:`~planner.lower.metal.printer` (the MSL text), :mod:`~planner.lower.metal.checks`
(refusals) and :mod:`~planner.lower.metal.results` (what :func:`emit_msl` returns).

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
  edges, staging) and the exchange areas below: exactly the plan's buffers in the
  resource (``plan.buffers``), whatever their element type, each at a byte offset
  aligned to the resource's alignment and each read through a typed ``threadgroup T*``
  view.  When the buffers side by side fit the plan's peak
  for the resource (``plan.peaks``) each gets its own bytes (reuse would cost
  write-after-read barriers); otherwise buffers whose lifetimes do not overlap share
  bytes, packed so that the arena is at most that peak (the largest sum of bytes live
  at one statement is the bound every packing needs; first fit in several orders, then
  CP-SAT).  Without a plan the bound is the resource's capacity.  A buffer
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
* **Broadcast subexpressions.**  A fused subexpression of a statement that does not
  depend on one of the statement's distributed variables (a producer fused into a
  broadcast: ``rsqrt(var[i] + eps)`` in ``y[i, j] = xc[i, j] * rsqrt(var[i] + eps)``)
  is never evaluated per broadcast element: each thread keeps its value while the
  variables it depends on stay the same (once per thread and source element; a note
  says so).  Computing it once per source element into threadgroup memory would need a
  buffer the plan does not hold, so the emitter does not.
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
* **Windows of an ancestor's Memory (S16).**  A windowed ``memory.store`` is spread over
  the threads by the window's elements (``offsets`` + the element), so it is not by the
  element's owner: a later read of the Memory needs a barrier.  The instances of the
  nested parallel that writes the windows run one after another in the group, and the
  verifier proved their windows disjoint, so two instances' windows never conflict: the
  only barrier is the plan's sync rule at the join, after the instances' loop.  A window
  of per-thread private Memory is refused (its elements belong to other threads).
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
(manual Memory, the plan's temporaries and exchange areas) larger than
the target's threadgroup memory, element types outside the subset (``f16``/``bf16``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from planner.catalog import Target
from planner.ir import core
from planner.ir.core import Kernel, ReduceFn
from planner.ir.dtypes import DType
from planner.ir.expr import Const, Expr, Sym, add, ceil_div, mul, product
from planner.ir.layout import dense
from planner.ir.printer import Printer, PrintOptions, ValueNamer
from planner.ir.types import ViewType
from planner.lower.loops import program as lp
from planner.lower.metal import tables as tb
from planner.lower.metal.arena import _ArenaLayout
from planner.lower.metal.barriers import _BarrierPlacement
from planner.lower.metal.checks import _check_memories, _check_target, _fail
from planner.lower.metal.printer import _Namer, _Printer
from planner.lower.metal.results import MslKernel, MslParam, SizeLimit
from planner.lower.metal.spread import (
    _Cached,
    _Comment,
    _Home,
    _Loop,
    _Node,
    _Pipe,
    _reads,
    _Stage,
    _Sync,
    _walk_works,
    _Work,
    _work_buffers,
)
from planner.lower.metal.tables import Space
from planner.plan.decisions import MaterializationPlan, Status, exchange_name
from planner.realize.binding import ExecutionBinding, MemoryBinding, bind_execution

__all__ = ["DEFAULT_THREADS", "MslKernel", "MslParam", "SizeLimit", "emit_msl"]

DEFAULT_THREADS = 64


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


def _vars(n: int) -> tuple[str, ...]:
    return tuple(lp.nest_var(i) for i in range(n))


# =========================================================================== the emitter


class _Emitter(_ArenaLayout, _BarrierPlacement):
    """Maps one kernel's loop program onto a threadgroup and emits it (the arena and
    barrier steps come from its bases)."""

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
        buf = self.program.buffer(dest.buffer)
        if dest.offsets:
            return self._window_vars(dest, ext)
        names = [i.name for i in dest.index if isinstance(i, Sym) and i.name in ext]
        dist = tuple((v, ext[v]) for v in names)
        if len(names) != len(dest.index) or len(set(names)) != len(names) \
                or tuple(e for _, e in dist) != buf.shape:
            raise _fail(f"lowering to Metal: a write to %{dest.buffer} at "
                        f"[{', '.join(map(str, dest.index))}] is not one element per "
                        "iteration of its destination", rule="msl-lowering")
        return dist

    def _window_vars(self, dest: lp.BufWrite, ext: Mapping[str, Expr]
                     ) -> tuple[tuple[str, Expr], ...]:
        """A windowed store (S16): one window element per iteration, ``offsets`` plus the
        nest's variables; the threads split the window, not the buffer, so a per-thread
        slice (which holds the elements its thread owns in the whole buffer) cannot take
        it."""
        in_offsets = {s for o in dest.offsets for s in o.symbols()}
        names: list[str] = []
        for off, i in zip(dest.offsets, dest.index, strict=True):
            v = next((n for n in ext if add(off, Sym(n)) == i), None)
            if v is None or v in names or v in in_offsets:
                raise _fail(f"lowering to Metal: a windowed write to %{dest.buffer} at "
                            f"[{', '.join(map(str, dest.index))}] is not one window element "
                            "per iteration", rule="msl-lowering")
            names.append(v)
        h = self.homes.get(dest.buffer)
        if h is not None and h.space is Space.THREAD:
            raise _fail(f"Memory %{dest.buffer} is per-thread private storage on Metal, and a "
                        f"windowed store [{', '.join(map(str, dest.offsets))}] +: "
                        f"[{', '.join(str(ext[v]) for v in names)}] writes elements other "
                        "threads own (S16, S17): give the Memory a shared resource",
                        rule="S17")
        return tuple((v, ext[v]) for v in names)

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
        return [_Loop(s.label, s.vars, s.extents, tuple(self.convert(s.body)), note,
                      instances=True)]

    def _barrier(self, s: lp.Barrier) -> list[_Node]:
        classes = tb.SYNC_RULE_CLASSES.get(s.rule)
        if classes is None:
            raise _fail(f"the plan synchronizes with {s.rule!r}, which has no Metal spelling "
                        f"(known: {', '.join(tb.SYNC_RULE_CLASSES)})", rule="S21")
        return [_Sync(frozenset(classes), f"plan: {s.rule}" + (f", {s.note}" if s.note
                                                                else ""))]

    def _note(self, s: lp.Note) -> list[_Node]:
        return [_Comment(s.text)]

    def _prefetch(self, s: lp.Prefetch) -> list[_Node]:
        """MSL has no prefetch: a hint only, so it stays a comment."""
        return [_Comment(f"prefetch {s.window} (no MSL prefetch: hint dropped)")]

    def _describe(self, dest: lp.BufWrite | lp.ViewWrite) -> str:
        if isinstance(dest, lp.ViewWrite):
            return f"store {dest.window}"
        buf = self.program.buffer(dest.buffer)
        return f"%{buf.name} ({buf.role})"

    # ------------------------------------------------------------------ exchanges

    def _with_exchanges(self, w: _Work) -> list[_Node]:
        """Cache ``w``'s broadcast subexpressions per thread, then publish per-thread
        slices that it reads away from their owners."""
        return self._exchanged(self._cache_broadcasts(w))

    # ------------------------------------------------------------------ broadcasts

    def _cache_broadcasts(self, w: _Work) -> _Work:
        """``w`` with its broadcast subexpressions kept per thread (see the module doc).

        A subexpression is kept when it computes something (an operator over at least
        one read) and does not depend on one of ``w``'s distributed variables; the
        largest such subexpressions are taken.  It must not read what ``w`` writes."""
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
            return w
        return self._cache(w, roots, order)

    def _cache(self, w: _Work, roots: Mapping[lp.Elem, frozenset[str]],
               order: list[str]) -> _Work:
        """Each thread keeps the value of a broadcast subexpression while the variables
        it depends on stay the same (once per thread and source element instead of once
        per element; only over distributed ones)."""
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
            reader = (self.homes[w.dest.buffer].buffer.planned
                      if isinstance(w.dest, lp.BufWrite) else f"tile.store(%{w.dest.view})")
            xbuf = lp.Buffer(xname, src.dtype, dense(src.shape), "exchange", "shared",
                             role="exchange", note=f"exchange of %{src.name}",
                             planned=exchange_name(src.planned, reader))
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

    # ------------------------------------------------------------------ emission

    def spread(self) -> list[_Node]:
        """The segment as spread statements; only the buffers they touch keep a home."""
        nodes = self.convert(self.segment.body)
        used = {b for w in _walk_works(nodes) for b, _ in _work_buffers(w)}
        self.homes = {k: h for k, h in self.homes.items() if k in used}
        return nodes

    def emit(self) -> MslKernel:
        self.place_buffers()
        nodes = self.spread()
        self.place_device()
        self.assign_arena(nodes)
        if self.cached_exprs:
            self.notes.append(
                f"{self.cached_exprs} broadcast subexpressions are kept per thread (evaluated "
                "once per thread and source element, not once per broadcast element; the "
                "plan holds no threadgroup buffer for them)")
        tg_bytes, thread_bytes = self.check_capacity()
        nodes, _ = self.place_barriers(nodes, [], ())
        printer = _Printer(self)
        params = printer.params()
        source = printer.source(nodes, params, tg_bytes, thread_bytes)
        arena = tuple(sorted((h.buffer.planned, h.offset, self.arena_items[n][0])
                             for n, h in self.homes.items() if n in self.arena_items))
        return MslKernel(source, printer.kernel_name, tuple(params), self.threads,
                         self.segment.extents if self.segment.parallel else (),
                         tuple(sorted(self.env.items())), tuple(self.limits), tg_bytes,
                         thread_bytes, tuple(self.notes), arena)


#: Loop-program statement -> its conversion into spread statements.
_CONVERT: dict[type, Callable[[_Emitter, Any], list[_Node]]] = {
    lp.Nest: _Emitter._nest, lp.ReduceNest: _Emitter._reduce, lp.FusedNest: _Emitter._fused,
    lp.Mma: _Emitter._mma, lp.Loop: _Emitter._loop, lp.Pipeline: _Emitter._pipeline,
    lp.Parallel: _Emitter._parallel, lp.Barrier: _Emitter._barrier, lp.Note: _Emitter._note,
    lp.Prefetch: _Emitter._prefetch,
}


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
