"""One execution binding for proofs, plan and both lowerings (S5, S7, S17, S20).

Expected scopes come from the catalogs' YAML (scope parents), read in the test; expected
legality from S17's text (a resource above the owner needs ``slicing``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from planner.catalog import CatalogRegistry, Target
from planner.catalog.loader import load_target_text
from planner.errors import PlannerError
from planner.ir.examples import builtin_examples_dir, load_example
from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    coord,
    dims,
    exec_,
    f32,
    mem,
    memory,
    parallel,
    shape,
    tile_kernel,
)
from planner.ir.interpreter import interpret, random_inputs
from planner.lower import build_loop_program, compile_kernel
from planner.prove import prove_kernel
from planner.realize import bind_execution
from planner.solve import Status, plan_kernel

CATALOGS = Path(__file__).resolve().parents[2] / "planner" / "catalogs"


def _yaml(name: str) -> dict:
    return yaml.safe_load((CATALOGS / f"{name}.yaml").read_text())


def _first_child(doc: dict, parent: str) -> str:
    return next(s["name"] for s in doc["scopes"] if s["parent"] == parent)


def nested(resource, elems: int = 4):
    """A Memory declared inside a nested AUTOMATIC parallel (owned by the inner region)."""

    @tile_kernel("nested_auto")
    def kernel(X: TensorView[f32, dims("M")]):
        g = axis("g", ceil_div(X.extent(0), 8 * elems))
        t = axis("t", 8)
        e = axis("e", elems)
        for outer in parallel(shape(g)):
            for inner in parallel(shape(t), exec_.AUTOMATIC):
                S = memory[f32](shape(e), resource)
                off = outer.index(g) * (8 * elems) + inner.index(t) * elems
                S.store(X[coord(off), shape(e)])
                X(coord(off), shape(e)).store(S.load())

    return kernel


@pytest.fixture(scope="module")
def targets() -> CatalogRegistry:
    return CatalogRegistry()


@pytest.mark.parametrize("name", ["x86-avx2", "apple-m2"])
def test_s20_nested_automatic_binds_below_the_parent(targets, name: str) -> None:
    doc = _yaml(name)
    outer = doc["default_parallel_scope"]
    binding = bind_execution(nested(mem.shared), targets.get(name))
    scopes = list(binding.parallel_scope.values())
    assert scopes == [outer, _first_child(doc, outer)]
    assert not binding.problems


def test_s17_nested_automatic_shared_on_apple_m2_agrees_everywhere(targets) -> None:
    """threadgroup_memory lives per threadgroup without slicing; the inner parallel binds
    to simdgroup, so a shared Memory it owns has no home: the proofs refute it, the plan
    is infeasible, and neither lowering re-owns it into threadgroup memory."""
    from planner.lower.metal.emitter import emit_msl

    m2 = targets.get("apple-m2")
    k = nested(mem.shared)
    res = next(r for r in _yaml("apple-m2")["resources"] if r["class"] == "shared")
    assert res["slicing"] is False and res["instance_scope"] == "threadgroup"
    report = prove_kernel(k, m2, {"M": 100})
    assert any(r.name == "factorization" and r.status == "refuted" for r in report.results)
    plan = plan_kernel(k, m2, {"M": 100})
    assert plan.status is Status.INFEASIBLE
    with pytest.raises(PlannerError, match="no legal home"):
        build_loop_program(k, None, m2)
    with pytest.raises(PlannerError, match="S17"):
        emit_msl(k, None, m2, sizes={"M": 100})


def test_s17_nested_automatic_shared_on_x86_is_sliced_local(targets) -> None:
    """x86's local storage is per worker with slicing: a lane-owned shared Memory lives
    there, and proofs, plan, loop program and the run agree on it."""
    x86 = targets.get("x86-avx2")
    k = nested(mem.shared)
    local = next(r for r in _yaml("x86-avx2")["resources"] if r["class"] == "shared")
    assert local["slicing"] is True
    report = prove_kernel(k, x86, {"M": 100})
    assert report.ok, [d.render() for d in report.diagnostics()]
    plan = plan_kernel(k, x86, {"M": 100})
    assert plan.status is Status.OPTIMAL
    assert [m.resource for m in plan.memories] == [local["name"]]
    ck = compile_kernel(k, plan, x86)
    assert ck.loop_program.buffer("S").resource == local["name"]
    for b in ({"M": 100}, {"M": 1}, {"M": 0}):
        inputs = random_inputs(k, b, 0)
        want = interpret(k, inputs, b)
        got = ck({n: v.copy() for n, v in inputs.items()}, bindings=b)
        np.testing.assert_array_equal(got["X"], want["X"])


# --------------------------------------------------------------------------- access


def _with_read_only_scratchpad() -> Target:
    """x86-avx2 plus a worker scratchpad listed first that workers may only read and a
    port that only the process scope may write: nothing may be placed in either."""
    text = (CATALOGS / "x86-avx2.yaml").read_text()
    text = text.replace("name: x86-avx2", "name: x86-scratch", 1)
    text = text.replace("resources:\n", """resources:
  - name: rom
    class: shared
    instance_scope: worker
    capacity: 1 MiB
    alignment: 64
    coherence: coherent
    operations: [read, write]
    slicing: true
    bandwidth: 256
    latency: 2
  - name: port
    class: shared
    instance_scope: process
    capacity: 1 MiB
    alignment: 64
    coherence: coherent
    operations: [read, write]
    slicing: true
    bandwidth: 512
    latency: 1
""", 1)
    text = text.replace("access:\n", """access:
  - {scope: worker, resource: rom, operations: [read]}
  - {scope: lane, resource: rom, operations: [read]}
  - {scope: process, resource: port, operations: [read, write]}
""", 1)
    return load_target_text(text, "x86-scratch.yaml")


@pytest.mark.parametrize("name", ["manual_gemm", "softmax", "gemm"])
def test_s6_no_buffer_or_temporary_where_a_scope_lacks_access(name: str) -> None:
    t = _with_read_only_scratchpad()
    ex = load_example(builtin_examples_dir() / f"{name}.py")
    plan = plan_kernel(ex.kernel, t, ex.bindings)
    assert plan.status is Status.OPTIMAL, plan.explanation
    placed = {e.resource for e in plan.edges} | {m.resource for m in plan.memories}
    assert not placed & {"rom", "port"}
    placements = {m.name.lstrip("%"): m.resource for m in plan.memories}
    report = prove_kernel(ex.kernel, t, ex.bindings, placements=placements)
    assert report.ok, [d.render() for d in report.diagnostics()]
    ck = compile_kernel(ex.kernel, plan, t)
    assert not {b.resource for b in ck.loop_program.buffers} & {"rom", "port"}
    inputs = random_inputs(ex.kernel, ex.bindings, 0)
    want = interpret(ex.kernel, inputs, ex.bindings)
    got = ck({n: v.copy() for n, v in inputs.items()}, bindings=ex.bindings)
    for out, value in want.items():
        np.testing.assert_allclose(got[out], value, rtol=2e-5, atol=2e-5)
