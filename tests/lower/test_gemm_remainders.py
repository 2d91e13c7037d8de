"""Every remainder path of the packed GEMM's edge handling (half-width/half-height
micro-tiles, lane-masked C stores, lane-masked packing of row-major B edge slivers, the
scalar packing of strided ones), through real llvmlite, against a float64 numpy product.
Without AVX-512 on the host, the AVX-512 blocking runs with 8-lane vectors."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from planner.lower.cpu.gemm import GemmConfig
from planner.lower.cpu.jit import host_target
from tests.lower.test_llvm_gemm import _aligned_zeros, _operand, _Strided

SIZES = (1, 7, 8, 15, 16, 17, 31, 33, 44, 72, 130)
#: (m, n, k) triples covering every size on each axis (the others varied with it).
SHAPES = sorted({(s, SIZES[(i + 3) % len(SIZES)], SIZES[(i + 7) % len(SIZES)])
                 for i, s in enumerate(SIZES)}
                | {(SIZES[(i + 5) % len(SIZES)], s, SIZES[(i + 2) % len(SIZES)])
                   for i, s in enumerate(SIZES)}
                | {(44, 72, 130), (130, 72, 44), (17, 33, 1)})


def _config(base: str) -> GemmConfig:
    if base == "avx2":
        return GemmConfig.avx2()
    cfg = GemmConfig.avx512()
    return cfg if host_target().has_feature("avx512f") else replace(cfg, vw=8)


@pytest.fixture(scope="module", params=["avx2", "avx512"], name="gemm")
def _gemm(request: pytest.FixtureRequest) -> _Strided:
    return _Strided(_config(request.param))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("la", "lb"), [("row", "row"), ("col", "strided"), ("rev", "col")])
@pytest.mark.parametrize("accumulate", [False, True])
def test_remainders(gemm: _Strided, shape: tuple[int, int, int], la: str, lb: str,
                    accumulate: bool) -> None:
    """C (+)= A @ B on a C window inside a sentinel-filled buffer: within tolerance of
    float64 numpy, nothing outside the window written."""
    m, n, k = shape
    rng = np.random.default_rng(m * 131 + n * 17 + k)
    a, b = _operand(rng, (m, k), la), _operand(rng, (k, n), lb)
    buf = np.full((m + 2, n + 37), -7.0, dtype=np.float32)
    c = buf[1 : 1 + m, 3 : 3 + n]
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    if accumulate:
        c[...] = c0
    gemm(a, b, c, accumulate=accumulate, scratch=_aligned_zeros(gemm.cfg.scratch_floats(n)))
    want = a.astype(np.float64) @ b.astype(np.float64) + (c0 if accumulate else 0.0)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    outside = np.ones(buf.shape, bool)
    outside[1 : 1 + m, 3 : 3 + n] = False
    assert np.all(buf[outside] == -7.0)
