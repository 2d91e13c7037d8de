"""Masked edge tiles cost what they compute (issue 13): columns that a select masks to a
constant (``where(j < B, x, -inf)``: attention's keys past the sequence) are not computed
where what is computed from them there is one value per row that adds nothing to a row
sum or max (``exp(-inf - m)`` is +0, or NaN when ``m`` is -inf or NaN, which one column
gives as well as all), nor read by the mma past the rows of V known to be 0
(:func:`planner.lower.cpu.rows.clamp_masked_columns`). Structural (the clamped extents),
and against the reference interpreter and numpy on shapes that are not tile multiples,
empty and single-element ones, rows whose every key is masked and inputs with inf/NaN."""

from __future__ import annotations

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
    exp,
    f32,
    full,
    i32,
    iota,
    maximum,
    parallel,
    reduce_max,
    reduce_sum,
    shape,
    tile_kernel,
    where,
    zeros,
)
from planner.ir.interpreter import interpret
from planner.lower import compile_kernel
from planner.lower.cpu.rows import clamp_masked_columns, clamp_rows
from planner.lower.loops import ir as lp
from planner.solve import plan_kernel

TARGET = CatalogRegistry().get("host")


def _online(masked: float, kind: str = "softmax"):
    """Per row of X: the sum of ``exp(s - max s)`` over column tiles of 64 (an online
    softmax denominator), ``s = where(column < N, x, masked)``, and the row max, on
    4-row tiles; ``kind="sum"``: the plain row sum of ``exp(s)`` instead."""

    @tile_kernel(f"online_{kind}")
    def k(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M")],
          Z: TensorView[f32, dims("M")]):
        gm = axis("gm", ceil_div(X.extent(0), 4))
        ct = axis("ct", ceil_div(X.extent(1), 64))
        r = axis("r", 4)
        c = axis("c", 64)
        for nest in parallel(shape(gm), exec_.AUTOMATIC):
            r0 = nest.index(gm) * 4
            m_i = full(shape(r), float("-inf"), f32)
            l_i = zeros[f32](shape(r))
            for step in nest.pipeline(shape(ct), window=1, interval=1):
                c0 = step.index() * 64
                x = X[coord(r0, c0), shape(r, c)]
                valid = iota(shape(r, c), 1) < full(shape(r, c), X.extent(1) - c0, i32)
                s = where(valid, x, masked)
                if kind == "sum":
                    l_i = l_i + reduce_sum(exp(s), axis=1)
                    m_i = maximum(m_i, reduce_max(s, axis=1))
                    continue
                m_new = maximum(m_i, reduce_max(s, axis=1))
                p = exp(s - broadcast(m_new, shape(r, c), dims=(0,)))
                l_i = l_i * exp(m_i - m_new) + reduce_sum(p, axis=1)
                m_i = m_new
            Y(coord(r0), shape(r)).store(l_i)
            Z(coord(r0), shape(r)).store(m_i)

    return k


def _inputs(m: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, n)) * 4).astype(np.float32)
    if m >= 6 and n >= 3:
        x[0, :] = -np.inf  # every key masked: m = -inf, exp(-inf - -inf) = NaN
        x[1, n // 2] = np.nan
        x[2, n - 1] = np.inf  # the max: exp(inf - inf) = NaN
        x[3, ::2] = -np.inf
        x[4, 0] = np.inf
        x[4, 1] = -np.inf
        x[5, :] = 1e30  # large finite
    return x


def _emitted_bodies(ck) -> list[tuple[lp.Stmt, ...]]:
    prog = ck.loop_program
    return [clamp_rows(seg, prog) for seg in prog.segments]


def _nests(body):
    return [s for s in lp.walk_stmts(body) if isinstance(s, lp.Nest | lp.ReduceNest |
                                                           lp.FusedNest | lp.Mma)]


SHAPES = [(9, 77), (1, 1), (4, 64), (13, 200), (6, 65), (7, 128), (0, 5), (3, 0), (8, 13)]


@pytest.mark.parametrize("mn", SHAPES)
def test_online_softmax_matches_interpreter(mn):
    m, n = mn
    k = _online(float("-inf"))
    ck = compile_kernel(k, plan_kernel(k, TARGET, {"M": m, "N": n}), TARGET)
    x = _inputs(m, n, m * 7 + n)
    want = interpret(k, {"X": x, "Y": np.zeros(m, np.float32), "Z": np.zeros(m, np.float32)})
    with np.errstate(all="ignore"):
        ref = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True)).sum(axis=1) \
            if n else np.zeros(m)
    for threads in (1, 2):
        got = ck({"X": x, "Y": np.full(m, 7.0, np.float32), "Z": np.full(m, 7.0, np.float32)},
                 threads=threads)
        np.testing.assert_allclose(got["Y"], want["Y"], rtol=2e-5, atol=1e-6)
        np.testing.assert_array_equal(got["Z"], want["Z"])
        np.testing.assert_allclose(got["Y"], ref, rtol=1e-4)


@pytest.mark.parametrize("masked,kind", [(0.0, "sum"), (-3.0, "softmax"), (float("nan"), "softmax"),
                                         (float("-inf"), "sum")])
