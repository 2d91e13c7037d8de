"""Capacity, versions and infeasibility explanations (S13, S17, S18)."""

from __future__ import annotations

import dataclasses

import pytest
from manual_gemm import GemmConfig, make_manual_gemm
from planning_support import bindings, kernel, target, with_capacity

from planner.errors import PlannerError
from planner.ir.frontend import mem
from planner.solve import Baseline, Status, plan_kernel

# The example's Memory is ``auto_``: under pressure the planner may move it to device
# memory.  These tests pin threadgroup pressure, so they ask for shared explicitly.
SHARED_GEMM = make_manual_gemm(GemmConfig(), resource=mem.shared)


def _memory_versions(capacity: int) -> tuple[Status, tuple[int, ...], tuple[str, ...]]:
    t = with_capacity(target("apple-m2"), "threadgroup_memory", capacity)
    plan = plan_kernel(SHARED_GEMM, t, bindings("manual_gemm"))
    return plan.status, tuple(m.versions for m in plan.memories), plan.explanation


def test_s18_shrinking_capacity_lowers_versions_before_infeasibility() -> None:
    # As: 32x17 f32 = 2,176 B, Bs: 16x32 f32 = 2,048 B; the pipeline wants 2 versions each
    seen = [_memory_versions(c) for c in (32768, 8448, 8447, 6400, 4224, 4223)]
    statuses = [s for s, _, _ in seen]
    totals = [sum(v) for _, v, _ in seen]
    assert statuses[:-1] == [Status.OPTIMAL] * 5 and statuses[-1] is Status.INFEASIBLE
    assert totals[:5] == [4, 4, 3, 3, 2]  # versions go first ...
    assert seen[-1][2]  # ... and only then the plan, with an explanation


def test_s18_versions_report_the_stall_they_cost() -> None:
    roomy = plan_kernel(SHARED_GEMM, target("apple-m2"), bindings("manual_gemm"))
    tight = plan_kernel(SHARED_GEMM,
                        with_capacity(target("apple-m2"), "threadgroup_memory", 4224),
                        bindings("manual_gemm"))
    assert roomy.breakdown.get("stalls", 0) == 0
    assert tight.breakdown["stalls"] > 0
    assert tight.objective > roomy.objective


def test_s17_infeasible_manual_gemm_names_the_capacity_and_the_numbers() -> None:
    k = make_manual_gemm(GemmConfig(block_k=128), resource=mem.shared)
    plan = plan_kernel(k, target("apple-m2"), {"M": 100, "N": 70, "K": 300})
    assert plan.status is Status.INFEASIBLE
    assert plan.edges == ()
    text = "\n".join(plan.explanation)
    assert "%As 16,512 B + %Bs 16,384 B = 32,896 B > threadgroup_memory capacity 32,768 B" \
        in text
    assert "pipeline k_tiles" in text


def test_infeasible_baseline_explains_register_capacity() -> None:
    plan = plan_kernel(kernel("softmax"), target("x86-avx2"), bindings("softmax"),
                       baseline=Baseline.ALL_VIRTUAL)
    assert plan.status is Status.INFEASIBLE
    text = "\n".join(plan.explanation)
    assert "1,120 B > registers capacity 512 B" in text
    assert "baseline all-virtual" in text


def test_s6_refuted_access_makes_every_plan_infeasible_and_says_which() -> None:
    # npu-systolic's core reaches DRAM only by copy_async: without its copy engines to
    # stage the tiles (tests/solve/test_npu_systolic.py has them) the access is refuted
    npu = dataclasses.replace(target("npu-systolic"), copy_engines=())
    plan = plan_kernel(kernel("gemm"), npu, bindings("gemm"))
    assert plan.status is Status.INFEASIBLE and not plan.edges
    text = "\n".join(plan.explanation)
    assert "proof can_access refuted: tile.load %A at core → weight_dram (read)" in text
    assert "(allowed: copy_async)" in text


def test_registers_too_small_push_values_out_and_say_why() -> None:
    plan = plan_kernel(kernel("gemm"), target("x86-avx2"), bindings("gemm"))
    acc = [e for e in plan.edges if e.producer_kind == "tile.mma"]
    assert acc and all(e.decision.value == "materialized" and e.resource == "local"
                       for e in acc)
    carried = [e for e in plan.edges if e.producer_kind == "loop.carry"]
    assert any("registers hold 512 B < 4,096 B" in e.reason for e in carried)


def test_peaks_never_exceed_capacity_and_name_holders() -> None:
    for name in ("softmax", "attention", "manual_gemm", "layernorm"):
        for target_name in ("x86-avx2", "apple-m2", "nvidia-h100"):
            plan = plan_kernel(kernel(name), target(target_name), bindings(name))
            for peak in plan.peaks:
                assert peak.capacity is None or peak.peak_bytes <= peak.capacity
                assert sum(b for _, b in peak.holders) == peak.peak_bytes


def test_unbound_symbols_are_named() -> None:
    with pytest.raises(PlannerError, match=r"unbound symbol\(s\) M, N") as info:
        plan_kernel(kernel("softmax"), target("x86-avx2"), {})
    assert info.value.kind == "unbound"


def test_partial_bindings_name_only_the_missing_symbol() -> None:
    with pytest.raises(PlannerError, match=r"unbound symbol\(s\) K "):
        plan_kernel(kernel("gemm"), target("x86-avx2"), {"M": 64, "N": 64})
