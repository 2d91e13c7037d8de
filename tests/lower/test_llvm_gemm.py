"""Tests for planner.lower.cpu.gemm: packed sgemm vs numpy, edges, strides, threads."""

from __future__ import annotations

import ctypes
import threading
from dataclasses import replace

import llvmlite.ir as ir
import numpy as np
import pytest

from planner.lower.cpu.gemm import (
    GemmConfig,
    SgemmKernel,
    emit_gemm_f32,
    emit_gemm_f32_strided,
    sgemm,
)
from planner.lower.cpu.jit import JitCache, compile_module, host_target

SHAPES = [  # (M, N, K)
    (1, 1, 1),
    (0, 5, 3),
    (5, 0, 3),
    (5, 3, 0),
    (7, 13, 17),
    (100, 70, 37),
    (131, 67, 259),
    (6, 16, 256),  # exactly one AVX2 micro-tile and one KC block
    (8, 32, 513),  # one AVX-512 tile, KC edge of 1 (KC = 512)
    (200, 5, 600),  # N narrower than one sliver, several KC blocks
    (3, 300, 50),  # M shorter than one tile: the threaded path splits columns
]

CACHE = JitCache()


@pytest.fixture(scope="module", params=["avx2", "host"])
def kernel(request: pytest.FixtureRequest) -> SgemmKernel:
    """The AVX2 6×16 kernel (the project's machine kind) and the host's default one."""
    cfg = GemmConfig.avx2() if request.param == "avx2" else None
    k = SgemmKernel(CACHE, config=cfg)
    k.min_parallel_flops = 0  # exercise the threaded path even on tiny shapes
    yield k
    k.close()


def _rand(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32)


