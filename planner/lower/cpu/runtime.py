"""Compile a kernel under a plan for its target CPU and call it on numpy arrays.

:func:`compile_kernel` builds the loop program (:mod:`planner.lower.loops.program`),
emits LLVM IR (:mod:`planner.lower.cpu.codegen`) with the target catalog's vector width
and register budget, optimizes it at O3 for the catalog's LLVM CPU name and features
(``cpu.llvm_cpu``, ``cpu.llvm_features``; never the host's) and JIT-compiles it
(:mod:`planner.lower.cpu.jit`).  A target without a ``cpu`` section (a Metal or
planning-only catalog) is compiled with the figures of :data:`DEFAULT_TARGET`.  Compiled
code is cached in memory by the content hash of the kernel's printed IR, the plan, the
target and the compilation spec, so compiling the same kernel and plan again is free;
the JIT layer additionally caches by IR text, in memory and on disk (the object code,
keyed by this key, the IR text and the compiler and planner versions: see
:class:`planner.lower.cpu.jit.DiskCache`), so another process skips LLVM's optimization
and code generation.

Code for a target whose features this machine lacks (an x86-avx512 plan on an
AVX2-only host) still compiles, so its IR and assembly can be inspected, but calling
it raises a :class:`~planner.errors.PlannerError` (kind ``unsupported``) naming the
target, the missing features and the host CPU instead of dying on an illegal
instruction.

Calling a :class:`CompiledKernel` binds the kernel's symbols from the arrays' shapes
(exactly like the reference interpreter), checks every array (dtype, rank, a unit
stride in the last dimension, writability of outputs) and raises a
:class:`~planner.errors.PlannerError` naming the parameter instead of crashing.  The
writable views are updated **in place** and returned (``{name: array}``); a writable
view that is not passed is allocated zero-filled.  Parallel segments are split into
contiguous pieces of instances (up to four per worker thread) that the workers take in
turn as they finish, so cheap edge instances do not leave a thread idle; each worker gets
its own arena for instance-local buffers.  ctypes releases the GIL for the duration of a
call, so the workers run concurrently.  Every instance computes the same way whatever
the split, so 1-thread and n-thread results are bit-identical.

Steady-state calls.  A checked call leaves a fast plan per call signature (shapes,
strides, dtypes, writeability, bindings): the context block of the native gate
(:mod:`planner.lower.cpu.callgate`), which re-checks the arrays' fields and runs every
segment in one ctypes call, inline or (once its split is decided) through the native
work pool (:mod:`planner.lower.cpu.workpool`); any difference (or a concurrent call
holding the reusable arenas or the pool) falls back to the checked path, with its
errors.  The pool's workers are shared, spin briefly and then sleep between calls, are
joined at exit or by :func:`shutdown_workers`, and forgotten in a forked child.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.errors import PlannerError, error
from planner.ir.core import Kernel
from planner.ir.dtypes import DType
from planner.ir.expr import Const, Sym
from planner.ir.interpreter import bind_symbols
from planner.ir.printer import PrintOptions, print_kernel
from planner.lower.cpu import callgate, nests, workpool
from planner.lower.cpu.abi import ModuleInfo
from planner.lower.cpu.codegen import emit_program
from planner.lower.cpu.config import (
    MMA_CALLS_SYMBOL,
    MMA_PACKED_SYMBOL,
    MMA_WORK_SYMBOL,
    CodegenConfig,
)
from planner.lower.cpu.gemm import (
    POOL_BYTES_SYMBOL,
    POOL_DRAIN_SYMBOL,
    POOL_LOCK_SYMBOL,
    POOL_SLOTS,
    POOL_SLOTS_SYMBOL,
)
from planner.lower.cpu.jit import (
    CompiledModule,
    TargetSpec,
    catalog_target,
    compile_module,
    host_target,
    missing_features,
)
from planner.lower.cpu.nests import STREAM_THRESHOLD_SYMBOL, view_bytes
from planner.lower.loops.program import LoopProgram, build_loop_program
from planner.plan.decisions import MaterializationPlan
from planner.realize.storage import align

__all__ = ["CompiledKernel", "KernelCache", "compile_kernel", "default_kernel_cache",
           "host_refusal", "shutdown_workers", "worker_threads"]

_INPUT = "invalid-input"
_CODEGEN_VERSION = "cpu-12"
_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_SEGMENT_FN = ctypes.CFUNCTYPE(None, _I64, _I64, _P, _P, _P, _P, _P, _P)


@dataclass(frozen=True)
class _Code:
    """Compiled code of one (kernel, plan, target, host): shared by CompiledKernels."""

    program: LoopProgram
    module: CompiledModule
    info: ModuleInfo
    functions: tuple[Any, ...]  # empty when ``refusal`` is set
    emitted_ir: str
    refusal: str | None = None  # why this machine must not run the code


class KernelCache:
    """Compiled kernels by content hash; thread-safe."""

    def __init__(self) -> None:
        self._entries: dict[str, _Code] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def get(self, key: str) -> _Code | None:
        with self._lock:
            return self._entries.get(key)

    def put(self, key: str, code: _Code) -> _Code:
        with self._lock:
            return self._entries.setdefault(key, code)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_state: dict[str, Any] = {}
_state_lock = threading.Lock()


def default_kernel_cache() -> KernelCache:
    """The process-wide cache used when none is passed (created on first use)."""
    with _state_lock:
        cache = _state.get("cache")
        if cache is None:
            cache = _state["cache"] = KernelCache()
        return cache


def worker_threads() -> int:
    """How many worker threads the shared pool has started (and not stopped)."""
    return workpool.started_threads()


def shutdown_workers() -> None:
    """Stop and join every worker thread; the next split segment starts them again.
    (At interpreter exit they are stopped and joined too.)"""
    workpool.shutdown()


def _after_fork_in_child() -> None:
    """A lock another thread may have held at the fork is free in the child."""
    global _state_lock
    _state_lock = threading.Lock()
    _forget_pools_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _machine_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _resolve_target(target: object, plan: MaterializationPlan | None) -> Any:
    if target is not None and not isinstance(target, str):
        return target
    name = target if isinstance(target, str) else (plan.target if plan is not None else None)
    if not name:
        return None
    from planner.catalog import CatalogRegistry

    try:
        return CatalogRegistry.from_environment().get(name)
    except PlannerError:
        if isinstance(target, str):
            raise
        return None


def _cpu_target(tgt: Any) -> Any:
    """The target whose ``cpu`` section the code is compiled for: ``tgt``, or the default
    target when ``tgt`` is None or has no ``cpu`` section."""
    if tgt is not None and getattr(tgt, "cpu", None) is not None:
        return tgt
    from planner.catalog import DEFAULT_TARGET, CatalogRegistry

    return CatalogRegistry.from_environment().get(DEFAULT_TARGET)


def _refusal(name: str, spec: TargetSpec) -> str | None:
    missing = missing_features(spec)
    if not missing:
        return None
    return (f"cannot run code for target {name!r} on this machine: the host CPU "
            f"{host_target().cpu!r} lacks {', '.join(missing)} (the target's "
            f"cpu.llvm_features); inspect it with 'planner lower --emit asm', or plan for "
            f"--target host")


def host_refusal(target: object = None) -> str | None:
    """Why this machine must not run code for ``target`` (a Target or its name; None:
    the default target): the message calling such code raises, or None when it may run.
    Compiles nothing, so a caller can skip the target up front."""
    cpu_tgt = _cpu_target(_resolve_target(target, None))
    return _refusal(cpu_tgt.name, catalog_target(cpu_tgt.cpu))


def _cache_key(kernel: Kernel, plan: MaterializationPlan | None, target: Any,
               config: CodegenConfig, spec: TargetSpec) -> str:
    h = hashlib.sha256()
    h.update(print_kernel(kernel, PrintOptions(locations=False)).encode())
    h.update(b"\0plan\0")
    h.update(repr(plan.edges if plan is not None else None).encode())
    h.update(repr(plan.memories if plan is not None else None).encode())
    h.update(b"\0target\0")
    h.update(str(getattr(target, "content_hash", "") or getattr(target, "name", "")).encode())
    h.update(b"\0spec\0" + spec.key.encode())
    h.update(f"\0{config!r}\0{_CODEGEN_VERSION}".encode())
    return h.hexdigest()


def _drain(module: CompiledModule, drain: Any) -> None:
    drain()  # ``module`` rides along: its engine must outlive the call


#: The buffer pools of at most this many modules, the ones most recently asked for by
#: ``compile_kernel``, keep their buffers: asking for another drains the oldest (a sweep
#: that measures 50 plans would otherwise keep up to 64 MiB for each).  A drained pool
#: refills on its module's next call.
POOLED_MODULES = 4
_pooled: OrderedDict[int, tuple[CompiledModule, Any]] = OrderedDict()  # oldest first
_pooled_lock = threading.Lock()
_drain_of: weakref.WeakKeyDictionary[CompiledModule, Any] = weakref.WeakKeyDictionary()
# per pooled module: the addresses of its pool's lock, slots and byte count (for a fork)
_pool_state: weakref.WeakKeyDictionary[CompiledModule, tuple[int, int, int]] = \
    weakref.WeakKeyDictionary()


def _forget_pools_after_fork() -> None:
    """In a forked child, empty every pool without freeing (the lock may have been held
    by a thread the child does not have, mid-update): the parent's buffers are the
    child's copies, left to the process."""
    global _pooled_lock
    _pooled_lock = threading.Lock()
    for lock, slots, held in list(_pool_state.values()):
        ctypes.memset(slots, 0, 16 * POOL_SLOTS)
        ctypes.c_int64.from_address(held).value = 0
        ctypes.c_int32.from_address(lock).value = 0
    _pooled.clear()


