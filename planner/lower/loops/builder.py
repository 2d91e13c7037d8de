"""Lowering a kernel under its plan and execution binding to a loop program.

:class:`_Builder` walks the kernel once, segment by segment: buffers from the edges'
decisions and the plan's Memory homes, element expressions that read a buffer, inline
their producer or re-derive its chain, a statement for each op, and temporal loops as
ordered loops or software pipelines with their carries and versions.  A windowed Memory
store writes just its window of the Memory's one buffer; the instances of a child parallel
writing windows of an ancestor's Memory share that buffer (S16), and the plan's sync rule
for it follows the parallel (the join).  :func:`build_loop_program` is the entry point.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from planner.catalog import Resource, Target
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
    Value,
)
from planner.ir.dtypes import DType
from planner.ir.expr import Const, Expr, Sym, add, mod, mul, product
from planner.ir.graph import writing_parallel
from planner.ir.layout import Layout, XorSwizzle, dense
from planner.ir.types import MemoryType, StateType, TileType, ViewType
from planner.lower.loops.fuse import fuse_siblings, one_pass_squares
from planner.lower.loops.ir import (
    Barrier,
    Binary,
    Buffer,
    BufRead,
    BufWrite,
    Cast,
    Elem,
    FusedNest,
    IndexOf,
    Lit,
    Loop,
    LoopProgram,
    Mma,
    MmaBuf,
    MmaView,
    Nest,
    Parallel,
    Pipeline,
    Prefetch,
    ReduceNest,
    Segment,
    Select,
    Stage,
    Stmt,
    Unary,
    ViewParam,
    ViewRead,
    ViewWrite,
    Window,
    elem_reads,
    nest_var,
    walk_stmts,
)
from planner.lower.loops.pipeline import PipeInfo, PipelineAnalysis
from planner.lower.loops.uses import INLINABLE, STORING, PlannedUses
from planner.plan.decisions import (
    Decision,
    EdgePlan,
    LayoutChoice,
    MaterializationPlan,
    register_copy_name,
    staging_name,
)
from planner.realize.binding import ExecutionBinding, bind_execution
from planner.realize.storage import version_granule
from planner.realize.temporaries import temporary_home

__all__ = ["DEFAULT_RESOURCES", "build_loop_program"]

_KIND = "lowering"

#: Resource names used when no target catalog is given (the x86-avx2 catalog's).
DEFAULT_RESOURCES = {"private": "registers", "shared": "local", "global": "dram"}


def _vars(rank: int) -> tuple[Expr, ...]:
    return tuple(Sym(nest_var(i)) for i in range(rank))


# =========================================================================== the builder

_DECIDED = object()  # _Builder.mode outside a recomputation
_REDUCE_IDENTITY = {ReduceFn.SUM: 0.0, ReduceFn.MAX: float("-inf")}
_REDUCE_COMBINE = {ReduceFn.SUM: BinaryFn.ADD, ReduceFn.MAX: BinaryFn.MAX}


@dataclass
class _BufRef:
    """Where a value's buffer is: name and the version expression of its writer/readers."""

    name: str
    version: Expr


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


