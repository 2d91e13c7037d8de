"""The Tile IR verifier.

Verification order (each step assumes the previous ones passed for the op):

1. **Op shape** — per op: operand kinds and arities from its ``SPEC``, its own
   cross-field invariants (mma shapes, broadcast dims, ...), result types equal
   to what the op infers.
2. **Scoping and dominance** — every operand is defined before its use in the same
   block or an enclosing one; every symbol in an expression is a kernel extent or
   the index of an enclosing region; loop bodies end in a ``yield`` matching the
   carried types and nothing else yields.
3. **MemorySSA** (S9, S15, S16) — every state belongs to exactly one Memory (followed
   through stores and loop carries); a store/load names the memory of its state
   (no swapping same-typed states); only the current state of a memory may be used
   (no reuse of an old state after a store); a carried memory yields its current
   state.  **Range-aware writes (S16)**: a windowed ``memory.store`` writes only the
   window ``offsets`` +: ``shape``, which z3 must prove inside the memory; inside a child
   ``parallel`` it may write an ancestor's Memory, which the region carries (a block
   argument per instance, a ``yield``) and joins into one state (its result), when z3
   proves that no two instances write one element (the counterexample names the two
   instances and the element; z3 giving up refuses the store as not proved).  A whole
   ancestor store or copy inside a child parallel, and a read of a memory inside a
   parallel whose instances write it, are rejected (S16); reads of an ancestor's memory
   nothing in the region writes are fine.  An asynchronous copy
   (``memory.copy_async``) is a store whose state is readable only after ``memory.wait``
   on its token: reading the memory (or copying from it) before, a second wait, a wait in
   a loop/parallel body on a token from outside it, a store or copy into a memory whose
   copy is in flight, and a copy never waited before the kernel, the loop iteration or
   the parallel instance ends are rejected (S9.async-read, -wait, -overwrite,
   -unwaited).  A token rebound in a loop is carried: it must be in flight when the loop
   starts and at every yield (S9.async-carry); the loop's result token is then in flight.
4. **Definite initialization** (S10) — a load must see a state that is stored on
   every path, including the path where a loop runs zero times.  A kernel is defined
   over its symbols, so a store inside a loop counts only when every axis extent of
   the loop is provably ``>= 1`` for *every* admissible value of the symbols: their
   declared ``bounds`` (default ``0..2**31-1``), never the bindings of one run.  The
   proof is interval arithmetic first, then z3 under a time limit; z3 giving up
   counts as "not provable".  A windowed store defines an initialized state when the
   state it overwrites was, or when z3 proves the window covers the memory; the join of a
   parallel when its init was, or when the instances' windows provably cover it.
5. **Allocations** (S5, S13, S14) — the resource constraint must be one the owner
   can have; whole-tile storage needs an injective layout; a known-empty
   allocation with surviving uses is rejected (unused ones are removed by
   :func:`remove_unused_empty_allocs`); byte addressing must fit signed 64 bits.
   An empty domain's strides are never evaluated (no address events), while an
   extent or stride of a non-empty domain that divides by zero at the bindings is
   an S14 error naming the memory, the expression and the symbol values.

All findings are collected, then raised together as one :class:`PlannerError`.
Target-dependent checks (can_access, factorization, capacity, symbolic proofs) live
in ``planner.prove.proofs``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.errors import Diagnostic, PlannerError, Severity, SourceLoc
from planner.ir import core
from planner.ir.core import Block, Kernel, LoopOp, Op, ParallelOp, ResourceClass, Value
from planner.ir.dtypes import DType
from planner.ir.expr import BINARY_FOLD, Apply, Const, Expr, ExprOp, Sym
from planner.ir.layout import Layout, division_by_zero_message
from planner.ir.types import IRType, MemoryType, StateType, TileType, TokenType, ViewType

INT64_MAX = 2**63 - 1


def dims_text(shape: tuple[Expr, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


#: The range of a symbol that ``bounds`` does not name (as in ``planner.prove.z3_exprs``).
DEFAULT_SYMBOL_BOUNDS: tuple[int, int] = (0, 2**31 - 1)
#: z3's time limit for one zero-trip question; ``unknown`` counts as "may run zero times".
ZERO_TRIP_TIME_LIMIT_MS = 2000


def verify(kernel: Kernel, bindings: Mapping[str, int] | None = None,
           bounds: Mapping[str, tuple[int, int]] | None = None) -> None:
    """Raise one PlannerError listing every violation; return quietly if valid.

    ``bounds`` declares inclusive ranges of the kernel's symbols; they alone decide
    whether a loop may run zero times (S10), whatever ``bindings`` say.
    """
    diags = collect_diagnostics(kernel, bindings, bounds)
    if diags:
        raise PlannerError(diags, kind="invalid-ir")


def collect_diagnostics(kernel: Kernel, bindings: Mapping[str, int] | None = None,
                        bounds: Mapping[str, tuple[int, int]] | None = None
                        ) -> list[Diagnostic]:
    checked: dict[str, tuple[int, int]] = {}
    diags: list[Diagnostic] = []
    for name, rng in (bounds or {}).items():
        lo, hi = (int(x) for x in rng)
        if lo > hi:
            diags.append(Diagnostic(f"declared bound {name} = {lo}..{hi} is empty: no value "
                                    "of the symbol is admissible", kernel.loc, ""))
        else:
            checked[name] = (lo, hi)
            value = (bindings or {}).get(name)
            if value is not None and not lo <= value <= hi:
                diags.append(Diagnostic(
                    f"binding {name}={value} is outside its declared bound {name} = "
                    f"{lo}..{hi}: the proofs and zero-trip checks assume the bound", kernel.loc,
                    "bounds"))
    v = _Verifier(kernel, dict(bindings or {}), checked)
    v.run()
    return diags + v.diags


def unstored_outputs(kernel: Kernel) -> list[Diagnostic]:
    """A warning for each writable view the kernel never stores into.

    Not an error (the view keeps what it held, and the IR is well formed), so
    :func:`verify` does not raise it; the frontend warns at capture and
    ``planner run --check`` catches the missing output against a numpy reference.
    """
    stored = {id(op.view) for op in kernel.walk() if isinstance(op, core.StoreOp)}
    return [Diagnostic(f"output view {value_name(p)} of kernel {kernel.name!r} is never "
                       "stored: it keeps whatever it held before the kernel ran",
                       kernel.loc, "", Severity.WARNING)
            for p in kernel.params
            if isinstance(p.type, ViewType) and not p.type.readonly and id(p) not in stored]


def value_name(v: Value) -> str:
    return f"%{v.name_hint}" if v.name_hint else f"value of type {v.type}"


def _loc_note(v: Value) -> tuple[SourceLoc, str] | None:
    owner = v.owner
    if isinstance(owner, Op):
        return (owner.loc, f"{value_name(v)} is defined here")
    return None


@dataclass
class _Scope:
    values: set[int] = field(default_factory=set)
    symbols: set[str] = field(default_factory=set)


class _Verifier:
    def __init__(self, kernel: Kernel, bindings: dict[str, int],
                 bounds: dict[str, tuple[int, int]] | None = None) -> None:
        self.kernel = kernel
        self.bindings = bindings
        self.bounds = dict(bounds or {})  # decides zero-trip loops (S10); never bindings
        self.diags: list[Diagnostic] = []
        self.state_memory: dict[int, Value] = {}  # state value id -> memory value
        self.initialized: dict[int, bool] = {}
        self.uninit_reason: dict[int, str] = {}
        self.mem_depth: dict[int, int] = {}  # memory id -> parallel nesting depth of alloc
        self.alloc_of: dict[int, core.AllocOp] = {}
        # asynchronous copies (S9.async): token id -> its memory / issuing copy / the
        # region body it is defined in; the tokens in flight now; where each was waited
        self.token_mem: dict[int, Value] = {}
        self.token_copy: dict[int, core.CopyAsyncOp] = {}
        self.token_region: dict[int, Block] = {}
        self.pending: dict[int, Value] = {}
        self.waited_at: dict[int, Op] = {}

    def err(self, op: Op | None, rule: str, message: str,
            notes: list[tuple[SourceLoc, str] | None] | None = None) -> None:
        loc = op.loc if op is not None else self.kernel.loc
        kept = tuple(n for n in (notes or []) if n is not None)
        self.diags.append(Diagnostic(message, loc, rule, notes=kept))

    # ------------------------------------------------------------------ driver

    def run(self) -> None:
        scope = _Scope()
        for p in self.kernel.params:
            if not isinstance(p.type, ViewType):
                self.err(None, "S1", f"kernel parameter {value_name(p)} must be a view")
            else:
                self.check_view(p, p.type)
            scope.values.add(id(p))
        scope.symbols.update(self.kernel.symbols())
        self.block(self.kernel.body, [scope], parallel_depth=0, current={})
        self.unwaited(self.kernel.body, "before the kernel ends")

    def block(self, block: Block, scopes: list[_Scope], parallel_depth: int,
              current: dict[int, Value]) -> dict[int, Value]:
        """Verify ``block``; ``current`` maps memory id -> its current state value."""
        local = _Scope()
        scopes = [*scopes, local]
        for a in block.args:
            local.values.add(id(a))
        for op in block.ops:
            self.op_shape(op)
            self.op_scoping(op, scopes)
            current = self.op_memory(op, scopes, parallel_depth, current)
            for r in op.results:
                local.values.add(id(r))
        return current

    def check_view(self, p: Value, vt: ViewType) -> None:
        env = self.bindings
        values = []
        for i, e in enumerate(vt.shape):
            if not e.symbols() <= set(env):
                continue
            try:
                v = e.evaluate(env)
            except ZeroDivisionError:
                self.err(None, "S14", division_by_zero_message(
                    f"dim {i} extent", e, f"view {value_name(p)}", env))
                continue
            values.append(v)
            if v < 0:
                self.err(None, "S14", f"view {value_name(p)} dim {i} has extent {e} = {v} < 0")
        if len(values) == vt.rank and min(values, default=1) > 0:
            nbytes = vt.dtype.itemsize
            for v in values:
                nbytes *= v
            if nbytes > INT64_MAX:
                self.err(None, "S14", f"view {value_name(p)} spans {nbytes:,} bytes, which "
                         f"overflows signed 64-bit byte addressing (max {INT64_MAX:,})")

    def check_slice(self, op: core.SliceOp, t: TileType) -> None:
        """S2: a tile slice is static (kernel symbols and constants, no region index),
        drops only extent-1 dims, and lies inside the tile at the bindings."""
        if len(op.offsets) != t.rank or len(op.shape) != t.rank:
            return  # result_types reports it
        where = f"tile.slice of {value_name(op.x)} {dims_text(t.shape)}"
        for d, (o, n) in enumerate(zip(op.offsets, op.shape, strict=True)):
            dynamic = sorted(s for s in o.symbols() | n.symbols() if s.startswith("%"))
            if dynamic:
                self.err(op, "S2", f"{where}: dim {d} window {o} +: {n} depends on the region "
                         f"index {', '.join(dynamic)}; a tile slice must be static (load the "
                         "window from the view instead)")
                continue
            if d not in op.dims and n.const_value() != 1:
                self.err(op, "S2", f"{where}: dim {d} is dropped, so its extent must be 1, "
                         f"got {n}")
            env = self.bindings
            names = o.symbols() | n.symbols() | t.shape[d].symbols()
            if not names <= set(env):
                continue
            lo, size, extent = o.evaluate(env), n.evaluate(env), t.shape[d].evaluate(env)
            if lo < 0 or size < 0 or lo + size > extent:
                at = ", ".join(f"{k}={env[k]}" for k in sorted(names))
                self.err(op, "S2", f"{where}: dim {d} window [{lo}, {lo + size}) is outside "
                         f"[0, {extent})" + (f" at {at}" if at else ""))

    # ------------------------------------------------------------------ 1. op shape

    def op_shape(self, op: Op) -> None:
        for name in op.SPEC.operands:
            if not isinstance(getattr(op, name, None), Value):
                self.err(op, "", f"{op.SPEC.name}: operand '{name}' is missing")
                return
        try:
            self.op_invariants(op)
            expected = op.result_types()
        except (AssertionError, IndexError, TypeError) as exc:
            self.err(op, "", f"{op.SPEC.name}: malformed operands ({exc or 'type mismatch'})")
            return
        actual = [r.type for r in op.results]
        if actual != expected:
            self.err(op, "", f"{op.SPEC.name}: result types {list(map(str, actual))} differ "
                             f"from the inferred {list(map(str, expected))}")

    def op_invariants(self, op: Op) -> None:
        def tile(v: Value, what: str) -> TileType:
            if not isinstance(v.type, TileType):
                raise TypeError(f"{what} must be a tile, got {v.type}")
            return v.type

        def dims(shape: tuple[Expr, ...]) -> str:
            return "[" + ", ".join(map(str, shape)) + "]"

        name = op.SPEC.name
        if isinstance(op, (core.LoadOp, core.StoreOp)):
            vt = op.view.type
            if not isinstance(vt, ViewType):
                raise TypeError(f"operand must be a view, got {vt}")
            if len(op.offsets) != vt.rank:
                self.err(op, "", f"{name}: {len(op.offsets)} offsets for a rank-{vt.rank} view")
            if isinstance(op, core.LoadOp) and len(op.shape) != vt.rank:
                self.err(op, "", f"{name}: window rank {len(op.shape)} != view rank {vt.rank}")
            if isinstance(op, core.StoreOp):
                t = tile(op.tile, "stored value")
                if t.rank != vt.rank or t.dtype != vt.dtype:
                    self.err(op, "", f"{name}: cannot store {t} into {vt}")
                if vt.readonly:
                    self.err(op, "S1", f"{name}: view {value_name(op.view)} is const")
        elif isinstance(op, core.BinaryOp):
            a, b = tile(op.lhs, "lhs"), tile(op.rhs, "rhs")
            if a != b:
                self.err(op, "", f"{name} {op.fn.value}: operand types differ: {a} vs {b}")
        elif isinstance(op, core.SelectOp):
            c, a, b = tile(op.cond, "cond"), tile(op.a, "a"), tile(op.b, "b")
            if c.dtype != DType.BOOL or c.shape != a.shape or a != b:
                self.err(op, "", f"{name}: needs a bool condition and equal tiles, got "
                                 f"{c}, {a}, {b}")
        elif isinstance(op, core.MmaOp):
            a, b, c = tile(op.a, "a"), tile(op.b, "b"), tile(op.acc, "acc")
            ok = (a.rank == b.rank == c.rank == 2 and a.shape[1] == b.shape[0]
                  and c.shape == (a.shape[0], b.shape[1]))
            if not ok:
                self.err(op, "", f"{name}: shapes {dims(a.shape)} @ {dims(b.shape)} + "
                                 f"{dims(c.shape)} do not form [m, k] @ [k, n] + [m, n]")
        elif isinstance(op, core.BroadcastOp):
            t = tile(op.x, "x")
            ok = (len(op.dims) == t.rank and len(set(op.dims)) == len(op.dims)
                  and all(0 <= d < len(op.shape) for d in op.dims)
                  and list(op.dims) == sorted(op.dims)
                  and all(op.shape[d] == t.shape[i] for i, d in enumerate(op.dims)))
            if not ok:
                self.err(op, "", f"{name}: cannot broadcast {dims(t.shape)} to "
                                 f"{dims(op.shape)} with dims {list(op.dims)}")
        elif isinstance(op, core.TransposeOp):
            t = tile(op.x, "x")
            if sorted(op.perm) != list(range(t.rank)):
                self.err(op, "", f"{name}: {list(op.perm)} is not a permutation of rank {t.rank}")
        elif isinstance(op, core.SliceOp):
            self.check_slice(op, tile(op.x, "x"))
        elif isinstance(op, core.ReduceOp):
            t = tile(op.x, "x")
            if not 0 <= op.axis < t.rank:
                self.err(op, "", f"{name}: axis {op.axis} out of range for rank {t.rank}")
        elif isinstance(op, core.IotaOp):
            if not 0 <= op.dim < len(op.shape):
                self.err(op, "", f"{name}: dim {op.dim} out of range for rank {len(op.shape)}")
        elif isinstance(op, (core.UnaryOp, core.CastOp)):
            tile(op.x, "x")
        elif isinstance(op, core.MemStoreOp):
            mt, t = op.memory.type, tile(op.tile, "stored value")
            if not isinstance(mt, MemoryType):
                raise TypeError(f"operand must be a memory, got {mt}")
            if not op.windowed:
                if (t.dtype, t.shape) != (mt.dtype, mt.shape):
                    self.err(op, "S10", f"{name}: cannot store {t} into {mt}")
            elif len(op.offsets) != len(mt.shape) or len(op.shape) != len(mt.shape):
                self.err(op, "S16", f"{name}: a window of {len(op.offsets)} offsets and "
                         f"{len(op.shape)} extents on a rank-{len(mt.shape)} memory {mt}")
            elif t.dtype != mt.dtype or not _same_shape(t.shape, op.shape):
                self.err(op, "S10", f"{name}: cannot store {t} into the window "
                         f"{dims(op.shape)} of {mt}: the tile's shape must be the window's "
                         "and its element type the memory's")
        elif isinstance(op, core.CopyAsyncOp):
            mt = op.memory.type
            if not isinstance(mt, MemoryType):
                raise TypeError(f"operand must be a memory, got {mt}")
            src = op.source[0].type if op.source else None
            if isinstance(src, (ViewType, MemoryType)):
                if len(op.offsets) != len(src.shape) or len(op.shape) != len(src.shape):
                    self.err(op, "", f"{name}: a window of {len(op.offsets)} offsets and "
                             f"{len(op.shape)} extents on a rank-{len(src.shape)} source")
                if (src.dtype, tuple(op.shape)) != (mt.dtype, mt.shape):
                    self.err(op, "S10", f"{name}: cannot copy a {src.dtype} window "
                             f"{dims(op.shape)} into {mt}: the window is the whole memory")
        elif isinstance(op, core.WaitOp):
            if not isinstance(op.token.type, TokenType):
                raise TypeError(f"operand must be a copy token, got {op.token.type}")
        elif isinstance(op, LoopOp) and (op.window < 1 or op.interval < 1):
            self.err(op, "S18", f"{name}: window {op.window} and interval {op.interval} "
                                "must be >= 1")

    # ------------------------------------------------------------------ 2. scoping

    def op_scoping(self, op: Op, scopes: list[_Scope]) -> None:
        visible = set().union(*(s.values for s in scopes))
        for v in op.operands():
            if id(v) not in visible:
                self.err(op, "S15", f"{op.SPEC.name} uses {value_name(v)}, whose definition "
                                    "does not dominate this use", [_loc_note(v)])
        symbols = set().union(*(s.symbols for s in scopes)) | set(self.bindings)
        for e in _op_exprs(op):
            for s in sorted(e.symbols() - symbols):
                self.err(op, "S15", f"{op.SPEC.name}: symbol {s} is not a kernel extent nor "
                                    "the index of an enclosing region")
        if isinstance(op, core.YieldOp) and not (
                op.parent and isinstance(op.parent.parent, (LoopOp, ParallelOp))):
            self.err(op, "", "region.yield outside a loop or parallel body")

    # ------------------------------------------------------------------ 3-5. memory

    def op_memory(self, op: Op, scopes: list[_Scope], parallel_depth: int,
                  current: dict[int, Value]) -> dict[int, Value]:
        if isinstance(op, core.AllocOp):
            self.check_alloc(op, parallel_depth)
            mem = op.memory
            self.alloc_of[id(mem)] = op
            self.mem_depth[id(mem)] = parallel_depth
            self.state_memory[id(op.initial_state)] = mem
            self.initialized[id(op.initial_state)] = False
            self.uninit_reason[id(op.initial_state)] = "it is never stored before this read"
            return {**current, id(mem): op.initial_state}
        if isinstance(op, core.CopyAsyncOp):
            return self.copy_async(op, parallel_depth, current)
        if isinstance(op, core.WaitOp):
            self.wait(op)
            return current
        if isinstance(op, (core.MemStoreOp, core.MemLoadOp)):
            self.use_state(op, op.memory, op.state, current)
            if isinstance(op, core.MemLoadOp):
                self.check_initialized(op, op.state)
                self.check_readable(op, op.memory)
                self.check_no_racing_read(op, op.memory)
                return current
            return self.mem_store(op, parallel_depth, current)
        if isinstance(op, ParallelOp):
            return self.parallel(op, scopes, parallel_depth, current)
        if isinstance(op, LoopOp):
            return self.loop(op, scopes, parallel_depth, current)
        return current

    def check_yielded_state(self, term: Op | None, mem: Value, y: Value | None,
                            after: Mapping[int, Value]) -> None:
        """S15 for the state a region yields in ``mem``'s carried slot: a state of ``mem``,
        and the one reaching the yield."""
        if y is None or self.state_memory.get(id(y)) is not mem:
            other = self.state_memory.get(id(y)) if y is not None else None
            self.err(term, "S15", f"region.yield carries a state of "
                     f"{self.mem_name(other) if other else 'no memory'} in the slot of "
                     f"{self.mem_name(mem)}: states cannot be swapped between memories")
        elif after.get(id(mem)) is not y:
            self.err(term, "S15", f"region.yield of {self.mem_name(mem)} yields an old "
                                  "state: only the reaching state may be carried")

    def mem_name(self, mem: Value) -> str:
        return f"memory {value_name(mem)}"

    def declared_note(self, mem: Value) -> tuple[SourceLoc, str] | None:
        alloc = self.alloc_of.get(id(mem))
        return (alloc.loc, "the memory is declared here") if alloc is not None else None

    # ------------------------------------------------------------------ stores (S9, S16)

    def mem_store(self, op: core.MemStoreOp, parallel_depth: int,
                  current: dict[int, Value]) -> dict[int, Value]:
        mem = op.memory
        self.check_not_in_flight(op, mem)
        ancestor = self.mem_depth.get(id(mem), 0) < parallel_depth
        if ancestor and not op.windowed:
            self.err(op, "S16", f"store to {self.mem_name(mem)}, owned outside this parallel "
                     "region, inside a child parallel writes the whole memory from every "
                     "instance: whole-Memory ancestor writes in child parallel scopes are not "
                     "supported yet; store a window each instance owns, "
                     "mem(coord(...), shape(...)).store(tile), which range-aware MemorySSA "
                     "proves disjoint; reads are fine", [self.declared_note(mem)])
        prior = self.initialized.get(id(op.state), True)
        covered = prior or not op.windowed
        if op.windowed and self.window_in_bounds(op) and not ancestor and not prior:
            covered = _covers(op.memory.type, [(op, [])], _enclosing_indices(op),
                              self.bounds) == "proved"
        self.state_memory[id(op.result)] = mem
        self.initialized[id(op.result)] = covered
        if not covered:
            self.uninit_reason[id(op.result)] = (
                f"the window store at line {op.loc.line} writes only part of it and "
                "nothing stored it whole before")
        return {**current, id(mem): op.result}

    def window_in_bounds(self, op: core.MemStoreOp) -> bool:
        """S16: every non-empty window lies inside the memory, for every admissible value of
        the symbols and region indices (z3; "unknown" refuses); report when not."""
        mt = op.memory.type
        if not isinstance(mt, MemoryType) or not (len(op.offsets) == len(op.shape)
                                                  == len(mt.shape)):
            return False  # op shape reports it
        verdict, detail = _window_bounds(op, mt, self.bounds)
        if verdict == "proved":
            return True
        where = (f"memory.store window {dims_text(op.offsets)} +: {dims_text(op.shape)} of "
                 f"{self.mem_name(op.memory)} {dims_text(mt.shape)}")
        if verdict == "refuted":
            self.err(op, "S16", f"{where} is not inside the memory: {detail}; a window store "
                     "must write only elements of the memory", [self.declared_note(op.memory)])
        else:
            self.err(op, "S16", f"{where}: z3 could not prove within {WINDOW_TIME_LIMIT_MS} ms "
                     "that the window lies inside the memory, so the store is refused as not "
                     "proved (declare bounds on the symbols, or simplify the offsets)")
        return False

    def check_no_racing_read(self, op: Op, mem: Value) -> None:
        """S16: inside a parallel region whose instances write windows of ``mem``, a read of
        ``mem`` would see other instances' windows while they are written."""
        region = _carrying_parallel(op, mem, self.alloc_of.get(id(mem)), self.state_memory)
        if region is not None:
            self.err(op, "S16", f"{op.SPEC.name} reads {self.mem_name(mem)} inside parallel "
                     f"region {region.label!r}, whose instances write windows of it: an "
                     "instance would read other instances' windows while they are being "
                     "written; read it after the region, where their states are joined",
                     [(region.loc, "the parallel region is here")])

    def parallel(self, op: ParallelOp, scopes: list[_Scope], parallel_depth: int,
                 current: dict[int, Value]) -> dict[int, Value]:
        """A parallel region; its carried ancestor MemoryStates are joined (S16)."""
        body, args = op.body, op.body.args
        symbols = {a.index.name for a in op.axes}
        if len(args) != len(op.inits) or any(a.type != i.type for a, i in zip(args, op.inits,
                                                                              strict=False)):
            self.err(op, "", f"{op.SPEC.name} {op.label}: block arguments do not match inits")
            return current
        inner = dict(current)
        carried: list[tuple[int, Value]] = []
        for i, (arg, init) in enumerate(zip(args, op.inits, strict=True)):
            mem = self.state_memory.get(id(init))
            if mem is None:
                self.err(op, "S1", f"parallel region {op.label!r} carries {value_name(init)} "
                         f"({init.type}): spatial instances carry only the MemoryStates of "
                         "ancestor memories they write windows of")
                continue
            self.use_state(op, mem, init, current)
            self.state_memory[id(arg)] = mem
            self.initialized[id(arg)] = self.initialized.get(id(init), True)
            self.uninit_reason[id(arg)] = self.uninit_reason.get(id(init), "")
            inner[id(mem)] = arg
            carried.append((i, mem))
        after = self.block(body, [*scopes, _Scope(symbols=symbols)], parallel_depth + 1, inner)
        self.unwaited(body, f"before each instance of parallel region {op.label!r} ends")
        term = body.ops[-1] if body.ops and isinstance(body.ops[-1], core.YieldOp) else None
        if (term is None and args) or (term is not None and len(term.values) != len(args)):
            self.err(op, "", f"{op.SPEC.name} {op.label}: the body must end with a yield of "
                             f"its {len(args)} carried states")
            return current
        for mem_id, state in after.items():
            if mem_id in current and current[mem_id] is not state and all(
                    id(m) != mem_id for _, m in carried):
                self.err(op, "S9", f"{self.mem_name(self.state_memory[id(state)])} is stored "
                         f"inside parallel region {op.label!r} but its state is not carried "
                         "out of it (the region must take it as an init and yield it)")
        out = dict(current)
        for i, mem in carried:
            y = term.values[i] if term is not None else None
            self.check_yielded_state(term, mem, y, after)
            res = op.results[i]
            self.state_memory[id(res)] = mem
            init_ok = self.initialized.get(id(op.inits[i]), True)
            self.initialized[id(res)] = init_ok
            if self.mem_depth.get(id(mem), 0) == parallel_depth:  # the outermost writer
                stores = self.disjoint_windows(op, mem)
                if not init_ok:
                    self.initialized[id(res)] = _covers(
                        mem.type, stores, _enclosing_indices(op), self.bounds) == "proved"
                    self.uninit_reason[id(res)] = (
                        f"the instances of parallel region {op.label!r} store windows of it "
                        "that are not proved to cover it, and nothing stored it whole before")
            out[id(mem)] = res
        return out

    def disjoint_windows(self, op: ParallelOp, mem: Value
                         ) -> list[tuple[core.MemStoreOp, list[Op]]]:
        """S16: prove that no two instances of ``op`` (the outermost parallel writing the
        ancestor memory ``mem``) write one element; report a counterexample otherwise.
        Returns every store of ``mem`` inside with its regions from ``op`` down."""
        stores = [(s, _regions_from(op, s)) for s in op.body.walk()
                  if isinstance(s, core.MemStoreOp) and s.memory is mem]
        windowed = [(s, path) for s, path in stores if s.windowed]  # whole ones are S16
        for i, (a, path_a) in enumerate(windowed):
            for b, path_b in windowed[i:]:
                verdict, detail = _disjoint(a, path_a, b, path_b, _enclosing_indices(op),
                                            self.bounds)
                if verdict == "proved":
                    continue
                where = (f"memory.store into {self.mem_name(mem)} inside parallel region "
                         f"{op.label!r}")
                notes = [self.declared_note(mem)]
                if b is not a:
                    notes.insert(0, (b.loc, "the other window store is here"))
                if verdict == "refuted":
                    self.err(a, "S16", f"{where}: two instances write overlapping windows "
                             f"(a race): {detail}; each instance must write a window no other "
                             "instance writes", notes)
                else:
                    self.err(a, "S16", f"{where}: z3 could not prove within "
                             f"{WINDOW_TIME_LIMIT_MS} ms that the instances' windows "
                             f"{dims_text(a.offsets)} +: {dims_text(a.shape)} are disjoint, so "
                             "the store is refused as not proved (simplify the offsets, or "
                             "declare bounds on the symbols)", notes)
        return stores

    # ------------------------------------------------------------------ async copies

    def in_flight(self, mem: Value) -> int | None:
        """The id of the token of ``mem``'s copy in flight, or None."""
        return next((t for t, m in self.pending.items() if m is mem), None)

    def copy_note(self, token_id: int) -> tuple[SourceLoc, str] | None:
        copy = self.token_copy.get(token_id)
        return (copy.loc, "the asynchronous copy is issued here") if copy is not None else None

    def check_readable(self, op: Op, mem: Value) -> None:
        tok = self.in_flight(mem)
        if tok is not None:
            self.err(op, "S9.async-read", f"{op.SPEC.name} reads {self.mem_name(mem)} while an "
                     "asynchronous copy into it is in flight: wait on its token first",
                     [self.copy_note(tok)])

    def check_not_in_flight(self, op: Op, mem: Value) -> None:
        tok = self.in_flight(mem)
        if tok is not None:
            self.err(op, "S9.async-overwrite", f"{op.SPEC.name} writes {self.mem_name(mem)} "
                     "while an asynchronous copy into it is still in flight: wait on its "
                     "token before storing or copying into it again", [self.copy_note(tok)])

    def copy_async(self, op: core.CopyAsyncOp, parallel_depth: int,
                   current: dict[int, Value]) -> dict[int, Value]:
        mem = op.memory
        if not isinstance(mem.type, MemoryType) or len(op.results) != 2:
            return current  # op shape reports it
        self.use_state(op, mem, op.state, current)
        if len(op.source) == 2 and isinstance(op.source[0].type, MemoryType):
            src_mem, src_state = op.source
            self.use_state(op, src_mem, src_state, current)
            self.check_initialized(op, src_state)
            self.check_readable(op, src_mem)
            self.check_no_racing_read(op, src_mem)
        self.check_not_in_flight(op, mem)
        if self.mem_depth.get(id(mem), 0) < parallel_depth:
            self.err(op, "S16", f"asynchronous copy into {self.mem_name(mem)}, owned outside "
                     "this parallel region, inside a child parallel: ancestor Memory writes "
                     "in child parallel scopes are not supported yet; reads are fine",
                     [(self.alloc_of[id(mem)].loc, "the memory is declared here")
                      if id(mem) in self.alloc_of else None])
        state, token = op.new_state, op.token
        self.state_memory[id(state)] = mem
        self.initialized[id(state)] = True
        self.token_mem[id(token)] = mem
        self.token_copy[id(token)] = op
        self.token_region[id(token)] = _region_body(op)
        self.pending[id(token)] = mem
        return {**current, id(mem): state}

    def wait(self, op: core.WaitOp) -> None:
        tok = op.token
        if not isinstance(tok.type, TokenType):
            return  # op shape reports it
        t = id(tok)
        if t in self.waited_at:
            self.err(op, "S9.async-wait", f"{value_name(tok)} is waited twice: a copy token "
                     "is consumed by its one wait",
                     [(self.waited_at[t].loc, "the first wait is here")])
            return
        if t not in self.pending:
            self.err(op, "S9.async-wait", f"{value_name(tok)} is not in flight here (it was "
                     "carried out of a loop or waited on another path)", [self.copy_note(t)])
            return
        region = _region_body(op)
        if self.token_region.get(t) is not region and isinstance(region.parent, LoopOp):
            self.err(op, "S9.async-wait", f"{value_name(tok)}, issued outside loop "
                     f"{region.parent.label!r}, is waited inside it, which would wait once "
                     "per iteration: wait before the loop, or carry the token (rebind it in "
                     "the loop, issuing the next copy)", [self.copy_note(t)])
            return
        if self.token_region.get(t) is not region and isinstance(region.parent, ParallelOp):
            self.err(op, "S9.async-wait", f"{value_name(tok)}, issued outside parallel region "
                     f"{region.parent.label!r}, is waited by each of its instances: wait "
                     "before the region", [self.copy_note(t)])
            return
        del self.pending[t]
        self.waited_at[t] = op

    def unwaited(self, body: Block, when: str, keep: frozenset[int] = frozenset()) -> None:
        """Report (S9.async-unwaited) and drop each token defined in ``body`` still in
        flight, except the ``keep`` ones (carried to the next iteration)."""
        for t in [t for t in self.pending if self.token_region.get(t) is body and t not in keep]:
            copy = self.token_copy.get(t)
            self.err(copy, "S9.async-unwaited", f"asynchronous copy into "
                     f"{self.mem_name(self.pending[t])} is never waited {when}: wait on its "
                     "token (tok.wait()) before then")
            del self.pending[t]

    def carry_tokens_in(self, op: LoopOp) -> list[int]:
        """Move the carried tokens into the body; the indices of the token slots."""
        slots = []
        for i, (arg, init) in enumerate(zip(op.body.args, op.inits, strict=True)):
            if not isinstance(init.type, TokenType):
                continue
            slots.append(i)
            t = id(init)
            if t not in self.pending:
                self.err(op, "S9.async-carry", f"loop {op.label!r} carries {value_name(init)}, "
                         "which is not in flight when the loop starts: a carried token must "
                         "be in flight at the start and at the end of every iteration",
                         [self.copy_note(t)])
                continue
            mem = self.pending.pop(t)
            self.token_mem[id(arg)] = mem
            self.token_copy[id(arg)] = self.token_copy[t]
            self.token_region[id(arg)] = op.body
            self.pending[id(arg)] = mem
        return slots

    def carry_tokens_out(self, op: LoopOp, term: core.YieldOp, slots: list[int]) -> None:
        """Check the yielded tokens are in flight, then move them to the loop's results."""
        body_tokens = {id(term.values[i]) for i in slots}
        self.unwaited(op.body, f"before the iteration of loop {op.label!r} ends",
                      keep=frozenset(body_tokens))
        for i in slots:
            y, arg, res = term.values[i], op.body.args[i], op.results[i]
            t = id(y)
            if t not in self.pending:
                self.err(term, "S9.async-carry", f"loop {op.label!r} carries the token of "
                         f"{value_name(arg)} but {value_name(y)} is not in flight at the end of "
                         "the iteration: issue the next copy under the carried name",
                         [self.copy_note(t)])
                if id(arg) in self.token_mem:  # the result stands for the carried copy
                    self.pending[id(res)] = self.token_mem[id(res)] = self.token_mem[id(arg)]
                    self.token_region[id(res)] = _region_body(op)
                continue
            mem = self.pending.pop(t)
            if self.token_mem.get(id(arg)) not in (None, mem):
                self.err(term, "S9.async-carry", f"loop {op.label!r} yields a token of "
                         f"{self.mem_name(mem)} in the slot of a token of "
                         f"{self.mem_name(self.token_mem[id(arg)])}")
            self.token_mem[id(res)] = mem
            self.token_copy[id(res)] = self.token_copy[t]
            self.token_region[id(res)] = _region_body(op)
            self.pending[id(res)] = mem

    def use_state(self, op: Op, mem: Value, state: Value, current: dict[int, Value]) -> None:
        owner_mem = self.state_memory.get(id(state))
        if owner_mem is None:
            if not isinstance(state.type, StateType):
                self.err(op, "S9", f"{op.SPEC.name}: {value_name(state)} is not a MemoryState")
            return
        if owner_mem is not mem:
            self.err(op, "S15", f"{op.SPEC.name} on {self.mem_name(mem)} uses a state of "
                     f"{self.mem_name(owner_mem)}: states cannot be swapped between memories, "
                     "even when their types agree")
        elif current.get(id(mem)) is not state:
            self.err(op, "S15", f"{op.SPEC.name} on {self.mem_name(mem)} uses an old state: "
                     "the memory was stored since; only the reaching state may be used",
                     [_loc_note(state)])

    def check_initialized(self, op: Op, state: Value) -> None:
        if not self.initialized.get(id(state), True):
            mem = self.state_memory.get(id(state))
            name = self.mem_name(mem) if mem is not None else "memory"
            self.err(op, "S10", f"read of {name} before a definite store: "
                     f"{self.uninit_reason.get(id(state), '')}; there is no implicit zero fill")

    def loop(self, op: LoopOp, scopes: list[_Scope], parallel_depth: int,
             current: dict[int, Value]) -> dict[int, Value]:
        args, body = op.body.args, op.body
        if len(args) != len(op.inits) or any(a.type != i.type for a, i in zip(args, op.inits,
                                                                              strict=False)):
            self.err(op, "", f"{op.SPEC.name} {op.label}: block arguments do not match inits")
            return current
        inner = dict(current)
        carried_mems: list[tuple[int, Value]] = []
        for i, (arg, init) in enumerate(zip(args, op.inits, strict=True)):
            mem = self.state_memory.get(id(init))
            if mem is not None:
                self.use_state(op, mem, init, current)
                self.state_memory[id(arg)] = mem
                self.initialized[id(arg)] = self.initialized.get(id(init), True)
                self.uninit_reason[id(arg)] = self.uninit_reason.get(id(init), "")
                inner[id(mem)] = arg
                carried_mems.append((i, mem))
        symbols = {a.index.name for a in op.axes}
        token_slots = self.carry_tokens_in(op)
        after = self.block(body, [*scopes, _Scope(symbols=symbols)], parallel_depth, inner)
        term = body.ops[-1] if body.ops else None
        if not isinstance(term, core.YieldOp) or len(term.values) != len(args):
            self.err(op, "", f"{op.SPEC.name} {op.label}: the body must end with a yield of "
                             f"{len(args)} values")
            self.unwaited(body, f"before the iteration of loop {op.label!r} ends")
            return current
        self.carry_tokens_out(op, term, token_slots)
        if any(v.type != a.type for v, a in zip(term.values, args, strict=True)):
            self.err(term, "", "region.yield: yielded types do not match the carried types")
        for mem_id, state in after.items():
            if mem_id in current and current[mem_id] is not state and all(
                    m is not None and id(m) != mem_id for _, m in carried_mems):
                self.err(op, "S9", f"{self.mem_name(self.state_memory[id(state)])} is stored "
                         f"inside loop {op.label!r} but its state is not carried out of it")
        out = dict(current)
        skip_reason: list[str | None] = []  # computed once, on the first carried store

        def may_skip() -> str | None:
            if not skip_reason:
                skip_reason.append(_zero_trip_reason(op, self.bounds))
            return skip_reason[0]

        for i, mem in carried_mems:
            y = term.values[i]
            self.check_yielded_state(term, mem, y, after)
            res = op.results[i]
            self.state_memory[id(res)] = mem
            init_ok = self.initialized.get(id(op.inits[i]), True)
            body_ok = self.initialized.get(id(y), True)
            reason = None if init_ok or not body_ok else may_skip()
            self.initialized[id(res)] = init_ok or (body_ok and reason is None)
            if not self.initialized[id(res)]:
                self.uninit_reason[id(res)] = (
                    f"it is only stored inside loop {op.label!r}, {reason}" if body_ok
                    else self.uninit_reason.get(id(op.inits[i]), ""))
            out[id(mem)] = res
        return out

    def check_alloc(self, op: core.AllocOp, parallel_depth: int) -> None:
        name = self.mem_name(op.memory)
        lay = op.layout
        if parallel_depth == 0 and op.resource.builtin not in (ResourceClass.GLOBAL,
                                                               ResourceClass.AUTO):
            self.err(op, "S5", f"{name} is owned by the kernel root (declared outside every "
                     f"parallel region) but constrained to '{op.resource.value}': only global "
                     "storage is shared by all instances of the kernel; declare it inside the "
                     "parallel region whose instances should own it")
        if len(lay.shape) != len(lay.strides):
            return
        env = self.bindings
        if not _known_empty(lay.shape, env) and not self.undefined_layout(op, lay):
            zero_stride = [i for i, (e, s) in enumerate(zip(lay.shape, lay.strides, strict=True))
                           if s == Const(0) and _maybe_gt_one(e, env)]
            if zero_stride:
                self.err(op, "S13", f"{name}: layout {lay} is a broadcast map (stride 0 on dim "
                         f"{zero_stride[0]}): whole-tile storage needs an injective layout")
            elif _concrete(lay.shape + lay.strides, env) and _enumerable(lay, env):
                cex = lay.injectivity_counterexample(env)
                if cex is not None:
                    a, b, off = cex
                    self.err(op, "S13", f"{name}: layout {lay} is not injective: elements "
                             f"{list(a)} and {list(b)} both map to offset {off}")
            if _concrete(lay.shape + lay.strides, env):
                nbytes = lay.storage_elements(env) * op.dtype.itemsize
                if nbytes > INT64_MAX:
                    self.err(op, "S14", f"{name}: {nbytes} bytes of storage overflow signed "
                             f"64-bit byte addressing (max {INT64_MAX})")
        if _known_empty(lay.shape, env) and _has_uses(op, self.kernel):
            self.err(op, "S14", f"{name} has an empty logical domain "
                     f"[{', '.join(map(str, lay.shape))}] but is still stored or loaded: "
                     "a zero-sized allocation cannot have surviving uses")

    def undefined_layout(self, op: core.AllocOp, lay: Layout) -> bool:
        """Report (S14) every extent or stride of a non-empty domain that divides by
        zero at the bindings; True when there is one (the map cannot be checked)."""
        bad = lay.undefined_terms(self.bindings)
        for kind, _, e in bad:
            self.err(op, "S14", division_by_zero_message(
                kind, e, self.mem_name(op.memory), self.bindings)
                + ": the address map of a non-empty logical domain must be defined")
        return bool(bad)


