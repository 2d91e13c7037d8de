"""CP-SAT's plan is the optimum: exhaustive enumeration agrees (S3), baselines cost more."""

from __future__ import annotations

import pytest
from manual_gemm import GemmConfig, make_manual_gemm
from planning_support import (
    bindings,
    exhaustive_optimum,
    kernel,
    small_dag,
    target,
    with_capacity,
)

from planner.ir.frontend import mem
from planner.solve import Baseline, Policy, Status, plan_kernel
from planner.solve.baselines import baseline_restrictions
from planner.solve.costs import build_problem

SMALL = [
    ("softmax", "x86-avx2", Policy.DEFAULT),
    ("softmax", "apple-m2", Policy.EXPENSIVE_ONLY),
    ("softmax", "nvidia-h100", Policy.DEFAULT),
    ("gemm", "x86-avx2", Policy.DEFAULT),
    ("gemm", "apple-m2", Policy.DEFAULT),
    ("manual_gemm", "x86-avx2", Policy.DEFAULT),
    ("manual_gemm", "apple-m2", Policy.EXPENSIVE_ONLY),
    ("manual_gemm", "nvidia-h100", Policy.DEFAULT),
]


@pytest.mark.parametrize(("name", "target_name", "policy"), SMALL,
                         ids=[f"{n}-{t}-{p.value}" for n, t, p in SMALL])
def test_s3_plan_matches_exhaustive_enumeration(name: str, target_name: str,
                                                policy: Policy) -> None:
    t = target(target_name)
    plan = plan_kernel(kernel(name), t, bindings(name), policy=policy)
    best, visited = exhaustive_optimum(build_problem(kernel(name), t, bindings(name), policy))
    assert visited > 0 and best is not None
    assert plan.status is Status.OPTIMAL
    assert plan.objective == best


def test_exhaustive_agrees_when_registers_bind() -> None:
    # 48 B per thread x 32 threads: one 1,120 B softmax row block fits, two do not.
    t = with_capacity(target("apple-m2"), "thread_registers", 48)
    plan = plan_kernel(kernel("softmax"), t, bindings("softmax"))
    best, _ = exhaustive_optimum(build_problem(kernel("softmax"), t, bindings("softmax")))
    assert plan.objective == best
    regs = next(p for p in plan.peaks if p.resource == "thread_registers")
    assert regs.peak_bytes <= regs.capacity == 1536


def test_exhaustive_agrees_when_versions_trade_against_capacity() -> None:
    t = with_capacity(target("apple-m2"), "threadgroup_memory", 6400)
    k = make_manual_gemm(GemmConfig(), resource=mem.shared)
    plan = plan_kernel(k, t, bindings("manual_gemm"))
    best, _ = exhaustive_optimum(build_problem(k, t, bindings("manual_gemm")))
    assert plan.objective == best
    assert sorted(m.versions for m in plan.memories) == [1, 2]


def test_auto_memory_home_is_chosen_by_capacity_and_cost() -> None:
    # With threadgroup memory for only one version of one operand, an auto_ Memory may
    # live in device memory (a legal, accessible home with room): the planner trades the
    # device traffic against the versions' stalls, and enumeration agrees.
    t = with_capacity(target("apple-m2"), "threadgroup_memory", 2400)
    k = kernel("manual_gemm")
    plan = plan_kernel(k, t, bindings("manual_gemm"))
    best, _ = exhaustive_optimum(build_problem(k, t, bindings("manual_gemm")))
    assert plan.status is Status.OPTIMAL and plan.objective == best
    assert "device_memory" in {m.resource for m in plan.memories}
    shared = make_manual_gemm(GemmConfig(), resource=mem.shared)
    assert plan_kernel(shared, t, bindings("manual_gemm")).status is Status.INFEASIBLE


@pytest.mark.parametrize("seed", [2, 4, 5, 6])
def test_exhaustive_agrees_on_random_dags(seed: int) -> None:
    k = small_dag(seed, ops=5)  # 9-10 edges; registers hold two of its 128 B tiles
    t = with_capacity(target("x86-avx2"), "registers", 256)
    plan = plan_kernel(k, t, {"M": 16, "N": 16})
    best, visited = exhaustive_optimum(build_problem(k, t, {"M": 16, "N": 16}))
    assert visited > 0
    assert plan.objective == best


@pytest.mark.parametrize("baseline", [Baseline.ALL_MATERIALIZE, Baseline.GREEDY_FUSION])
def test_baselines_are_optimal_within_their_restrictions(baseline: Baseline) -> None:
    t = target("apple-m2")
    k, b = kernel("softmax"), bindings("softmax")
    plan = plan_kernel(k, t, b, baseline=baseline)
    problem = build_problem(k, t, b)
    best, _ = exhaustive_optimum(problem, baseline_restrictions(problem, baseline))
    assert plan.objective == best


@pytest.mark.parametrize("name", ["softmax", "gemm", "manual_gemm", "layernorm", "gelu",
                                  "attention"])
@pytest.mark.parametrize("target_name", ["x86-avx2", "apple-m2"])
def test_plan_never_costs_more_than_a_feasible_baseline(name: str, target_name: str) -> None:
    t = target(target_name)
    best = plan_kernel(kernel(name), t, bindings(name))
    assert best.status is Status.OPTIMAL
    for baseline in Baseline:
        other = plan_kernel(kernel(name), t, bindings(name), baseline=baseline)
        if other.status is not Status.INFEASIBLE:
            assert best.objective <= other.objective, baseline