@pytest.mark.parametrize("mn", [(9, 77), (6, 65), (5, 3)])
def test_masked_columns_that_count_are_computed(masked, kind, mn):
    """A mask value whose columns add to the row (0 or -3 under exp: 1 or e^-3 each) keeps
    the whole tile; ``exp(-inf)`` summed without a max is +0 and is clamped, and a NaN
    mask makes every sum and max NaN, which one masked column gives: clamped too."""
    m, n = mn
    k = _online(masked, kind)
    ck = compile_kernel(k, plan_kernel(k, TARGET, {"M": m, "N": n}), TARGET)
    x = _inputs(m, n, n)
    want = interpret(k, {"X": x, "Y": np.zeros(m, np.float32), "Z": np.zeros(m, np.float32)})
    got = ck({"X": x})
    np.testing.assert_allclose(got["Y"], want["Y"], rtol=2e-5, atol=1e-6)
    np.testing.assert_array_equal(got["Z"], want["Z"])
    clamped = [s for b in _emitted_bodies(ck) for s in _nests(b)
               if not isinstance(s, lp.Mma) and s.vars and "N" in s.extents[-1].symbols()]
    assert bool(clamped) == (masked == float("-inf") or masked != masked), clamped


def _attention(L, S, D):
    mod = load_example(builtin_examples_dir() / "attention.py").module
    kern = mod.make_attention(mod.AttentionConfig(64, 64, 2))
    return mod, kern, compile_kernel(kern, plan_kernel(kern, TARGET, {"L": L, "S": S, "D": D}),
                                     TARGET)


def test_attention_masked_columns_are_clamped():
    """The row max, exp and row sum of the last key tile run the valid keys (rounded up to
    whole vectors of 16, plus the one a NaN needs), and the mma over them stops at V's
    valid rows; full tiles run all 64."""
    _, _, ck = _attention(100, 77, 64)
    (body,) = _emitted_bodies(ck)
    by_text = {}
    for s in _nests(body):
        by_text.setdefault("\n".join(lp._format_body((s,), 0)), s)
    env = {"L": 100, "S": 77, "D": 64, "%block_q": 0}
    cols = {}
    for text, s in by_text.items():
        if isinstance(s, lp.Mma) and "%vt" in text:
            cols["mma k"] = [s.k.evaluate({**env, "%kv_tiles": t}) for t in (0, 1)]
        elif "max over" in text:
            cols["max"] = [s.extents[-1].evaluate({**env, "%kv_tiles": t}) for t in (0, 1)]
        elif "= exp(%s_0" in text:
            cols["exp"] = [s.extents[-1].evaluate({**env, "%kv_tiles": t}) for t in (0, 1)]
        elif "sum over" in text:
            cols["sum"] = [s.extents[-1].evaluate({**env, "%kv_tiles": t}) for t in (0, 1)]
    assert cols == {"mma k": [64, 13], "max": [64, 16], "exp": [64, 16], "sum": [64, 16]}


def test_clamp_leaves_unmasked_programs_alone():
    """A program without a column mask comes back as it was (the same statements)."""
    mod = load_example(builtin_examples_dir() / "softmax.py").module
    kern = mod.make_softmax(mod.SoftmaxConfig(block_m=4))
    ck = compile_kernel(kern, plan_kernel(kern, TARGET, {"M": 37, "N": 1000}), TARGET)
    for seg in ck.loop_program.segments:
        assert clamp_masked_columns(seg.body, seg, ck.loop_program) is seg.body


@pytest.mark.parametrize("lsd", [(100, 77, 64), (1, 1, 64), (65, 3, 8), (0, 5, 8), (7, 0, 8),
                                 (128, 64, 64), (70, 129, 16), (64, 65, 64)])
def test_attention_matches_interpreter_and_numpy(lsd):
    L, S, D = lsd
    mod, kern, ck = _attention(L, S, D)
    rng = np.random.default_rng(L * 5 + S)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((L, D), (S, D), (S, D)))
    if L >= 4 and S >= 3:
        q[0, :] = np.inf  # scores ±inf / NaN: rows of NaN as numpy gives them
        k[S - 1, 0] = np.nan  # the last key (in the edge tile): NaN scores in every row
        q[1, :] = 0.0
        v[S // 2, 0] = np.inf
    arrays = {"Q": q, "K": k, "V": v, "O": np.zeros((L, D), np.float32)}
    want = interpret(kern, arrays)["O"]
    ref = mod.reference(Q=q, K=k, V=v)["O"]
    for threads in (1, 2):
        got = ck(Q=q, K=k, V=v, O=np.full((L, D), 5.0, np.float32), threads=threads)["O"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_attention_all_keys_masked_rows_are_nan():
    """Scores that are all -inf in a row (a query of -inf against positive keys): the row
    max stays -inf, exp(-inf - -inf) is NaN in every column, the output row NaN, as in the
    interpreter; the other rows are untouched by it."""
    L, S, D = 70, 77, 8
    _, kern, ck = _attention(L, S, D)
    rng = np.random.default_rng(3)
    q = rng.standard_normal((L, D)).astype(np.float32)
    k = np.abs(rng.standard_normal((S, D))).astype(np.float32) + 0.5
    v = rng.standard_normal((S, D)).astype(np.float32)
    q[2, :] = -np.inf
    q[66, :] = -np.inf  # a row of the edge query tile
    want = interpret(kern, {"Q": q, "K": k, "V": v, "O": np.zeros((L, D), np.float32)})["O"]
    got = ck(Q=q, K=k, V=v)["O"]
    assert np.isnan(want[2]).all() and np.isnan(got[2]).all() and np.isnan(got[66]).all()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