def _op_exprs(op: Op) -> list[Expr]:
    out: list[Expr] = []
    for name in op.SPEC.attrs:
        val = getattr(op, name)
        if isinstance(val, Expr):
            out.append(val)
        elif isinstance(val, tuple):
            for x in val:
                if isinstance(x, Expr):
                    out.append(x)
                elif isinstance(x, core.Axis):
                    out.append(x.extent)
        elif isinstance(val, Layout):
            out.extend(val.shape)
            out.extend(val.strides)
    return out


def _concrete(exprs: tuple[Expr, ...], env: Mapping[str, int]) -> bool:
    return all(e.symbols() <= set(env) for e in exprs)


ENUMERATION_LIMIT = 1 << 22


def _enumerable(lay: Layout, env: Mapping[str, int]) -> bool:
    """Small concrete layouts are checked by enumeration; larger ones by the z3 proofs."""
    return lay.num_elements().evaluate(env) <= ENUMERATION_LIMIT


def _known_empty(shape: tuple[Expr, ...], env: Mapping[str, int]) -> bool:
    """Some extent is 0 at the bindings: known zeros first, and an extent that cannot
    be evaluated does not hide another one that is 0 (S14)."""
    if any(e == Const(0) for e in shape):
        return True
    for e in shape:
        if e.symbols() <= set(env):
            try:
                if e.evaluate(env) == 0:
                    return True
            except ZeroDivisionError:
                continue
    return False


