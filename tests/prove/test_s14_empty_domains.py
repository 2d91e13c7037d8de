"""S14, empty domains: an empty logical domain has no address events, so its map
arithmetic is never evaluated; known zero factors come first; an empty allocation
still never bypasses an explicit resource constraint.

Two kernels (``s14_kernels/``) carry the issue's reports:

* ``unused_empty_memory``: an unused Memory ``[4, N] stride [ceildiv(64, N), 1]`` at
  ``N = 0``.  The verifier, the interpreter, the z3 proofs (``check``), the planner,
  the loop program and both backends (CPU; Metal in the emulator) must all work
  without ever dividing by zero.
* ``nonempty_zero_divisor``: a Memory ``[4, 4] stride [4 * ceildiv(N, N), 1]``, whose
  domain does not depend on ``N``; at ``N = 0`` its address map divides by zero, which
  is an S14 error naming the memory, the stride and the symbol value on every path,
  never a traceback.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from toolchain import needs_clang

from planner.catalog import CatalogRegistry
from planner.cli import main
from planner.errors import PlannerError
from planner.ir.expr import ceil_div, mul, sym
from planner.ir.frontend import (
    TensorView,
    axis,
    coord,
    dims,
    f32,
    layout,
    mem,
    memory,
    parallel,
    shape,
    stride,
    tile_kernel,
)
from planner.ir.interpreter import interpret, random_inputs
from planner.ir.layout import strided
from planner.ir.load import load_kernel
from planner.ir.verify import collect_diagnostics, verify
from planner.lower import build_loop_program, compile_kernel
from planner.lower.metal.emulator import clang_available
from planner.prove import prove_kernel, z3_layout
from planner.prove.z3_exprs import SymbolSpace
from planner.solve import Status, plan_kernel

KERNELS = Path(__file__).resolve().parent / "s14_kernels"
UNUSED = KERNELS / "unused_empty_memory.py"
NONEMPTY = KERNELS / "nonempty_zero_divisor.py"
EMPTY = {"M": 16, "N": 0}
TARGETS = ("x86-avx2", "apple-m2")
N = sym("N")



def _target(name: str):
    return CatalogRegistry().get(name)


def _run_cpu(kernel, plan, target, bindings):
    inputs = random_inputs(kernel, bindings, 0)
    want = interpret(kernel, inputs, bindings)
    got = compile_kernel(kernel, plan, target)({k: v.copy() for k, v in inputs.items()},
                                               bindings=bindings)
    return got, want


def _run_metal(kernel, plan, target, bindings):
    from planner.lower.metal.runtime import run_msl

    inputs = random_inputs(kernel, bindings, 0)
    want = interpret(kernel, inputs, bindings)
    return run_msl(kernel, plan, target, inputs, bindings), want


# --------------------------------------------------------------------------- (a) unused


@pytest.mark.parametrize("target_name", TARGETS)
def test_s14_unused_empty_memory_never_divides_by_zero(target_name: str) -> None:
    kernel = load_kernel(str(UNUSED)).kernel
    target = _target(target_name)
    verify(kernel, EMPTY)
    # check: every proof holds; the Memory's storage is 0 B, its layout is trivial
    report = prove_kernel(kernel, target, EMPTY)
    assert report.ok, report.diagnostics()
    int64 = [r for r in report.by_name("int64") if r.subject.startswith("memory")]
    assert len(int64) == 1 and "0 B of storage" in int64[0].detail
    for name in ("injectivity", "bounds"):
        (r,) = report.by_name(name)
        assert r.status == "proved" and "empty domain" in r.detail
    # plan: optimal, and every proof it records is proved (no "prover failed")
    plan = plan_kernel(kernel, target, EMPTY)
    assert plan.status is Status.OPTIMAL
    assert plan.proofs and all(p.status == "proved" for p in plan.proofs), plan.proofs
    # the loop program does not allocate it
    program = build_loop_program(kernel, plan, target)
    assert [b.name for b in program.buffers if b.role == "memory"] == []
    assert any("has no loads or stores: not allocated" in n for n in program.notes)
    # the interpreter never evaluates the stride either
    inputs = random_inputs(kernel, EMPTY, 0)
    assert interpret(kernel, inputs, EMPTY)["Y"].shape == (16, 0)


def test_s14_unused_empty_memory_runs_on_the_cpu_backend() -> None:
    kernel = load_kernel(str(UNUSED)).kernel
    target = _target("x86-avx2")
    for plan_at in (EMPTY, {"M": 16, "N": 8}):  # one compiled kernel serves every shape
        plan = plan_kernel(kernel, target, plan_at)
        for run_at in (EMPTY, {"M": 16, "N": 8}):
            got, want = _run_cpu(kernel, plan, target, run_at)
            np.testing.assert_array_equal(got["Y"], want["Y"])


@needs_clang
def test_s14_unused_empty_memory_runs_in_the_metal_emulator() -> None:
    kernel = load_kernel(str(UNUSED)).kernel
    target = _target("apple-m2")
    for plan_at in (EMPTY, {"M": 16, "N": 8}):
        plan = plan_kernel(kernel, target, plan_at)
        for run_at in (EMPTY, {"M": 16, "N": 8}):
            got, want = _run_metal(kernel, plan, target, run_at)
            np.testing.assert_array_equal(got["Y"], want["Y"])


CLI_OK = [
    ("check", "--target", "x86-avx2"),
    ("check", "--target", "apple-m2"),
    ("plan",),
    ("plan", "--target", "apple-m2"),
    ("lower",),
    ("interpret",),
    ("run", "--check", "--repeat", "1"),
    ("run", "--target", "apple-m2", "--check"),
]


@pytest.mark.parametrize("argv", CLI_OK, ids=[" ".join(a) for a in CLI_OK])
def test_s14_unused_empty_memory_on_the_command_line(argv: tuple[str, ...],
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    if "apple-m2" in argv and argv[0] == "run" and not clang_available():
        pytest.skip("clang-19 is not installed: the Metal emulator cannot run")
    name, *rest = argv
    rc = main([name, str(UNUSED), *rest, "--bind", "N=0"])
    out, err = capsys.readouterr()
    assert rc == 0, (out, err)
    assert "Traceback" not in err and "ZeroDivisionError" not in out + err
    assert "prover failed" not in out and "internal error" not in err
    if name == "check":
        assert "all proved" in out
    if name == "plan":
        assert "status optimal" in out


def test_s14_used_memory_emptied_at_run_time_never_divides_by_zero() -> None:
    """The same layout, stored and loaded, planned at N = 8 and run at N = 0: the
    lowering's storage size meets the empty domain before the stride (S14)."""

    @tile_kernel("s14_used_then_empty")
    def kernel(X: TensorView[f32, dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 4)
        n = X.extent(1)
        for nest in parallel(shape(g)):
            r0 = nest.index(g) * 4
            buf = memory[f32](layout(shape(4, n), stride(ceil_div(64, n), 1)))
            buf.store(X[coord(r0, 0), shape(4, n)])
            Y(coord(r0, 0), shape(4, n)).store(buf.load())

    cpu = _target("x86-avx2")
    plan = plan_kernel(kernel, cpu, {"M": 16, "N": 8})
    for run_at in (EMPTY, {"M": 16, "N": 8}):
        got, want = _run_cpu(kernel, plan, cpu, run_at)
        np.testing.assert_array_equal(got["Y"], want["Y"])
    if clang_available():
        m2 = _target("apple-m2")
        plan = plan_kernel(kernel, m2, {"M": 16, "N": 8})
        for run_at in (EMPTY, {"M": 16, "N": 8}):
            got, want = _run_metal(kernel, plan, m2, run_at)
            np.testing.assert_array_equal(got["Y"], want["Y"])


def test_s14_empty_allocation_with_a_zero_divisor_still_checks_its_resource_constraint(
        ) -> None:
    # apple-m2 has no private home for a threadgroup-owned Memory: even an empty,
    # unused one whose stride would divide by zero is refused, by the constraint
    @tile_kernel("s14_empty_private")
    def kernel(X: TensorView[f32, dims("M", "N")]):
        g = axis("g", 4)
        n = X.extent(1)
        for nest in parallel(shape(g)):
            spare = memory[f32](layout(shape(4, n), stride(ceil_div(64, n), 1)),  # noqa: F841
                                mem.private_)
            r0 = nest.index(g) * 4
            X(coord(r0, 0), shape(4, 4)).store(X[coord(r0, 0), shape(4, 4)] * 2.0)

    m2 = _target("apple-m2")
    verify(kernel, EMPTY)
    report = prove_kernel(kernel, m2, EMPTY)
    assert [r.name for r in report.refuted] == ["factorization"]
    with pytest.raises(PlannerError, match="no legal home"):
        build_loop_program(kernel, None, m2)


def test_s14_empty_domain_storage_is_zero_before_any_stride_is_evaluated() -> None:
    lay = strided([4, N], [ceil_div(64, N), 1])
    at0 = {"N": 0}
    assert lay.is_empty(at0) and not lay.is_empty({"N": 8})
    assert lay.storage_elements(at0) == 0
    assert lay.offsets(at0).shape == (4, 0)
    assert lay.undefined_terms(at0) == []
    assert lay.span().evaluate(at0) == 0  # the symbolic size the lowering evaluates
    assert lay.span().evaluate({"N": 8}) == lay.storage_elements({"N": 8}) == 32
    # known zero factors first: a zero factor wins over one that divides by zero
    assert mul(N, ceil_div(64, N)).evaluate(at0) == 0
    assert mul(ceil_div(64, N), N).evaluate(at0) == 0
    assert mul(ceil_div(64, N), N).substitute(at0) == mul(0)
    with pytest.raises(ZeroDivisionError):
        mul(ceil_div(64, N), sym("M")).evaluate({"N": 0, "M": 3})
    # the z3 helpers: storage 0, both layout proofs trivial
    space = SymbolSpace(at0)
    assert space.is_concrete([*lay.shape, *lay.strides])
    assert z3_layout.known_empty(lay, space)
    assert z3_layout.storage_term(lay, space).as_long() == 0
    for prove in (z3_layout.prove_injective, z3_layout.prove_in_bounds):
        verdict = prove(lay, SymbolSpace(at0))
        assert verdict.status == "proved" and verdict.method == "trivial"


# --------------------------------------------------------------------------- (b) non-empty

MESSAGE = "division by zero evaluating stride 4 * ceildiv(N, N) of memory %buf at N=0"


def test_s14_division_by_zero_on_a_nonempty_domain_is_an_error() -> None:
    kernel = load_kernel(str(NONEMPTY)).kernel
    with pytest.raises(PlannerError) as info:
        verify(kernel, EMPTY)
    (d,) = info.value.diagnostics
    assert d.rule == "S14" and MESSAGE in d.message, d.message
    assert d.loc.file.endswith("nonempty_zero_divisor.py") and d.loc.line > 0
    assert "Traceback" not in info.value.render()
    # the same kernel is valid where the divisor is not zero
    assert collect_diagnostics(kernel, {"M": 16, "N": 4}) == []
    # the interpreter says the same (it runs unverified kernels too)
    with pytest.raises(PlannerError) as info:
        interpret(kernel, random_inputs(kernel, EMPTY, 0), EMPTY)
    assert [d.rule for d in info.value.diagnostics] == ["S14"]
    assert MESSAGE in info.value.render()


def test_s14_division_by_zero_on_a_nonempty_domain_is_an_error_on_every_api_path() -> None:
    """Unverified kernels through the API: a clear S14 PlannerError, never a
    ZeroDivisionError or an internal prover error."""
    kernel = load_kernel(str(NONEMPTY)).kernel
    cpu = _target("x86-avx2")
    stride_text = re.escape("division by zero evaluating stride 4 * ceildiv(N, N)")
    for call in (lambda: prove_kernel(kernel, cpu, EMPTY),
                 lambda: plan_kernel(kernel, cpu, EMPTY),
                 lambda: _run_cpu(kernel, plan_kernel(kernel, cpu, {"M": 16, "N": 4}), cpu,
                                  EMPTY)):
        with pytest.raises(PlannerError, match=stride_text + ".* at N=0") as info:
            call()
        assert [d.rule for d in info.value.diagnostics] == ["S14"]
        assert "internal error" not in info.value.render()


def test_s14_symbolic_zero_divisor_is_refuted_by_the_bounds_proof() -> None:
    # N unbound (0 is in its default bounds): the map is not total, said once, by the
    # bounds proof; the other proofs are asked where the map is defined
    kernel = load_kernel(str(NONEMPTY)).kernel
    report = prove_kernel(kernel, _target("x86-avx2"), {"M": 16})
    assert [(r.name, r.status) for r in report.refuted] == [("bounds", "refuted")]
    (bounds,) = report.refuted
    assert "divisor" in bounds.detail and "N=0" in bounds.detail
    assert bounds.counterexample == {"N": 0}


CLI_REFUSED = [
    ("check",),
    ("check", "--target", "x86-avx2"),
    ("plan",),
    ("plan", "--target", "apple-m2"),
    ("run", "--check"),
    ("run", "--target", "apple-m2", "--check"),
    ("lower",),
    ("interpret",),
]


@pytest.mark.parametrize("argv", CLI_REFUSED, ids=[" ".join(a) for a in CLI_REFUSED])
def test_s14_division_by_zero_on_a_nonempty_domain_is_an_error_on_the_command_line(
        argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    name, *rest = argv
    rc = main([name, str(NONEMPTY), *rest, "--bind", "N=0"])
    out, err = capsys.readouterr()
    assert rc != 0
    assert out == "", "the verifier answers before anything is printed"
    assert "Traceback" not in err and "ZeroDivisionError" not in err
    assert f"error [S14]: {MESSAGE}" in err, err
    assert re.search(r"nonempty_zero_divisor\.py:\d+", err), err
