"""The packed GEMM's pack caches (``name_cached``, planner.lower.cpu.gemm) and their use by
planned mmas (planner.lower.cpu.mma): a packed A block / B panel is reused only for the
same source address, strides and extents, within one table's lifetime (one segment call),
and results are bit-identical to packing every time, against float64 numpy."""

from __future__ import annotations

import ctypes
from dataclasses import replace

import llvmlite.ir as ir
import numpy as np
import pytest

import planner.lower.cpu.gemm as gemm_mod
from planner.catalog import CatalogRegistry
from planner.ir.examples import builtin_examples_dir, load_example
from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    f32,
    mma,
    parallel,
    shape,
    tile_kernel,
    zeros,
)
from planner.lower import compile_kernel
from planner.lower.cpu.gemm import GemmConfig, cache_table_i64, emit_gemm_f32_strided
from planner.lower.cpu.jit import compile_module, host_target
from planner.solve import plan_kernel
from tests.lower.test_llvm_gemm import _aligned_zeros

_ARGS = [ctypes.c_int64] * 3 + [ctypes.c_void_p] + [ctypes.c_int64] * 2 + [
    ctypes.c_void_p] + [ctypes.c_int64] * 2 + [ctypes.c_void_p, ctypes.c_int64,
                                               ctypes.c_int32] + [ctypes.c_void_p] * 3
_LIBC = ctypes.CDLL(None)


def _small_config() -> GemmConfig:
    """Tiny blocks, so that small operands span several blocks and panels."""
    vw = 16 if host_target().has_feature("avx512f") else 8
    return GemmConfig(mr=4, nr=2 * vw, vw=vw, mc=8, kc=16, nc=4 * vw)


class _Cached:
    """``name_cached`` compiled for one config, with one pair of tables reused by every
    call until :meth:`reset` (what a segment call does)."""

    def __init__(self, cfg: GemmConfig) -> None:
        self.cfg = cfg
        mod = ir.Module()
        emit_gemm_f32_strided(mod, "sg", config=cfg)
        self.cm = compile_module(mod)
        self.f = self.cm.ctypes_function("sg_cached", None, _ARGS)
        self.tables = [np.zeros(cache_table_i64(w), np.int64) for w in ("a", "b")]

    def __call__(self, a: np.ndarray, b: np.ndarray, *, cached: bool = True) -> np.ndarray:
        (m, k), n = a.shape, b.shape[1]
        c = np.full((m, n), np.nan, np.float32)
        tabs = [t.ctypes.data if cached else None for t in self.tables]
        scratch = _aligned_zeros(self.cfg.scratch_floats(n))  # alive through the call
        self.f(m, n, k, a.ctypes.data, a.strides[0] // 4, a.strides[1] // 4, b.ctypes.data,
               b.strides[0] // 4, b.strides[1] // 4, c.ctypes.data, max(n, 1), 0,
               scratch.ctypes.data, *tabs)
        return c

    def buffers(self) -> int:
        """Slots holding a packed buffer, over both tables."""
        return sum(int(np.count_nonzero(t[8 + 7 :: 8])) for t in self.tables)

    def reset(self) -> None:
        for t in self.tables:
            for p in t[8 + 7 :: 8]:
                if p:
                    _LIBC.free(ctypes.c_void_p(int(p)))
            t[:] = 0


@pytest.fixture(name="cached")
def _cached_fixture() -> _Cached:
    g = _Cached(_small_config())
    yield g
    g.reset()


def _check(g: _Cached, a: np.ndarray, b: np.ndarray) -> None:
    got = g(a, b)
    np.testing.assert_array_equal(got, g(a, b, cached=False))  # bit-identical
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(max(a.shape[1], 1)))


def test_a_hit_skips_packing(cached: _Cached) -> None:
    """The same operands again are served from the tables: changing the source in
    between (which a caller must not do while a table lives) shows the old values."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((20, 40)).astype(np.float32)
    b = rng.standard_normal((40, 70)).astype(np.float32)
    first = cached(a, b)
    assert cached.buffers() > 0
    a2, b2 = a.copy(), b.copy()
    a += 1.0
    b -= 1.0
    np.testing.assert_array_equal(cached(a, b), first)  # every block a hit
    np.testing.assert_array_equal(first, cached(a2, b2, cached=False))
    cached.reset()  # a new table lifetime packs again
    _check(cached, a, b)


def test_same_address_other_strides_or_extents_is_a_miss(cached: _Cached) -> None:
    """X and X.T share their address; so do X[:, :k] for every k, and the rows of a
    window: none of them may reuse another's packed blocks."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((40, 40)).astype(np.float32)
    y = rng.standard_normal((40, 40)).astype(np.float32)
    for a, b in [(x, y), (x.T, y), (x, y.T), (x.T, y.T), (x[:, :17], y[:17]),
                 (x[:, :33], y[:33]), (x[:9], y), (x[:9, :1], y[:1, :5]), (x[::2], y),
                 (x, y[:, ::3]), (x, y)]:
        _check(cached, a, b)


