"""Honest proof statuses: proved by something, assumed visibly, unknown with its time,
and a prover exception reported as a bug (issue: proofs that prove).

The z3 path of the int64 view-addressing proof is exercised on symbolic extents (the
declared bounds decide it), its arithmetic fast path is compared with z3 on the same
questions, and disabling z3 turns the symbolic verdicts into ``unknown`` (a mutation
check: the tests that cover them would fail).
"""

from __future__ import annotations

import dataclasses

import pytest
import z3

from planner.catalog import CatalogRegistry
from planner.errors import PlannerError
from planner.ir.examples import builtin_examples_dir, load_example
from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    f32,
    parallel,
    tile_kernel,
)
from planner.ir.frontend import shape as shape_
from planner.plan.plan_io import format_plan_table, proof_caveats
from planner.prove import proofs
from planner.prove.proofs import prove_kernel
from planner.solve import plan_kernel

INT64_MAX = 2**63 - 1


@pytest.fixture(scope="module")
def x86():
    return CatalogRegistry().get("x86-avx2")


@tile_kernel("copy_rows")
def copy_rows(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
    g = axis("block_m", ceil_div(X.extent(0), 4))
    m, n = axis("m", 4), axis("n", X.extent(1))
    for nest in parallel(shape_(g)):
        r0 = nest.index(g) * 4
        Y(coord(r0, 0), shape_(m, n)).store(X[coord(r0, 0), shape_(m, n)])


def int64_views(report) -> list[proofs.ProofResult]:
    return [r for r in report.results if r.name == "int64" and "%" in r.subject
            and "memory" not in r.subject]


def test_s14_declared_bounds_let_z3_prove_view_addressing(x86):
    # (65,536 x 65,536 - 1) x 4 B < 2**63: provable, and only by reasoning over symbols
    report = prove_kernel(copy_rows, x86, symbol_bounds={"M": (1, 65536), "N": (1, 65536)})
    views = int64_views(report)
    assert len(views) == 2
    assert all(r.status == "proved" and r.detail.startswith("z3:") for r in views)


def test_s14_bounds_that_allow_overflow_leave_an_assumption_with_its_witness(x86):
    big = {"M": (1, 2**40), "N": (1, 2**40)}
    report = prove_kernel(copy_rows, x86, symbol_bounds=big)
    for r in int64_views(report):
        assert r.status == "assumed", r.detail
        cex = r.counterexample
        m, n = cex["M"], cex["N"]
        assert 1 <= m <= 2**40 and 1 <= n <= 2**40
        assert 0 <= cex["x0"] < m and 0 <= cex["x1"] < n
        assert cex["byte_offset"] == (cex["x0"] * n + cex["x1"]) * 4 > INT64_MAX


def test_mutation_without_z3_the_symbolic_verdicts_are_unknown(x86, monkeypatch):
    """The proved verdict above comes from z3: with z3 answering nothing, the same
    questions are unknown (with the time limit), never proved."""
    monkeypatch.setattr(proofs, "check", lambda solver, limit_ms: z3.unknown)
    report = prove_kernel(copy_rows, x86, symbol_bounds={"M": (1, 65536), "N": (1, 65536)},
                          time_limit_ms=321)
    views = int64_views(report)
    assert views and all(r.status == "unknown" for r in views)
    assert all("within 321 ms" in r.detail for r in views)


@pytest.mark.parametrize(("m", "n"), [(1000, 700), (2**31, 2**31), (2**30, 2**33),
                                      (1, 2**61), (2**40, 2**20), (3, 5)])
def test_s14_fast_path_and_z3_agree_on_bound_extents(x86, m: int, n: int):
    """The arithmetic shortcuts (the obvious overflow, the whole view's last byte) and
    z3's search over the window give the same verdict on the same question."""
    bindings = {"M": m, "N": n}
    prover = proofs._Prover(copy_rows, x86, bindings, {}, 2000, ())
    ops = [op for op in copy_rows.walk() if op.SPEC.name in ("tile.load", "tile.store")]
    assert len(ops) == 2
    for op in ops:
        fast, _, _ = prover.view_addressing(op)
        vt = op.view.type
        window = op.shape if op.SPEC.name == "tile.load" else op.tile.type.shape
        slow, _, cex = prover.window_addressing(op, vt, window, 4, prover.binding.context(op))
        assert fast == slow, (m, n, op.SPEC.name)
        # independently: the last element of the view is at (m*n - 1) * 4 bytes
        assert (slow == "refuted") == ((m * n - 1) * 4 > INT64_MAX)
        if slow == "refuted":
            assert cex["byte_offset"] > INT64_MAX


def test_a_prover_exception_is_a_bug_report_naming_the_proof(x86, monkeypatch):
    def broken(self):
        raise ZeroDivisionError("integer division or modulo by zero")

    monkeypatch.setattr(proofs._Prover, "check_capacity", broken)
    kernel = load_example(builtin_examples_dir() / "softmax.py").kernel
    with pytest.raises(PlannerError) as err:
        plan_kernel(kernel, x86, {"M": 64, "N": 64})
    assert err.value.kind == "internal"
    text = str(err.value)
    assert "capacity proof" in text and "ZeroDivisionError" in text and "prover bug" in text
    with pytest.raises(PlannerError) as err:
        prove_kernel(kernel, x86, {"M": 64, "N": 64})
    assert err.value.kind == "internal"


def test_a_plan_reports_its_assumptions_and_unknown_proofs(x86):
    kernel = load_example(builtin_examples_dir() / "softmax.py").kernel
    plan = plan_kernel(kernel, x86, {"M": 64, "N": 64})
    assert plan.status.value == "optimal" and proof_caveats(plan) == ""
    assert all(p.status == "proved" for p in plan.proofs)
    proofs_ = list(plan.proofs)
    proofs_[0] = dataclasses.replace(proofs_[0], status="assumed")
    proofs_[1] = dataclasses.replace(proofs_[1], status="unknown")
    caveated = dataclasses.replace(plan, proofs=tuple(proofs_))
    assert proof_caveats(caveated) == "1 assumption / 1 unknown proof"
    assert "status optimal, with 1 assumption / 1 unknown proof" in format_plan_table(caveated)