def _drain_on_discard(code: _Code) -> None:
    """Free what the module's buffer pool (:func:`~planner.lower.cpu.gemm.buffer_pool`)
    holds once ``code`` is discarded (and as :func:`_keep_pool` says). The drain
    function is resolved now (a finalizer must not take the module's locks) and the
    finalizer holds the CompiledModule, so its engine (the pool's code and globals)
    outlives the drain; a drain while another thread's call runs only frees buffers in
    the pool, under its lock. Not at exit: the process's memory goes."""
    drain = ctypes.CFUNCTYPE(None)(code.module.address(POOL_DRAIN_SYMBOL))
    weakref.finalize(code, _drain, code.module, drain).atexit = False
    at = tuple(code.module.address(s) for s in (POOL_LOCK_SYMBOL, POOL_SLOTS_SYMBOL,
                                                 POOL_BYTES_SYMBOL))
    with _pooled_lock:
        _drain_of[code.module] = drain
        _pool_state[code.module] = at
    _keep_pool(code.module, drain)


def _keep_pool(module: CompiledModule, drain: Any) -> None:
    """Mark ``module``'s pool the most recently asked for; drain the pools past
    :data:`POOLED_MODULES`."""
    with _pooled_lock:
        _pooled[id(module)] = (module, drain)
        _pooled.move_to_end(id(module))
        old = [_pooled.popitem(last=False)[1] for _ in range(len(_pooled) - POOLED_MODULES)]
    for _, older in old:
        older()


