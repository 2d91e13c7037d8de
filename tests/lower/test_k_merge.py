"""A k loop that only accumulates one tile product is lowered to ONE packed GEMM over the
whole reduction (``planner.lower.cpu.mma_sources.k_merge``, ``_Mma.k_loop``): decided
from the loop program (the planned gemm, the manual gemm with explicit Memory As/Bs),
not per example. Pinned by the mma counters of ``CodegenConfig(count_work=True)``: one
mma execution per output tile doing exactly M·N·K multiply-adds in all, and results
against float64 numpy on tile multiples, non-multiples, 1-element and empty shapes, on
1 and 2 threads."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.catalog import CatalogRegistry
from planner.ir.examples import builtin_examples_dir, load_example
from planner.ir.expr import Const
from planner.lower import compile_kernel
from planner.lower.cpu.config import CodegenConfig
from planner.lower.cpu.mma_sources import ViewCopies, k_merge, view_copies
from planner.lower.loops import program as lp
from planner.solve import plan_kernel
from tests.lower.test_gemm_pack_cache import _two_b

TARGET = CatalogRegistry().get("x86-avx2")
CONFIG = dataclasses.replace(CodegenConfig.for_target(TARGET), count_work=True)


def _module(name):
    return load_example(builtin_examples_dir() / f"{name}.py").module


def _compiled(kernel, bindings, config=CONFIG):
    return compile_kernel(kernel, plan_kernel(kernel, TARGET, bindings), TARGET,
                          config=config)


def _cdiv(x: int, y: int) -> int:
    return -(-x // y)


def _run(ck, m, n, k, threads):
    rng = np.random.default_rng(m + 5 * n + 11 * k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    calls, work = ck.mma_calls, ck.mma_work
    got = ck(A=a, B=b, C=np.full((m, n), np.nan, np.float32), threads=threads)["C"]
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64),
                               rtol=1e-4, atol=1e-3)
    return ck.mma_calls - calls, ck.mma_work - work


def _one_mma_per_tile(ck, m, n, k, tile_m, tile_n) -> None:
    """On 1 and 2 threads: one mma per output tile, M·N·K multiply-adds, numpy's C."""
    for threads in (1, 2):
        calls, work = _run(ck, m, n, k, threads)
        assert calls == _cdiv(m, tile_m) * _cdiv(n, tile_n)
        assert work == m * n * k


SHAPES = [(300, 200, 130), (256, 384, 512), (129, 255, 385), (1, 1, 1)]


