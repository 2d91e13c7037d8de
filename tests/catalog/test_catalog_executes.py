"""A scope's ``executes:`` list: which unit runs each op class inside a parallel (S20)."""

from __future__ import annotations

import jsonschema
import pytest
import yaml
from conftest import edit

from planner.catalog import OpClass, catalog_json_schema, load_target_text
from planner.errors import PlannerError

UNITS = ("  - {name: worker, parent: root, extent: 4}",
         "  - {name: worker, parent: root, extent: 4}\n"
         "  - {name: vec, parent: worker, extent: 1, executes: [elementwise, reduction]}\n"
         "  - {name: mxu, parent: worker, extent: 1, executes: [mma]}")


def test_without_executes_every_op_runs_on_its_parallels_scope(tiny):
    t = load_target_text(tiny, "tiny.yaml")
    assert all(s.executes == () for s in t.scopes)
    for cls in OpClass:
        assert t.executing_scope("worker", cls) == "worker"
    assert t.execution_members("worker") == ("worker",)


def test_units_below_the_parallel_run_the_classes_they_list(tiny):
    t = load_target_text(edit(tiny, UNITS), "tiny.yaml")
    assert t.scope("vec").executes == (OpClass.ELEMENTWISE, OpClass.REDUCTION)
    assert t.executing_scope("worker", "mma") == "mxu"
    assert t.executing_scope("worker", "reduction") == "vec"
    assert t.executing_scope("root", "mma") == "mxu"  # nearest unit below, breadth first
    assert t.executing_scope("worker", "transcendental") == "worker"  # nobody claims it
    assert t.executing_scope("worker", None) == "worker"
    assert t.execution_members("worker") == ("worker", "vec", "mxu")


def test_the_schema_lists_the_op_classes(tiny):
    schema = catalog_json_schema()
    prop = schema["$defs"]["Scope"]["properties"]["executes"]
    assert prop["items"]["enum"] == [c.value for c in OpClass]
    jsonschema.validate(yaml.safe_load(edit(tiny, UNITS)), schema)
    bad = yaml.safe_load(edit(tiny, UNITS, ("[mma]", "[matmul]")))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_bad_entries_are_all_reported_with_their_scope(tiny):
    text = edit(tiny, UNITS, ("[elementwise, reduction]", "[elementwise, elementwise, redux]"))
    with pytest.raises(PlannerError) as info:
        load_target_text(text, "tiny.yaml")
    got = [(d.rule, d.message) for d in info.value.diagnostics]
    assert got == [
        ("S20", "scopes[2].executes[1]: scope 'vec' executes 'elementwise', which is listed "
                "twice: an op class runs on one scope"),
        ("S20", "scopes[2].executes[2]: scope 'vec' executes 'redux', which is not an op "
                "class (known: elementwise, transcendental, reduction, mma, memory)"),
    ]