def compile_kernel(kernel: Kernel, plan: MaterializationPlan | None, target: object = None,
                   threads: int | None = None, *, cache: KernelCache | None = None,
                   config: CodegenConfig | None = None) -> CompiledKernel:
    """Compile ``kernel`` under ``plan`` for the target's CPU (never the host's).

    ``target`` is a catalog :class:`~planner.catalog.Target` or its name (default: the
    plan's target); it names the resources, sizes the worker pool
    (``costs.concurrent_instances``) and, through its ``cpu`` section and register
    capacity, fixes the vector width, the register budget and the LLVM CPU and features
    (``config`` overrides the first two); ``threads`` overrides the pool size.
    """
    tgt = _resolve_target(target, plan)
    cpu_tgt = _cpu_target(tgt)
    spec = catalog_target(cpu_tgt.cpu)
    if config is None:
        config = CodegenConfig.for_target(cpu_tgt)
    key = _cache_key(kernel, plan, tgt, config, spec)
    use = cache if cache is not None else default_kernel_cache()
    code = use.get(key)
    if code is None:
        program = build_loop_program(kernel, plan, tgt)
        module, info = emit_program(program, config)
        text = str(module)
        compiled = compile_module(text, target=spec, context=key)
        refusal = _refusal(cpu_tgt.name, spec)
        fns = () if refusal else tuple(
            compiled.ctypes_function(name, None, [_I64, _I64, _P, _P, _P, _P, _P, _P])
            for name in info.functions)
        made = _Code(program, compiled, info, fns, text, refusal)
        if refusal is None and POOL_DRAIN_SYMBOL in module.globals:
            _drain_on_discard(made)
        code = use.put(key, made)
    else:
        with _pooled_lock:
            drain = _drain_of.get(code.module)
        if drain is not None:
            _keep_pool(code.module, drain)
    if threads is None:
        costs = getattr(tgt, "costs", None)
        threads = int(costs.concurrent_instances) if costs is not None else _machine_threads()
    return CompiledKernel(kernel, code, max(1, int(threads)))


