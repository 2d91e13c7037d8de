"""Every malformed-catalog case reports a located message (file:line:col), all at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.catalog import load_target_file, load_target_text
from planner.errors import PlannerError


def test_tiny_catalog_is_valid(tiny):
    target = load_target_text(tiny, "tiny.yaml")
    assert target.name == "tiny"
    assert target.resource("scratch").capacity == 48 * 1024


def test_bad_byte_size_suggests_binary_spelling(catalog_errors):
    assert catalog_errors(("capacity: 48 KiB", "capacity: 48KB")) == [
        "tiny.yaml:11:15: error: resources[0].capacity: '48KB' is not a byte size "
        '(write 49152 or "48 KiB")',
    ]


def test_fractional_byte_size(catalog_errors):
    assert catalog_errors(("capacity: 48 KiB", "capacity: 1.3 KiB")) == [
        "tiny.yaml:11:15: error: resources[0].capacity: '1.3 KiB' is not a whole number "
        "of bytes (1331.2)",
    ]


def test_unknown_key_suggests_closest(catalog_errors):
    assert catalog_errors(("capacity: 48 KiB", "capacty: 48 KiB")) == [
        "tiny.yaml:8:5: error: resources[0]: missing required key 'capacity'",
        "tiny.yaml:11:5: error: resources[0]: unknown key 'capacty' (did you mean 'capacity'?)",
    ]


def test_unknown_key_without_close_match_lists_known(catalog_errors):
    assert catalog_errors(("latency: 300", "latency: 300\n    colour: red")) == [
        "tiny.yaml:26:5: error: resources[1]: unknown key 'colour' (known: name, class, "
        "instance_scope, capacity, alignment, coherence, operations, slicing, bandwidth, "
        "latency, banks, sync, description)",
    ]


def test_duplicate_resource_name(catalog_errors):
    assert catalog_errors(("- name: dram", "- name: scratch")) == [
        "tiny.yaml:17:11: error: resources[1].name: duplicate resource name 'scratch'",
        "tiny.yaml:8:11: note: first defined here",
        "tiny.yaml:28:31: error: access[1].resource: unknown resource 'dram' (known: scratch)",
    ]


def test_duplicate_yaml_key(catalog_errors):
    assert catalog_errors(("latency: 300", "latency: 300\n    latency: 3")) == [
        "tiny.yaml:26:5: error: resources[1]: duplicate key 'latency'",
        "tiny.yaml:25:5: note: first written here",
    ]


def test_dangling_instance_scope(catalog_errors):
    assert catalog_errors(("instance_scope: worker", "instance_scope: wrker")) == [
        "tiny.yaml:10:21: error: resources[0].instance_scope: unknown scope 'wrker' "
        "(did you mean 'worker'?)",
    ]


def test_dangling_parent(catalog_errors):
    assert catalog_errors(("parent: root", "parent: rot")) == [
        "tiny.yaml:5:28: error: scopes[1].parent: unknown scope 'rot' (did you mean 'root'?)",
    ]


def test_scope_cycle(catalog_errors):
    assert catalog_errors(("parent: null", "parent: worker")) == [
        "tiny.yaml:4:26: error: scopes[0].parent: scopes form a cycle: root → worker → root",
    ]


def test_second_root(catalog_errors):
    assert catalog_errors(("parent: root", "parent: null")) == [
        "tiny.yaml:5:28: error: scopes[1].parent: scope 'worker' is a second root "
        "(the root is 'root'); give it a parent",
    ]


def test_access_names_unknown_scope(catalog_errors):
    assert catalog_errors(("{scope: worker, resource: scratch",
                           "{scope: workers, resource: scratch")) == [
        "tiny.yaml:27:13: error: access[0].scope: unknown scope 'workers' "
        "(did you mean 'worker'?)",
    ]


def test_access_names_unknown_resource(catalog_errors):
    assert catalog_errors(("resource: dram", "resource: dam")) == [
        "tiny.yaml:28:31: error: access[1].resource: unknown resource 'dam' "
        "(did you mean 'dram'?)",
    ]


def test_unknown_operation(catalog_errors):
    # The access entry granting 'write' is not blamed: the resource's list was rejected.
    assert catalog_errors(("operations: [read, write]\n    slicing: false",
                           "operations: [read, wirte]\n    slicing: false")) == [
        "tiny.yaml:13:24: error: resources[0].operations[1]: unknown operation 'wirte' "
        "(did you mean 'write'?)",
    ]


def test_access_operation_the_resource_lacks(catalog_errors):
    assert catalog_errors(("operations: [read]}", "operations: [read, atomic]}")) == [
        "tiny.yaml:28:56: error: access[1].operations[1]: resource 'dram' does not support "
        "'atomic' (its operations: read, write)",
    ]


def test_second_access_entry_for_same_pair(catalog_errors):
    assert catalog_errors(("resource: dram, operations: [read]",
                           "resource: scratch, operations: [read]")) == [
        "tiny.yaml:28:5: error: access[1]: second access entry for scope 'worker' and "
        "resource 'scratch'; list all operations in one entry",
        "tiny.yaml:27:5: note: first entry",
    ]


def test_unknown_class_and_custom_classes(catalog_errors, tiny):
    assert catalog_errors(("class: shared", "class: shraed")) == [
        "tiny.yaml:9:12: error: resources[0].class: unknown resource class 'shraed' "
        "(did you mean 'shared'?); declare a new class under 'classes'",
    ]
    declared = tiny.replace("backend: null", "backend: null\nclasses: [{name: scratchpad}]")
    target = load_target_text(declared.replace("class: shared", "class: scratchpad"), "t.yaml")
    assert target.resources_for_class("scratchpad")[0].name == "scratch"
    assert catalog_errors(("backend: null", "backend: null\nclasses: [{name: shared}]")) == [
        "tiny.yaml:3:18: error: classes[0].name: 'shared' is a built-in resource class; "
        "do not declare it",
    ]


def test_wrong_types(catalog_errors):
    assert catalog_errors(("extent: 4", "extent: four"), ("slicing: true", "slicing: yes!"),
                          ("coherence: barrier", "coherence: sometimes"),
                          ("clock_ghz: 1.0", "clock_ghz: 0")) == [
        "tiny.yaml:5:42: error: scopes[1].extent: expected an integer ≥ 1, got 'four'",
        "tiny.yaml:12:16: error: resources[0].coherence: unknown coherence 'sometimes' "
        "(known: coherent, barrier, fence, async, none)",
        "tiny.yaml:23:14: error: resources[1].slicing: expected true or false, got 'yes!'",
        "tiny.yaml:29:20: error: costs.clock_ghz: expected a number > 0, got '0'",
    ]


def test_alignment_and_max_extent(catalog_errors):
    assert catalog_errors(("capacity: unbounded", "capacity: unbounded\n    alignment: 48"),
                          ("extent: 4}", "extent: 4, max_extent: 2}")) == [
        "tiny.yaml:5:57: error: scopes[1].max_extent: max_extent 2 is below extent 4",
        "tiny.yaml:21:16: error: resources[1].alignment: alignment 48 is not a power of two",
    ]


def test_yaml_syntax_error(catalog_errors):
    assert catalog_errors(("    class: shared", "    class: shared: x")) == [
        "tiny.yaml:9:18: error: invalid YAML: mapping values are not allowed here",
    ]
    assert catalog_errors(("extent: 4}", "extent: 4")) == [
        "tiny.yaml:6:23: error: invalid YAML: expected ',' or '}', but got ':' "
        "(while parsing a flow mapping)",
        "tiny.yaml:5:5: note: while parsing a flow mapping",
    ]


def test_multiple_errors_are_collected_in_file_order(catalog_errors):
    assert catalog_errors(("{scope: worker, resource: scratch",
                           "{scope: workers, resource: scratch"),
                          ("capacity: 48 KiB", "capacity: 48KB"),
                          ("instance_scope: root", "instance_scope: roots")) == [
        "tiny.yaml:11:15: error: resources[0].capacity: '48KB' is not a byte size "
        '(write 49152 or "48 KiB")',
        "tiny.yaml:19:21: error: resources[1].instance_scope: unknown scope 'roots' "
        "(did you mean 'root'?)",
        "tiny.yaml:27:13: error: access[0].scope: unknown scope 'workers' "
        "(did you mean 'worker'?)",
    ]


def test_missing_sections_and_wrong_top_level():
    with pytest.raises(PlannerError) as info:
        load_target_text("name: x\nbackend: null\n", "x.yaml")
    assert [d.message for d in info.value.diagnostics] == [
        f"missing required key {key!r}"
        for key in ("scopes", "default_parallel_scope", "resources", "access", "costs")]
    with pytest.raises(PlannerError) as info:
        load_target_text("- a\n- b\n", "x.yaml")
    assert info.value.render() == (
        "x.yaml:1:1: error: expected a mapping (a planner target catalog), got a list")
    with pytest.raises(PlannerError) as info:
        load_target_text("# nothing\n", "x.yaml")
    assert info.value.render().startswith("x.yaml:1: error: the catalog is empty")


def test_file_name_must_match_target_name(tmp_path: Path, tiny):
    path = tmp_path / "other.yaml"
    path.write_text(tiny)
    with pytest.raises(PlannerError) as info:
        load_target_file(path)
    assert info.value.render() == (
        f"{path}:1:7: error: name: target name 'tiny' does not match the file name "
        "'other.yaml' (a catalog is <name>.yaml)")


def test_unreadable_file(tmp_path: Path):
    with pytest.raises(PlannerError) as info:
        load_target_file(tmp_path / "absent.yaml")
    assert info.value.kind == "catalog"
    assert "cannot read catalog" in info.value.render()