def _maybe_gt_one(e: Expr, env: Mapping[str, int]) -> bool:
    if e.symbols() <= set(env):
        try:
            return e.evaluate(env) > 1
        except ZeroDivisionError:
            return True
    return True


# --------------------------------------------------------------- zero-trip loops (S10)

Interval = tuple[int, int]


def _enclosing_indices(op: Op) -> dict[str, Expr]:
    """Region index symbol -> its extent, for every region enclosing ``op`` (innermost wins)."""
    out: dict[str, Expr] = {}
    block = op.parent
    while block is not None and block.parent is not None:
        region = block.parent
        if isinstance(region, (LoopOp, ParallelOp)):
            for a in region.axes:
                out.setdefault(a.index.name, a.extent)
        block = region.parent
    return out


def _interval(e: Expr, bounds: Mapping[str, Interval], indices: Mapping[str, Expr],
              seen: frozenset[str] = frozenset()) -> Interval | None:
    """Sound inclusive range of ``e`` over the admissible symbol values; None if unknown.

    Every symbol has a finite range (its declared bound, the default, or ``[0, extent)``
    of its region), so the ranges are finite and exact Python integers.  A division
    whose divisor range contains zero is unknown (left to z3).
    """
    if isinstance(e, Const):
        return (e.value, e.value)
    if isinstance(e, Sym):
        if e.name in indices and e.name not in seen:
            ext = _interval(indices[e.name], bounds, indices, seen | {e.name})
            if ext is None:
                return None
            return (0, max(0, ext[1] - 1))
        return bounds.get(e.name, DEFAULT_SYMBOL_BOUNDS)
    assert isinstance(e, Apply)
    args = []
    for a in e.args:
        r = _interval(a, bounds, indices, seen)
        if r is None:
            return None
        args.append(r)
    if e.op is ExprOp.ADD:
        return (sum(r[0] for r in args), sum(r[1] for r in args))
    if e.op is ExprOp.MUL:
        lo, hi = args[0]
        for a_lo, a_hi in args[1:]:
            corners = (lo * a_lo, lo * a_hi, hi * a_lo, hi * a_hi)
            lo, hi = min(corners), max(corners)
        return (lo, hi)
    (x_lo, x_hi), (y_lo, y_hi) = args
    if e.op is ExprOp.MIN:
        return (min(x_lo, y_lo), min(x_hi, y_hi))
    if e.op is ExprOp.MAX:
        return (max(x_lo, y_lo), max(x_hi, y_hi))
    if y_lo <= 0 <= y_hi:
        return None
    if e.op is ExprOp.MOD:  # Python's sign: that of the divisor
        if y_lo > 0:
            return (0, min(x_hi, y_hi - 1)) if x_lo >= 0 else (0, y_hi - 1)
        return (y_lo + 1, 0)
    # floordiv / ceildiv are monotone in each operand on a box where the divisor keeps
    # its sign, so their extremes lie at the corners.
    fold = BINARY_FOLD[e.op]
    values = [fold(x, y) for x in (x_lo, x_hi) for y in (y_lo, y_hi)]
    return (min(values), max(values))


