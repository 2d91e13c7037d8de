"""Edge copies of fill-0 view windows copy what the view holds (issue 13): attention's last
key tile copies its valid rows of K and V and transposes only those keys (rounded up to
whole vectors of 16), since only mmas that stop at the valid keys read them
(:func:`planner.lower.cpu.zero_tiles.clamp_zero_tiles`). Structural (the clamped extents)
and against numpy on sizes that are not tile multiples, with stale NaN in the tiles' unused
rows from an earlier call."""

from __future__ import annotations

import numpy as np
import pytest

from planner.catalog import CatalogRegistry
from planner.ir.examples import builtin_examples_dir, load_example
from planner.lower import compile_kernel
from planner.lower.cpu.rows import clamp_rows
from planner.lower.cpu.zero_tiles import clamp_zero_tiles
from planner.lower.loops import ir as lp
from planner.solve import plan_kernel

TARGET = CatalogRegistry().get("host")


def _attention(bq: int, bkv: int, bindings: dict[str, int]):
    mod = load_example(builtin_examples_dir() / "attention.py").module
    kern = mod.make_attention(mod.AttentionConfig(bq, bkv, 2))
    return compile_kernel(kern, plan_kernel(kern, TARGET, bindings), TARGET)


def _clamped(ck) -> tuple[lp.Stmt, ...]:
    prog = ck.loop_program
    (seg,) = [s for s in prog.segments if s.parallel]
    return clamp_zero_tiles(clamp_rows(seg, prog), seg, prog)


def _extents(body, text: str, env: dict[str, int]) -> list[list[int]]:
    """The extents of the nest whose printed form contains ``text``, per key tile 0, 1."""
    for s in lp.walk_stmts(body):
        if isinstance(s, lp.Nest | lp.FusedNest) and text in "\n".join(
                lp._format_body((s,), 0)):
            return [[e.evaluate({**env, "%kv_tiles": t}) for e in s.extents] for t in (0, 1)]
    raise AssertionError(f"no nest {text!r}")


@pytest.mark.parametrize(("bq", "bkv", "S"), [(64, 64, 77), (16, 16, 21), (32, 64, 65)])
def test_edge_key_tile_copies_and_transposes_the_valid_keys(bq, bkv, S):
    D = 24
    ck = _attention(bq, bkv, {"L": 100, "S": S, "D": D})
    body = _clamped(ck)
    env = {"L": 100, "S": S, "D": D, "%block_q": 0}
    last = S - bkv
    assert _extents(body, "%kt<mod(%kv_tiles, 2)>[i.0, i.1] = K[", env) == [[bkv, D],
                                                                            [last, D]]
    rounded = min(bkv, -(-last // 16) * 16)
    assert _extents(body, "= %kt<mod(%kv_tiles, 2)>[i.1, i.0]", env) == [[D, bkv],
                                                                          [D, rounded]]


def test_nests_reading_a_copied_tile_keep_it_whole():
    """A tile that a nest reads (not only mmas) is copied whole: the softmax's row tiles."""
    mod = load_example(builtin_examples_dir() / "softmax.py").module
    kern = mod.make_softmax(mod.SoftmaxConfig(block_m=4))
    ck = compile_kernel(kern, plan_kernel(kern, TARGET, {"M": 37, "N": 1000}), TARGET)
    prog = ck.loop_program
    for seg in prog.segments:
        body = clamp_rows(seg, prog)
        assert clamp_zero_tiles(body, seg, prog) is body


def _numpy_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    s = q @ k.T / np.sqrt(q.shape[1])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p @ v) / p.sum(axis=1, keepdims=True)


@pytest.mark.parametrize(("bq", "bkv", "L", "S", "D"),
                         [(64, 64, 100, 77, 64), (64, 64, 1, 1, 64), (64, 64, 65, 129, 16),
                          (64, 64, 64, 65, 64), (64, 64, 36, 13, 64), (64, 64, 128, 64, 64),
                          (16, 16, 33, 17, 24), (16, 16, 5, 1, 8), (32, 64, 70, 141, 24)])
def test_attention_with_stale_tile_rows_matches_numpy(bq, bkv, L, S, D):
    """A first call with all-NaN K and V of 4 full key tiles leaves NaN in every row of both
    tile buffers; the second call (finite inputs) must read none of the rows its edge tile
    did not copy."""
    ck = _attention(bq, bkv, {"L": L, "S": S, "D": D})
    rng = np.random.default_rng(L * 7 + S)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((L, D), (S, D), (S, D)))
    want = _numpy_attention(q, k, v)
    for threads in (1, 2):
        nan = np.full((4 * bkv, D), np.nan, np.float32)
        ck(Q=q, K=nan, V=nan, O=np.zeros((L, D), np.float32), threads=threads)
        got = ck(Q=q, K=k, V=v, O=np.full((L, D), 5.0, np.float32), threads=threads)["O"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
