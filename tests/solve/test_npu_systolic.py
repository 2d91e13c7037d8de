"""Every shipped example plans on npu-systolic, its view tiles staged by the catalog's DMA.

Expected figures come from the catalog YAML read here (engine issue and bandwidth), the
IR's tile shapes at the example's bindings and the contract text: the core reaches
weight_dram only by copy_async, so each view load/store is moved by a copy engine through
a scratchpad the vector or matrix unit reaches; an mma accumulates into the accumulators.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import jsonschema
import pytest
import yaml

from planner.catalog import BUILTIN_DIR, load_target_file, load_target_text
from planner.errors import PlannerError
from planner.ir import core
from planner.ir.examples import list_examples, load_example
from planner.plan.plan_io import (
    format_plan_table,
    plan_from_json,
    plan_json_schema,
    plan_to_json,
)
from planner.prove.proofs import prove_kernel
from planner.realize import bind_execution
from planner.solve import plan_kernel
from planner.solve.build import build_problem

NPU_FILE = Path(BUILTIN_DIR) / "npu-systolic.yaml"
X86_FILE = Path(BUILTIN_DIR) / "x86-avx2.yaml"
NPU = load_target_file(NPU_FILE)
EXAMPLES = {load_example(p).name: p for p in list_examples()}
#: which engine fills each scratchpad from weight_dram, as the catalog's comments say
ENGINE_OF = {"unified_buffer": "dma", "weight_fifo": "weight_fetcher"}


def _yaml_engines() -> dict[str, dict[str, float]]:
    doc = yaml.safe_load(NPU_FILE.read_text())
    return {e["name"]: e for e in doc["copy_engines"]}


def _view_ops(kernel: core.Kernel) -> list[core.LoadOp | core.StoreOp]:
    return [op for op in kernel.walk() if isinstance(op, (core.LoadOp, core.StoreOp))]


def _tile_bytes(op: core.LoadOp | core.StoreOp, env: dict[str, int]) -> int:
    tile = op.results[0] if isinstance(op, core.LoadOp) else op.tile
    return math.prod(int(e.evaluate(env)) for e in tile.type.shape) * 4  # f32 examples


@pytest.fixture(scope="module")
def plans():
    out = {}
    for name, path in EXAMPLES.items():
        ex = load_example(path)
        out[name] = (ex, plan_kernel(ex.kernel, NPU, ex.bindings, time_limit_s=30, workers=1))
    return out


def test_the_examples_are_all_there():
    assert set(EXAMPLES) >= {"gemm", "manual_gemm", "async_gemm", "softmax", "layernorm",
                             "gelu", "attention", "conv1d"}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_s20_every_example_plans_on_the_npu(plans, name):
    ex, plan = plans[name]
    assert plan.status.value in ("optimal", "feasible"), plan.explanation
    assert not [p for p in plan.proofs if p.status == "refuted"]
    ops = _view_ops(ex.kernel)
    staged = [c for c in plan.copies if c.kind.startswith("staged")]
    assert len(staged) == len(ops)  # every view load and store is a staged transfer
    for op, c in zip(ops, staged, strict=True):
        load = isinstance(op, core.LoadOp)
        assert c.kind == ("staged load" if load else "staged store")
        assert c.line == op.loc.line and c.scope == "core"
        assert c.bytes == _tile_bytes(op, ex.bindings)
        ends = (c.source_resource, c.destination)
        assert ends == (("weight_dram", c.staging) if load else (c.staging, "weight_dram"))
        assert c.engine == ENGINE_OF[c.staging] and c.wait == "sync_engines"
        assert c.mode == "async"
    # every store leaves from unified_buffer by dma; loads land there unless a matrix
    # operand is fetched into the weight FIFO
    assert {(c.engine, c.staging) for c in staged if c.kind == "staged store"} == {
        ("dma", "unified_buffer")}
    assert ("dma", "unified_buffer") in {(c.engine, c.staging) for c in staged}


@pytest.mark.parametrize("name", ["gemm", "softmax", "conv1d"])
def test_s9_a_staged_copy_costs_issue_plus_bytes_over_bandwidth(plans, name):
    engines = _yaml_engines()
    _, plan = plans[name]
    staged = [c for c in plan.copies if c.kind.startswith("staged")]
    assert staged
    for c in staged:
        e = engines[c.engine]
        assert c.cycles == pytest.approx(e["issue"] + c.bytes / e["bandwidth"])
        assert str(c.engine) in c.detail and c.staging in c.detail


def test_an_explicit_copy_async_keeps_its_own_record(plans):
    _, plan = plans["async_gemm"]
    kinds = [c.kind for c in plan.copies]
    assert kinds == ["copy_async", "copy_async", "staged store"]
    engines = _yaml_engines()
    for c in plan.copies[:2]:
        assert c.engine == "dma" and c.overlapped  # overlapped: only the issue is exposed
        assert c.cycles == pytest.approx(engines["dma"]["issue"])


def test_the_plan_json_and_table_list_the_staged_transfers(plans):
    _, plan = plans["gemm"]
    doc = plan_to_json(plan)
    jsonschema.validate(doc, plan_json_schema())
    assert plan_from_json(doc).copies == plan.copies
    rows = [(c["kind"], c["engine"], c["source_resource"], c["destination"], c["bytes"])
            for c in doc["copies"]]
    assert rows == [("staged load", "dma", "weight_dram", "unified_buffer", 32 * 16 * 4),
                    ("staged load", "dma", "weight_dram", "unified_buffer", 16 * 32 * 4),
                    ("staged store", "dma", "unified_buffer", "weight_dram", 32 * 32 * 4)]
    text = format_plan_table(plan)
    assert "staged load" in text and "staged store" in text and "dma" in text


@pytest.mark.parametrize("name", ["gemm", "manual_gemm", "async_gemm", "attention"])
def test_mma_results_are_accumulated_in_the_accumulators(plans, name):
    _, plan = plans[name]
    mma = [e for e in plan.edges if e.producer_kind == "tile.mma"]
    assert mma
    for e in mma:
        assert e.decision.value == "materialized" and e.resource == "accumulators", e


def test_values_live_in_the_scratchpads_ordered_by_the_engines_sync(plans):
    for _, plan in plans.values():
        for b in plan.buffers:
            assert b.resource in ("unified_buffer", "weight_fifo", "accumulators"), b
            assert b.sync == "sync_engines", b  # one engine writes, another reads
        for e in plan.edges:
            assert e.decision.value in ("fused", "materialized"), e  # no registers
            if e.decision.value == "materialized":
                assert e.sync == "sync_engines"


def test_each_value_may_be_placed_only_where_its_unit_writes():
    # the matrix unit mma-writes only the accumulators; the vector unit writes only the
    # unified buffer; a DMA/weight fetch lands in the unified buffer or the weight FIFO
    ex = load_example(EXAMPLES["attention"])
    problem = build_problem(ex.kernel, NPU, ex.bindings)
    homes: dict[str, set[str]] = {}
    for v in problem.values:
        homes.setdefault(v.kind.split(".")[1], set()).update(p.resource for p in v.placements)
    assert homes["mma"] == {"accumulators"}
    assert homes["load"] == {"unified_buffer", "weight_fifo"}
    assert homes["unary"] == homes["binary"] == homes["reduce"] == {"unified_buffer"}


def test_a_staged_load_is_never_inlined(plans):
    # a DMA lands the tile in a buffer: fusing or recomputing the load cannot read the view
    for _, plan in plans.values():
        for e in plan.edges:
            if e.producer_kind == "tile.load":
                assert e.decision.value == "materialized", e


def test_the_access_proof_names_the_engine_and_the_staging_resource():
    ex = load_example(EXAMPLES["gemm"])
    report = prove_kernel(ex.kernel, NPU, ex.bindings)
    access = [r for r in report.results if r.name == "can_access"]
    assert all(r.status == "proved" for r in access)
    views = [r for r in access if r.subject.startswith(("tile.load", "tile.store"))]
    assert [r.subject for r in views] == [
        "tile.load %A at core → weight_dram (read) staged by dma via unified_buffer",
        "tile.load %B at core → weight_dram (read) staged by dma via unified_buffer",
        "tile.store %C at core → weight_dram (write) staged by dma via unified_buffer"]
    assert "completed by sync_engines" in views[0].detail
    assert "matrix_unit (mma_read)" in views[0].detail


def test_without_an_engine_the_view_access_is_refuted():
    ex = load_example(EXAMPLES["softmax"])
    no_dma = dataclasses.replace(NPU, copy_engines=())
    plan = plan_kernel(ex.kernel, no_dma, ex.bindings, time_limit_s=30, workers=1)
    assert plan.status.value == "infeasible"
    assert any("does not let core read weight_dram (allowed: copy_async)" in x
               for x in plan.explanation)


def test_ops_run_on_the_units_the_catalog_names():
    ex = load_example(EXAMPLES["attention"])
    binding = bind_execution(ex.kernel, NPU, ex.bindings)
    scopes = {type(op).__name__: binding.context(op).scope for op in ex.kernel.walk()
              if id(op) in binding.contexts}
    assert scopes["MmaOp"] == "matrix_unit"
    assert scopes["ReduceOp"] == scopes["UnaryOp"] == scopes["BinaryOp"] == "vector_unit"
    assert scopes["LoadOp"] == scopes["StoreOp"] == "core"  # the DMA's issuer


# --------------------------------------------------------------------------- other targets


def _all_classes(text: str, scope_line: str) -> str:
    assert scope_line in text
    return text.replace(scope_line, scope_line + "\n    executes: [elementwise, "
                        "transcendental, reduction, mma, memory]", 1)


@pytest.mark.parametrize("name", ["softmax", "gemm"])
def test_a_catalog_without_executes_plans_as_before(name):
    """x86-avx2 has no ``executes``: its plan equals the one of a catalog that says its
    worker runs every op class itself, and every op runs on its parallel's scope."""
    text = X86_FILE.read_text()
    assert "executes" not in text
    shipped = load_target_text(text, "x86-avx2.yaml")
    explicit = load_target_text(_all_classes(text, "  - name: worker"), "x86-avx2.yaml")
    ex = load_example(EXAMPLES[name])
    a = plan_kernel(ex.kernel, shipped, ex.bindings, time_limit_s=30, workers=1)
    b = plan_kernel(ex.kernel, explicit, ex.bindings, time_limit_s=30, workers=1)
    assert a.status.value == "optimal" and a.objective == b.objective
    assert [(e.edge_id, e.decision, e.resource) for e in a.edges] == [
        (e.edge_id, e.decision, e.resource) for e in b.edges]
    assert not [c for c in a.copies if c.kind != "copy_async"]
    binding = bind_execution(ex.kernel, shipped, ex.bindings)
    for op in ex.kernel.walk():
        ctx = binding.contexts.get(id(op))
        if ctx is not None and ctx.parallels:
            assert ctx.scope == binding.scope_of(ctx.parallels[-1])


