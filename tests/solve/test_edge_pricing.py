"""Edge tiles are priced as the llvm-cpu backend runs them: remainder-sized work (issue 13).

The expected cycles are the catalog's throughputs over the work of every actual tile,
summed by hand here from the shapes: attention 100×77 with 64×64 tiles (query blocks of
64 and 36 rows, key tiles of 64 and 13 keys, the masked key columns rounded up to 16),
softmax 37×1000 in blocks of 4 rows, GEMM 300×200×130 in 128×128×256 tiles. The plan's
predicted per-element cost of attention 100×77 over 128×64 is near the measured ~1.1.
"""

from __future__ import annotations

import pytest

from planner.catalog import CatalogRegistry
from planner.examples import attention, gemm, softmax
from planner.ir import core
from planner.ir.expr import Const
from planner.ir.graph import dataflow_graph
from planner.realize.binding import bind_execution
from planner.realize.edges import (
    granule,
    granule_expr,
    mean_granule,
    mean_valid,
    valid,
    valid_expr,
)
from planner.solve import plan_kernel
from planner.solve.context import Context, op_cycles
from planner.solve.figures import Figures

TARGET = CatalogRegistry().get("x86-avx512")
ATTENTION = {"L": 100, "S": 77, "D": 64}


def _context(kern: core.Kernel, bindings: dict[str, int]) -> Context:
    env = dict(bindings)
    ctx = Context(kern, TARGET, Figures(TARGET), env, dataflow_graph(kern, env), {},
                  bind_execution(kern, TARGET, env))
    for op in kern.walk():
        if isinstance(op, core.ParallelOp):
            ctx.parallels[op.label] = op
        elif isinstance(op, core.LoopOp):
            ctx.loops[op.label] = op
    return ctx


def _priced(ctx: Context, kind: type[core.Op], instances: int, name: str | None = None
            ) -> list[float]:
    """Compute cycles of every ``kind`` op (named ``name``) over its ``instances``."""
    return [op_cycles(ctx, d, "core")[0] * instances for d in ctx.nodes.values()
            if isinstance(d["op"], kind)
            and (name is None or d["op"].results[0].name_hint == name)]


def _attention() -> core.Kernel:
    return attention.make_attention(attention.AttentionConfig(64, 64, 2))


def test_shared_edge_arithmetic():
    """The valid part of a tile, its granule rounding, their means over the tiles, and
    the lowering's expressions of the same."""
    assert [valid(64, 77, o) for o in (0, 64, 128)] == [64, 13, 0]
    assert [granule(n, 64) for n in (0, 1, 13, 16, 17, 60, 64)] == [0, 16, 16, 16, 32, 64, 64]
    assert mean_valid(64, 77) == (64 + 13) / 2
    assert mean_valid(4, 37) == 37 / 10
    assert mean_granule(64, 77) == (64 + 16) / 2
    env: dict[str, int] = {}
    assert valid_expr(Const(64), Const(77), Const(64)).evaluate(env) == 13
    assert granule_expr(Const(13), Const(64)).evaluate(env) == 16


def test_attention_mmas_price_the_actual_tiles():
    """q·kᵀ runs m × n × 64 on query rows m ∈ {64, 36} and keys n ∈ {64, 13}; p·v runs
    m × 64 × k, k ∈ {64, 13}: each prices 2·Σ m·n·k / mma throughput over the 4 tiles."""
    ctx = _context(_attention(), ATTENTION)
    work = sum(m * n * 64 for m in (64, 36) for n in (64, 13))
    want = 2.0 * work / TARGET.costs.mma
    assert _priced(ctx, core.MmaOp, 2 * 2) == pytest.approx([want, want])


def test_attention_exp_runs_the_masked_columns_rounded_to_16():
    """p = exp(s - m) on the last key tile runs 16 of 64 columns (13 rounded up)."""
    ctx = _context(_attention(), ATTENTION)
    work = sum(m * n for m in (64, 36) for n in (64, 16))
    want = work / TARGET.costs.transcendental
    assert _priced(ctx, core.UnaryOp, 2 * 2, "p") == pytest.approx([want])


def test_softmax_prices_the_rows_stored():
    """The last block of 4 rows stores 1 of 37: exp runs 37·1000 elements in all."""
    kern = softmax.make_softmax(softmax.SoftmaxConfig(block_m=4))
    ctx = _context(kern, {"M": 37, "N": 1000})
    want = 37 * 1000 / TARGET.costs.transcendental
    assert _priced(ctx, core.UnaryOp, 10) == pytest.approx([want])


def test_gemm_mma_prices_m_n_k():
    kern = gemm.make_gemm(gemm.GemmConfig(128, 128, 256, 2))
    ctx = _context(kern, {"M": 300, "N": 200, "K": 130})
    want = 2.0 * 300 * 200 * 130 / TARGET.costs.mma
    assert _priced(ctx, core.MmaOp, 3 * 2) == pytest.approx([want])


def _per_element(kern: core.Kernel, bindings: dict[str, int], elements: int) -> float:
    return plan_kernel(kern, TARGET, bindings).objective / elements


def test_attention_edge_per_element_cost_is_near_the_measured_ratio():
    """Measured on the CPU backend: 100×77 costs ~1.1× the per-element time of 128×64;
    whole-tile pricing predicted ~1.9."""
    odd = _per_element(_attention(), ATTENTION, 100 * 77)
    near = _per_element(_attention(), {"L": 128, "S": 64, "D": 64}, 128 * 64)
    assert 1.0 <= odd / near <= 1.25


def test_a_re_derivation_is_priced_on_whole_tiles():
    """What a consumer recomputes runs whole tiles in the lowering (it clamps buffer
    tiles): ``whole`` prices the 64×64×64 tile, the node itself the mean tile."""
    ctx = _context(_attention(), ATTENTION)
    (d, _) = [d for d in ctx.nodes.values() if isinstance(d["op"], core.MmaOp)]
    whole = op_cycles(ctx, d, "core", whole=True)[0]
    assert whole == pytest.approx(2.0 * 64 ** 3 / TARGET.costs.mma)
    assert op_cycles(ctx, d, "core")[0] == pytest.approx(2.0 * 50 * 38.5 * 64 / TARGET.costs.mma)
