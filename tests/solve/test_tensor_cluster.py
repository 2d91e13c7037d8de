"""Tensor and cluster allocations on the planning-only GPU targets (issue 12).

- ``gpu_kernels/tensor_acc_gemm.py`` keeps its accumulator in a ``mem.tensor`` Memory:
  planned on nvidia-b200 (the mma reads and accumulates into tensor memory in place,
  asynchronous copies zero it and read it out), refused on nvidia-h100 (no tensor
  resource, S5) and on a b200 variant whose mma may not read tensor memory (S20).
- ``gpu_kernels/cluster_shared_gemm.py`` owns a ``mem.cluster`` Memory at cluster scope:
  planned in distributed shared memory with the catalog's cluster sync rule.
- Every plan of every built-in example and of these kernels on h100/b200 is complete:
  every buffer placed in a resource of the target, every cross-scope materialized edge
  and every Memory touched across scopes in a non-coherent resource has a sync rule.

Expected numbers and names are read from the catalog YAML here, never from the planner.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import yaml
from planning_support import bindings as example_bindings
from planning_support import kernel as example_kernel
from planning_support import target

from planner.catalog import load_target_text
from planner.ir.examples import list_examples, load_example
from planner.plan.decisions import Decision, MaterializationPlan, Status
from planner.prove import prove_kernel
from planner.realize import bind_execution
from planner.solve import plan_kernel

HERE = Path(__file__).parent / "gpu_kernels"
CATALOGS = Path(__file__).parents[2] / "planner" / "catalogs"
GPUS = ("nvidia-h100", "nvidia-b200")
UNITS = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2}


@cache
def raw(name: str) -> dict:
    """The catalog as plain YAML: the independent source of expected values."""
    return yaml.safe_load((CATALOGS / f"{name}.yaml").read_text())


def size(v: object) -> int:
    if isinstance(v, int):
        return v
    number, unit = str(v).split()
    return int(number) * UNITS[unit]


def resource_of_class(name: str, cls: str) -> dict:
    (res,) = [r for r in raw(name)["resources"] if r["class"] == cls]
    return res


def gpu_kernel(stem: str):
    return load_example(HERE / f"{stem}.py")


@cache
def planned(stem: str, target_name: str) -> MaterializationPlan:
    ex = gpu_kernel(stem)
    return plan_kernel(ex.kernel, target(target_name), ex.bindings, time_limit_s=30)


def buffer(plan: MaterializationPlan, name: str):
    (b,) = [b for b in plan.buffers if b.name == name]
    return b


# --------------------------------------------------------------------------- tensor memory


def test_tensor_accumulator_plans_on_b200_with_every_buffer_placed():
    plan = planned("tensor_acc_gemm", "nvidia-b200")
    assert plan.status in (Status.OPTIMAL, Status.FEASIBLE), plan.explanation
    tmem = resource_of_class("nvidia-b200", "tensor")
    acc = buffer(plan, "%Acc")
    assert acc.role == "memory" and acc.resource == tmem["name"]
    align = size(tmem["alignment"])
    assert acc.bytes == -(-64 * 64 * 4 // align) * align
    # ordered by the tensor memory's block-scope rule (tcgen05.commit)
    (rule,) = [s["name"] for s in tmem["sync"] if s["scope"] == "block"]
    assert acc.sync == rule
    peak = next(p for p in plan.peaks if p.resource == tmem["name"])
    assert peak.peak_bytes <= size(tmem["capacity"])
    names = {r["name"] for r in raw("nvidia-b200")["resources"]}
    assert all(b.resource in names for b in plan.buffers)


def test_tensor_accumulator_accesses_name_the_engine_operation():
    ex = gpu_kernel("tensor_acc_gemm")
    report = prove_kernel(ex.kernel, target("nvidia-b200"), ex.bindings)
    assert report.ok, [d.render() for d in report.diagnostics()]
    subjects = {r.subject for r in report.by_name("can_access") if "%Acc" in r.subject}
    assert subjects == {
        "memory.store %Acc at block → tmem (copy_async)",  # the zero fill: tcgen05.st
        "memory.store %Acc at block → tmem (mma_write)",  # the mma accumulates in place
        "memory.load %Acc at block → tmem (mma_read)",  # the mma reads it in place
        "memory.load %Acc at block → tmem (copy_async)",  # the read-out: tcgen05.ld
    }


def test_tensor_accumulator_refused_on_h100_naming_rule_resource_and_operations():
    assert not [r for r in raw("nvidia-h100")["resources"] if r["class"] == "tensor"]
    plan = planned("tensor_acc_gemm", "nvidia-h100")
    assert plan.status is Status.INFEASIBLE
    text = "\n".join(plan.explanation)
    assert "can_access refuted: memory %Acc" in text
    assert "no resource of class 'tensor'" in text
    assert "memory.load at block (read or mma_read)" in text
    assert "memory.store at block (write or mma_write)" in text
    ex = gpu_kernel("tensor_acc_gemm")
    (bad,) = prove_kernel(ex.kernel, target("nvidia-h100"), ex.bindings).refuted
    assert bad.rule == "S5" and bad.loc.line > 0


def test_tensor_accumulator_refused_where_the_mma_cannot_read_tensor_memory():
    text = (CATALOGS / "nvidia-b200.yaml").read_text()
    line = ("  - {scope: block, resource: tmem, operations: [mma_read, mma_write, copy_async], "
            "mma_operands: [a, c]}")
    assert line in text
    without = line.replace("mma_read, ", "").replace(", mma_operands: [a, c]", "")
    variant = load_target_text(
        text.replace(line, without).replace(
            "name: nvidia-b200", "name: b200-no-tmem-mma-read"), "b200-no-tmem-mma-read.yaml")
    ex = gpu_kernel("tensor_acc_gemm")
    refuted = prove_kernel(ex.kernel, variant, ex.bindings).refuted
    assert [r.subject for r in refuted] == ["memory.load %Acc at block → tmem (read)"]
    (bad,) = refuted
    assert bad.rule == "S20"
    assert "does not let block read tmem" in bad.detail
    assert "no alternative either: mma_read is not allowed for block on tmem" in bad.detail
    plan = plan_kernel(ex.kernel, variant, ex.bindings, time_limit_s=30)
    assert plan.status is Status.INFEASIBLE
    assert any("mma_read" in line and "tmem" in line for line in plan.explanation)


# --------------------------------------------------------------------------- cluster memory


@pytest.mark.parametrize("target_name", GPUS)
def test_cluster_memory_is_planned_in_dsmem_with_the_cluster_sync(target_name):
    plan = planned("cluster_shared_gemm", target_name)
    assert plan.status in (Status.OPTIMAL, Status.FEASIBLE), plan.explanation
    dsmem = resource_of_class(target_name, "cluster")
    (rule,) = [s["name"] for s in dsmem["sync"] if s["scope"] == "cluster"]
    bs = buffer(plan, "%Bs")
    assert (bs.role, bs.resource, bs.sync) == ("memory", dsmem["name"], rule)
    assert bs.bytes == -(-16 * 32 * 4 // dsmem["alignment"]) * dsmem["alignment"]
    assert [m.resource for m in plan.memories if m.name == "%Bs"] == [dsmem["name"]]
    # held by the cluster's instance and read by each of its blocks
    assert {owner for owner, _, _ in bs.live} == {"cluster_m_block_n", "cluster_block"}


def test_cluster_memory_fill_is_an_async_copy_at_cluster_scope():
    ex = gpu_kernel("cluster_shared_gemm")
    report = prove_kernel(ex.kernel, target("nvidia-h100"), ex.bindings)
    assert report.ok, [d.render() for d in report.diagnostics()]
    subjects = {r.subject for r in report.by_name("can_access")}
    assert "tile.load %B at cluster → hbm (copy_async)" in subjects
    assert "memory.store %Bs at cluster → dsmem (copy_async)" in subjects
    assert "memory.load %Bs at block → dsmem (read)" in subjects


# --------------------------------------------------------------------------- completeness


def _cases():
    for p in list_examples():
        for t in GPUS:
            yield pytest.param("example", p.stem, t, id=f"{p.stem}-{t}")
    for stem in ("tensor_acc_gemm", "cluster_shared_gemm"):
        for t in GPUS:
            yield pytest.param("gpu", stem, t, id=f"{stem}-{t}")


def _scopes_by_line(kernel, tgt, binds) -> dict[int, set[str]]:
    binding = bind_execution(kernel, tgt, binds)
    out: dict[int, set[str]] = {}
    for op in kernel.walk():
        out.setdefault(op.loc.line, set()).add(binding.context(op).scope)
    return out


@pytest.mark.parametrize(("kind", "stem", "target_name"), list(_cases()))
def test_every_gpu_plan_is_complete(kind, stem, target_name):
    if kind == "example":
        kern, binds = example_kernel(stem), example_bindings(stem)
        plan = plan_kernel(kern, target(target_name), binds, time_limit_s=30)
    else:
        ex = gpu_kernel(stem)
        kern, binds = ex.kernel, ex.bindings
        plan = planned(stem, target_name)
    if plan.status is Status.INFEASIBLE:
        assert plan.explanation  # refused with a reason, never an incomplete plan
        return
    resources = {r["name"]: r for r in raw(target_name)["resources"]}
    for b in plan.buffers:
        assert b.resource in resources, f"{b.name} is not placed"
    needs_sync = {n for n, r in resources.items() if r["coherence"] not in ("none", "coherent")}
    scopes = _scopes_by_line(kern, target(target_name), binds)
    for e in plan.edges:
        if e.decision is not Decision.MATERIALIZED:
            continue
        assert e.resource in resources, f"{e.edge_id} materialized nowhere"
        producer, consumer = scopes.get(e.lines[0], set()), scopes.get(e.lines[1], set())
        if producer and consumer and producer != consumer and e.resource in needs_sync:
            assert e.sync, f"{e.edge_id}: {producer} → {consumer} in {e.resource} has no sync"
    binding = bind_execution(kern, target(target_name), binds)
    for mb in binding.memory_bindings():
        b = buffer(plan, f"%{mb.name}")
        if len(set(mb.scopes)) > 1 and b.resource in needs_sync:
            assert b.sync, f"%{mb.name} in {b.resource}, touched at {mb.scopes}, has no sync"
