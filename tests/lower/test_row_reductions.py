"""Row reductions on the CPU: the lanes of the vector accumulators reduce as a tree, and a
max keeps NaN wherever it sits (first lane, last lane, the masked tail, an unrolled
accumulator) and otherwise equals numpy's; sums agree with a float64 sum within f32
rounding. Rows of 1..70 elements cover the full vectors, the unrolled accumulators and
the tail on 8-lane vectors and the host's (16 lanes on AVX-512)."""

from __future__ import annotations

import numpy as np
import pytest

from planner.catalog import CatalogRegistry
from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    exec_,
    f32,
    parallel,
    reduce_max,
    reduce_sum,
    shape,
    tile_kernel,
)
from planner.lower import compile_kernel
from planner.solve import plan_kernel

ROWS = 8


def _row_reduce(fn):
    @tile_kernel("row_reduce")
    def row_reduce(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M")]):
        g = axis("g", ceil_div(X.extent(0), ROWS))
        r = axis("r", ROWS)
        n = axis("n", X.extent(1))
        for nest in parallel(shape(g), exec_.AUTOMATIC):
            r0 = nest.index(g) * ROWS
            Y(coord(r0), shape(r)).store(fn(X[coord(r0, 0), shape(r, n)], axis=1))
    return row_reduce


def _compiled(fn, target: str, n: int):
    t = CatalogRegistry().get(target)
    k = _row_reduce(fn)
    return compile_kernel(k, plan_kernel(k, t, {"M": ROWS, "N": n}), t)


@pytest.mark.parametrize("target", ["x86-avx2", "host"])
@pytest.mark.parametrize("n", [1, 7, 16, 17, 64, 70])
def test_row_max_keeps_nan_in_every_lane_position(target: str, n: int) -> None:
    ck = _compiled(reduce_max, target, n)
    rng = np.random.default_rng(n)
    x = rng.standard_normal((ROWS, n)).astype(np.float32)
    x[0, 0] = np.nan  # the first element: the accumulator starts with NaN
    x[1, n - 1] = np.nan  # the last element (the tail when n is not a multiple)
    x[2, n // 2] = np.nan
    x[3, :] = -np.inf  # a fully masked row
    x[4, :] = 0.0
    x[4, n - 1] = -0.0
    x[5, n - 1] = 1e30  # the max in the last lane
    got = ck(X=x, Y=np.zeros(ROWS, np.float32))["Y"]
    want = np.max(x, axis=1)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", ["x86-avx2", "host"])
@pytest.mark.parametrize("n", [1, 7, 16, 17, 64, 70])
def test_row_sum_matches_a_float64_sum(target: str, n: int) -> None:
    ck = _compiled(reduce_sum, target, n)
    rng = np.random.default_rng(100 + n)
    x = rng.standard_normal((ROWS, n)).astype(np.float32)
    x[6, 0] = np.nan
    x[7, n - 1] = np.inf
    got = ck(X=x, Y=np.zeros(ROWS, np.float32))["Y"]
    want = x.astype(np.float64).sum(axis=1)
    bound = 1e-6 * n * np.abs(x.astype(np.float64)).sum(axis=1) + 1e-7
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    assert np.all(np.abs(got[finite] - want[finite]) <= bound[finite])
    assert got[7] == np.inf