@pytest.mark.parametrize("mnk", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_planned_gemm_runs_one_mma_per_output_tile(mnk) -> None:
    """128×128 tiles, 64-deep k steps: one mma per output tile (not per k step) over
    the whole K, exactly M·N·K multiply-adds, numpy's results."""
    m, n, k = mnk
    g = _module("gemm")
    ck = _compiled(g.make_gemm(g.GemmConfig(128, 128, 64, 2)), {"M": m, "N": n, "K": k})
    _one_mma_per_tile(ck, m, n, k, 128, 128)


@pytest.mark.parametrize("mnk", [(300, 200, 130), (100, 70, 37), (1, 1, 1)],
                         ids=lambda s: "x".join(map(str, s)))
def test_manual_gemm_memory_copies_merge_too(mnk) -> None:
    """The manual gemm (explicit Memory As/Bs written by view copies, a staging copy
    of Bs, a 2-stage pipeline over 16-deep k steps in 32×32 tiles): one mma per tile."""
    m, n, k = mnk
    g = _module("manual_gemm")
    ck = _compiled(g.kernel(), {"M": m, "N": n, "K": k})
    _one_mma_per_tile(ck, m, n, k, 32, 32)


@pytest.mark.parametrize("mnk", [(300, 200, 130), (100, 70, 37), (64, 64, 64)],
                         ids=lambda s: "x".join(map(str, s)))
def test_default_gemm_with_a_materialized_b_tile(mnk) -> None:
    """The gemm's default 32×32×16 tiles planned for x86-avx512: the plan copies B's
    window into a materialized tile (clamped to the view at edge tiles by
    ``clamp_zero_tiles``) that only the mma reads: one mma per tile all the same."""
    m, n, k = mnk
    target = CatalogRegistry().get("x86-avx512")
    kern = _module("gemm").kernel()
    ck = compile_kernel(kern, plan_kernel(kern, target, {"M": m, "N": n, "K": k}), target,
                        config=dataclasses.replace(CodegenConfig.for_target(target),
                                                   count_work=True))
    prog = ck.loop_program
    (seg,) = [s for s in prog.segments if s.parallel]
    # the premise: this plan copies B's window into a tile only the mma reads
    assert any(b.role == "materialized" and b.name != "acc"
               for b in map(prog.buffer, seg.buffers))
    # on every host: the loop program's k loop merges through that copy
    sources = view_copies(seg.body, prog, seg)
    assert sum(k_merge(s, prog, sources) is not None for s in lp.walk_stmts(seg.body)
               if isinstance(s, lp.Loop | lp.Pipeline)) == 1
    if not ck.runnable:  # x86-avx512 code: counted and compared where the host runs it
        return
    _one_mma_per_tile(ck, m, n, k, 32, 32)


@pytest.mark.parametrize("mnk", [(0, 5, 7), (5, 0, 7), (5, 7, 0)],
                         ids=lambda s: "x".join(map(str, s)))
def test_empty_shapes(mnk) -> None:
    """Empty M or N: nothing runs; empty K: C is the zero accumulator."""
    m, n, k = mnk
    g = _module("gemm")
    ck = _compiled(g.make_gemm(g.GemmConfig(128, 128, 64, 2)), {"M": m, "N": n, "K": k})
    for threads in (1, 2):
        _, work = _run(ck, m, n, k, threads)
        assert work == 0


def test_without_the_merge_each_k_step_is_an_mma() -> None:
    """The counter tells the two lowerings apart (``merge_k=False``: one mma per k
    step), and both give numpy's results."""
    m, n, k = 300, 200, 130
    g = _module("gemm")
    ck = _compiled(g.make_gemm(g.GemmConfig(128, 128, 64, 2)), {"M": m, "N": n, "K": k},
                   dataclasses.replace(CONFIG, merge_k=False))
    calls, work = _run(ck, m, n, k, 2)
    assert calls == _cdiv(m, 128) * _cdiv(n, 128) * _cdiv(k, 64)
    assert work == m * n * k


def test_a_loop_with_two_products_is_not_merged() -> None:
    """Two mmas per k step (C = A @ B1 + A @ B2): not the shape, left as the loop."""
    m, n, k = 300, 130, 260
    ck = _compiled(_two_b(128), {"M": m, "N": n, "K": k})
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b1, b2 = (rng.standard_normal((k, n)).astype(np.float32) for _ in range(2))
    got = ck(A=a, B1=b1, B2=b2, C=np.zeros((m, n), np.float32), threads=2)["C"]
    a64 = a.astype(np.float64)
    np.testing.assert_allclose(got, a64 @ b1 + a64 @ b2, rtol=1e-4, atol=2e-3)
    assert ck.mma_calls == 2 * _cdiv(m, 128) * _cdiv(n, 128) * _cdiv(k, 128)


def test_merged_mma_spans_the_whole_reduction() -> None:
    """On the loop program: K = k_tiles · k, the windows start at k = 0 and span it."""
    g = _module("gemm")
    kern = g.make_gemm(g.GemmConfig(128, 128, 64, 2))
    prog = _compiled(kern, {"M": 300, "N": 200, "K": 130}).loop_program
    (seg,) = [s for s in prog.segments if s.parallel]
    loops = [s for s in lp.walk_stmts(seg.body) if isinstance(s, lp.Loop | lp.Pipeline)]
    merged = [got for s in loops if (got := k_merge(s, prog, ViewCopies())) is not None]
    assert len(merged) == 1
    mm = merged[0].mma
    (kvar,) = next(s for s in loops if k_merge(s, prog, ViewCopies()) is not None).vars
    assert mm.accumulate and kvar not in mm.k.symbols()
    a, b = merged[0].windows
    assert a.offsets[1] == Const(0) and b.offsets[0] == Const(0)
    assert a.shape[1] == mm.k == b.shape[0]
    assert mm.k.evaluate({"K": 130}) == 192  # ceildiv(130, 64) steps of 64


def test_only_loops_of_one_accumulating_product_merge() -> None:
    """Built from the planned gemm's k loop: two products per step, an overwriting
    product, a window not tiled by the loop variable, a nest of other work: no merge."""
    g = _module("gemm")
    kern = g.make_gemm(g.GemmConfig(128, 128, 64, 2))
    prog = _compiled(kern, {"M": 300, "N": 200, "K": 130}).loop_program
    (seg,) = [s for s in prog.segments if s.parallel]
    loop = next(s for s in lp.walk_stmts(seg.body)
                if isinstance(s, lp.Loop | lp.Pipeline) and k_merge(s, prog, ViewCopies()))
    assert isinstance(loop, lp.Loop)
    (mm,) = [s for s in loop.body if isinstance(s, lp.Mma)]
    other = next(s for s in seg.body if isinstance(s, lp.Nest))

    def merges(*body: lp.Stmt, extents=loop.extents) -> bool:
        return k_merge(dataclasses.replace(loop, body=body, extents=extents), prog,
                       ViewCopies()) is not None

    assert merges(mm) and merges(lp.Note("x"), mm)
    assert not merges(mm, mm)
    assert not merges(dataclasses.replace(mm, accumulate=False))
    assert not merges(mm, other)
    fixed = dataclasses.replace(mm.a, window=dataclasses.replace(
        mm.a.window, offsets=(mm.a.window.offsets[0], Const(0))))
    assert not merges(dataclasses.replace(mm, a=fixed))