def _z3_zero_trip(extent: Expr, bounds: Mapping[str, Interval], indices: Mapping[str, Expr]
                  ) -> tuple[str, dict[str, int] | None]:
    """Ask z3 for admissible symbol values with ``extent <= 0``.

    Returns ``("proved", None)`` when there are none, ``("refuted", values)`` with a
    counterexample, ``("unknown", None)`` when z3 gives up (or is missing).
    """
    try:
        from planner.prove.z3_exprs import SymbolSpace, check  # lazy: planner.prove imports us
    except ImportError:  # pragma: no cover - z3 is a dependency
        return ("unknown", None)
    space = SymbolSpace(bindings=None, symbol_bounds=bounds,
                        default_bounds=DEFAULT_SYMBOL_BOUNDS)
    for name, ext in reversed(list(indices.items())):  # innermost declared last: it wins
        space.declare_index(name, ext)
    zero = space.to_z3(extent) <= 0
    solver = space.solver()
    solver.add(*space.constraints())
    solver.add(zero)
    result = check(solver, ZERO_TRIP_TIME_LIMIT_MS)
    if str(result) == "unsat":
        return ("proved", None)
    if str(result) == "sat":
        values = space.model_values(solver.model())
        return ("refuted", dict(sorted(values.items())))
    return ("unknown", None)


