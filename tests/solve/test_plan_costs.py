"""The cost model's pieces: legality, live ranges, layouts and bank conflicts, figures."""

from __future__ import annotations

import pytest
from planning_support import bindings, kernel, target

from planner.plan.decisions import LayoutChoice
from planner.solve import Decision, plan_kernel
from planner.solve.costs import (
    MAX_RECOMPUTE_CHAIN,
    Edge,
    Figures,
    Problem,
    build_problem,
    conflict_degree,
    layout_bytes,
    layout_candidates,
)

DENSE = LayoutChoice("dense")
BANKS = (32, 4)


def _edge(problem: Problem, producer_kind: str, consumer_kind: str | None = None) -> Edge:
    for e in problem.edges:
        if problem.values[e.value].kind == producer_kind and (
                consumer_kind is None or e.consumer_kind == consumer_kind):
            return e
    raise AssertionError(f"no {producer_kind} -> {consumer_kind} edge")


def test_bank_conflicts_of_column_reads() -> None:
    assert conflict_degree((32, 32), 4, DENSE, BANKS) == 32
    assert conflict_degree((32, 32), 4, LayoutChoice("padded", pad=1), BANKS) == 1
    assert conflict_degree((16, 24), 4, DENSE, BANKS) == 4
    assert conflict_degree((64,), 4, DENSE, BANKS) == 1  # rank 1: no columns
    swizzled = [c for c in layout_candidates((32, 32), 4, BANKS, True) if c.kind == "swizzled"]
    assert swizzled and conflict_degree((32, 32), 4, swizzled[0], BANKS) == 1


def test_layout_candidates_only_where_banks_and_column_reads_meet() -> None:
    assert layout_candidates((32, 32), 4, None, True) == [DENSE]
    assert layout_candidates((32, 32), 4, BANKS, False) == [DENSE]
    kinds = [c.kind for c in layout_candidates((32, 32), 2, BANKS, True)]
    assert kinds == ["dense", "padded", "padded", "swizzled"]  # +1 and +2 halves (one bank)


def test_padding_counts_toward_storage() -> None:
    assert layout_bytes((32, 16), 4, DENSE) == 2048
    assert layout_bytes((32, 16), 4, LayoutChoice("padded", pad=1)) == 32 * 17 * 4


def test_fusion_and_recompute_legality_reasons() -> None:
    p = build_problem(kernel("softmax"), target("x86-avx2"), bindings("softmax"))
    reduce_edge = _edge(p, "tile.reduce.max")
    assert "reduction's result cannot be fused" in reduce_edge.why_illegal(Decision.FUSED)
    assert reduce_edge.why_illegal(Decision.RECOMPUTED)
    load_edge = _edge(p, "tile.load")
    assert load_edge.legal(Decision.FUSED)  # recomputing a load is the same program
    assert "same program as fused" in load_edge.why_illegal(Decision.RECOMPUTED)

    g = build_problem(kernel("gemm"), target("x86-avx2"), bindings("gemm"))
    carried = _edge(g, "tile.mma", "loop.carry")
    assert carried.loop_carried
    assert "loop-carried" in carried.why_illegal(Decision.FUSED)
    assert carried.legal(Decision.VIRTUAL) and carried.legal(Decision.MATERIALIZED)

    a = build_problem(kernel("attention"), target("x86-avx2"), bindings("attention"))
    acc_in = next(e for e in a.edges if e.consumer_kind == "tile.mma" and e.operand == 2
                  and a.values[e.value].kind == "tile.full")
    assert acc_in.legal(Decision.FUSED)  # zeros evaluated into the mma's output: c = a @ b
    cross = _edge(a, "tile.load", "tile.transpose")
    assert cross.stage_distance == 1
    assert "pipeline stages" in cross.why_illegal(Decision.FUSED)
    assert a.values[cross.value].max_versions == 2


def test_live_ranges_of_a_loop_carry() -> None:
    p = build_problem(kernel("gemm"), target("x86-avx2"), bindings("gemm"))
    carry = next(v for v in p.values if v.kind == "loop.carry")
    in_loop = next(p.edges[i] for i in carry.edges if p.edges[i].consumer_kind == "tile.mma")
    after = next(p.edges[i] for i in carry.edges if p.edges[i].consumer_kind == "tile.store")
    yielded = _edge(p, "tile.mma", "loop.carry")
    loop_end = max(pt.index for pt in p.points.values() if pt.pipeline == "k_tiles")
    assert in_loop.span[0] == carry.def_point  # from the loop start ...
    assert yielded.span[1] == loop_end + 1  # ... the new value lives to the loop end
    assert after.span[0] == loop_end + 1  # the loop result is read after the loop
    load = _edge(p, "tile.load", "tile.mma")
    assert load.span == (p.values[load.value].def_point, p.values[load.value].def_point + 2)


def test_figures_share_global_bandwidth_and_aggregate_registers() -> None:
    x86 = Figures(target("x86-avx2"))
    assert x86.share(target("x86-avx2").resource("dram"), "worker") == 2
    assert x86.share(target("x86-avx2").resource("local"), "worker") == 1
    assert x86.register_home("worker")[1] == 512
    m2 = Figures(target("apple-m2"))
    # 512 B per thread x 32 threads of the one SIMD-group a launch guarantees
    assert m2.register_home("threadgroup")[1] == 512 * 32
    assert Figures(target("npu-systolic")).register_home("core") is None


def test_long_producer_chains_are_not_recomputed() -> None:
    from planning_support import chain_kernel

    short = build_problem(chain_kernel(MAX_RECOMPUTE_CHAIN - 2), target("x86-avx2"),
                          {"M": 16, "N": 16})
    long = build_problem(chain_kernel(MAX_RECOMPUTE_CHAIN + 2), target("x86-avx2"),
                         {"M": 16, "N": 16})
    last = short.edges[-1]
    assert last.legal(Decision.RECOMPUTED)
    assert dict(last.recompute)["recompute"] > dict(last.fused)["compute"]
    why = long.edges[-1].why_illegal(Decision.RECOMPUTED)
    assert why == f"its producer chain is longer than {MAX_RECOMPUTE_CHAIN} ops"


@pytest.mark.parametrize("name", ["softmax", "attention", "manual_gemm"])
def test_every_cost_term_is_attributed_to_an_edge(name: str) -> None:
    plan = plan_kernel(kernel(name), target("apple-m2"), bindings(name))
    per_edge = sum(e.total_cost for e in plan.edges)
    fixed = plan.breakdown.get("traffic", 0) + plan.breakdown.get("compute", 0) \
        + plan.breakdown.get("stalls", 0)
    assert per_edge <= plan.objective
    assert sum(plan.breakdown.values()) == plan.objective
    assert fixed > 0


def test_sync_rule_is_recorded_for_shared_threadgroup_memory() -> None:
    from planning_support import with_capacity

    t = with_capacity(target("apple-m2"), "thread_registers", 4)
    plan = plan_kernel(kernel("gemm"), t, bindings("gemm"))
    mat = [e for e in plan.edges if e.decision is Decision.MATERIALIZED]
    assert mat and all(e.resource == "threadgroup_memory" for e in mat)
    assert {e.sync for e in mat} == {"threadgroup_barrier"}
    assert plan.breakdown["barriers"] > 0
    x86 = plan_kernel(kernel("gemm"), target("x86-avx2"), bindings("gemm"))
    assert all(e.sync is None for e in x86.edges)  # coherent caches: no barrier
