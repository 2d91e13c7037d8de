"""The small in-place mma kernel (``planner.lower.cpu.small_gemm``) through the real
llvmlite, at the x86-avx512 and x86-avx2 vector widths, against a float64 numpy reference.
Without AVX-512 on the host the 16-lane kernel compiles for the AVX2 view of the host
(LLVM splits the 16-lane vectors), so the blocking chosen for 16 lanes still runs; a
host without AVX2 runs both widths as LLVM legalizes them for it."""

from __future__ import annotations

import ctypes
import functools

import llvmlite.ir as ir
import numpy as np
import pytest

from planner.catalog import CatalogRegistry
from planner.lower.cpu.jit import (
    JitCache,
    catalog_target,
    compile_module,
    host_target,
    missing_features,
)
from planner.lower.cpu.small_gemm import _emit_small_gemm

SHAPES = [(64, 64, 64), (1, 1, 1), (0, 5, 3), (5, 0, 3), (5, 3, 0), (7, 37, 13),
          (65, 63, 64), (64, 64, 32), (64, 128, 64), (64, 64, 128), (1, 64, 64),
          (64, 1, 64), (13, 33, 7),
          # one vector or less past the full blocks (a one-vector block): attention's
          # 13-key edge tile, exactly one vector at 16 and at 8 lanes
          (64, 13, 64), (36, 13, 64), (36, 16, 64), (5, 48, 7), (3, 24, 5)]


@functools.cache
def _kernel(width: int):  # -> ctypes function
    spec = catalog_target(CatalogRegistry().get("x86-avx512" if width == 16 else
                                                "x86-avx2").cpu)
    if missing_features(spec):
        spec = catalog_target(CatalogRegistry().get("x86-avx2").cpu)
    if missing_features(spec):  # not x86: LLVM legalizes the vectors for the host
        spec = host_target()
    mod = ir.Module("small_gemm_test")
    fn = _emit_small_gemm(mod, "sg", width)
    fn.linkage = "external"
    cm = compile_module(mod, cache=JitCache(), target=spec, disk=False)
    f32p, i64 = ctypes.POINTER(ctypes.c_float), ctypes.c_int64
    return cm.ctypes_function("sg", None, [i64, i64, i64, f32p, i64, f32p, i64, f32p, i64,
                                           ctypes.c_int32])


@pytest.mark.parametrize("width", [16, 8])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("acc", [False, True])
def test_matches_numpy(width: int, shape: tuple[int, int, int], acc: bool) -> None:
    """Strided operands (row strides past the row length); C's columns past n and the
    rows past m stay untouched; NaN in C is overwritten when not accumulating."""
    m, n, k = shape
    rng = np.random.default_rng(m * 1009 + n * 31 + k + acc)
    a = rng.standard_normal((m, k + 3)).astype(np.float32)
    b = rng.standard_normal((k, n + 5)).astype(np.float32)
    c = rng.standard_normal((m + 1, n + 2)).astype(np.float32)
    if not acc:
        c[:m, :n] = np.nan
    want = c.astype(np.float64)
    a64, b64 = a[:, :k].astype(np.float64), b[:, :n].astype(np.float64)
    want[:m, :n] = (want[:m, :n] if acc else 0.0) + a64 @ b64
    p = ctypes.POINTER(ctypes.c_float)
    _kernel(width)(m, n, k, a.ctypes.data_as(p), k + 3, b.ctypes.data_as(p), n + 5,
                   c.ctypes.data_as(p), n + 2, int(acc))
    scale = np.abs(a64) @ np.abs(b64) + (np.abs(want[:m, :n]) if acc else 0.0)
    tol = 2 * (k + 2) * np.finfo(np.float32).eps * scale + 1e-30
    assert np.all(np.abs(c[:m, :n] - want[:m, :n]) <= tol)
    np.testing.assert_array_equal(c[:, n:], want[:, n:].astype(np.float32))
    np.testing.assert_array_equal(c[m:], want[m:].astype(np.float32))