def _kernel_symbols(e: Expr, indices: Mapping[str, Expr]) -> list[str]:
    """The non-index symbols of ``e``, following region-index extents."""
    out: set[str] = set()
    todo, seen = [e], set()
    while todo:
        for s in todo.pop().symbols():
            if s in indices:
                if s not in seen:
                    seen.add(s)
                    todo.append(indices[s])
            else:
                out.add(s)
    return sorted(out)


def _zero_trip_reason(op: LoopOp, bounds: Mapping[str, Interval]) -> str | None:
    """None when every axis extent of ``op`` is >= 1 for every admissible symbol value.

    Otherwise the words that finish "it is only stored inside loop 'L', ...": the
    trip count, the failing extents and the symbols that need a declared lower bound.
    Only ``bounds`` count (a kernel is defined over its symbols), never bindings.
    """
    indices = _enclosing_indices(op)
    trip = " * ".join(str(a.extent) for a in op.axes)
    failing: list[str] = []
    symbols: list[str] = []
    for a in op.axes:
        e = a.extent
        if isinstance(e, Const):
            if e.value >= 1:
                continue
            failing.append(f"axis {a.name!r} has extent {e.value}")
            continue
        r = _interval(e, bounds, indices)
        if r is not None and r[0] >= 1:
            continue
        verdict, cex = _z3_zero_trip(e, bounds, indices)
        if verdict == "proved":
            continue
        names = _kernel_symbols(e, indices)
        ranges = ", ".join(
            f"{s} in {lo}..{hi}" + ("" if s in bounds else ", no declared bound")
            for s in names for lo, hi in [bounds.get(s, DEFAULT_SYMBOL_BOUNDS)])
        if verdict == "refuted" and cex is not None:
            given = ", ".join(f"{s} = {v}" for s, v in cex.items() if s in names)
            try:
                value = e.evaluate(cex)
                why = f"{given} gives {value}" if given else f"{value} at some region index"
            except (KeyError, ZeroDivisionError):
                why = "it can be <= 0"
            failing.append(f"axis {a.name!r} extent {e} can be < 1 ({why}; {ranges})")
        else:
            failing.append(f"axis {a.name!r} extent {e} could not be shown >= 1 (z3 gave up "
                           f"after {ZERO_TRIP_TIME_LIMIT_MS} ms; {ranges})")
        symbols += [s for s in names if s not in symbols]
    if not failing:
        return None
    if all(isinstance(a.extent, Const) for a in op.axes):
        return f"which runs zero times (S10: trip count {trip}, and {'; '.join(failing)})"
    head = (f"which may run zero times: S10 needs its trip count {trip} >= 1 for every "
            f"admissible value of the symbols, and {'; '.join(failing)}")
    need = [s for s in symbols if bounds.get(s, DEFAULT_SYMBOL_BOUNDS)[0] < 1] or symbols
    if not need:
        return f"{head}; store it before the loop, or make every extent at least 1"
    hint = " ".join(f"--bound {s}=1.." for s in need)
    return (f"{head}; values bound for one run do not count: declare a lower bound on "
            f"{', '.join(need)} that keeps every extent >= 1, such as {hint}")


