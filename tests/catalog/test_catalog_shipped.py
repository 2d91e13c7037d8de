"""The shipped catalogs validate, and their relations say what DESIGN.md's rules need."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
import yaml

from planner.catalog import (
    BUILTIN_DIR,
    DEFAULT_TARGET,
    Backend,
    CatalogRegistry,
    Operation,
    Target,
    catalog_json_schema,
    load_target_file,
)
from planner.errors import PlannerError

SHIPPED = sorted(BUILTIN_DIR.glob("*.yaml"))


@pytest.fixture(scope="module")
def targets() -> dict[str, Target]:
    return {path.stem: load_target_file(path) for path in SHIPPED}


def test_expected_catalogs_ship():
    assert {p.stem for p in SHIPPED} >= {"x86-avx2", "x86-avx512", "apple-m2", "nvidia-h100",
                                         "nvidia-b200", "npu-systolic"}
    assert DEFAULT_TARGET in {p.stem for p in SHIPPED}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_s6_shipped_catalog_validates(path):
    target = load_target_file(path)
    assert target.name == path.stem
    assert target.content_hash == hashlib.sha256(path.read_bytes()).hexdigest()
    assert target.source == str(path)
    assert target.scope(target.default_parallel_scope)
    for res in target.resources:
        assert res.loc.file == str(path) and res.loc.line > 0 and res.loc.col > 0


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_catalog_satisfies_json_schema(path):
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator(catalog_json_schema()).validate(
        yaml.safe_load(path.read_text()))


def test_schema_rejects_what_the_loader_rejects():
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(catalog_json_schema())
    document = yaml.safe_load((BUILTIN_DIR / "x86-avx2.yaml").read_text())
    document["resources"][1]["capacity"] = "48KB"
    document["resources"][0]["capacty"] = 1
    document["access"][0]["operations"] = ["load"]
    messages = sorted(e.json_path for e in validator.iter_errors(document))
    assert messages == ["$.access[0].operations[0]", "$.resources[0]",
                        "$.resources[1].capacity"]


def test_schema_structure():
    schema = catalog_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    target = schema["$defs"]["Target"]
    assert target["additionalProperties"] is False
    assert set(target["required"]) == {"name", "backend", "scopes", "default_parallel_scope",
                                       "resources", "access", "costs"}
    resource = schema["$defs"]["Resource"]["properties"]
    assert resource["operations"]["items"]["enum"] == [op.value for op in Operation]
    assert all("description" in prop for prop in resource.values())


def test_backends(targets):
    assert targets["x86-avx2"].backend is Backend.LLVM_CPU
    assert targets["x86-avx512"].backend is Backend.LLVM_CPU
    assert targets["apple-m2"].backend is Backend.METAL
    assert targets["nvidia-h100"].backend is None


def test_scope_queries(targets):
    cpu = targets["x86-avx2"]
    assert [s.name for s in cpu.scopes] == ["process", "worker", "lane"]
    assert cpu.scope_depth("process") == 0 and cpu.scope_depth("lane") == 2
    assert cpu.is_ancestor_or_self("worker", "lane")
    assert cpu.is_ancestor_or_self("lane", "lane")
    assert not cpu.is_ancestor_or_self("lane", "worker")
    assert cpu.scope_path("lane") == ("process", "worker", "lane")
    h100 = targets["nvidia-h100"]
    assert h100.scope_path("thread") == ("grid", "cluster", "block", "warp", "thread")
    assert h100.default_parallel_scope == "block"
    npu = targets["npu-systolic"]  # a tree: engines are siblings
    assert not npu.is_ancestor_or_self("matrix_unit", "vector_unit")
    assert npu.scope_depth("matrix_unit") == npu.scope_depth("vector_unit") == 2


def test_cpu_figures(targets):
    cpu = targets["x86-avx2"]
    assert cpu.resource("registers").capacity == 512
    assert cpu.resource("local").capacity == 512 * 1024 and cpu.resource("local").slicing
    assert cpu.resource("dram").capacity is None
    assert cpu.costs.concurrent_instances == 2 and cpu.costs.mma == 32
    assert [r.name for r in cpu.resources_for_class("private_")] == ["registers"]


def test_s17_resolve_keeps_hard_constraints(targets):
    cpu, m2 = targets["x86-avx2"], targets["apple-m2"]
    # CPU worker memory lives in local storage; an open class has every home with an
    # instance per worker or a sliceable one above it, nearest first (the planner chooses).
    assert cpu.resolve("shared", "worker").name == "local"
    assert [r.name for r in cpu.homes("auto_", "worker")] == ["registers", "local", "dram"]
    assert cpu.resolve("shared", "lane").name == "local"  # a slice of the worker's
    assert cpu.resolve("global", "worker").name == "dram"
    # Metal: group memory → threadgroup storage, descendant memory → private.
    assert m2.resolve("shared", "threadgroup").name == "threadgroup_memory"
    assert m2.resolve("private_", "thread").name == "thread_registers"
    # per thread; threadgroup memory is not sliceable per thread, device memory is
    assert [r.name for r in m2.homes("auto_", "thread")] == ["thread_registers",
                                                            "device_memory"]
    # Unsupported pairs fail instead of changing the owner.
    assert m2.resolve("private", "threadgroup") is None  # group-owned private
    assert m2.resolve("shared", "simdgroup") is None  # no slicing of threadgroup memory
    assert cpu.resolve("tensor", "worker") is None
    # auto_ has no catalog answer: choosing among its homes is the planner's decision
    with pytest.raises(PlannerError, match="chosen by the planner"):
        cpu.resolve("auto_", "worker")


def test_s6_tensor_memory_access_is_not_monotone(targets):
    b200 = targets["nvidia-b200"]
    tmem = b200.resource("tmem")
    assert tmem.resource_class == "tensor" and tmem.capacity == 256 * 1024
    assert tmem.operations == {Operation.MMA_READ, Operation.MMA_WRITE, Operation.COPY_ASYNC}
    assert b200.resolve("tensor", "block") is tmem
    assert b200.can_access("block", "tmem", "mma_write")
    assert b200.can_access("warp", "tmem", Operation.COPY_ASYNC)
    assert not b200.can_access("thread", "tmem", "read")
    assert not b200.can_access("warp", "tmem", "mma_write")
    # ...while threads do read shared memory, which the block also reaches.
    assert b200.can_access("thread", "smem", "read")
    # tensor memory is never an auto_ home (it cannot be read and written plainly)
    assert "tmem" not in {r.name for r in b200.homes("auto_", "block")}
    assert "tmem" not in {r.name for r in targets["nvidia-h100"].resources}


def test_h100_cluster_memory(targets):
    h100 = targets["nvidia-h100"]
    assert h100.resource("smem").capacity == 227 * 1024
    assert h100.resolve("cluster", "cluster").name == "dsmem"
    assert h100.can_access("block", "dsmem", "write")
    assert h100.resolve("private", "thread").capacity == 255 * 4


def test_npu_custom_classes_and_odd_access(targets):
    npu = targets["npu-systolic"]
    assert {c.name for c in npu.classes} == {"weight_buffer", "psum"}
    assert "psum" in npu.class_names
    assert npu.resolve("psum", "matrix_unit").name == "accumulators"
    assert npu.resolve("weight_buffer", "core") is None  # owned below the core
    # The matrix unit reads the unified buffer it cannot write.
    assert npu.can_access("matrix_unit", "unified_buffer", "mma_read")
    assert not npu.can_access("matrix_unit", "unified_buffer", "write")
    # The accumulators' read port is reachable from the vector unit only.
    assert npu.can_access("vector_unit", "accumulators", "read")
    assert not npu.can_access("core", "accumulators", "read")
    assert not npu.can_access("matrix_unit", "accumulators", "read")


def test_unknown_names_raise_with_known_list(targets):
    cpu = targets["x86-avx2"]
    with pytest.raises(PlannerError, match=r"no scope 'wroker' \(did you mean 'worker'\?"):
        cpu.scope("wroker")
    with pytest.raises(PlannerError, match="known: registers, local, dram"):
        cpu.can_access("worker", "l2", "read")
    with pytest.raises(ValueError):
        cpu.can_access("worker", "local", "load")


def test_model_is_frozen_and_compares_structurally(targets):
    cpu = targets["x86-avx2"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cpu.name = "other"  # type: ignore[misc]
    again = CatalogRegistry([]).get("x86-avx2")
    moved = dataclasses.replace(cpu.resource("local"), loc=cpu.resource("dram").loc)
    assert moved == cpu.resource("local") and hash(moved) == hash(cpu.resource("local"))
    assert again == cpu and hash(again) == hash(cpu)
