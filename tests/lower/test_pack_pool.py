"""The per-module buffer pool (planner.lower.cpu.gemm.buffer_pool): a segment call's GEMM
scratch and pack-cache buffers are kept for the next call instead of going back to the OS
(which made every call page-fault and zero ~20 MiB at 2048³), within POOL_SLOTS slots and
POOL_BUDGET_BYTES bytes; ``planner_pool_drain`` frees what it holds, and compile_kernel's
finalizer calls it when the compiled code is discarded.

The pool's state is read through its module globals (pointer and capacity per slot, the
bytes held, and with ``count_work`` the aligned_alloc calls of ``take``)."""

from __future__ import annotations

import ctypes
import dataclasses
import gc

import llvmlite.ir as ir
import numpy as np
import pytest

from planner.catalog import CatalogRegistry
from planner.ir.examples import builtin_examples_dir, load_example
from planner.lower import compile_kernel
from planner.lower.cpu.config import POOL_ALLOCS_SYMBOL, CodegenConfig
from planner.lower.cpu.gemm import (
    POOL_BUDGET_BYTES,
    POOL_BYTES_SYMBOL,
    POOL_DRAIN_SYMBOL,
    POOL_SLOTS,
    POOL_SLOTS_SYMBOL,
    buffer_pool,
)
from planner.lower.cpu.jit import CompiledModule, compile_module
from planner.lower.cpu.runtime import KernelCache
from planner.solve import plan_kernel

TARGET = CatalogRegistry().get("host")
CONFIG = dataclasses.replace(CodegenConfig.for_target(TARGET), count_work=True)
TILE = 128


def _pool(module: CompiledModule) -> tuple[list[tuple[int, int]], int]:
    """The (pointer, capacity) of every taken slot, and the bytes the pool says it holds."""
    raw = (ctypes.c_int64 * (2 * POOL_SLOTS)).from_address(module.address(POOL_SLOTS_SYMBOL))
    slots = [(raw[2 * i], raw[2 * i + 1]) for i in range(POOL_SLOTS) if raw[2 * i]]
    return slots, ctypes.c_int64.from_address(module.address(POOL_BYTES_SYMBOL)).value


def _allocs(module: CompiledModule) -> int:
    return ctypes.c_int64.from_address(module.address(POOL_ALLOCS_SYMBOL)).value


def _drain(module: CompiledModule) -> None:
    ctypes.CFUNCTYPE(None)(module.address(POOL_DRAIN_SYMBOL))()


def _kernel(example: str, m: int, n: int, k: int, config: CodegenConfig | None = None,
            cache: KernelCache | None = None):
    g = load_example(builtin_examples_dir() / f"{example}.py").module
    make = g.make_gemm if example == "gemm" else g.make_manual_gemm
    kern = make(g.GemmConfig(TILE, TILE, TILE, 2))
    return compile_kernel(kern, plan_kernel(kern, TARGET, {"M": m, "N": n, "K": k}), TARGET,
                          config=config, cache=cache)


def _operands(m: int, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("example", ["gemm", "manual_gemm"])
def test_repeated_calls_match_numpy(example: str) -> None:
    """Many calls on 1 and 2 threads, with shapes that are no tile multiples and change
    between calls (pooled buffers of one shape serve the next), all match numpy."""
    ck = _kernel(example, 300, 200, 170)
    shapes = [(300, 200, 170), (130, 390, 260), (300, 200, 170), (70, 129, 300)]
    for i in range(16):
        m, n, k = shapes[i % len(shapes)]
        a, b, want = _operands(m, n, k, i)
        c = np.full((m, n), np.nan, np.float32)
        ck(A=a, B=b, C=c, threads=1 + i % 2)
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    _, held = _pool(ck._code.module)
    assert 0 < held <= POOL_BUDGET_BYTES


def test_second_call_allocates_nothing() -> None:
    """After one call the pool holds the call's buffers; the same call again takes them
    all from the pool (no aligned_alloc) and gives the same buffers back."""
    ck = _kernel("gemm", 520, 390, 300, config=CONFIG)
    mod = ck._code.module
    _drain(mod)  # the module may be shared with an earlier test (JIT cache)
    a, b, want = _operands(520, 390, 300, 7)
    c = np.zeros((520, 390), np.float32)
    before = _allocs(mod)
    ck(A=a, B=b, C=c, threads=1)
    first = _allocs(mod) - before
    slots, held = _pool(mod)
    assert first > 0 and len(slots) == first  # every buffer taken came back
    assert held == sum(cap for _, cap in slots)
    for _ in range(3):
        ck(A=a, B=b, C=c, threads=1)
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4 * np.sqrt(300))
    assert _allocs(mod) - before == first
    assert sorted(_pool(mod)[0]) == sorted(slots)


def test_drain_frees_everything_and_runs_when_code_is_discarded() -> None:
    cache = KernelCache()
    ck = _kernel("manual_gemm", 300, 260, 200, cache=cache)
    mod = ck._code.module
    a, b, _ = _operands(300, 260, 200, 3)
    ck(A=a, B=b, C=np.zeros((300, 260), np.float32), threads=2)
    assert _pool(mod)[1] > 0
    _drain(mod)
    assert _pool(mod) == ([], 0)
    ck(A=a, B=b, C=np.zeros((300, 260), np.float32), threads=2)
    assert _pool(mod)[1] > 0
    del ck
    cache.clear()  # the last reference to the compiled code: its finalizer drains
    gc.collect()
    assert _pool(mod) == ([], 0)