def _has_uses(alloc: core.AllocOp, kernel: Kernel) -> bool:
    mem = alloc.memory
    return any(mem in op.operands() for op in kernel.walk()
               if isinstance(op, (core.MemStoreOp, core.MemLoadOp, core.CopyAsyncOp)))


def _region_body(op: Op) -> Block:
    """The body of the innermost loop or parallel region around ``op`` (else the kernel's)."""
    block = op.parent
    assert block is not None
    while block.parent is not None and not isinstance(block.parent, (LoopOp, ParallelOp)):
        assert block.parent.parent is not None
        block = block.parent.parent
    return block


def remove_unused_empty_allocs(kernel: Kernel, bindings: Mapping[str, int] | None = None
                               ) -> list[core.AllocOp]:
    """Remove allocations with a known-empty domain and no loads or stores (S14).

    Run after the target's resource checks: an empty allocation never bypasses an
    explicit resource constraint.  Returns the removed ops.
    """
    env = dict(bindings or {})
    removed = []
    for op in list(kernel.walk()):
        if (isinstance(op, core.AllocOp) and _known_empty(op.layout.shape, env)
                and not _has_uses(op, kernel)):
            assert op.parent is not None
            op.parent.ops.remove(op)
            removed.append(op)
    return removed


# --------------------------------------------------------------- range-aware writes (S16)
#
# A windowed ``memory.store`` inside a child parallel writes an ancestor's Memory.  It is
# legal when no two instances can write one element: for the outermost parallel ``P``
# that carries the memory, every pair of its window stores (a store with itself
# included) is asked of z3 as a counterexample search.  Each store gets its own copy of
# the region indices from ``P`` down (two instances are two copies, in ranges
# ``[0, extent)``); the indices above ``P`` and the kernel's symbols are shared and range
# over their declared bounds (never the bindings of one run, as for S10).  Two store
# events run at once when, walking their common regions from ``P`` down, the first
# region whose indices differ is a parallel; a common loop whose iterations differ
# orders them.  An element both windows contain at such a pair is a race; z3 answering
# ``unknown`` refuses the store as not proved.

