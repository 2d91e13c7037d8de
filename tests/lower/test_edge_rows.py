"""Edge tiles cost what they compute, for tiles that are buffers: rows of a parallel
instance that its edge-masked store drops are not computed when every statement feeding
the store is row-independent, and an mma on a buffer loaded (or transposed) from a view
window with fill 0 clamps to what the window holds (``planner.lower.cpu.rows``).
Structural (the multiply-add counter of ``CodegenConfig(count_work=True)``) and against
numpy."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.catalog import CatalogRegistry
from planner.ir.examples import builtin_examples_dir, load_example
from planner.ir.frontend import (
    TensorView,
    axis,
    broadcast,
    ceil_div,
    const,
    coord,
    dims,
    exec_,
    f32,
    parallel,
    reduce_sum,
    shape,
    tile_kernel,
)
from planner.lower import compile_kernel
from planner.lower.cpu.config import CodegenConfig
from planner.lower.cpu.rows import row_limit
from planner.solve import plan_kernel

TARGET = CatalogRegistry().get("x86-avx2")
CONFIG = dataclasses.replace(CodegenConfig.for_target(TARGET), count_work=True)


def _attention(L, S, D, clamp=True):
    mod = load_example(builtin_examples_dir() / "attention.py").module
    kern = mod.make_attention(mod.AttentionConfig(64, 64, 2))
    cfg = dataclasses.replace(CONFIG, clamp_rows=clamp)
    return mod, compile_kernel(kern, plan_kernel(kern, TARGET, {"L": L, "S": S, "D": D}),
                               TARGET, config=cfg)


@pytest.mark.parametrize("lsd", [(100, 77, 64), (1, 1, 64), (65, 3, 8), (0, 5, 8),
                                 (7, 0, 8), (128, 64, 64)])
def test_attention_edge_rows_are_not_computed(lsd):
    L, S, D = lsd
    mod, ck = _attention(L, S, D)
    rng = np.random.default_rng(L * 3 + S)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((L, D), (S, D), (S, D)))
    want = mod.reference(Q=q, K=k, V=v)["O"]
    before = ck.mma_work
    for threads in (1, 2):
        got = ck(Q=q, K=k, V=v, O=np.full((L, D), np.nan, np.float32), threads=threads)["O"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # both mmas (q@k^T: L x S x D, p@v: L x D x S in all) run only the L valid query
    # rows and the S valid keys: exactly the useful multiply-adds, on both runs
    assert ck.mma_work - before == 2 * 2 * L * S * D


def test_attention_100x77_row_clamp_is_found():
    _, ck = _attention(100, 77, 64)
    prog = ck.loop_program
    seg = next(s for s in prog.segments if s.parallel)
    got = row_limit(seg, prog)
    assert got is not None
    _, rows, _ = got
    # the query-row chain is clamped; the key/value tiles (rows = keys) are not
    assert {"qt", "s", "p", "acc_1"} <= rows and not {"kt", "vt"} & rows
    _, full = _attention(100, 77, 64, clamp=False)
    w = ck.mma_work
    q, k, v = (np.ones(s, np.float32) for s in ((100, 64), (77, 64), (77, 64)))
    ck(Q=q, K=k, V=v, O=np.empty((100, 64), np.float32))
    w_full = full.mma_work
    full(Q=q, K=k, V=v, O=np.empty((100, 64), np.float32))
    # 100 of the 128 rows of the two 64-row instances, 77 of the 128 keys of the two
    # 64-key tiles: 2.13x fewer multiply-adds than the zero-padded tiles
    assert (full.mma_work - w_full) == 2 * 128 * 128 * 64
    assert (ck.mma_work - w) == 2 * 100 * 77 * 64


def _column_centered():
    """Rows coupled through a reduction over the rows: no row may be skipped."""

    @tile_kernel("column_centered")
    def column_centered(X: TensorView[const(f32), dims("M", "N")],
                        Y: TensorView[f32, dims("M", "N")]):
        gm = axis("block_m", ceil_div(X.extent(0), 4))
        m = axis("m", 4)
        n = axis("n", X.extent(1))
        for nest in parallel(shape(gm), exec_.AUTOMATIC):
            r0 = nest.index(gm) * 4
            t = X(coord(r0, 0), shape(m, n)).load(fill=1.0)
            s = reduce_sum(t, axis=0)
            Y(coord(r0, 0), shape(m, n)).store(t - broadcast(s, shape(m, n), dims=(1,)))

    return column_centered


def test_rows_coupled_across_the_tile_are_not_clamped():
    kern = _column_centered()
    m, n = 6, 5
    ck = compile_kernel(kern, plan_kernel(kern, TARGET, {"M": m, "N": n}), TARGET,
                        config=CONFIG)
    prog = ck.loop_program
    assert all(row_limit(s, prog) is None for s in prog.segments if s.parallel)
    x = np.arange(m * n, dtype=np.float32).reshape(m, n)
    pad = np.ones((8, n), np.float32)
    pad[:m] = x
    want = np.concatenate([b - b.sum(axis=0) for b in (pad[:4], pad[4:])])[:m]
    for threads in (1, 2):
        got = ck(X=x, Y=np.full((m, n), np.nan, np.float32), threads=threads)["Y"]
        np.testing.assert_allclose(got, want, rtol=1e-5)
