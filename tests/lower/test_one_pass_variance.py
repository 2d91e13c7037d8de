"""The CPU layernorm's one-pass variance (a ``SquaresNest``: Welford per lane and
accumulator, merged by Chan's formula across accumulators and then lanes pairwise) keeps
the accuracy of the two-pass form on rows whose mean is far from zero, where a sum of
squares minus ``n·mean²`` in f32 loses every digit.  Expected values: numpy in float64.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.catalog import CatalogRegistry
from planner.ir.examples import builtin_examples_dir, load_example
from planner.lower import compile_kernel
from planner.lower.loops.program import SquaresNest, walk_stmts
from planner.solve.planner import plan_kernel

EPS = 1e-5


@pytest.fixture(scope="module")
def layernorm():
    ex = load_example(builtin_examples_dir() / "layernorm.py")
    x86 = CatalogRegistry().get("x86-avx2")
    return compile_kernel(ex.kernel, plan_kernel(ex.kernel, x86, {"M": 100, "N": 70}), x86)


def _np_layernorm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=1, keepdims=True)
    return ((x64 - mean) / np.sqrt(var + EPS) * w + b).astype(np.float32)


def test_the_variance_takes_one_pass(layernorm) -> None:
    body = layernorm.loop_program.segments[0].body
    squares = [p for s in walk_stmts(body) for p in getattr(s, "parts", ())
               if isinstance(p, SquaresNest)]
    assert len(squares) == 1


@pytest.mark.parametrize("offset", [0.0, 1e3, -3e4])
@pytest.mark.parametrize("shape", [(13, 1000), (5, 4096), (7, 9), (3, 1), (4, 64)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_rows_far_from_zero_keep_two_pass_accuracy(layernorm, shape: tuple[int, int],
                                                   offset: float) -> None:
    m, n = shape
    rng = np.random.default_rng(5)
    x = (offset + rng.standard_normal(shape)).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    want = _np_layernorm(x, w, b)
    # f32 rounding of the inputs' centered values alone is |offset| * 2^-24 per element
    tol = 2e-5 + 4 * abs(offset) * 2.0 ** -24 * float(np.abs(w).max())
    for threads in (1, 2):
        got = layernorm({"X": x, "W": w, "Bias": b}, bindings={"M": m, "N": n},
                        threads=threads)["Y"]
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=tol,
                                   err_msg=f"{shape} offset {offset}, {threads} threads")


def test_a_constant_row_has_zero_variance(layernorm) -> None:
    """Every element equal: the variance is exactly 0, so y = bias (no NaN, no noise)."""
    m, n = 6, 1003
    x = np.full((m, n), 1234.5, np.float32)
    w = np.random.default_rng(6).standard_normal(n).astype(np.float32)
    b = np.random.default_rng(7).standard_normal(n).astype(np.float32)
    got = layernorm({"X": x, "W": w, "Bias": b}, bindings={"M": m, "N": n}, threads=2)["Y"]
    np.testing.assert_array_equal(got, np.broadcast_to(b, (m, n)))