#: z3's time limit for one window question (bounds, disjointness, coverage).
WINDOW_TIME_LIMIT_MS = 5000

Verdict = tuple[str, str]  # ("proved" | "refuted" | "unknown", the counterexample's words)


def _same_shape(a: tuple[Expr, ...], b: tuple[Expr, ...]) -> bool:
    return len(a) == len(b) and all(x == y or str(x) == str(y)
                                    for x, y in zip(a, b, strict=True))


def _carrying_parallel(op: Op, mem: Value, alloc: core.AllocOp | None,
                       state_memory: Mapping[int, Value]) -> ParallelOp | None:
    """The outermost parallel around ``op``, below ``mem``'s declaration, carrying ``mem``."""
    found = None
    home = alloc.parent if alloc is not None else None
    block = op.parent
    while block is not None and block is not home and block.parent is not None:
        region = block.parent
        if isinstance(region, ParallelOp) and any(state_memory.get(id(v)) is mem
                                                  for v in region.inits):
            found = region
        block = region.parent
    return found


def _regions_from(top: ParallelOp, op: Op) -> list[Op]:
    """The loop and parallel regions from ``top`` (included) down to ``op``, outer first."""
    out: list[Op] = []
    block = op.parent
    while block is not None and block.parent is not None:
        region = block.parent
        if isinstance(region, (LoopOp, ParallelOp)):
            out.append(region)
        if region is top:
            break
        block = region.parent
    return out[::-1]