class CompiledKernel:
    """A kernel compiled for its target's CPU; call it with the view arrays.

    ``kernel(X=x, Y=y)`` or ``kernel({"X": x, "Y": y})``; ``bindings=`` supplies symbols
    no view extent binds; ``threads=`` overrides the worker count for one call.
    """

    def __init__(self, kernel: Kernel, code: _Code, threads: int) -> None:
        self.kernel = kernel
        self._code = code
        self.threads = threads
        prog = code.program
        owner = {name: seg for seg in prog.segments for name in seg.buffers}
        # Per buffer: placement, byte size and (for per-instance copies) instance count.
        self._sizes = [(where, buf, 1 if buf.dtype is DType.BOOL else buf.dtype.itemsize,
                        owner[buf.name].instances() if buf.name in owner else Const(1))
                       for buf, where in zip(prog.buffers, code.info.placement, strict=True)]
        self._layouts: dict[tuple[int, ...], tuple[int, int, np.ndarray]] = {}
        # per call signature (_call_key): what checking the arrays found, so a repeated
        # call with arrays of the same shapes, strides and dtypes skips the checks
        self._calls: dict[tuple[object, ...], tuple[Any, ...]] = {}
        self._instances = [seg.instances() if seg.parallel else Const(1)
                           for seg in prog.segments]
        self._arena_lock = threading.Lock()
        self._arenas: list[np.ndarray] = []  # reused by calls that do not overlap
        self._arena_table = np.zeros(1, np.int64)  # their addresses, for the work pool
        self._global = _aligned(0)
        # the native fast path (planner.lower.cpu.callgate): the gate, the segment
        # addresses, the fast plan per call signature and the one tried first, and the
        # reusable arenas' (address, bytes) of worker 0 and of the global arena
        self._gate = (callgate.gate(len(prog.params)) if code.refusal is None and code.functions
                      else None)
        self._fn_addrs = ([code.module.address(n) for n in code.info.functions]
                          if code.refusal is None and code.functions else [])
        self._pieces = (code.info.pieces if len(code.info.pieces) == len(code.info.functions)
                        else (workpool.PIECES_PER_WORKER,) * len(code.info.functions))
        self._fasts: dict[tuple[object, ...], _FastCall] = {}
        self._last: _FastCall | None = None
        self._view_bytes = view_bytes(prog)
        self._stream_at = _symbol(code, STREAM_THRESHOLD_SYMBOL) if self._fn_addrs else None
        # (arena table address, arenas, bytes of each, global arena address, its bytes)
        self._arena_cap = (0, 0, 0, 0, 0)

    @property
    def loop_program(self) -> LoopProgram:
        return self._code.program

    @property
    def llvm_ir(self) -> str:
        """The optimized LLVM IR that runs."""
        return self._code.module.llvm_ir

    @property
    def emitted_ir(self) -> str:
        """The LLVM IR as emitted from the loop program, before optimization."""
        return self._code.emitted_ir

    @property
    def asm(self) -> str:
        """Assembly of the code, for the target's LLVM CPU and features."""
        return self._code.module.asm

    @property
    def target_spec(self) -> TargetSpec:
        """The triple, LLVM CPU name and features the code was compiled for."""
        return self._code.module.target

    @property
    def mma_work(self) -> int:
        """Multiply-adds the kernel's mma statements have run since it was compiled
        (only with ``CodegenConfig(count_work=True)``; else ``KeyError``)."""
        return ctypes.c_int64.from_address(self._code.module.address(MMA_WORK_SYMBOL)).value

    @property
    def mma_calls(self) -> int:
        """How many times the kernel's mma statements have run since it was compiled
        (only with ``CodegenConfig(count_work=True)``; else ``KeyError``)."""
        return ctypes.c_int64.from_address(self._code.module.address(MMA_CALLS_SYMBOL)).value

    @property
    def mma_packed(self) -> int:
        """Bytes of source elements the packed GEMM of the kernel's mma statements has
        packed since it was compiled (pack-cache hits pack nothing; only with
        ``CodegenConfig(count_work=True)`` and a packed mma; else ``KeyError``)."""
        return ctypes.c_int64.from_address(
            self._code.module.address(MMA_PACKED_SYMBOL)).value

    @property
    def runnable(self) -> bool:
        """Whether this machine has every feature the code was compiled with."""
        return self._code.refusal is None

    @property
    def refusal(self) -> str | None:
        """Why calling this kernel is refused on this machine (None: it runs)."""
        return self._code.refusal

    def with_threads(self, threads: int) -> CompiledKernel:
        return CompiledKernel(self.kernel, self._code, max(1, int(threads)))

    # ------------------------------------------------------------------ calling

    def __call__(self, arrays: Mapping[str, np.ndarray] | None = None, /, *,
                 bindings: Mapping[str, int] | None = None, threads: int | None = None,
                 **named: np.ndarray) -> dict[str, np.ndarray]:
        given = named if arrays is None else ({**arrays, **named} if named else arrays)
        return self.run(given, bindings, threads)

    def run(self, arrays: Mapping[str, np.ndarray], bindings: Mapping[str, int] | None = None,
            threads: int | None = None) -> dict[str, np.ndarray]:
        fast = self._last
        if fast is not None:
            got = self._run_fast(fast, arrays, bindings, threads)
            if got is not None:
                return got
        return self._run_checked(arrays, bindings, threads)

    def _run_fast(self, fast: _FastCall, arrays: Mapping[str, np.ndarray],
                  bindings: Mapping[str, int] | None, threads: int | None
                  ) -> dict[str, np.ndarray] | None:
        """Run a call with the signature of ``fast`` natively (the gate checks the
        arrays); None when it does not apply (the caller takes the checked path)."""
        nthreads = self.threads if threads is None else max(1, int(threads))
        if len(arrays) != fast.given or (bindings or None) != fast.bindings:
            return None
        if fast.helpers:
            if nthreads != fast.threads:
                return None
        elif not (fast.inline or nthreads <= 1):
            return None
        try:
            objs = [arrays[name] if alloc is None else np.zeros(*alloc)
                    for name, alloc in fast.params]
        except KeyError:
            return None
        if fast.big and self._stream_at is not None:
            decided = fast.prep[10].get(nthreads)
            if not isinstance(decided, bool):
                return None  # not decided for this thread count: the trial runs checked
            _set_streaming(self._stream_at, decided)
        if not self._arena_lock.acquire(blocking=False):
            return None  # a concurrent call holds the arenas: the checked path makes its own
        try:
            table, count, worker_bytes, glob, glob_bytes = self._arena_cap
            if (fast.worker > worker_bytes or fast.glob > glob_bytes
                    or count < fast.helpers + 1):
                return None
            if not fast.helpers:
                if self._gate(fast.ctx_addr, table, glob, 0, *map(id, objs)):
                    return None
            else:
                pool = workpool.shared_pool()
                if not pool.enter(fast.helpers):
                    return None
                try:
                    if self._gate(fast.ctx_addr, table, glob, pool.address, *map(id, objs)):
                        return None
                finally:
                    pool.leave()
        finally:
            self._arena_lock.release()
        if fast.retime:
            fast.calls += 1
            if fast.calls >= fast.redecide:
                self._retime(fast)
        return {name: objs[i] for name, i in fast.outputs}

    def _retime(self, fast: _FastCall) -> None:
        """Forget the split decisions of ``fast``'s signature and its streamed-store
        decision for ``fast``'s thread count (and its fast plan): its next calls take the
        checked path and measure them again.  Each time a split that lost is measured
        again, the next measurement waits twice as long (prep[9]); those quick re-measures
        of a lost split keep the streamed-store decision (its trial would run every few
        calls), the regular ones (every ``_REDECIDE_CALLS``) measure it again."""
        split, declined = fast.prep[6], fast.prep[7]
        fast.calls = 0  # another thread's call of the same plan does not retime it again
        if not any(declined) and isinstance(fast.prep[10].get(fast.threads), bool):
            fast.prep[10].pop(fast.threads, None)
        rounds = fast.prep[9]
        rounds[0] = rounds[0] + 1 if any(declined) else 0  # a lost split measured again
        for i, state in enumerate(split):
            if isinstance(state, bool):
                split[i] = None
                declined[i] = 0.0
        self._fasts.pop(fast.key, None)
        if self._last is fast:
            self._last = None

    def _run_checked(self, arrays: Mapping[str, np.ndarray],
                     bindings: Mapping[str, int] | None = None, threads: int | None = None
                     ) -> dict[str, np.ndarray]:
        prog = self._code.program
        if self._code.refusal is not None:
            raise error(self._code.refusal, kind="unsupported")
        nthreads = self.threads if threads is None else max(1, int(threads))
        key = _call_key(arrays, bindings)
        known = self._calls.get(key) if key is not None else None
        if known is not None:  # same shapes, strides, dtypes and bindings: checked before
            env, syms, strides, missing, prep = known
            given = dict(arrays)
            for name, (shape, dtype) in missing.items():
                given[name] = np.zeros(shape, dtype)
            views = (_P * max(1, len(prog.params)))()
            outputs: dict[str, np.ndarray] = {}
            for i, p in enumerate(prog.params):
                a = given[p.name]
                views[i] = _addr(a)
                if not p.readonly:
                    outputs[p.name] = a
            self._execute(env, syms, views, strides, nthreads, prep)
            fast = self._fasts.get(key)
            if fast is None or fast.stale(prep, nthreads):
                fast = self._fast_call(key, given, bindings, env, syms, strides, prep,
                                       nthreads)
            self._last = fast
            return outputs
        arrays = self._complete(dict(arrays), bindings)
        env = bind_symbols(self.kernel, arrays, bindings)
        views, strides, outputs = self._views(arrays)
        try:
            syms = np.array([env[s] for s in prog.symbols], dtype=np.int64)
        except KeyError as e:
            raise error(f"kernel {prog.kernel!r} needs symbol {e.args[0]}, which no view "
                        "extent binds: pass it in bindings", kind=_INPUT) from None
        prep = self._prepare(env, syms, strides)
        self._execute(env, syms, views, strides, nthreads, prep)
        if key is not None:
            if len(self._calls) > 64:
                self._calls.clear()
            given_names = {k for k, _ in key[0]}
            self._calls[key] = (env, syms, strides, {
                p.name: (arrays[p.name].shape, arrays[p.name].dtype)
                for p in prog.params if p.name not in given_names}, prep)
            self._last = self._fast_call(key, arrays, bindings, env, syms, strides, prep,
                                         nthreads)
        return outputs

    def _fast_call(self, key: tuple[object, ...], arrays: Mapping[str, np.ndarray],
                   bindings: Mapping[str, int] | None, env: Mapping[str, int],
                   syms: np.ndarray, strides: np.ndarray, prep: tuple[Any, ...],
                   threads: int) -> _FastCall | None:
        """The fast plan of a checked call with signature ``key`` on ``threads``
        threads (None: no gate).  Segments whose split is decided run split through the
        work pool; undecided ones inline (so the plan is rebuilt once they are)."""
        if self._gate is None:
            return None
        if self._stream_at is not None and prep[8] >= nests.STREAM_MIN_BYTES \
                and not isinstance(prep[10].get(threads), bool):
            return None  # the streamed-store trial times checked calls first
        prog = self._code.program
        worker, glob, table = self._layout(env, tuple(int(v) for v in syms))
        given = {k for k, _ in key[0]}
        objs = [arrays[p.name] for p in prog.params]
        segs = [(fn, n, min(threads, n) - 1 if s is True else 0, per)
                for fn, n, s, per in zip(self._fn_addrs, prep[3], prep[6], self._pieces,
                                         strict=True) if n > 0]
        ctx = callgate.context_block(objs, [not p.readonly for p in prog.params],
                                     _addr(syms), _addr(strides), _addr(table), segs)
        fast = _FastCall(
            ctx=ctx, ctx_addr=_addr(ctx), given=len(given),
            bindings=dict(bindings) if bindings else None,
            params=tuple((p.name, None if p.name in given else (a.shape, a.dtype))
                         for p, a in zip(prog.params, objs, strict=True)),
            outputs=tuple((p.name, i) for i, p in enumerate(prog.params) if not p.readonly),
            key=key, prep=prep,
            retime=(threads > 1 and any(n > 1 for n in prep[3]))
            or isinstance(prep[10].get(threads), bool),
            redecide=_redecide_calls(prep[7], prep[9][0]),
            big=prep[8] >= nests.STREAM_MIN_BYTES,
            worker=worker, glob=glob, inline=_all_inline(prep), settled=_settled(prep),
            threads=threads, helpers=max((h for _, _, h, _ in segs), default=0),
            keep=(syms, strides, table, tuple(a.dtype for a in objs)))
        if len(self._fasts) > 64:
            self._fasts.clear()
        self._fasts[key] = fast
        return fast

    def _complete(self, arrays: dict[str, Any], bindings: Mapping[str, int] | None
                  ) -> dict[str, Any]:
        """Check names and types; allocate missing writable views (zeros)."""
        prog = self._code.program
        names = {p.name for p in prog.params}
        unknown = sorted(set(arrays) - names)
        if unknown:
            raise error(f"kernel {prog.kernel!r} has no view named {', '.join(unknown)} "
                        f"(views: {', '.join(p.name for p in prog.params)})", kind=_INPUT)
        env: dict[str, int] = {k: int(v) for k, v in (bindings or {}).items()}
        for p in prog.params:
            a = arrays.get(p.name)
            if a is None:
                continue
            if not isinstance(a, np.ndarray):
                raise error(f"view {p.name!r} needs a numpy array, got {type(a).__name__}",
                            kind=_INPUT)
            if a.dtype != p.dtype.numpy or p.dtype is DType.BF16:
                raise error(f"view {p.name!r} ({p.dtype}) needs a {p.dtype.numpy} array, got "
                            f"{a.dtype}", kind=_INPUT)
            if a.ndim != len(p.shape):
                raise error(f"view {p.name!r} has rank {len(p.shape)}, but its array has rank "
                            f"{a.ndim} (shape {a.shape})", kind=_INPUT)
            for d, e in enumerate(p.shape):
                if isinstance(e, Sym):
                    env.setdefault(e.name, int(a.shape[d]))
        for p in prog.params:
            if p.name in arrays:
                continue
            if p.readonly:
                raise error(f"no array given for view {p.name!r} of kernel {prog.kernel!r}",
                            kind=_INPUT)
            try:
                shape = tuple(e.evaluate(env) for e in p.shape)
            except KeyError as e:
                raise error(f"cannot allocate output {p.name!r}: symbol {e.args[0]} is not "
                            "bound", kind=_INPUT) from None
            arrays[p.name] = np.zeros(shape, p.dtype.numpy)
        return arrays

    def _views(self, arrays: Mapping[str, np.ndarray]
               ) -> tuple[Any, np.ndarray, dict[str, np.ndarray]]:
        prog = self._code.program
        ptrs = (_P * max(1, len(prog.params)))()
        strides: list[int] = []
        outputs: dict[str, np.ndarray] = {}
        for i, p in enumerate(prog.params):
            a = arrays[p.name]
            item = a.itemsize
            if any(s % item for s in a.strides):
                raise error(f"view {p.name!r}: strides {a.strides} are not multiples of the "
                            f"element size {item}", kind=_INPUT)
            el = [s // item for s in a.strides]
            if a.size > 1 and a.shape[-1] > 1 and el[-1] != 1:
                raise error(f"view {p.name!r} must have unit stride in its last dimension "
                            f"(got {a.strides[-1]} bytes for {a.dtype}); pass "
                            "np.ascontiguousarray(...)", kind=_INPUT)
            if a.ndim:
                el[-1] = 1
            if not p.readonly:
                if not a.flags.writeable:
                    raise error(f"output view {p.name!r} is not writeable", kind=_INPUT)
                outputs[p.name] = a
            ptrs[i] = _addr(a)
            strides.extend(el)
        return ptrs, np.array(strides or [0], dtype=np.int64), outputs

    def _layout(self, env: Mapping[str, int], key: tuple[int, ...]
                ) -> tuple[int, int, np.ndarray]:
        """Worker-arena size, global-arena size and the bufinfo table (memoized)."""
        got = self._layouts.get(key)
        if got is not None:
            return got
        table = np.zeros(2 * max(1, len(self._sizes)), dtype=np.int64)
        worker = glob = 0
        for i, (where, buf, item, instances) in enumerate(self._sizes):
            # the bytes the plan holds for the buffer, on a vector-aligned boundary
            size = align(buf.footprint_bytes(env, item), _ARENA_ALIGN)
            if where == "worker":
                table[2 * i] = worker
                worker += size
            elif where == "kernel":
                table[2 * i] = glob
                glob += size
            elif where == "global":
                table[2 * i], table[2 * i + 1] = glob, size
                glob += size * max(instances.evaluate(env), 0)
        if len(self._layouts) > 64:
            self._layouts.clear()
        got = self._layouts[key] = (worker, glob, table)
        return got

    def _prepare(self, env: Mapping[str, int], syms: np.ndarray, strides: np.ndarray
                 ) -> tuple[Any, ...]:
        """What a call with these symbols computes before it runs: worker and global
        arena sizes, the addresses of the symbol, stride and bufinfo tables, the instance
        counts per segment, and per segment whether splitting it across workers pays
        (None before its first run, then the seconds of its 1-worker runs until
        :data:`_SPLIT_SAMPLES` are in: see ``_SPLIT_MIN_S``), and per segment the fastest
        1-worker seconds of a segment kept on one worker after a trial its split did not
        win (0.0 otherwise: see :data:`_REDECIDE_S`), the bytes of its views together
        (what decides whether its rows may stream their stores), how many times in a row
        a lost split was measured again (``_redecide_calls``), and per thread count the
        streamed-store trial or decision (:class:`_StreamTrial`)."""
        worker_size, global_size, table = self._layout(env, tuple(int(v) for v in syms))
        counts = [e.evaluate(env) for e in self._instances]
        split: list[Any] = [None] * len(counts)
        return (worker_size, global_size, _addr(table), counts, _addr(syms), _addr(strides),
                split, [0.0] * len(counts), self._view_bytes.evaluate(env), [0], {})

    def _execute(self, env: Mapping[str, int], syms: np.ndarray, views: Any,
                 strides: np.ndarray, threads: int,
                 prep: tuple[Any, ...] | None = None) -> None:
        """Run every segment; while the streamed-store trial is open (see
        :class:`_StreamTrial`), as one of its timed runs."""
        prep = prep or self._prepare(env, syms, strides)
        if self._stream_at is None or prep[8] < nests.STREAM_MIN_BYTES:
            self._run_segments(views, threads, prep)
            return
        state = prep[10].get(threads)
        if isinstance(state, bool) or not _split_settled(prep, threads):
            # decided; or a split trial is open (the two trials time the same runs, so
            # they take turns): the decision made, or streaming (the default) meanwhile
            _set_streaming(self._stream_at, state is not False)
            self._run_segments(views, threads, prep)
            return
        trial = state if state is not None else _StreamTrial()
        prep[10][threads] = trial
        streamed = trial.stream_next()
        _set_streaming(self._stream_at, streamed)
        t0 = time.perf_counter()
        self._run_segments(views, threads, prep)
        prep[10][threads] = trial.record(streamed, time.perf_counter() - t0)

    def _run_segments(self, views: Any, threads: int, prep: tuple[Any, ...]) -> None:
        worker_size, global_size, table, counts, syms_at, strides_at, split, declined = \
            prep[:8]
        chunks_max = max([min(threads, n) for n in counts if n > 0], default=1)
        reuse = self._arena_lock.acquire(blocking=False)
        try:
            if reuse:
                grown = [a if a.nbytes >= worker_size else _aligned(worker_size)
                         for a in self._arenas]
                grown += [_aligned(worker_size) for _ in range(chunks_max - len(grown))]
                if len(grown) != len(self._arenas) or any(
                        a is not b for a, b in zip(grown, self._arenas, strict=True)):
                    self._arenas, self._arena_table = grown, _address_table(grown)
                if self._global.nbytes < global_size:
                    self._global = _aligned(global_size)
                arenas, garena, table_of = self._arenas, self._global, self._arena_table
                self._arena_cap = (_addr(table_of), len(arenas),
                                   min(a.nbytes for a in arenas), _addr(garena),
                                   garena.nbytes)
            else:
                arenas = [_aligned(worker_size) for _ in range(chunks_max)]
                garena = _aligned(global_size)
                table_of = _address_table(arenas)
            base = (syms_at, ctypes.addressof(views), strides_at)
            tail = (_addr(garena), table)
            for i, (fn, addr, n, per) in enumerate(zip(self._code.functions, self._fn_addrs,
                                                       counts, self._pieces, strict=True)):
                if n <= 0:
                    continue
                chunks = min(threads, n)
                s = split[i]
                if chunks > 1 and s is not True:
                    if s is False:
                        chunks = 1
                    else:  # still deciding: time this run, one worker or split
                        trial = s if s is not None else _SplitTrial()
                        split[i] = trial  # concurrent calls add their runs to it
                        apart = trial.split_next()
                        t0 = time.perf_counter()
                        helped = _run_segment(fn, addr, n, chunks if apart else 1, base,
                                              arenas, table_of, tail, per)
                        split[i] = trial.record(apart, time.perf_counter() - t0, helped)
                        if split[i] is False and (trial.split or trial.unjoined):
                            declined[i] = min(trial.single)  # split lost (or never joined)
                        continue
                _run_segment(fn, addr, n, chunks, base, arenas, table_of, tail, per)
        finally:
            if reuse:
                self._arena_lock.release()


def _run_segment(fn: Any, addr: int, n: int, chunks: int, base: tuple[int, ...],
                 arenas: list[np.ndarray], arena_table: np.ndarray, tail: tuple[int, ...],
                 per: int = workpool.PIECES_PER_WORKER) -> bool:
    """Instances ``[0, n)`` of the segment (ctypes function ``fn`` at ``addr``) run by
    ``chunks`` threads, the calling one included: up to ``per`` (the segment's
    ``ModuleInfo.pieces``, else :data:`~planner.lower.cpu.workpool.PIECES_PER_WORKER`)
    contiguous pieces per thread,
    taken in order as they finish (edge instances cost what they compute, so equal
    counts are not equal work), by the native pool (:mod:`planner.lower.cpu.workpool`).
    ``arena_table`` holds the addresses of ``arenas``.  Whether another thread took a
    piece."""
    def alone() -> None:
        fn(0, n, *base, _addr(arenas[0]), *tail)

    if chunks == 1:
        alone()
        return False
    return workpool.shared_pool().run(addr, n, chunks, base, _addr(arena_table), tail, alone,
                                      per)


@dataclass(slots=True)
class _FastCall:
    """What a steady-state call with one signature needs (see ``CompiledKernel._run_fast``)."""

    ctx: np.ndarray  # the gate's context block (planner.lower.cpu.callgate)
    ctx_addr: int
    given: int  # how many arrays the call passes
    bindings: dict[str, int] | None
    params: tuple[tuple[str, tuple[Any, Any] | None], ...]  # per view: name, zeros to make
    outputs: tuple[tuple[str, int], ...]  # writable views: name, parameter index
    worker: int  # bytes of worker 0's arena and of the global arena the code needs
    glob: int
    inline: bool  # every segment runs on the caller whatever the thread count
    settled: bool  # every split decision was made when ctx was built
    threads: int  # the thread count ctx was built for
    helpers: int  # the most pool workers one of its segments uses (0: all inline)
    keep: tuple[Any, ...]  # the tables (and dtypes) whose addresses ctx holds
    key: tuple[object, ...] = ()  # the call signature
    prep: tuple[Any, ...] = ()  # the signature's prepared call (its split states)
    retime: bool = False  # its split and streaming decisions are measured again now and then
    calls: int = 0  # steady calls since they were made
    redecide: int = 0  # measure them again after this many steady calls (_redecide_calls)
    big: bool = False  # its views are large enough for its rows to stream (_StreamTrial)


    def stale(self, prep: tuple[Any, ...], threads: int) -> bool:
        """Whether a call on ``threads`` threads with ``prep`` needs a new context
        block: split decisions made since, or splits for another thread count."""
        return ((not self.settled and _settled(prep))
                or (self.helpers > 0 and threads != self.threads)
                or (threads > 1 and self.threads <= 1 and not self.inline))


def _settled(prep: tuple[Any, ...]) -> bool:
    """Whether every segment's split decision is made (see ``_SPLIT_SAMPLES``)."""
    return all(n <= 1 or isinstance(s, bool) for n, s in zip(prep[3], prep[6], strict=True))


def _split_settled(prep: tuple[Any, ...], threads: int) -> bool:
    """Whether no split trial is open for a call on ``threads`` threads (on one thread
    no segment splits, so none is)."""
    return threads <= 1 or _settled(prep)


def _all_inline(prep: tuple[Any, ...]) -> bool:
    """Whether every segment of a prepared call stays on the calling thread (one
    instance, or a 1-worker run too short to be worth splitting)."""
    return all(n <= 1 or s is False for n, s in zip(prep[3], prep[6], strict=True))


def _call_key(arrays: Mapping[str, Any], bindings: Mapping[str, int] | None
              ) -> tuple[object, ...] | None:
    """What the checks of a call depend on: per array its name, shape, strides, dtype
    and writeability, and the bindings (None: something that is not an ndarray)."""
    items = []
    for name, a in arrays.items():
        if type(a) is not np.ndarray:
            return None
        items.append((name, (a.shape, a.strides, a.dtype, a.flags.writeable)))
    items.sort(key=lambda kv: kv[0])
    return (tuple(items), tuple(sorted((bindings or {}).items())))


def _addr(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def _address_table(arrays: list[np.ndarray]) -> np.ndarray:
    """The arrays' data addresses as an ``int64`` table (what native code indexes)."""
    return np.array([_addr(a) for a in arrays], np.int64)


_ARENA_ALIGN = 64  # every buffer starts on a cache line (vector loads need no more)
#: Whether a parallel segment is split across workers is measured, per call signature:
#: its runs alternate between one worker and split until each way has
#: :data:`_SPLIT_SAMPLES` runs, then it is split when the fastest split run beat the
#: fastest 1-worker run by :data:`_SPLIT_GAIN` (the first runs are cold, so minima, not
#: means; alternating shares a passing disturbance, such as another library's threads
#: still spinning on the other core, between both ways).  A segment whose first two
#: 1-worker runs stay under :data:`_SPLIT_MIN_S` is not split at all: handing out pieces
#: costs a few µs even with the workers spinning (:mod:`workpool`), and a worker that went
#: to sleep takes ~100-200 µs to wake.  The decision is measured again every
#: :data:`_REDECIDE_CALLS` steady calls, so one taken while the machine was busy does not
#: stick.  A split run that no worker joined (the other cores busy, another library's
#: threads still spinning there) measures nothing about splitting and is not counted;
#: after :data:`_SPLIT_SAMPLES` * 3 of them the segment stays on one worker.  Instances
#: are independent, so the split never changes a result.
_SPLIT_MIN_S = 20e-6
_SPLIT_SAMPLES = 5
_SPLIT_GAIN = 0.9
_REDECIDE_CALLS = 512
#: A segment kept on one worker because its split did not win is measured again after
#: about this many seconds of such runs (at least :data:`_MIN_REDECIDE_CALLS` calls), not
#: after 512 calls: a 23 ms GEMM whose trial ran while another library's threads held the
#: other core ran 512 calls (12 s) at half speed before this.
_REDECIDE_S = 0.25
_MIN_REDECIDE_CALLS = 8


def _redecide_calls(declined: list[float], rounds: int = 0) -> int:
    """After how many steady calls a signature's split decisions are measured again,
    given the 1-worker seconds of its segments whose split lost (see ``_prepare``) and
    how many times in a row it was measured again with a lost split (each doubles the
    wait: a split that keeps losing, e.g. on a busy core, costs ever less to confirm)."""
    lost = sum(declined)
    if lost <= 0:
        return _REDECIDE_CALLS
    calls = max(_MIN_REDECIDE_CALLS, int(_REDECIDE_S / lost)) << min(rounds, 16)
    return min(_REDECIDE_CALLS, calls)


#: Calls whose views hold at least ``nests.STREAM_MIN_BYTES`` alternate between streamed
#: and plain stores (the module global ``nests.STREAM_THRESHOLD_SYMBOL``) until each way
#: has :data:`_STREAM_SAMPLES` runs, once the call's split decisions are made; the faster
#: minimum wins, for that call signature and thread count, and is measured again with
#: the split decisions (``_redecide_calls``: a decision taken while another process held
#: the memory bus does not stick; in one peers run GELU on 2 threads kept plain stores at
#: 5.1 ms where streamed ones ran 3.8 ms).
#: The global is the module's: concurrent calls of other signatures or thread counts may
#: set it while a call runs (its rows then stream or not: the results are the same, the
#: trial's timings less clean).  Whether streaming pays depends on the host: on an Intel
#: Xeon VM with a 480 MiB L3 plain stores ran GELU on 16M floats 1.35x faster on 1 thread
#: while softmax and layernorm 4096x4096 ran 1.25-1.5x faster streamed.
_STREAM_SAMPLES = 3
_NO_STREAMING = 1 << 62  # a threshold no kernel's views reach


@dataclass(slots=True)
class _StreamTrial:
    """The timed runs of a module whose streamed stores are being decided."""

    streamed: list[float] = field(default_factory=list)
    plain: list[float] = field(default_factory=list)

    def stream_next(self) -> bool:
        return len(self.streamed) <= len(self.plain)

    def record(self, streamed: bool, seconds: float) -> _StreamTrial | bool:
        """This trial, or the decision (whether to stream) once every way has its runs."""
        (self.streamed if streamed else self.plain).append(seconds)
        if min(len(self.streamed), len(self.plain)) < _STREAM_SAMPLES:
            return self
        return min(self.streamed) <= min(self.plain)


def _symbol(code: _Code, name: str) -> int | None:
    """The address of module global ``name`` of ``code``; None when it has none."""
    try:
        return code.module.address(name)
    except KeyError:
        return None


def _set_streaming(at: int | None, stream: bool) -> None:
    """Point the streaming threshold at ``at`` to stream (the default) or not."""
    if at is not None:
        ctypes.c_int64.from_address(at).value = (nests.STREAM_MIN_BYTES if stream
                                                 else _NO_STREAMING)


@dataclass(slots=True)
class _SplitTrial:
    """The timed runs of a segment whose split is being decided (see ``_SPLIT_SAMPLES``)."""

    single: list[float] = field(default_factory=list)
    split: list[float] = field(default_factory=list)
    unjoined: int = 0  # split runs no worker took part in (not timed)

    def split_next(self) -> bool:
        return len(self.single) >= 2 and len(self.split) < len(self.single) - 1

    def record(self, split: bool, seconds: float, joined: bool = True
               ) -> _SplitTrial | bool:
        """The segment's next state after a run (``joined``: a worker took part in a
        split run): still this trial, or the decision."""
        if split and not joined:
            self.unjoined += 1
            return self if self.unjoined < 3 * _SPLIT_SAMPLES else False
        (self.split if split else self.single).append(seconds)
        if len(self.single) >= 2 and not self.split and min(self.single) <= _SPLIT_MIN_S:
            return False
        if len(self.split) < _SPLIT_SAMPLES or len(self.single) < _SPLIT_SAMPLES + 1:
            return self
        return min(self.split) < min(self.single) * _SPLIT_GAIN


def _aligned(nbytes: int) -> np.ndarray:
    """A 64-byte aligned byte buffer of at least ``nbytes`` (never empty)."""
    raw = np.empty(max(nbytes, 0) + 128, dtype=np.uint8)
    shift = (-raw.ctypes.data) % 64
    return raw[shift:shift + max(nbytes, 64)]
