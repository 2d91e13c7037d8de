"""Which tile.mma operand may come from tensor memory on nvidia-b200 (``mma_operands``).

tcgen05.mma reads A from tensor or shared memory, B from shared memory only, and keeps
the accumulator in tensor memory; the catalog's block/tmem access entry says so with
``mma_operands``.  A GEMM whose A operand is a ``mem.tensor`` Memory plans with it in
tmem; one whose B operand is refused by the can_access proof naming operand b.

Expected names come from the catalog YAML, read here with plain YAML.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml
from planning_support import bindings as example_bindings
from planning_support import kernel as example_kernel
from planning_support import target

from planner.catalog import load_target_text
from planner.ir.core import Kernel
from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    f32,
    mem,
    memory,
    mma,
    parallel,
    serial,
    shape,
    tile_kernel,
    zeros,
)
from planner.plan.decisions import Status
from planner.prove import prove_kernel
from planner.solve import build_problem, plan_kernel

CATALOGS = Path(__file__).parents[2] / "planner" / "catalogs"
BINDINGS = {"M": 100, "N": 70, "K": 37}
BM, BN, BK = 64, 64, 16


@cache
def b200() -> dict:
    return yaml.safe_load((CATALOGS / "nvidia-b200.yaml").read_text())


def tensor_resource() -> str:
    (res,) = [r["name"] for r in b200()["resources"] if r["class"] == "tensor"]
    return res


def allowed_operands() -> list[str]:
    tmem = tensor_resource()
    (entry,) = [a for a in b200()["access"]
                if a["scope"] == "block" and a["resource"] == tmem]
    return entry["mma_operands"]


def gemm(a_class, b_class) -> Kernel:
    """A manual GEMM: A and B staged in Memories of the given classes, the accumulator
    in tensor memory (read and accumulated in place, zeroed and read out by copies)."""

    @tile_kernel("operand_gemm")
    def operand_gemm(A: TensorView[const(f32), dims("M", "K")],
                     B: TensorView[const(f32), dims("K", "N")],
                     C: TensorView[f32, dims("M", "N")]):
        gm = axis("block_m", ceil_div(A.extent(0), BM))
        gn = axis("block_n", ceil_div(B.extent(1), BN))
        kt = axis("k_tiles", ceil_div(A.extent(1), BK))
        m, n, k = axis("m", BM), axis("n", BN), axis("k", BK)
        for nest in parallel(shape(gm, gn)):
            m0 = nest.index(gm) * BM
            n0 = nest.index(gn) * BN
            As = memory[f32](shape(m, k), a_class)
            Bs = memory[f32](shape(k, n), b_class)
            Acc = memory[f32](shape(m, n), mem.tensor)
            Acc.store(zeros[f32](shape(m, n)))
            for step in serial(shape(kt)):
                k0 = step.index() * BK
                As.store(A[coord(m0, k0), shape(m, k)])
                Bs.store(B[coord(k0, n0), shape(k, n)])
                Acc.store(mma(As.load(), Bs.load(), Acc.load()))
            C(coord(m0, n0), shape(m, n)).store(Acc.load())

    return operand_gemm


@cache
def planned(a_class, b_class):
    return plan_kernel(gemm(a_class, b_class), target("nvidia-b200"), BINDINGS,
                       time_limit_s=30)


def test_the_catalog_lets_a_and_the_accumulator_come_from_tensor_memory():
    assert allowed_operands() == ["a", "c"]


def test_operand_a_in_tensor_memory_plans_with_the_memory_in_tmem():
    assert "a" in allowed_operands()
    plan = planned(mem.tensor, mem.shared)
    assert plan.status in (Status.OPTIMAL, Status.FEASIBLE), plan.explanation
    homes = {m.name: m.resource for m in plan.memories}
    assert homes["%As"] == tensor_resource()
    assert homes["%Acc"] == tensor_resource()
    report = prove_kernel(gemm(mem.tensor, mem.shared), target("nvidia-b200"), BINDINGS)
    assert report.ok, [d.render() for d in report.diagnostics()]
    subjects = {r.subject for r in report.by_name("can_access") if "%As" in r.subject}
    tmem = tensor_resource()
    assert subjects == {f"memory.store %As at block → {tmem} (copy_async)",
                        f"memory.load %As at block → {tmem} (mma_read)"}


def test_operand_b_in_tensor_memory_is_refused_naming_the_operand():
    assert "b" not in allowed_operands()
    tmem = tensor_resource()
    kern = gemm(mem.shared, mem.tensor)
    refuted = prove_kernel(kern, target("nvidia-b200"), BINDINGS).refuted
    assert [r.subject for r in refuted] == [f"memory.load %Bs at block → {tmem} (mma_read)"]
    (bad,) = refuted
    assert bad.rule == "S20" and bad.name == "can_access"
    allowed = ", ".join(allowed_operands())
    assert bad.detail.startswith(f"tile.mma operand b reads %Bs in {tmem} in place: target "
                                 f"nvidia-b200 lets mma read only operands {allowed} there")
    plan = planned(mem.shared, mem.tensor)
    assert plan.status is Status.INFEASIBLE
    assert any("operand b reads %Bs" in line for line in plan.explanation), plan.explanation


def test_without_the_field_operand_b_may_come_from_tensor_memory():
    """The old permissive rule, which is what a catalog without mma_operands still gets."""
    text = (CATALOGS / "nvidia-b200.yaml").read_text()
    assert ", mma_operands: [a, c]}" in text
    variant = load_target_text(text.replace(", mma_operands: [a, c]}", "}").replace(
        "name: nvidia-b200", "name: b200-any-operand"), "b200-any-operand.yaml")
    report = prove_kernel(gemm(mem.shared, mem.tensor), variant, BINDINGS)
    assert report.ok, [d.render() for d in report.diagnostics()]
    plan = plan_kernel(gemm(mem.shared, mem.tensor), variant, BINDINGS, time_limit_s=30)
    assert plan.status in (Status.OPTIMAL, Status.FEASIBLE), plan.explanation


def test_a_materialized_operand_b_is_not_admissible_in_tensor_memory():
    """The placement rule of the cost model: the built-in gemm's loaded A tile may be kept
    in tmem for the mma (copied in, read in place), its B tile may not."""
    tmem = tensor_resource()
    problem = build_problem(example_kernel("gemm"), target("nvidia-b200"),
                            example_bindings("gemm"))
    reads = {}
    for e in problem.edges:
        if e.consumer_kind == "tile.mma" and e.operand in (0, 1):
            v = problem.values[e.value]
            (i,) = [i for i, p in enumerate(v.placements) if p.resource == tmem]
            reads["ab"[e.operand]] = (e.reads[i] is not None, e.not_admissible[i])
    assert reads == {
        "a": (True, ""),
        "b": (False, f"block cannot read {tmem} for tile.mma operand b"),
    }