def _check(c: np.ndarray, a: np.ndarray, b: np.ndarray, c0: np.ndarray | None = None) -> None:
    """|C - ref| ≤ 2·(K+2)·eps32·(|A|@|B| + |C0|) with the reference in float64."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64 @ b64
    scale = np.abs(a64) @ np.abs(b64)
    if c0 is not None:
        ref += c0
        scale += np.abs(c0)
    k = a.shape[1]
    tol = 2 * (k + 2) * np.finfo(np.float32).eps * scale + 1e-30
    err = np.abs(c.astype(np.float64) - ref)
    assert np.all(err <= tol), f"max err {err.max()} (tol {tol.max()})"


@pytest.mark.parametrize("shape", SHAPES)
def test_matches_numpy(kernel: SgemmKernel, shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    rng = np.random.default_rng(m * 10007 + n * 101 + k)
    a, b = _rand(rng, (m, k)), _rand(rng, (k, n))
    c = kernel.sgemm(a, b)
    assert c.shape == (m, n) and c.dtype == np.float32
    _check(c, a, b)
    # a NaN-filled output is fully overwritten (also for K == 0: zeros)
    out = np.full((m, n), np.nan, dtype=np.float32)
    assert kernel.sgemm(a, b, out) is out
    np.testing.assert_array_equal(out, c)


@pytest.mark.parametrize("shape", SHAPES)
def test_accumulate(kernel: SgemmKernel, shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    rng = np.random.default_rng(7 + m + n + k)
    a, b = _rand(rng, (m, k)), _rand(rng, (k, n))
    c0 = _rand(rng, (m, n))
    c = c0.copy()
    kernel.sgemm(a, b, c, accumulate=True)
    _check(c, a, b, c0.astype(np.float64))
    if k == 0:
        np.testing.assert_array_equal(c, c0)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("accumulate", [False, True])
def test_two_threads_bitwise_equal_one(
    kernel: SgemmKernel, shape: tuple[int, int, int], accumulate: bool
) -> None:
    m, n, k = shape
    rng = np.random.default_rng(99 + m * n + k)
    a, b = _rand(rng, (m, k)), _rand(rng, (k, n))
    c0 = _rand(rng, (m, n))
    c1, c2, c3 = c0.copy(), c0.copy(), c0.copy()
    kernel.sgemm(a, b, c1, threads=1, accumulate=accumulate)
    kernel.sgemm(a, b, c2, threads=2, accumulate=accumulate)
    kernel.sgemm(a, b, c3, threads=3, accumulate=accumulate)
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_array_equal(c1, c3)


def test_larger_threaded(kernel: SgemmKernel) -> None:
    rng = np.random.default_rng(3)
    a, b = _rand(rng, (517, 301)), _rand(rng, (301, 611))
    c1 = kernel.sgemm(a, b)
    c2 = kernel.sgemm(a, b, threads=2)
    np.testing.assert_array_equal(c1, c2)
    _check(c2, a, b)


def test_strided_views(kernel: SgemmKernel) -> None:
    """Row strides larger than the row length, offsets, a reversed A and a C view inside
    a bigger buffer whose surroundings must stay untouched."""
    rng = np.random.default_rng(11)
    m, n, k = 37, 45, 29
    big_a = _rand(rng, (2 * m + 3, k + 9))
    big_b = _rand(rng, (k + 4, n + 17))
    a = big_a[3 : 3 + 2 * m : 2, 5 : 5 + k]  # every other row, column offset
    b = big_b[2 : 2 + k, 7 : 7 + n]
    a_rev = big_a[m - 1 :: -1, :k]  # negative row stride
    for aa in (a, a_rev):
        buf = np.full((m + 4, n + 10), -7.0, dtype=np.float32)
        c = buf[2 : 2 + m, 3 : 3 + n]
        for threads in (1, 2):
            kernel.sgemm(aa, b, c, threads=threads)
            _check(c, aa, b)
            mask = np.ones(buf.shape, bool)
            mask[2 : 2 + m, 3 : 3 + n] = False
            assert np.all(buf[mask] == -7.0)


def test_zero_sizes_touch_no_memory() -> None:
    """The raw entry points never dereference anything when M or N is 0 (null pointers)."""
    mod = ir.Module()
    assert emit_gemm_f32(mod, "zgemm", config=GemmConfig.avx2()).name == "zgemm"
    assert "zgemm_task" not in mod.globals  # threaded entry points are opt-in
    cm = compile_module(mod, cache=CACHE)
    i64, p = ctypes.c_int64, ctypes.c_void_p
    f = cm.ctypes_function("zgemm", None, [i64, i64, i64, p, i64, p, i64, p, i64, ctypes.c_int32])
    for m, n, k in [(0, 5, 3), (5, 0, 3), (0, 0, 0), (0, 4, 0)]:
        f(m, n, k, None, 3, None, 5, None, 5, 0)
        f(m, n, k, None, 3, None, 5, None, 5, 1)
    # K == 0 with accumulate == 0 zero-fills C (respecting ldc), and leaves it otherwise.
    c = np.full((3, 8), 5.0, dtype=np.float32)
    f(3, 4, 0, None, 1, None, 1, c.ctypes.data, 8, 1)
    assert np.all(c == 5.0)
    f(3, 4, 0, None, 1, None, 1, c.ctypes.data, 8, 0)
    assert np.all(c[:, :4] == 0.0) and np.all(c[:, 4:] == 5.0)


def test_concurrent_calls_on_disjoint_outputs(kernel: SgemmKernel) -> None:
    rng = np.random.default_rng(5)
    a, b = _rand(rng, (160, 90)), _rand(rng, (90, 130))
    c = np.zeros((160, 130), dtype=np.float32)
    errors: list[BaseException] = []

    def work(lo: int, hi: int, threads: int) -> None:
        try:
            for _ in range(5):
                kernel.sgemm(a[lo:hi], b, c[lo:hi], threads=threads)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [
        threading.Thread(target=work, args=(0, 40, 1)),
        threading.Thread(target=work, args=(40, 100, 2)),
        threading.Thread(target=work, args=(100, 160, 2)),
    ]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    _check(c, a, b)


def test_module_level_sgemm() -> None:
    rng = np.random.default_rng(1)
    a, b = _rand(rng, (33, 20)), _rand(rng, (20, 19))
    _check(sgemm(a, b), a, b)
    _check(sgemm(a, b, threads=2), a, b)


def test_avx2_kernel_uses_ymm_fma() -> None:
    spec = host_target()
    if not (spec.has_feature("avx2") and spec.has_feature("fma")):
        pytest.skip("host has no AVX2+FMA")
    # Compile for an AVX2-only view of the host: the Zen 3 code path.
    feats = ",".join(
        f"-{f[1:]}" if f.startswith("+avx512") else f for f in spec.features.split(",")
    )
    k = SgemmKernel(CACHE, config=GemmConfig.avx2(), target=replace(spec, features=feats))
    asm = k.compiled.asm
    assert "vfmadd231ps" in asm and "ymm" in asm and "zmm" not in asm
    rng = np.random.default_rng(2)
    a, b = _rand(rng, (50, 40)), _rand(rng, (40, 70))
    _check(k.sgemm(a, b, threads=2), a, b)
    k.close()


@pytest.mark.parametrize(
    ("a", "b", "c", "kwargs", "match"),
    [
        (np.ones((2, 3)), np.ones((3, 4), np.float32), None, {}, "dtype float32"),
        (np.ones((2, 3), np.float32), np.ones((3, 4), np.int32), None, {}, "dtype float32"),
        (np.ones(3, np.float32), np.ones((3, 4), np.float32), None, {}, "2-D"),
        (np.ones((2, 3), np.float32), np.ones((4, 4), np.float32), None, {}, "not aligned"),
        (np.ones((2, 6), np.float32)[:, ::2], np.ones((3, 4), np.float32), None, {},
         "unit inner stride"),
        (np.ones((2, 3), np.float32), np.ones((3, 4), np.float32),
         np.ones((2, 5), np.float32), {}, "expected"),
        (np.ones((2, 3), np.float32), np.ones((3, 4), np.float32),
         np.ones((2, 4)), {}, "dtype float32"),
        (np.ones((2, 3), np.float32), np.ones((3, 4), np.float32), None,
         {"accumulate": True}, "needs an output"),
        (np.ones((2, 3), np.float32), np.ones((3, 4), np.float32), None,
         {"threads": 0}, "threads"),
        ([[1.0]], np.ones((1, 1), np.float32), None, {}, "numpy.ndarray"),
    ],
)
def test_bad_arguments(
    kernel: SgemmKernel, a: object, b: object, c: object, kwargs: dict, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        kernel.sgemm(a, b, c, **kwargs)  # type: ignore[arg-type]


def test_bad_output(kernel: SgemmKernel) -> None:
    a = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match="overlap"):
        kernel.sgemm(a, a, a)
    ro = np.zeros((4, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        kernel.sgemm(a, a, ro)
    bcast = np.broadcast_to(np.zeros((1, 4), np.float32), (4, 4))
    with pytest.raises(ValueError):
        kernel.sgemm(a, a, bcast)


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        GemmConfig(mr=6, nr=12, vw=8)
    with pytest.raises(ValueError):
        GemmConfig(mr=6, nr=16, vw=8, mc=100)
    assert GemmConfig.for_target(host_target()) in (GemmConfig.avx2(), GemmConfig.avx512())


def test_threaded_fallback_polling(kernel: SgemmKernel, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a zero spin budget every in-kernel wait times out at once and the driver's
    sleep-polling fallback takes over; results stay bit-identical."""
    import planner.lower.cpu.gemm as gemm_mod

    monkeypatch.setattr(gemm_mod, "_SPIN_CYCLES", 0)
    rng = np.random.default_rng(8)
    a, b = _rand(rng, (203, 150)), _rand(rng, (150, 170))
    c1 = kernel.sgemm(a, b)
    for threads in (2, 3):
        for _ in range(5):
            np.testing.assert_array_equal(kernel.sgemm(a, b, threads=threads), c1)