class _Pool:
    """A module with only the pool and exported wrappers of ``take`` and ``give``."""

    def __init__(self) -> None:
        mod = ir.Module()
        pool = buffer_pool(mod, count_allocs=True)
        for name, fn in (("t_take", pool.take), ("t_give", pool.give)):
            w = ir.Function(mod, fn.function_type, name)
            b = ir.IRBuilder(w.append_basic_block("entry"))
            r = b.call(fn, list(w.args))
            if isinstance(fn.function_type.return_type, ir.VoidType):
                b.ret_void()
            else:
                b.ret(r)
        self.module = compile_module(mod, disk=False)
        self._take = self.module.ctypes_function(
            "t_take", ctypes.c_void_p, [ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)])
        self._give = self.module.ctypes_function("t_give", None,
                                                 [ctypes.c_void_p, ctypes.c_int64])

    def take(self, need: int) -> tuple[int, int]:
        cap = ctypes.c_int64(0)
        ptr = self._take(need, ctypes.byref(cap))
        assert ptr and ptr % 64 == 0 and cap.value >= need
        return ptr, cap.value

    def give(self, ptr: int, cap: int) -> None:
        self._give(ptr, cap)


def test_retention_bound_and_best_fit() -> None:
    p = _Pool()
    big = POOL_BUDGET_BYTES // 5 + 64
    bufs = [p.take(big) for _ in range(8)]
    for ptr, cap in bufs:
        p.give(ptr, cap)
    slots, held = _pool(p.module)
    assert len(slots) == 4 and held == 4 * big <= POOL_BUDGET_BYTES  # the rest freed
    # many small ones: no more than POOL_SLOTS are kept
    _drain(p.module)
    small = [p.take(4096) for _ in range(POOL_SLOTS + 40)]
    for ptr, cap in small:
        p.give(ptr, cap)
    slots, held = _pool(p.module)
    assert len(slots) == POOL_SLOTS and held == POOL_SLOTS * 4096
    # take returns the smallest that fits, with its capacity, and allocates otherwise
    _drain(p.module)
    sizes = [1 << 20, 1 << 16, 1 << 18]
    got = {s: p.take(s) for s in sizes}
    for ptr, cap in got.values():
        p.give(ptr, cap)
    n = _allocs(p.module)
    assert p.take(1 << 17) == got[1 << 18]
    assert p.take(100) == got[1 << 16]
    assert _allocs(p.module) == n
    ptr, cap = p.take(2 << 20)  # larger than any pooled buffer
    assert cap == 2 << 20 and _allocs(p.module) == n + 1
    p.give(ptr, cap)
    p.give(0, 123)  # a null pointer is ignored
    assert len(_pool(p.module)[0]) == 2
    _drain(p.module)
    assert _pool(p.module) == ([], 0)


def test_only_the_most_recently_compiled_modules_keep_their_buffers() -> None:
    # the first kernel's pool fills; compiling POOLED_MODULES other pooled kernels drains
    # it (a sweep compiling one kernel per plan keeps a bounded amount); asking for the
    # first again makes it the newest, and its next call refills it
    from planner.lower.cpu import runtime

    cache = KernelCache()
    configs = [dataclasses.replace(CONFIG, small_mma=i) for i in range(runtime.POOLED_MODULES + 1)]
    a, b, _ = _operands(300, 260, 270, 7)
    first = _kernel("gemm", 300, 260, 270, configs[0], cache)
    first(A=a, B=b, C=np.empty((300, 260), np.float32), threads=1)
    assert _pool(first._code.module)[1] > 0
    for config in configs[1:-1]:
        _kernel("gemm", 300, 260, 270, config, cache)
    assert _pool(first._code.module)[1] > 0  # POOLED_MODULES - 1 others: still kept
    _kernel("gemm", 300, 260, 270, configs[-1], cache)
    assert _pool(first._code.module) == ([], 0)  # the oldest of POOLED_MODULES + 1
    again = _kernel("gemm", 300, 260, 270, configs[0], cache)  # a cache hit: the newest
    again(A=a, B=b, C=np.empty((300, 260), np.float32), threads=1)
    assert _pool(again._code.module)[1] > 0
    _kernel("gemm", 300, 260, 270, configs[1], cache)
    assert _pool(again._code.module)[1] > 0  # not the oldest any more


def test_a_forked_child_runs_gemm_with_a_pool_locked_at_the_fork() -> None:
    # the pool's lock held at the fork (here: set by hand, as a worker mid-take leaves
    # it) is another thread's in the child; the child empties its pools and runs
    import multiprocessing

    from planner.lower.cpu.gemm import POOL_LOCK_SYMBOL

    ck = _kernel("gemm", 200, 150, 130)
    a, b, want = _operands(200, 150, 130, 11)
    ck(A=a, B=b, C=np.empty((200, 150), np.float32), threads=1)
    lock = ctypes.c_int32.from_address(ck._code.module.address(POOL_LOCK_SYMBOL))
    lock.value = 1
    try:
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()

        def child() -> None:
            got = ck(A=a, B=b, C=np.empty((200, 150), np.float32), threads=1)["C"]
            queue.put(bool(np.allclose(got, want, rtol=1e-4, atol=1e-3)))

        proc = ctx.Process(target=child)
        proc.start()
        proc.join(20)
        alive = proc.is_alive()
        if alive:
            proc.kill()
        assert not alive, "the child spun on the pool's lock"
        assert proc.exitcode == 0 and queue.get(timeout=5) is True
    finally:
        lock.value = 0
