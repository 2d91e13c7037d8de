"""GEMM edge tiles cost what they compute (issue 13), for the plain and the manual GEMM.

* Results against numpy on sizes just above tile multiples (K included), below one tile,
  1×1×1 and empty, on 1 and 2 threads.
* The work is remainder-sized: the multiply-add counter the code generator emits with
  ``CodegenConfig(count_work=True)`` counts exactly M·N·K per call (structural, not a
  timing), and the cost model prices an mma on the clamped tile.
* The edge tile's store into C is unmasked over the part of the window inside C.
* The manual GEMM's copies into ``As``/``Bs`` are not emitted: the mma packs straight
  from the view (``planner.lower.cpu.mma_sources``); a window that starts outside the
  view is still copied first (checked against the interpreter).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.catalog import CatalogRegistry
from planner.ir import core
from planner.ir.examples import builtin_examples_dir, load_example
from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    f32,
    layout,
    memory,
    mma,
    parallel,
    shape,
    stride,
    tile_kernel,
    zeros,
)
from planner.ir.graph import dataflow_graph
from planner.ir.interpreter import interpret
from planner.lower import compile_kernel
from planner.lower.cpu.config import CodegenConfig
from planner.lower.cpu.edge_stores import clamped_store
from planner.lower.cpu.mma_sources import view_copies
from planner.lower.cpu.rows import clamp_rows
from planner.lower.loops import program as lp
from planner.lower.loops.builder import build_loop_program
from planner.realize.binding import bind_execution
from planner.solve import plan_kernel
from planner.solve.context import Context, op_cycles
from planner.solve.figures import Figures

TARGET = CatalogRegistry().get("x86-avx2")
CONFIG = dataclasses.replace(CodegenConfig.for_target(TARGET), count_work=True)

#: (M, N, K): just above multiples of the 128 tiles and of K = 128 / 256, below a tile,
#: one element, empty.
SIZES = [(129, 129, 129), (257, 130, 257), (300, 200, 130), (50, 37, 20), (1, 1, 1),
         (0, 5, 7), (5, 0, 7), (5, 7, 0)]


def _module(name):
    """The example's module (its ``make_*`` builders take sizes beyond its SPACE)."""
    return load_example(builtin_examples_dir() / f"{name}.py").module


def _gemm():
    g = _module("gemm")
    return g.make_gemm(g.GemmConfig(128, 128, 256, 2))


def _manual():
    g = _module("manual_gemm")
    return g.make_manual_gemm(g.GemmConfig(128, 128, 128, 2))


KERNELS = {"gemm": _gemm, "manual_gemm": _manual}


def _inputs(m, n, k, seed=0):
    rng = np.random.default_rng(seed + 7 * m + 3 * n + k)
    return (rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32))