def test_two_b_arrays_and_a_used_as_both_operands(cached: _Cached) -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((36, 36)).astype(np.float32)
    b1 = rng.standard_normal((36, 50)).astype(np.float32)
    b2 = rng.standard_normal((36, 50)).astype(np.float32)
    for x, y in [(a, b1), (a, b2), (a, b1), (a, a), (a.T, a), (a, b2)]:
        _check(cached, x, y)


def test_eviction_with_fewer_slots_than_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two slots per table, cycling over more distinct blocks than that (LRU victims,
    buffers regrown for larger blocks)."""
    monkeypatch.setattr(gemm_mod, "CACHE_SLOTS", {"a": 2, "b": 2})
    g = _Cached(replace(_small_config()))
    try:
        rng = np.random.default_rng(3)
        ops = [(rng.standard_normal((m, k)).astype(np.float32),
                rng.standard_normal((k, n)).astype(np.float32))
               for m, n, k in [(5, 7, 3), (30, 80, 40), (9, 33, 17), (1, 1, 1)]]
        for _ in range(3):
            for a, b in ops:
                _check(g, a, b)
        assert g.buffers() <= 4
    finally:
        g.reset()


# --------------------------------------------------------------------------------------
# Planned GEMMs: tables live for one segment call, filled by every instance it runs
# --------------------------------------------------------------------------------------

TARGET = CatalogRegistry().get("host")


def _gemm(bm: int, bn: int, bk: int):
    g = load_example(builtin_examples_dir() / "gemm.py").module
    return g.make_gemm(g.GemmConfig(bm, bn, bk, 2))


def _two_b(block: int):
    """C = A @ B1 + A @ B2, both mmas in one k step (the A window shared)."""
    @tile_kernel("gemm_two_b")
    def kern(A: TensorView[const(f32), dims("M", "K")],
             B1: TensorView[const(f32), dims("K", "N")],
             B2: TensorView[const(f32), dims("K", "N")],
             C: TensorView[f32, dims("M", "N")]):
        gm = axis("block_m", ceil_div(A.extent(0), block))
        gn = axis("block_n", ceil_div(B1.extent(1), block))
        kt = axis("k_tiles", ceil_div(A.extent(1), block))
        t = axis("t", block)
        for nest in parallel(shape(gm, gn)):
            m0, n0 = nest.index(gm) * block, nest.index(gn) * block
            acc = zeros[f32](shape(t, t))
            for step in nest.pipeline(shape(kt), window=2, interval=1):
                k0 = step.index() * block
                a = A[coord(m0, k0), shape(t, t)]
                acc = mma(a, B1[coord(k0, n0), shape(t, t)], acc)
                acc = mma(a, B2[coord(k0, n0), shape(t, t)], acc)
            C(coord(m0, n0), shape(t, t)).store(acc)

    return kern


def _compile(kern, bindings):
    return compile_kernel(kern, plan_kernel(kern, TARGET, bindings), TARGET)


#: (M, N, K): multiples of the 128 tiles, just above and below, one element, empty.
SIZES = [(256, 384, 256), (300, 260, 200), (129, 255, 385), (1, 1, 1), (0, 5, 7),
         (5, 0, 7), (5, 7, 0)]


@pytest.mark.parametrize("mnk", SIZES, ids=lambda s: "x".join(map(str, s)))
def test_planned_gemm_matches_numpy_across_calls_and_threads(mnk) -> None:
    """Many instances per segment call (1 thread) and pieces claimed by 2 workers; the
    inputs changed in place between calls (same addresses): nothing is kept from one
    call to the next."""
    m, n, k = mnk
    ck = _compile(_gemm(128, 128, 128), {"M": m, "N": n, "K": k})
    rng = np.random.default_rng(m + 3 * n + 7 * k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    for rnd in range(3):
        for threads in (1, 2):
            c = np.full((m, n), np.nan, np.float32)
            got = ck(A=a, B=b, C=c, threads=threads)["C"]
            want = a.astype(np.float64) @ b.astype(np.float64)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3, err_msg=str(rnd))
        a *= -0.5
        b += 0.25


@pytest.mark.parametrize("mnk", [(256, 256, 256), (300, 130, 260), (1, 1, 1)],
                         ids=lambda s: "x".join(map(str, s)))
def test_two_b_arrays_in_one_kernel(mnk) -> None:
    """Two B views of the same shape (their windows at the same offsets, distinct
    addresses) and the same array passed as both: never each other's panels."""
    m, n, k = mnk
    ck = _compile(_two_b(128), {"M": m, "N": n, "K": k})
    rng = np.random.default_rng(9)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b1 = rng.standard_normal((k, n)).astype(np.float32)
    b2 = rng.standard_normal((k, n)).astype(np.float32)
    a64 = a.astype(np.float64)
    for x, y in [(b1, b2), (b2, b1), (b1, b1)]:
        for threads in (1, 2):
            got = ck(A=a, B1=x, B2=y, C=np.zeros((m, n), np.float32), threads=threads)["C"]
            want = a64 @ x.astype(np.float64) + a64 @ y.astype(np.float64)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-3)
