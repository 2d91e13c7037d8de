"""Edge tiles cost what they compute: an mma on a window that runs past the view (fill 0)
multiplies only the rows, columns and reduction steps the view holds. Checked by the
multiply-add counter the code generator emits with ``CodegenConfig(count_work=True)``
(structural, not a timing), and against numpy on awkward, empty and 1-element shapes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.catalog import CatalogRegistry
from planner.ir.examples import builtin_examples_dir, load_example
from planner.lower import compile_kernel
from planner.lower.cpu.config import CodegenConfig
from planner.solve import plan_kernel

TARGET = CatalogRegistry().get("x86-avx2")
CONFIG = dataclasses.replace(CodegenConfig.for_target(TARGET), count_work=True)


def _module(name):
    """The example's module (its ``make_*`` builders take sizes beyond its SPACE)."""
    return load_example(builtin_examples_dir() / f"{name}.py").module


def _compiled(kernel, bindings):
    return compile_kernel(kernel, plan_kernel(kernel, TARGET, bindings), TARGET,
                          config=CONFIG)


@pytest.mark.parametrize("mnk", [(300, 200, 130), (129, 1, 257), (131, 75, 3), (4, 9, 300),
                                 (1, 1, 1), (0, 5, 7),
                                 (5, 0, 7), (5, 7, 0), (256, 128, 256)])
def test_gemm_edge_tiles_do_exactly_the_product(mnk):
    m, n, k = mnk
    g = _module("gemm")
    kern = g.make_gemm(g.GemmConfig(128, 128, 256, 2))
    ck = _compiled(kern, {"M": m, "N": n, "K": k})
    rng = np.random.default_rng(m * 7 + n * 3 + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    before = ck.mma_work
    for threads in (1, 2):
        c = np.full((m, n), np.nan, np.float32)
        got = ck(A=a, B=b, C=c, threads=threads)["C"]
        np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    # 300x200x130 on 128x128x256 tiles: 300*200*130 multiply-adds, not 384*256*256 (3.2x)
    assert ck.mma_work - before == 2 * m * n * k


def test_gemm_small_edge_tiles_use_remainder_sizes():
    """Tiles small enough for the small kernel: the edge is clamped there too."""
    g = _module("gemm")
    kern = g.make_gemm(g.GemmConfig(16, 16, 16, 2))
    m, n, k = 37, 21, 19
    ck = _compiled(kern, {"M": m, "N": n, "K": k})
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    before = ck.mma_work
    got = ck(A=a, B=b, C=np.empty((m, n), np.float32))["C"]
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert ck.mma_work - before == m * n * k