@pytest.mark.parametrize("which", sorted(KERNELS))
@pytest.mark.parametrize("mnk", SIZES, ids=lambda s: "x".join(map(str, s)))
def test_edge_sizes_match_numpy_and_do_exactly_the_product(which, mnk):
    m, n, k = mnk
    kern = KERNELS[which]()
    ck = compile_kernel(kern, plan_kernel(kern, TARGET, {"M": m, "N": n, "K": k}), TARGET,
                        config=CONFIG)
    a, b = _inputs(m, n, k)
    want = a.astype(np.float64) @ b.astype(np.float64)
    for threads in (1, 2):
        before = ck.mma_work
        c = np.full((m, n), np.nan, np.float32)
        got = ck(A=a, B=b, C=c, threads=threads)["C"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
        # remainder-sized edge tiles: M*N*K multiply-adds, not the zero-padded tiles'
        assert ck.mma_work - before == m * n * k


def test_manual_gemm_packs_as_and_bs_from_the_views():
    """The copies into As and Bs are dropped; each mma operand reads its view window."""
    kern = _manual()
    prog = build_loop_program(kern, plan_kernel(kern, TARGET, {"M": 300, "N": 200, "K": 130}),
                              TARGET)
    (seg,) = prog.segments
    found = view_copies(clamp_rows(seg, prog), prog, seg)  # the body the codegen emits
    assert len(found.skip) == 2
    written = {(slot, cp.dest.buffer, cp.value.view) for (_, slot), cp in found.sources.items()}
    assert written == {(0, "As", "A"), (1, "Bs", "B")}


def _shifted_manual(block=32, store_shift=0):
    """A manual GEMM whose B windows start one row above the k tile (the first one
    outside the view): C = A @ B', B'[k] = B[k - 1], B'[0] = 0; with ``store_shift``
    its C windows start that many rows above the tile, too."""
    @tile_kernel("shifted_manual_gemm")
    def kernel(A: TensorView[const(f32), dims("M", "K")],
               B: TensorView[const(f32), dims("K", "N")],
               C: TensorView[f32, dims("M", "N")]):
        gm = axis("block_m", ceil_div(A.extent(0), block))
        gn = axis("block_n", ceil_div(B.extent(1), block))
        kt = axis("k_tiles", ceil_div(A.extent(1), block))
        mx, nx, kx = axis("m", block), axis("n", block), axis("k", block)
        for nest in parallel(shape(gm, gn)):
            m0, n0 = nest.index(gm) * block, nest.index(gn) * block
            As = memory[f32](layout(shape(mx, kx), stride(block + 1, 1)))
            Bs = memory[f32](layout(shape(kx, nx), stride(1, block)))
            acc = zeros[f32](shape(mx, nx))
            for step in nest.pipeline(shape(kt), window=2, interval=1):
                k0 = step.index() * block
                step.stage("load")
                As.store(A[coord(m0, k0), shape(mx, kx)])
                Bs.store(B[coord(k0 - 1, n0), shape(kx, nx)])
                step.stage("compute")
                acc = mma(As.load(), Bs.load(), acc)
            C(coord(m0 - store_shift, n0), shape(mx, nx)).store(acc)

    return kernel


@pytest.mark.parametrize("store_shift", [0, 1])
@pytest.mark.parametrize("mnk", [(70, 40, 33), (32, 32, 32), (1, 1, 1)],
                         ids=lambda s: "x".join(map(str, s)))
def test_view_copy_starting_outside_the_view_is_copied_first(mnk, store_shift):
    """Also the edge-tile store: clamped to the view when its window starts inside,
    masked when it starts outside (``store_shift``: the first row block's)."""
    m, n, k = mnk
    kern = _shifted_manual(store_shift=store_shift)
    bindings = {"M": m, "N": n, "K": k}
    plan = plan_kernel(kern, TARGET, bindings)
    prog = build_loop_program(kern, plan, TARGET)
    assert any(view_copies(clamp_rows(seg, prog), prog, seg).skip for seg in prog.segments)
    ck = compile_kernel(kern, plan, TARGET)
    a, b = _inputs(m, n, k, seed=1)
    c0 = np.random.default_rng(2).standard_normal((m, n)).astype(np.float32)  # rows not stored
    want = interpret(kern, {"A": a, "B": b, "C": c0}, bindings)["C"]
    shifted = a.astype(np.float64) @ np.vstack([np.zeros((1, n)), b[:-1]])
    if not store_shift:
        np.testing.assert_allclose(want, shifted, rtol=1e-4, atol=1e-3)
    for threads in (1, 2):
        got = ck(A=a, B=b, C=c0.copy(), threads=threads)["C"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def _mma_compute_cycles(kern, target, bindings):
    env = dict(bindings)
    g = dataflow_graph(kern, env)
    ctx = Context(kern, target, Figures(target), env, g, {}, bind_execution(kern, target, env))
    (d,) = [d for _, d in g.nodes(data=True) if isinstance(d.get("op"), core.MmaOp)]
    compute, traffic = op_cycles(ctx, d, "core")
    assert traffic == 0.0
    return compute


@pytest.mark.parametrize("which,tiles", [("gemm", (128, 128, 256)),
                                         ("manual_gemm", (128, 128, 128))])
@pytest.mark.parametrize("mnk", [(300, 200, 130), (256, 256, 256), (50, 37, 20), (129, 1, 257)],
                         ids=lambda s: "x".join(map(str, s)))
def test_mma_is_priced_on_the_clamped_tile(which, tiles, mnk):
    """One mma's cycles: the catalog's 2·m·n·k / mma throughput on the mean clamped tile,
    each extent E over tiles of t averaging E / ceil(E / t) (exactly M·N·K in all)."""
    bindings = dict(zip("MNK", mnk, strict=True))
    clamped = [e / -(-e // t) for e, t in zip(mnk, tiles, strict=True)]
    want = 2.0 * clamped[0] * clamped[1] * clamped[2] / TARGET.costs.mma
    assert _mma_compute_cycles(KERNELS[which](), TARGET, bindings) == pytest.approx(want)


def test_mma_on_a_gpu_target_is_priced_on_the_whole_tile():
    """Metal computes whole tiles: the price stays the full tile's."""
    gpu = CatalogRegistry().get("apple-m2")
    want = 2.0 * 128 * 128 * 256 / gpu.costs.mma
    assert _mma_compute_cycles(_gemm(), gpu, {"M": 300, "N": 200, "K": 130}) == pytest.approx(want)


def test_edge_tile_store_is_clamped_to_the_view():
    """The C store of an edge tile runs unmasked over the part of the window inside C:
    min(128, max(0, M - 128·block_m)) rows and the same for the columns."""
    kern = _gemm()
    prog = build_loop_program(kern, plan_kernel(kern, TARGET, {"M": 300, "N": 200, "K": 130}),
                              TARGET)
    (seg,) = prog.segments
    stores = [s for s in seg.body if isinstance(s, lp.Nest) and isinstance(s.dest, lp.ViewWrite)]
    assert len(stores) == 1
    win, inner = clamped_store(stores[0], prog)
    assert win.view == "C"
    env = {"M": 300, "N": 200, "K": 130}
    for bm, bn, rows, cols in ((0, 0, 128, 128), (2, 0, 44, 128), (1, 1, 128, 72), (2, 1, 44, 72)):
        at = {**env, "%block_m": bm, "%block_n": bn}
        assert [int(e.evaluate(at)) for e in inner.extents] == [rows, cols]