# --------------------------------------------------------------------------- the catalog


def _npu_errors(*edits: tuple[str, str]) -> list:
    text = NPU_FILE.read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    with pytest.raises(PlannerError) as info:
        load_target_text(text, "npu.yaml")
    return info.value.diagnostics


def test_an_unknown_op_class_is_refused_naming_rule_scope_and_entry():
    bad = _npu_errors(("executes: [elementwise, transcendental",
                       "executes: [elementwize, transcendental"))
    assert len(bad) == 1 and bad[0].rule == "S20"
    assert "scope 'vector_unit' executes 'elementwize', which is not an op class" \
        in bad[0].message
    assert "did you mean 'elementwise'?" in bad[0].message
    assert bad[0].message.startswith("scopes[3].executes[0]:")


def test_an_op_class_on_two_scopes_is_refused():
    bad = _npu_errors(("executes: [mma]", "executes: [mma, reduction]"))
    assert len(bad) == 1 and bad[0].rule == "S20"
    assert "scope 'vector_unit' executes 'reduction', which is listed by scope " \
           "'matrix_unit' too" in bad[0].message
    assert bad[0].notes and bad[0].notes[0][1] == "first listed here"


def test_an_executes_entry_must_be_a_name():
    bad = _npu_errors(("executes: [mma]", "executes: [{mma: 1}]"))
    assert len(bad) == 1 and "expected an op class, got a mapping" in bad[0].message