class _Builder(PlannedUses):
    """One lowering of a kernel: the buffers, notes and statements made so far, and the
    state of the walk (the loops it is in, a recomputation under way)."""

    def __init__(self, kernel: Kernel, plan: MaterializationPlan | None,
                 target: Target | None, binding: ExecutionBinding | None = None) -> None:
        self.target = target
        if binding is None and target is not None:
            binding = bind_execution(kernel, target, dict(plan.bindings) if plan else None)
        self.binding = binding
        if self.binding is not None and self.binding.problems:
            p = self.binding.problems[0]
            raise error(f"{p.subject}: {p.detail}; the lowering does not re-bind or re-own "
                        "it", p.loc, rule=p.rule, kind=_KIND)
        super().__init__(kernel, plan)
        self.buffers: dict[str, Buffer] = {}
        self.buf_of: dict[Value, _BufRef] = {}
        self.reg_of: dict[Value, _BufRef] = {}  # register copies for virtual edges
        self.mem_buf: dict[Value, str] = {}  # memory value -> buffer name
        self.mem_versioned: dict[str, dict[LoopOp, int]] = {}
        self.value_versioned: dict[Value, tuple[LoopOp, int]] = {}
        self.segment_buffers: list[str] = []
        self.notes: list[str] = []
        self.pipes: dict[LoopOp, PipeInfo | str] = {}
        self.pipelines = PipelineAnalysis(self)
        self.loop_stack: list[LoopOp] = []
        self.pending_barriers: list[Barrier] = []
        self._temp = 0
        # _DECIDED, or the owner (a ParallelOp, None at the root) of the recomputation
        # whose chain is being re-derived
        self.mode: object = _DECIDED

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
        # the bytes at the plan's bindings, as the planner sized the temporary
        sized = n if n is not None else product(shape).evaluate(dict(self.plan.bindings)) \
            if self.plan is not None else 0
        nbytes = int(sized) * dtype.itemsize
        res = temporary_home(self.binding.target, scope, nbytes, n is not None)
        if res is None:
            raise error(f"a {dtype} temporary of {nbytes:,} B used at scope {scope} has no "
                        f"home on {self.binding.target.name}: no resource serving {scope} "
                        "that it may write and read has room for it", op.loc, rule="S17",
                        kind=_KIND)
        return res.name, res.resource_class

    def new_buffer(self, base: str, dtype: DType, layout: Layout, resource: tuple[str, str],
                   role: str, edges: tuple[str, ...] = (), note: str = "",
                   versions: int = 1, planned: str = "") -> str:
        """A buffer named after ``base``; ``planned``: the plan's buffer it realizes
        (default: the value or Memory named ``base``)."""
        name = base
        i = 0
        while name in self.buffers:
            name, i = f"{base}.{i}", i + 1
        alignment = self._alignment(resource[0])
        self.buffers[name] = Buffer(name, dtype, layout, resource[0], resource[1], versions,
                                    role, edges, note, alignment,
                                    version_granule=version_granule(alignment),
                                    planned=planned or f"%{base}")
        self.segment_buffers.append(name)
        return name

    def _resource(self, resource: str) -> Resource | None:
        if self.target is None:
            return None
        try:
            return self.target.resource(resource)
        except PlannerError:
            return None

    def _alignment(self, resource: str) -> int:
        res = self._resource(resource)
        return res.alignment if res is not None else 1

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
        ids = tuple(e.edge_id for e in edges if e is not None and e.decision in STORING)
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
                          and e.decision in STORING])
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
                                  "register copy for the virtual edges", versions,
                                  register_copy_name(f"%{self.name(v)}"))
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

    def store_from_registers(self, v: Value, ctx: _Ctx) -> None:
        """After ``v`` is computed into its register copy: store it into its buffer (the
        operands' last reads and the register copy's first write are one statement, as
        the planner holds them at the value's point)."""
        reg = self.reg_of.get(v)
        ref = self.buf_of.get(v)
        if reg is None or ref is None:
            return
        t = v.type
        assert isinstance(t, TileType)
        idx = _vars(t.rank)
        ctx.out.append(Nest(tuple(map(str, idx)), t.shape, BufWrite(ref.name, idx, ref.version),
                            BufRead(reg.name, idx, reg.version, t.dtype)))

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

    def _inline_slice(self, op: core.SliceOp, idx: tuple[Expr, ...]) -> Elem:
        return self.read(op.x, op.source_index(idx), op, 0)

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
        segments = [dataclasses.replace(seg, body=fuse_siblings(seg.body, self._pinned))
                    for seg in segments]
        if self.plan is not None and self.target is not None \
                and self.target.backend == "llvm-cpu":  # SquaresNest: the CPU emitter's
            env = dict(self.plan.bindings)
            segments = [dataclasses.replace(seg, body=one_pass_squares(
                seg.body, self.buffers, env, self._pinned)) for seg in segments]
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
        first = self.reg_of.get(v, ref)  # computed in registers, then stored from there
        ctx.out.append(self._dest_order(Nest(tuple(map(str, idx)), t.shape,
                                             BufWrite(first.name, idx, first.version),
                                             self.inline(v, idx))))
        self.store_from_registers(v, ctx)

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
            first = self.reg_of.get(op.result, ref)  # folded in registers, then stored
            ctx.out.append(ReduceNest(tuple(map(str, idx)), xt.shape, op.fn,
                                      BufWrite(first.name, out_idx, first.version), value))
            self.store_from_registers(op.result, ctx)
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
        planned = staging_name(f"%{self.name(v)}", f"%{self.name(op.result)}")
        if isinstance(e, BufRead) and e.index == idx:
            lay = self.buffers[e.buffer].layout
            if not self._mma_needs_dense(lay):
                return MmaBuf(e.buffer, e.version)
        if isinstance(e, ViewRead) and e.index == tuple(
                add(o, i) for o, i in zip(e.window.offsets, idx, strict=True)) \
                and e.window.shape == shape:
            stage = self.new_buffer(self.temp_name(f"{self.name(v)}.stage"), DType.F32,
                                    dense(shape), self.temp_resource(shape, DType.F32, op),
                                    "stage", note="edge tiles of the view window",
                                    planned=planned)
            return MmaView(e.window, e.fill, stage)
        stage = self.new_buffer(self.temp_name(f"{self.name(v)}.stage"), DType.F32,
                                dense(shape), self.temp_resource(shape, DType.F32, op), "stage",
                                note="mma operand staging", planned=planned)
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
        if not any(isinstance(u, (core.MemStoreOp, core.MemLoadOp, core.CopyAsyncOp))
                   for u, _ in self.uses.get(op.memory, ())):
            self._memory_resource(op)  # S14: never bypasses its resource constraint
            # S14: an unused allocation (zero-sized or not) has no address events; the
            # binding and the proofs still checked its resource constraint, and the
            # planner holds no bytes for it, so neither does the program
            self.notes.append(f"Memory {self.name(op.memory)} has no loads or stores: not "
                              "allocated")
            return
        planned = self.memory_plan(op)
        if planned is not None and planned.resource:
            resource = (planned.resource, self.resource_class(planned.resource))
        else:
            resource = self._memory_resource(op)
        name = self.new_buffer(self.name(op.memory), op.dtype, op.layout, resource, "memory",
                               note=f"explicit Memory ({op.resource.value}) owned by "
                                    f"{op.owner}, declared layout",
                               versions=planned.versions if planned is not None else 1)
        self.mem_buf[op.memory] = name

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
        """The tile into its Memory's buffer: the whole buffer, or just the window
        ``offsets`` +: ``shape`` (S16: the instances of a child parallel each write their
        own window of the one buffer their ancestor owns; the other elements keep their
        values)."""
        tt = op.tile.type
        assert isinstance(tt, TileType)
        name = self.mem_buf[op.memory]
        idx = _vars(tt.rank)
        at = tuple(add(o, i) for o, i in zip(op.offsets, idx, strict=True)) \
            if op.windowed else idx
        ctx.out.append(self._dest_order(Nest(tuple(map(str, idx)), tt.shape,
                                             BufWrite(name, at, self.memory_version(name),
                                                      op.offsets if op.windowed else ()),
                                             self.read(op.tile, idx, op, 2))))

    def _emit_copy_async(self, op: core.CopyAsyncOp, ctx: _Ctx) -> None:
        """A copy into a Memory's current version, as the realization decides
        (:mod:`planner.realize.copies`): the issuing worker copies the window itself (no
        CPU or Metal target has an asynchronous engine); elements outside a view read
        ``fill``, as ``tile.load`` does."""
        name = self.mem_buf[op.memory]
        planned = self.copy_plan(op)
        how = planned.detail if planned is not None else "in program order (no plan)"
        self.notes.append(f"copy into %{name} (line {op.loc.line}): {how}")
        idx = _vars(len(op.shape))
        index = tuple(add(o, i) for o, i in zip(op.offsets, idx, strict=True))
        if len(op.source) == 1:
            view = op.source[0]
            vt = view.type
            assert isinstance(vt, ViewType)
            vname = self.name(view)
            src: Elem = ViewRead(vname, index, op.fill, vt.dtype,
                                 Window(vname, op.offsets, op.shape))
        else:
            sname = self.mem_buf[op.source[0]]
            src = BufRead(sname, index, self.memory_version(sname),
                          self.buffers[sname].dtype)
        if planned is not None and planned.mode == "prefetch" and len(op.source) == 1:
            nxt = self._next_window(op)
            if nxt is not None:
                ctx.out.append(Prefetch(nxt))
        ctx.out.append(self._dest_order(Nest(tuple(map(str, idx)), op.shape,
                                             BufWrite(name, idx, self.memory_version(name)),
                                             src)))

    def _next_window(self, op: core.CopyAsyncOp) -> Window | None:
        """The window this copy reads one iteration of its innermost loop later (what a
        prefetching engine fetches ahead), or None outside a loop or where the window
        does not move with it."""
        if not self.loop_stack:
            return None
        loop = self.loop_stack[-1]
        step = {a.index.name: add(a.index, Const(1)) for a in loop.axes[-1:]}
        offsets = tuple(o.substitute(step) for o in op.offsets)
        if offsets == op.offsets:
            return None
        vname = self.name(op.source[0])
        return Window(vname, offsets, op.shape)

    def _emit_wait(self, op: core.WaitOp, ctx: _Ctx) -> None:
        """The copy ran in program order: nothing left to wait for (a Metal group's
        barrier before the destination is read is placed like any Memory store's)."""

    def _pinned(self, nest: Nest | ReduceNest) -> bool:
        """Nests sibling fusion may not move earlier: those writing a buffer in a resource
        whose capacity the plan counts (moving one would hold its buffer over the nests
        it passes, at points where the plan does not)."""
        d = nest.dest
        if not isinstance(d, BufWrite):
            return False
        buf = self.buffers[d.buffer]
        if buf.resource_class == "private":
            return True
        res = self._resource(buf.resource)
        return res is not None and res.capacity is not None

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
        self._join_barriers(op, ctx)

    def _join_barriers(self, op: ParallelOp, ctx: _Ctx) -> None:
        """After a child parallel whose instances wrote windows of an ancestor's Memory
        (S16): the plan's sync rule for that Memory, at the join (one barrier per rule)."""
        if not op.inits or self.plan is None:
            return
        names = dict.fromkeys(self.mem_buf[x.memory] for x in op.body.walk()
                              if isinstance(x, core.MemStoreOp) and x.windowed
                              and writing_parallel(x) is op and x.memory in self.mem_buf)
        rules: dict[str, list[str]] = {}
        for name in names:
            planned = next((b for b in self.plan.buffers
                            if b.role == "memory" and b.name == f"%{name}"), None)
            if planned is not None and planned.sync:
                rules.setdefault(planned.sync, []).append(f"%{name}")
        for rule, bufs in rules.items():
            ctx.out.append(Barrier(rule, self._sync_scope(rule),
                                   f"join of parallel {op.label}: the instances' windows of "
                                   f"{', '.join(bufs)} written, then read"))

    def _emit_yield(self, op: core.YieldOp, ctx: _Ctx) -> None:
        """A parallel's yield of the states its instances wrote windows of (S16): nothing
        to copy, the windows are in the one buffer of the ancestor's Memory, which is also
        the region's joined state."""
        region = op.parent.parent if op.parent is not None else None
        if isinstance(region, ParallelOp) and all(
                isinstance(v.type, StateType) for v in op.values):
            return
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
            if isinstance(pipe, PipeInfo):
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
        if isinstance(pipe, PipeInfo):
            stages = tuple(Stage(name, lag, body)
                           for name, lag, body in zip(op.stages, pipe.lags, bodies,
                                                      strict=True))
            ctx.out.append(Pipeline(op.label, vars_, extents, op.window, stages))
        else:
            note = pipe if isinstance(pipe, str) else ""
            ctx.out.append(Loop(op.label, op.kind.value, vars_, extents, bodies[0], note))

    def _carries(self, op: LoopOp, pipe: PipeInfo | str) -> list[_Carry | None]:
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
            self.buffers[name] = dataclasses.replace(  # old value + yielded one
                self.buffers[name], version_granule=self.buffers[name].alignment)
            cur, nxt = Sym(f"{name}.cur"), Sym(f"{name}.next")
            stage = 0
            if isinstance(pipe, PipeInfo) and i < len(yields):
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

    def _pipeline_info(self, op: LoopOp) -> PipeInfo | str:
        cached = self.pipes.get(op)
        if cached is not None:
            return cached
        info = self.pipelines.analyze(op)
        if isinstance(info, PipeInfo):
            info = self.pipelines.fit_to_plan(op, info)
        self.pipes[op] = info
        if isinstance(info, PipeInfo):
            self._assign_versions(op, info)
        elif info and op.kind is LoopKind.PIPELINE:
            self.notes.append(f"pipeline {op.label} ordered: {info}")
        return info

    def _assign_versions(self, op: LoopOp, info: PipeInfo) -> None:
        """Iteration-local versions for buffers written in one stage, read in a later one."""
        body = [o for o in op.body.ops if not isinstance(o, core.YieldOp)]
        for o in body:
            lag_w = info.lags[info.stage_of[o]]
            for v in o.results:
                if not isinstance(v.type, TileType) or not self.buffered(v):
                    continue
                span = max((info.lags[s] - lag_w
                            for s in self.pipelines.buffer_read_stages(v, op, info)), default=0)
                if span > 0:
                    self.value_versioned[v] = (op, span + 1)
            for x in [o, *(y for b in o.region_blocks() for y in b.walk())]:
                if not isinstance(x, core.MEMORY_WRITE_OPS):
                    continue
                span = 0
                for r, _ in self.uses.get(x.results[0], []):
                    if isinstance(r, core.MemLoadOp):
                        for s in self.pipelines.eval_stages(r.result, op, info):
                            span = max(span, info.lags[s] - lag_w)
                if span > 0:
                    name = self.mem_buf[x.memory]
                    alloc = self.producer(x.memory)
                    planned = self.memory_plan(alloc) if isinstance(alloc, core.AllocOp) \
                        else None
                    versions = max(span + 1, planned.versions if planned is not None else 1)
                    self.mem_versioned.setdefault(name, {})[op] = versions
                    buf = self.buffers[name]
                    self.buffers[name] = dataclasses.replace(
                        buf, versions=max(buf.versions, versions))

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
    core.SliceOp: _Builder._inline_slice,
    core.MemLoadOp: _Builder._inline_memload,
}

_GENERATE: dict[type, Callable[[_Builder, Op, _Ctx], None]] = {
    **{cls: _Builder._emit_value for cls in INLINABLE},
    core.ReduceOp: _Builder._emit_reduce,
    core.MmaOp: _Builder._emit_mma,
    core.StoreOp: _Builder._emit_store,
    core.AllocOp: _Builder._emit_alloc,
    core.MemStoreOp: _Builder._emit_mem_store,
    core.CopyAsyncOp: _Builder._emit_copy_async,
    core.WaitOp: _Builder._emit_wait,
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


