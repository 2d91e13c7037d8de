"""The notebook API in ``planner/__init__.py``: load, plan, compare, lower, run."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

import planner
from planner.errors import PlannerError
from planner.plan.decisions import Decision, EdgePlan, MaterializationPlan, Status

SOFTMAX = {"M": 37, "N": 29}
GEMM = {"M": 37, "N": 29, "K": 19}


@pytest.fixture(scope="module")
def softmax_plan() -> MaterializationPlan:
    return planner.plan("softmax", bindings=SOFTMAX)


@pytest.fixture(scope="module")
def gemm_plan() -> MaterializationPlan:
    return planner.plan("gemm", bindings=GEMM)


def test_import_planner_is_light() -> None:
    code = ("import sys, planner; print(sorted(m for m in ('ortools','z3','llvmlite',"
            "'fastapi','numpy','networkx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_load_example_and_override_bindings() -> None:
    loaded = planner.load("softmax", {"N": 29})
    assert loaded.kernel.name == "softmax"
    assert loaded.bindings["N"] == 29 and "M" in loaded.bindings
    with pytest.raises(PlannerError):
        planner.load("no-such-kernel")


def test_plan_returns_feasible_plan(softmax_plan: MaterializationPlan,
                                    gemm_plan: MaterializationPlan) -> None:
    for p, name in ((softmax_plan, "softmax"), (gemm_plan, "gemm")):
        assert p.kernel == name and p.target == "x86-avx2"
        assert p.status in (Status.OPTIMAL, Status.FEASIBLE)
    assert dict(softmax_plan.bindings) == SOFTMAX


def test_plan_accepts_kernel_object_and_baseline() -> None:
    loaded = planner.load("softmax")
    p = planner.plan(loaded.kernel, "x86-avx2", SOFTMAX, baseline="all-materialize")
    assert p.baseline is not None and p.baseline.value == "all-materialize"
    assert all(e.decision is Decision.MATERIALIZED for e in p.edges)


def test_plan_runs_the_verifier() -> None:
    with pytest.raises(PlannerError) as exc:
        planner.plan("softmax", bindings={"M": -3, "N": 29})
    assert exc.value is not None


def test_compare_plans_and_kernel(softmax_plan: MaterializationPlan) -> None:
    other = planner.plan("softmax", bindings=SOFTMAX, baseline="all-materialize")
    c = planner.compare(softmax_plan, other)
    assert c.labels == ("optimal", "all-materialize")
    assert c.totals[0] is not None and c.totals[1] is not None
    assert c.totals[0] <= c.totals[1]
    c2 = planner.compare("softmax", bindings=SOFTMAX, baselines=("greedy-fusion",))
    assert c2.labels == ("optimal", "greedy-fusion")
    text = repr(c)  # one line with each plan's estimate, not a dataclass dump
    assert "\n" not in text and len(text) < 300
    assert f"optimal {c.totals[0]:,} ns" in text and f"all-materialize {c.totals[1]:,} ns" in text
    assert str(c).splitlines()[0].startswith("softmax")  # str is the comparison table


def test_lower_forms(softmax_plan: MaterializationPlan) -> None:
    loaded = planner.load("softmax")
    loops = planner.lower(loaded, softmax_plan)
    assert loops.startswith("loop program softmax")
    llvm_ir = planner.lower(loaded, softmax_plan, emit="llvm")
    assert "define" in llvm_ir
    with pytest.raises(PlannerError):
        planner.lower(loaded, softmax_plan, emit="msl")


def test_plan_and_lower_are_still_the_subpackages() -> None:
    import planner.lower.backends
    from planner.plan import plan_to_json

    assert planner.plan.Status is Status
    assert planner.lower.backends.backend_named("cpu").name == "cpu"
    assert callable(planner.plan) and callable(planner.lower)
    assert callable(plan_to_json)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_run_softmax_matches_numpy(softmax_plan: MaterializationPlan) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((SOFTMAX["M"], SOFTMAX["N"])).astype(np.float32)
    out = planner.run("softmax", softmax_plan, inputs={"X": x})
    assert set(out) == {"Y"}
    np.testing.assert_allclose(out["Y"], _softmax(x.astype(np.float64)), rtol=1e-5,
                               atol=1e-6)


def test_run_gemm_matches_numpy(gemm_plan: MaterializationPlan) -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((GEMM["M"], GEMM["K"])).astype(np.float32)
    b = rng.standard_normal((GEMM["K"], GEMM["N"])).astype(np.float32)
    before = a.copy()
    out = planner.run("gemm", gemm_plan, inputs={"A": a, "B": b})
    np.testing.assert_allclose(out["C"], a.astype(np.float64) @ b.astype(np.float64),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(a, before)  # inputs are not written


def test_run_without_plan_or_inputs() -> None:
    out = planner.run("softmax", bindings=SOFTMAX, check=True)
    assert out["Y"].shape == (SOFTMAX["M"], SOFTMAX["N"])
    np.testing.assert_allclose(out["Y"].sum(axis=1), 1.0, rtol=1e-5)


def test_repr_is_one_short_line(softmax_plan: MaterializationPlan) -> None:
    text = repr(softmax_plan)
    assert len(text) < 300 and "\n" not in text
    assert softmax_plan.status.value in text
    assert "softmax" in text and "x86-avx2" in text
    counts = softmax_plan.decision_counts()
    assert f"V{counts[Decision.VIRTUAL]} F{counts[Decision.FUSED]}" in text


def test_repr_of_infeasible_plan(softmax_plan: MaterializationPlan) -> None:
    bad = dataclasses.replace(softmax_plan, status=Status.INFEASIBLE,
                              explanation=("registers overflow",))
    text = repr(bad)
    assert len(text) < 300 and "infeasible" in text


def test_repr_html_escapes_names(softmax_plan: MaterializationPlan) -> None:
    edge = dataclasses.replace(softmax_plan.edges[0], edge_id="<script>x</script> -> y",
                               reason="a < b & c")
    evil = dataclasses.replace(softmax_plan, kernel="<b>k</b>",
                               edges=(edge, *softmax_plan.edges[1:]))
    html = evil._repr_html_()
    assert "<script>" not in html and "<b>k" not in html
    assert "&lt;script&gt;" in html and "&lt;b&gt;k" in html and "a &lt; b &amp; c" in html
    assert html.count("<tr>") >= len(evil.edges) + 1
    assert isinstance(edge, EdgePlan)