def _space(indices: Mapping[str, Expr], bounds: Mapping[str, Interval]) -> Any:
    from planner.prove.z3_exprs import SymbolSpace  # lazy: planner.prove imports us

    space = SymbolSpace(bindings=None, symbol_bounds=bounds,
                        default_bounds=DEFAULT_SYMBOL_BOUNDS)
    for name, ext in reversed(list(indices.items())):  # innermost declared last: it wins
        space.declare_index(name, ext)
    return space


@dataclass
class _Instance:
    """One copy of the region indices on a store's path: its z3 terms and their ranges."""

    terms: dict[str, Any] = field(default_factory=dict)
    ranges: list[Any] = field(default_factory=list)
    axes: list[list[tuple[str, Any]]] = field(default_factory=list)  # per region

    @property
    def variables(self) -> list[Any]:
        return [v for region in self.axes for _, v in region]

    def describe(self, values: Callable[[Any], int]) -> str:
        text = [f"{n} = {values(v)}" for region in self.axes for n, v in region]
        return text[0] if len(text) == 1 else f"({', '.join(text)})"


def _instance(space: Any, path: list[Op], tag: str) -> _Instance:
    inst = _Instance()
    for r, region in enumerate(path):
        axes = region.axes  # type: ignore[attr-defined]
        extents = [space.to_z3_renamed(a.extent, inst.terms) for a in axes]
        here = []
        for a, ext in zip(axes, extents, strict=True):
            v = space.int_var(f"{tag}.{r}.{a.index.name}")
            inst.ranges += [v >= 0, v < ext]
            here.append((a.index.name, v))
        inst.terms.update(dict(here))
        inst.axes.append(here)
    return inst


def _window_terms(space: Any, op: core.MemStoreOp, terms: Mapping[str, Any]
                  ) -> tuple[list[Any], list[Any]]:
    offsets, shape = op.window()
    return ([space.to_z3_renamed(o, terms) for o in offsets],
            [space.to_z3_renamed(n, terms) for n in shape])


def _solve(space: Any, constraints: list[Any], minimize: list[Any] | None
           ) -> tuple[str, Any]:
    """("proved", None) when ``constraints`` (with the space's ranges) are unsatisfiable,
    ("refuted", a lexicographically minimal model) or ("unknown", None)."""
    from planner.prove.z3_exprs import check, minimal_model

    cons = [*space.constraints(), *constraints]
    solver = space.solver()
    solver.add(*cons)
    result = str(check(solver, WINDOW_TIME_LIMIT_MS))
    if result == "unsat":
        return ("proved", None)
    if result != "sat":
        return ("unknown", None)
    if minimize is None:
        return ("refuted", solver.model())
    symbols = [space.vars[k] for k in sorted(space.vars)]
    model = minimal_model(space.ctx, cons, [*symbols, *minimize], WINDOW_TIME_LIMIT_MS)
    return ("refuted", model if model is not None else solver.model())


def _symbol_values(space: Any, values: Callable[[Any], int]) -> str:
    return ", ".join(f"{k} = {values(space.vars[k])}" for k in sorted(space.vars))


def _evaluator(model: Any) -> Callable[[Any], int]:
    return lambda t: model.eval(t, model_completion=True).as_long()  # type: ignore[no-any-return]


def _window_bounds(op: core.MemStoreOp, mt: MemoryType, bounds: Mapping[str, Interval]
                   ) -> Verdict:
    """Whether the window of ``op`` can be non-empty and outside ``mt``, or of negative size."""
    import z3

    space = _space(_enclosing_indices(op), bounds)
    lo, n = _window_terms(space, op, {})
    ext = [space.to_z3(e) for e in mt.shape]
    outside = z3.Or([z3.Or(lo[d] < 0, lo[d] + n[d] > ext[d]) for d in range(len(ext))])
    bad = z3.Or(z3.Or([x < 0 for x in n]), z3.And(z3.And([x > 0 for x in n]), outside))
    verdict, model = _solve(space, [bad], [])
    if verdict != "refuted":
        return (verdict, "")
    val = _evaluator(model)
    at = _symbol_values(space, val)
    at = f" at {at}" if at else ""
    sizes = [val(x) for x in n]
    if any(x < 0 for x in sizes):
        d = next(d for d, x in enumerate(sizes) if x < 0)
        return ("refuted", f"dim {d} of the window has extent {sizes[d]} < 0{at}")
    span = " x ".join(f"[{val(a)}, {val(a) + x})" for a, x in zip(lo, sizes, strict=True))
    whole = " x ".join(f"[0, {val(e)})" for e in ext)
    return ("refuted", f"it covers {span} of {whole}{at}")


def _disjoint(a: core.MemStoreOp, path_a: list[Op], b: core.MemStoreOp, path_b: list[Op],
              indices: Mapping[str, Expr], bounds: Mapping[str, Interval]) -> Verdict:
    """Whether two instances can run the window stores ``a`` and ``b`` at once and write one
    element (see the section comment)."""
    import z3

    space = _space(indices, bounds)
    ia, ib = _instance(space, path_a, "a"), _instance(space, path_b, "b")
    concurrent, equal = [], []
    for r, (ra, rb) in enumerate(zip(path_a, path_b, strict=False)):
        if ra is not rb:
            break
        eqs = [va == vb for (_, va), (_, vb) in zip(ia.axes[r], ib.axes[r], strict=True)]
        if isinstance(ra, ParallelOp) and eqs:
            concurrent.append(z3.And(*equal, z3.Not(z3.And(eqs))))
        equal += eqs
    if not concurrent:
        return ("proved", "")  # never in two instances at once: program order decides
    lo_a, n_a = _window_terms(space, a, ia.terms)
    lo_b, n_b = _window_terms(space, b, ib.terms)
    elem = [space.int_var(f"element.{d}") for d in range(len(lo_a))]
    both = [z3.And(lo_a[d] <= e, e < lo_a[d] + n_a[d], lo_b[d] <= e, e < lo_b[d] + n_b[d])
            for d, e in enumerate(elem)]
    verdict, model = _solve(space, [*ia.ranges, *ib.ranges, z3.Or(concurrent), *both],
                            [*ia.variables, *ib.variables, *elem])
    if verdict != "refuted":
        return (verdict, "")
    val = _evaluator(model)
    at = _symbol_values(space, val)
    which = "" if a is b else f" (this store and the one at line {b.loc.line})"
    return ("refuted", f"instance {ia.describe(val)} and instance {ib.describe(val)}{which} "
            f"both write element [{', '.join(str(val(e)) for e in elem)}]"
            + (f" at {at}" if at else ""))


def _covers(mt: IRType, stores: list[tuple[core.MemStoreOp, list[Op]]],
            indices: Mapping[str, Expr], bounds: Mapping[str, Interval]) -> str:
    """"proved" when every element of the memory is written by some instance of some of
    ``stores`` (each with the regions whose indices its instances range over)."""
    import z3

    assert isinstance(mt, MemoryType)
    space = _space(indices, bounds)
    elem = [space.int_var(f"element.{d}") for d in range(len(mt.shape))]
    cons = [z3.And(e >= 0, e < space.to_z3(x)) for e, x in zip(elem, mt.shape, strict=True)]
    for k, (store, path) in enumerate(stores):
        inst = _instance(space, path, f"c{k}")
        lo, n = _window_terms(space, store, inst.terms)
        inside = z3.And([z3.And(lo[d] <= e, e < lo[d] + n[d]) for d, e in enumerate(elem)])
        missed = z3.Implies(z3.And(inst.ranges), z3.Not(inside)) if inst.ranges else z3.Not(
            inside)
        cons.append(z3.ForAll(inst.variables, missed) if inst.variables else missed)
    return _solve(space, cons, None)[0] if elem else "proved"
