"""An mma whose accumulator is an expression over a view window (``C = A @ B + 2 * Cin``):
the plan fuses it, so the accumulator is evaluated into the mma's output with the window's
edge masks (no buffer of its own), and the CPU code and the emulated Metal kernel both
match numpy on shapes that are not tile multiples, empty and single-element ones."""

from __future__ import annotations

import numpy as np
import pytest

from planner.catalog import CatalogRegistry, Target
from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    exec_,
    f32,
    full,
    mma,
    parallel,
    shape,
    tile_kernel,
)
from planner.lower import build_loop_program, compile_kernel
from planner.lower.backends import check_metal
from planner.lower.loops.program import Mma, Nest, ViewRead, elem_reads, walk_stmts
from planner.plan.decisions import Decision, MaterializationPlan
from planner.solve import plan_kernel

BLOCK = 16


@tile_kernel("gemm_plus")
def gemm_plus(A: TensorView[const(f32), dims("M", "K")],
              B: TensorView[const(f32), dims("K", "N")],
              Cin: TensorView[const(f32), dims("M", "N")],
              C: TensorView[f32, dims("M", "N")]):
    gm = axis("block_m", ceil_div(A.extent(0), BLOCK))
    gn = axis("block_n", ceil_div(B.extent(1), BLOCK))
    m, n, k = axis("m", BLOCK), axis("n", BLOCK), axis("k", A.extent(1))
    for nest in parallel(shape(gm, gn), exec_.AUTOMATIC):
        m0, n0 = nest.index(gm) * BLOCK, nest.index(gn) * BLOCK
        acc = mma(A[coord(m0, 0), shape(m, k)], B[coord(0, n0), shape(k, n)],
                  Cin[coord(m0, n0), shape(m, n)] * full(shape(m, n), 2.0, f32))
        C(coord(m0, n0), shape(m, n)).store(acc)


SHAPES = [(37, 45, 13), (1, 1, 1), (0, 5, 3), (5, 0, 3), (16, 16, 16), (17, 33, 7)]


def _inputs(m: int, n: int, k: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(m * 100 + n * 10 + k)
    return {"A": rng.standard_normal((m, k)).astype(np.float32),
            "B": rng.standard_normal((k, n)).astype(np.float32),
            "Cin": rng.standard_normal((m, n)).astype(np.float32)}


def _fused_plan(target: Target, mnk: tuple[int, int, int]) -> MaterializationPlan:
    """The optimal plan of ``gemm_plus``, whose one accumulator edge it fuses."""
    m, n, k = mnk
    plan = plan_kernel(gemm_plus, target, {"M": m, "N": n, "K": k})
    into = [e for e in plan.edges if e.consumer_kind == "tile.mma" and e.edge_id.endswith("#2")]
    assert [e.decision for e in into] == [Decision.FUSED]
    return plan


@pytest.mark.parametrize("mnk", SHAPES)
def test_cpu_evaluates_the_fused_accumulator_into_the_output(mnk: tuple[int, int, int]) -> None:
    target = CatalogRegistry().get("x86-avx2")
    m, n, k = mnk
    plan = _fused_plan(target, mnk)
    prog = build_loop_program(gemm_plus, plan, target)
    body = [s for seg in prog.segments for s in walk_stmts(seg.body)]
    mm = next(s for s in body if isinstance(s, Mma))
    init = body[body.index(mm) - 1]  # Cin * 2 written straight into the mma's output
    assert isinstance(init, Nest) and init.dest.buffer == mm.c.buffer  # type: ignore[union-attr]
    assert [r.view for r in elem_reads(init.value) if isinstance(r, ViewRead)] == ["Cin"]
    x = _inputs(m, n, k)
    want = x["A"].astype(np.float64) @ x["B"] + 2.0 * x["Cin"]
    got = compile_kernel(gemm_plus, plan, target)(
        **x, C=np.full((m, n), np.nan, np.float32))["C"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mnk", [(37, 45, 13), (1, 1, 1), (17, 33, 7)])
def test_metal_runs_the_same_plan(mnk: tuple[int, int, int]) -> None:
    target = CatalogRegistry().get("apple-m2")
    m, n, k = mnk
    plan = _fused_plan(target, mnk)
    result = check_metal(gemm_plus, plan, target, {"M": m, "N": n, "K": k})
    assert result.ok, result.lines
