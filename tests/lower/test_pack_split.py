"""A split segment of packed mmas runs one contiguous piece per thread, so each thread
packs each A row panel and B column panel of its instances once (issue 13); with at most
four instances per thread it runs one piece per instance (edge tiles of unequal work
balance only when taken one at a time), each packing its own panels.

Counted with ``CodegenConfig(count_work=True)`` (``CompiledKernel.mma_packed``: bytes of
source elements packed); the expected figures are computed here from the shapes and the
tile size: a thread running instances ``[lo, hi)`` (row-major over the tile grid) packs
``valid rows × K`` floats of every row tile and ``K × valid columns`` of every column tile
those instances touch.  A call whose caller ran every piece itself (a worker not awake
in time) packs what one thread packs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import planner.lower.cpu.runtime as runtime
from planner.catalog import CatalogRegistry
from planner.ir.examples import builtin_examples_dir, load_example
from planner.lower import compile_kernel
from planner.lower.cpu.config import CodegenConfig
from planner.solve import plan_kernel

TARGET = CatalogRegistry().get("host")
CONFIG = dataclasses.replace(CodegenConfig.for_target(TARGET), count_work=True)
TILE = 128


def _expected(m: int, n: int, k: int, pieces: int) -> int:
    """Bytes packed by ``pieces`` contiguous pieces of the row-major tile grid."""
    gm, gn = -(-m // TILE), -(-n // TILE)
    total, count = 0, gm * gn
    for t in range(pieces):
        lo, hi = count * t // pieces, count * (t + 1) // pieces
        rows = {i // gn for i in range(lo, hi)}
        cols = {i % gn for i in range(lo, hi)}
        total += sum(min(TILE, m - r * TILE) for r in rows) * k
        total += sum(min(TILE, n - c * TILE) for c in cols) * k
    return 4 * total


@pytest.fixture(autouse=True)
def _always_split(monkeypatch: pytest.MonkeyPatch) -> None:
    # decide every timed split trial for splitting (the machine may be busy)
    monkeypatch.setattr(runtime, "_SPLIT_GAIN", 1e9)


# (shape, pieces on two threads): 16 and 15 tiles, more than 4 per thread: one piece per
# thread; 6 tiles: one piece per tile
@pytest.mark.parametrize(("mnk", "pieces"), [((512, 512, 512), 2), ((300, 200, 130), 6),
                                             ((384, 640, 256), 2)],
                         ids=lambda s: "x".join(map(str, s)) if isinstance(s, tuple) else "")
def test_two_threads_pack_each_panel_once_per_thread(mnk, pieces) -> None:
    m, n, k = mnk
    g = load_example(builtin_examples_dir() / "gemm.py").module
    kern = g.make_gemm(g.GemmConfig(TILE, TILE, TILE, 2))
    ck = compile_kernel(kern, plan_kernel(kern, TARGET, {"M": m, "N": n, "K": k}), TARGET,
                        config=CONFIG)
    rng = np.random.default_rng(m * n + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    alone, split = _expected(m, n, k, 1), _expected(m, n, k, pieces)
    assert split < pieces * alone  # sanity of the figures: at most each panel per piece
    before = ck.mma_packed
    one = ck(A=a, B=b, C=np.zeros((m, n), np.float32), threads=1)["C"].copy()
    assert ck.mma_packed - before == alone
    np.testing.assert_allclose(one, want, rtol=1e-4, atol=1e-3)
    seen = set()
    for _ in range(24):  # the trial runs, then the decided (split) calls
        before = ck.mma_packed
        got = ck(A=a, B=b, C=np.full((m, n), np.nan, np.float32), threads=2)["C"]
        packed = ck.mma_packed - before
        assert packed in (alone, split), (packed, alone, split)
        np.testing.assert_array_equal(got, one)  # same summation order per element
        seen.add(packed)
        if split in seen and len(seen) > 1 and _ >= 12:
            break
    assert split in seen


@pytest.mark.parametrize("mnk", [(1, 1, 1), (0, 5, 7), (5, 0, 7), (5, 7, 0)],
                         ids=lambda s: "x".join(map(str, s)))
def test_tiny_and_empty_shapes(mnk) -> None:
    m, n, k = mnk
    g = load_example(builtin_examples_dir() / "gemm.py").module
    kern = g.make_gemm(g.GemmConfig(TILE, TILE, TILE, 2))
    ck = compile_kernel(kern, plan_kernel(kern, TARGET, {"M": m, "N": n, "K": k}), TARGET,
                        config=CONFIG)
    a = np.ones((m, k), np.float32)
    b = np.full((k, n), 2.0, np.float32)
    for threads in (1, 2, 2):
        got = ck(A=a, B=b, C=np.full((m, n), np.nan, np.float32), threads=threads)["C"]
        np.testing.assert_array_equal(got, a @ b)
