"""An access entry's ``mma_operands``: which tile.mma operands the mma may read in place.

Expected values come from the catalog text (parsed here with plain YAML), never from the
loader under test.
"""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml

from planner.catalog import MmaOperand, catalog_json_schema, load_target_text
from planner.errors import PlannerError

B200 = Path(__file__).parents[2] / "planner" / "catalogs" / "nvidia-b200.yaml"
TMEM = ("  - {scope: block, resource: tmem, operations: [mma_read, mma_write, copy_async], "
        "mma_operands: [a, c]}")


def b200_text(entry: str | None = None) -> str:
    text = B200.read_text()
    assert TMEM in text
    return text if entry is None else text.replace(TMEM, entry)


def raw_entry(text: str, scope: str, resource: str) -> dict:
    (entry,) = [a for a in yaml.safe_load(text)["access"]
                if (a["scope"], a["resource"]) == (scope, resource)]
    return entry


def test_b200_lets_the_block_mma_read_only_a_and_the_accumulator_from_tmem():
    text = b200_text()
    listed = raw_entry(text, "block", "tmem")["mma_operands"]
    assert listed == ["a", "c"]
    t = load_target_text(text, "nvidia-b200.yaml")
    for operand in ("a", "b", "c"):
        assert t.mma_operand_allowed("block", "tmem", operand) == (operand in listed)
    assert t.mma_operands("block", "tmem") == (MmaOperand.A, MmaOperand.C)


def test_without_the_field_every_operand_may_be_read_where_mma_read_is_allowed():
    text = b200_text()
    smem = raw_entry(text, "block", "smem")
    assert "mma_operands" not in smem and "mma_read" in smem["operations"]
    t = load_target_text(text, "nvidia-b200.yaml")
    assert t.mma_operands("block", "smem") == tuple(MmaOperand)
    # no mma_read granted at all: no operand, whatever the default
    assert "mma_read" not in raw_entry(text, "thread", "smem")["operations"]
    assert t.mma_operands("thread", "smem") == ()
    assert not t.mma_operand_allowed("block", "hbm", "a")


def test_an_unknown_operand_is_refused_naming_the_entry_resource_and_value():
    bad = TMEM.replace("[a, c]", "[a, acc, bb]")
    with pytest.raises(PlannerError) as info:
        load_target_text(b200_text(bad), "nvidia-b200.yaml")
    index = [(a["scope"], a["resource"]) for a in yaml.safe_load(b200_text())["access"]
             ].index(("block", "tmem"))
    got = [(d.rule, d.message) for d in info.value.diagnostics]
    entry = "the access entry of scope 'block' on resource 'tmem'"
    assert got == [
        ("S20", f"access[{index}].mma_operands[1]: {entry} lists mma operand 'acc', which is "
                "not a tile.mma operand (known: a, b, c); c names the accumulator"),
        ("S20", f"access[{index}].mma_operands[2]: {entry} lists mma operand 'bb', which is "
                "not a tile.mma operand (did you mean 'b'?); c names the accumulator"),
    ]
    line = b200_text().splitlines().index(TMEM) + 1
    assert {d.loc.line for d in info.value.diagnostics} == {line}


def test_a_repeated_operand_and_operands_without_mma_read_are_refused():
    bad = TMEM.replace("[a, c]", "[c, c]").replace("mma_read, ", "")
    with pytest.raises(PlannerError) as info:
        load_target_text(b200_text(bad), "nvidia-b200.yaml")
    messages = sorted(d.message.split(": ", 1)[1] for d in info.value.diagnostics)
    assert all(d.rule == "S20" for d in info.value.diagnostics)
    entry = "the access entry of scope 'block' on resource 'tmem'"
    assert messages == [
        f"{entry} lists mma operand 'c' twice",
        f"{entry} lists mma_operands but does not grant 'mma_read' (they say which operands "
        "the mma may read in place)",
    ]


def test_an_empty_list_is_refused():
    with pytest.raises(PlannerError) as info:
        load_target_text(b200_text(TMEM.replace("[a, c]", "[]")), "nvidia-b200.yaml")
    assert any("needs at least 1 entry" in d.message for d in info.value.diagnostics)


def test_the_schema_lists_the_operands():
    schema = catalog_json_schema()
    prop = schema["$defs"]["Access"]["properties"]["mma_operands"]
    assert prop["items"]["enum"] == ["a", "b", "c"]
    jsonschema.validate(yaml.safe_load(b200_text()), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(yaml.safe_load(b200_text(TMEM.replace("[a, c]", "[a, d]"))),
                            schema)