def _aligned_zeros(nfloats: int) -> np.ndarray:
    """64-byte aligned (packed buffers are accessed with aligned vector loads/stores)."""
    raw = np.zeros(nfloats + 16, np.float32)
    off = (-raw.ctypes.data % 64) // 4
    return raw[off : off + nfloats]


def test_task_entry_statuses() -> None:
    """name_task: 0 when done; 1 when B chunks claimed elsewhere are not packed in time;
    2 when C blocks claimed elsewhere are not done in time; re-entrant."""
    cfg = GemmConfig.avx2()
    mod = ir.Module()
    emit_gemm_f32(mod, "tgemm", config=cfg, threaded_entry_points=True)
    cm = compile_module(mod, cache=CACHE)
    i64, i32, p = ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p
    task = cm.ctypes_function(
        "tgemm_task", i32,
        [p, i64, i32, i64, i64, i64, p, i64, p, i64, p, i64, p, i64, i32, p, i64, i64, i64],
    )
    rng = np.random.default_rng(4)
    m, n, k = 50, 70, 40
    a, b = _rand(rng, (m, k)), _rand(rng, (k, n))
    npad = -(-n // cfg.nr) * cfg.nr
    bp = _aligned_zeros(k * npad)
    abuf = _aligned_zeros(cfg.a_buffer_floats)
    c = np.zeros((m, n), np.float32)
    pack_cols, chunk_m, chunk_n = 32, 12, npad
    npack, nchunks = -(-n // pack_cols), -(-m // chunk_m)

    def call(sync: np.ndarray, max_cycles: int) -> int:
        return task(sync.ctypes.data, max_cycles, 1, m, n, k, a.ctypes.data, k,
                    b.ctypes.data, n, bp.ctypes.data, npad, c.ctypes.data, n, 0,
                    abuf.ctypes.data, pack_cols, chunk_m, chunk_n)

    pending = np.array([npack, npack - 1, 0, 0, 0], np.int64)  # one pack chunk in flight
    assert call(pending, 1000) == 1
    assert pending[2] == 0  # nothing computed
    sync = np.zeros(5, np.int64)
    assert call(sync, 1 << 30) == 0
    assert list(sync[[1, 4]]) == [npack, nchunks]
    _check(c, a, b)
    sync[4] -= 1  # pretend one C block is still being computed by another thread
    assert call(sync, 1000) == 2
    sync[4] += 1
    assert call(sync, 1000) == 0  # re-entrant: nothing left to do


# --------------------------------------------------------------------------------------
# Strided entry point (any element strides for A and B, caller-provided scratch)
# --------------------------------------------------------------------------------------

_STRIDED_ARGS = [ctypes.c_int64] * 3 + [ctypes.c_void_p] + [ctypes.c_int64] * 2 + [
    ctypes.c_void_p] + [ctypes.c_int64] * 2 + [ctypes.c_void_p, ctypes.c_int64,
                                               ctypes.c_int32, ctypes.c_void_p]


class _Strided:
    """The strided entry point compiled for one config, called on numpy views."""

    def __init__(self, cfg: GemmConfig) -> None:
        self.cfg = cfg
        mod = ir.Module()
        fn = emit_gemm_f32_strided(mod, "sgemm_strided", config=cfg)
        assert fn.name == "sgemm_strided"
        assert "sgemm_strided_task" not in mod.globals
        self.cm = compile_module(mod, cache=CACHE)
        self.f = self.cm.ctypes_function("sgemm_strided", None, _STRIDED_ARGS)

    def __call__(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, *,
                 accumulate: bool = False, scratch: np.ndarray | None = None) -> None:
        (m, k), n = a.shape, b.shape[1]
        assert c.size == 0 or c.strides[1] == 4
        if scratch is None:
            scratch = _aligned_zeros(self.cfg.scratch_floats(n))
        assert scratch.size >= self.cfg.scratch_floats(n)
        self.f(m, n, k, a.ctypes.data, a.strides[0] // 4, a.strides[1] // 4, b.ctypes.data,
               b.strides[0] // 4, b.strides[1] // 4, c.ctypes.data, max(c.strides[0] // 4, n),
               int(accumulate), scratch.ctypes.data)


@pytest.fixture(scope="module", params=["avx2", "host"], name="strided")
def _strided_fixture(request: pytest.FixtureRequest) -> _Strided:
    cfg = GemmConfig.avx2() if request.param == "avx2" else GemmConfig.for_target()
    return _Strided(cfg)


def _operand(rng: np.random.Generator, shape: tuple[int, int], layout: str) -> np.ndarray:
    """A (rows, cols) float32 view with the given memory layout: ``row`` (contiguous),
    ``col`` (column-major: a transposed contiguous array), ``padcol`` (column-major inside
    a wider buffer), ``strided`` (no unit stride at all) or ``rev`` (negative row stride,
    unit column stride)."""
    r, c = shape
    if layout == "row":
        return _rand(rng, shape)
    if layout == "col":
        return _rand(rng, (c, r)).T
    if layout == "padcol":
        return _rand(rng, (c + 2, r + 5))[1 : 1 + c, 3 : 3 + r].T
    if layout == "strided":
        return _rand(rng, (2 * r + 1, 3 * c + 2))[1 : 1 + 2 * r : 2, 2 : 2 + 3 * c : 3]
    if layout == "rev":
        return _rand(rng, (r + 1, c + 3))[r - 1 :: -1, 1 : 1 + c] if r else _rand(rng, shape)
    raise AssertionError(layout)


STRIDED_SHAPES = [
    (1, 1, 1),
    (7, 13, 17),
    (100, 70, 37),
    (131, 67, 259),  # several KC blocks on AVX2, odd everything
    (6, 16, 256),
    (8, 32, 513),
    (200, 5, 600),
    (3, 300, 50),
    (37, 48, 9),  # column-major B: full slivers, one transpose block plus a k remainder
]
LAYOUTS = [("row", "col"), ("col", "row"), ("col", "col"), ("col", "padcol"),
           ("strided", "strided"), ("row", "strided"), ("rev", "padcol"), ("row", "row")]


@pytest.mark.parametrize("shape", STRIDED_SHAPES)
@pytest.mark.parametrize(("la", "lb"), LAYOUTS)
def test_strided_operands(strided: _Strided, shape: tuple[int, int, int], la: str,
                          lb: str) -> None:
    """Transposed A, column-major B, both, no unit stride at all: same values as numpy,
    and bit-identical to the row-major entry point on contiguous copies."""
    m, n, k = shape
    rng = np.random.default_rng(m * 7919 + n * 31 + k)
    a, b = _operand(rng, (m, k), la), _operand(rng, (k, n), lb)
    assert a.shape == (m, k) and b.shape == (k, n)
    buf = np.full((m + 3, n + 9), -7.0, dtype=np.float32)
    c = buf[1 : 1 + m, 4 : 4 + n]
    strided(a, b, c)
    _check(c, a, b)
    mask = np.ones(buf.shape, bool)
    mask[1 : 1 + m, 4 : 4 + n] = False
    assert np.all(buf[mask] == -7.0)
    ref = SgemmKernel(CACHE, config=strided.cfg).sgemm(np.ascontiguousarray(a),
                                                       np.ascontiguousarray(b))
    np.testing.assert_array_equal(c, ref)
    # accumulate, reusing one scratch buffer for several calls
    c0 = _rand(rng, (m, n))
    c2 = c0.copy()
    scratch = _aligned_zeros(strided.cfg.scratch_floats(max(n, 300)))
    strided(a, b, c2, accumulate=True, scratch=scratch)
    _check(c2, a, b, c0.astype(np.float64))
    strided(a, b, c2, scratch=scratch)
    np.testing.assert_array_equal(c2, c)


def test_strided_zero_sizes(strided: _Strided) -> None:
    """M == 0 or N == 0 touch nothing (null operands, null scratch); K == 0 zero-fills C
    unless accumulating."""
    f = strided.f
    for m, n, k in [(0, 5, 3), (5, 0, 3), (0, 0, 0), (0, 4, 0)]:
        for acc in (0, 1):
            f(m, n, k, None, 3, 1, None, 1, 5, None, 5, acc, None)
    c = np.full((3, 8), 5.0, dtype=np.float32)
    f(3, 4, 0, None, 1, 7, None, 1, 1, c.ctypes.data, 8, 1, None)
    assert np.all(c == 5.0)
    f(3, 4, 0, None, 1, 7, None, 1, 1, c.ctypes.data, 8, 0, None)
    assert np.all(c[:, :4] == 0.0) and np.all(c[:, 4:] == 5.0)
    # empty operands through the numpy-facing helper too
    rng = np.random.default_rng(0)
    for m, n, k in [(4, 20, 0), (0, 20, 4), (4, 0, 4)]:
        a, b = _operand(rng, (m, k), "col"), _operand(rng, (k, n), "col")
        out = np.full((m, n), np.nan, dtype=np.float32)
        strided(a, b, out)
        np.testing.assert_array_equal(out, np.zeros((m, n), np.float32))


def test_scratch_floats() -> None:
    cfg = GemmConfig.avx2()
    assert cfg.scratch_floats(1) == cfg.kc * cfg.nr + cfg.mc * cfg.kc
    assert cfg.scratch_floats(0) == cfg.scratch_floats(1)
    assert cfg.scratch_floats(10**6) == cfg.kc * cfg.nc + cfg.a_buffer_floats
    assert cfg.scratch_floats(33) == cfg.kc * 48 + cfg.a_buffer_floats


@pytest.mark.parametrize("base", ["avx2", "avx512"])
def test_prefetch_c_is_bit_identical(base: str) -> None:
    """Prefetching C splits the micro-kernel's k loop at ``kc - prefetch_c``; the sums
    keep their order, so results are bit-identical with and without it, for K below, at
    and above the prefetch distance and across KC blocks (plain and strided entry).
    Without AVX-512 on the host, the AVX-512 blocking runs with 8-lane vectors: the k
    loop's split does not depend on the vector width."""
    cfg = GemmConfig.avx2() if base == "avx2" else GemmConfig.avx512()
    if base == "avx512" and not host_target().has_feature("avx512f"):
        cfg = replace(cfg, vw=8)
    with_pf = replace(cfg, prefetch_c=7)
    without = replace(cfg, prefetch_c=0)
    kernels = [SgemmKernel(CACHE, config=c) for c in (with_pf, without)]
    rng = np.random.default_rng(5)
    for m, n, k in [(1, 1, 1), (13, 37, 6), (cfg.mr, cfg.nr, 7), (29, 70, 8),
                    (cfg.mr * 3 + 1, cfg.nr * 2 - 3, cfg.kc + 9), (5, 3, 2 * cfg.kc + 1)]:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        c0 = rng.standard_normal((m, n), dtype=np.float32)
        outs = []
        for kern in kernels:
            c = c0.copy()
            kern.sgemm(a, b, c, accumulate=True)
            outs.append(c)
        np.testing.assert_array_equal(outs[0], outs[1])
        np.testing.assert_allclose(outs[0], c0 + a.astype(np.float64) @ b, rtol=1e-4,
                                   atol=1e-4 * max(1, k))
    with pytest.raises(ValueError, match="prefetch_c"):
        GemmConfig(prefetch_c=-1)
    assert GemmConfig.avx2().prefetch_c == 0  # the AVX2 kernel is unchanged


def _busiest(m: int, chunk: int, threads: int) -> int:
    """Rows of the busiest thread when ``threads`` claim ``chunk``-row chunks in turn."""
    sizes = [min(chunk, m - i) for i in range(0, m, chunk)]
    return max(sum(sizes[t::threads]) for t in range(threads))


def test_balanced_chunk() -> None:
    from planner.lower.cpu.gemm import _balanced_chunk

    # 2048 rows, 2 threads: 192-row chunks are 11 (1088 vs 960 rows), 128-row ones 16.
    assert _busiest(2048, 192, 2) == 1088
    assert _balanced_chunk(2048, 8, 192, 2) == 128
    assert _balanced_chunk(1024, 8, 128, 2) == 128  # already even: unchanged
    for m in (9, 100, 300, 777, 1000, 2048, 4097):
        for unit, cap in ((8, 192), (6, 144), (8, 8)):
            for threads in (2, 3, 4):
                c = _balanced_chunk(m, unit, cap, threads)
                assert c % unit == 0 and c <= cap and 2 * c >= cap
                best = min(_busiest(m, x, threads) for x in range(cap, (cap + 1) // 2 - 1, -unit)
                           if x >= unit)
                assert _busiest(m, c, threads) * 100 <= best * 101


def test_balance_rows_is_bit_identical() -> None:
    """Balanced row chunks change only which thread computes which rows."""
    cfg = replace(GemmConfig.avx2(), balance_rows=True)
    kern = SgemmKernel(CACHE, config=cfg)
    kern.min_parallel_flops = 0
    rng = np.random.default_rng(9)
    for m, n, k in [(2048, 40, 20), (301, 77, 300), (97, 33, 5)]:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        one = kern.sgemm(a, b, threads=1)
        for threads in (2, 3):
            np.testing.assert_array_equal(kern.sgemm(a, b, threads=threads), one)
    kern.close()
