"""The JSON form: schema, located errors for malformed documents, size guards."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from planner.errors import UNKNOWN_LOC, PlannerError, SourceLoc
from planner.ir.examples import list_examples, load_example
from planner.ir.json_form import (
    kernel_from_json,
    kernel_from_json_text,
    kernel_json_schema,
    kernel_to_json,
)
from planner.ir.structural import structurally_equal

jsonschema = pytest.importorskip("jsonschema")

EXAMPLES = list_examples()
VALIDATOR = jsonschema.Draft202012Validator(kernel_json_schema())

PAR = "$.body.ops[0]"  # the parallel region of manual_gemm
LOOP = f"{PAR}.regions[0].ops[3]"
LOAD = f"{LOOP}.regions[0].ops[0]"


def gemm_doc() -> dict[str, Any]:
    path = next(p for p in EXAMPLES if p.stem == "manual_gemm")
    return kernel_to_json(load_example(path).kernel)


def at(doc: dict[str, Any], path: str) -> Any:
    """The node at a ``$.a.b[1]`` path."""
    node: Any = doc
    for key, index in _steps(path):
        node = node[key] if index is None else node[index]
    return node


def _steps(path: str) -> list[tuple[str | None, int | None]]:
    out: list[tuple[str | None, int | None]] = []
    for part in path[2:].replace("[", ".[").split("."):
        if part.startswith("["):
            out.append((None, int(part[1:-1])))
        elif part:
            out.append((part, None))
    return out


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    schema = kernel_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_schema_validates_every_example(path) -> None:  # type: ignore[no-untyped-def]
    doc = kernel_to_json(load_example(path).kernel)
    VALIDATOR.validate(json.loads(json.dumps(doc, allow_nan=False)))


@pytest.mark.parametrize(("mutate", "fragment"), [
    (lambda d: at(d, LOAD).update(op="tile.lod"), "tile.lod"),
    (lambda d: at(d, LOAD)["operands"].append("B"), "is too long"),
    (lambda d: at(d, LOAD)["attrs"].pop("offsets"), "'offsets' is a required property"),
    (lambda d: at(d, LOAD)["attrs"].update(fill="zero"), "zero"),
    (lambda d: at(d, PAR)["attrs"]["axes"][0].update(extent=1.5), "1.5"),
    (lambda d: d.update(version=2), "1 was expected"),
])
def test_schema_rejects_malformed_documents(mutate: Callable[[dict[str, Any]], None],
                                           fragment: str) -> None:
    doc = gemm_doc()
    mutate(doc)
    errors = [e.message for e in VALIDATOR.iter_errors(doc)]
    assert any(fragment in m for m in errors), errors


def test_constants_are_json_integers_and_floats_are_tagged() -> None:
    doc = gemm_doc()
    load = at(doc, LOAD)
    assert load["attrs"] == {"offsets": ["32 * %block_m", "16 * %k_tiles"], "shape": [32, 16],
                             "fill": 0.0}
    assert at(doc, f"{PAR}.regions[0].ops[2]")["attrs"]["value"] == {"float": 0.0}
    assert at(doc, f"{PAR}.regions[0].ops[0]")["attrs"]["layout"] == {
        "shape": [32, 16], "strides": [17, 1], "swizzles": [], "planned": False}


def test_ids_follow_the_text_names_and_hints_are_kept() -> None:
    loop = at(gemm_doc(), LOOP)
    assert loop["operands"] == ["acc", "As_init", "Bs_init"]
    assert [(r["id"], r.get("name")) for r in loop["results"]] == [
        ("acc_0", "acc"), ("As_0", "As"), ("Bs_0", "Bs")]


def test_non_finite_floats_are_strings() -> None:
    doc = gemm_doc()
    at(doc, LOAD)["attrs"]["fill"] = "-inf"
    at(doc, f"{PAR}.regions[0].ops[2]")["attrs"]["value"] = {"float": "nan"}
    kernel = kernel_from_json(doc)
    assert kernel_to_json(kernel) == doc
    json.dumps(doc, allow_nan=False)


def test_base_dir_relativizes_locations() -> None:
    from planner.ir.examples import builtin_examples_dir

    path = next(p for p in EXAMPLES if p.stem == "manual_gemm")
    doc = kernel_to_json(load_example(path).kernel, base_dir=str(builtin_examples_dir()))
    assert doc["loc"]["file"] == "manual_gemm.py"


# --------------------------------------------------------------------------- errors


def invalid(mutate: Callable[[dict[str, Any]], None], **kwargs: Any) -> PlannerError:
    doc = gemm_doc()
    mutate(doc)
    with pytest.raises(PlannerError) as info:
        kernel_from_json(doc, **kwargs)
    return info.value


def _set(path: str, key: str | int, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: at(d, path).__setitem__(key, value)


def _del(path: str, key: str) -> Callable[[dict[str, Any]], None]:
    return lambda d: at(d, path).pop(key)


@pytest.mark.parametrize(("mutate", "message"), [
    (_del(LOAD, "results"), f"{LOAD}: missing field 'results'"),
    (_del("$", "body"), "$: missing field 'body'"),
    (_set(LOAD, "operands", "A"), f"{LOAD}.operands: expected an array, got string"),
    (_set(LOAD, "op", 3), f"{LOAD}.op: expected a string, got number"),
    (_set(LOAD, "op", "tile.lod"), f"{LOAD}.op: unknown op 'tile.lod'"),
    (_set(LOAD, "colour", "red"), f"{LOAD}.colour: unknown field (expected: op, operands, "
                                  "results, attrs, regions, stage, loc)"),
    (_set(f"{LOAD}.operands", 0, "Z"), f"{LOAD}.operands[0]: undefined value id 'Z'"),
    (_set(f"{PAR}.regions[0].ops[4].operands", 1, "acc_2"),
     f"{PAR}.regions[0].ops[4].operands[1]: value 'acc_2' is not visible here (defined inside a "
     f"region at {LOOP}.regions[0].ops[6].results[0])"),
    (_set(f"{LOAD}.results[0]", "id", "A"),
     f"{LOAD}.results[0].id: duplicate value id 'A' (first defined at $.params[0])"),
    (_set(f"{LOAD}.attrs.offsets", 1, "16 * * %k_tiles"),
     f"{LOAD}.attrs.offsets[1]: bad expression '16 * * %k_tiles': unexpected '*' in "
     "expression at character 5"),
    (_set(f"{LOAD}.attrs.offsets", 1, ""), f"{LOAD}.attrs.offsets[1]: bad expression '': "
                                           "expression ends early"),
    (_set(f"{LOAD}.attrs.offsets", 1, True), f"{LOAD}.attrs.offsets[1]: expected a string, "
                                             "got boolean"),
    (_set(f"{LOAD}.attrs", "fill", "zero"), f"{LOAD}.attrs.fill: expected a number or "
                                            '"inf", "-inf", "nan", got string'),
    (_del(f"{LOAD}.attrs", "shape"), f"{LOAD}.attrs: missing field 'shape'"),
    (_set(f"{LOOP}.attrs", "kind", "forever"), f"{LOOP}.attrs.kind: unknown value 'forever' "
                                               "(expected one of: serial, pipeline, reduce)"),
    (_set(f"{LOOP}.attrs", "window", 2.0), f"{LOOP}.attrs.window: expected an integer, "
                                           "got number"),
    (_set(f"{LOOP}.attrs", "stages", ["load", 1]), f"{LOOP}.attrs.stages[1]: expected a "
                                                   "string, got number"),
    (_set(f"{PAR}.attrs.axes", 0, {"name": "bad name", "extent": 4}),
     f"{PAR}.attrs.axes[0].name: invalid axis name 'bad name'"),
    (_set(f"{PAR}.regions[0].ops[2].attrs", "value", 0.0),
     f'{PAR}.regions[0].ops[2].attrs.value: expected {{"float": number}} or {{"expr": string}}'),
    (_set(f"{PAR}.regions[0].ops[0].attrs", "dtype", "f64"),
     f"{PAR}.regions[0].ops[0].attrs.dtype: unknown element type 'f64'"),
    (_set(f"{PAR}.regions[0].ops[0].attrs.layout", "strides", [17]),
     f"{PAR}.regions[0].ops[0].attrs.layout: layout rank mismatch: shape has 2 extents, "
     "stride has 1"),
    (_set(f"{PAR}.regions[0].ops[0].attrs.layout", "swizzles",
          [{"bits": 3, "base": 0, "shift": 1}]),
     f"{PAR}.regions[0].ops[0].attrs.layout.swizzles[0]: swizzle shift 1 must be >= bits 3"),
    (_set(f"{LOAD}.results[0].type", "dtype", "f16"),
     f"{LOAD}.results[0].type: declared tile<[32, 16], f16> but tile.load produces "
     "tile<[32, 16], f32>"),
    (_set(f"{LOAD}.results[0].type", "kind", "tensor"),
     f"{LOAD}.results[0].type.kind: unknown type kind 'tensor' (expected one of: tile, view, "
     "memory, state, token)"),
    (_set(f"{LOAD}.results[0].type", "readonly", True),
     f"{LOAD}.results[0].type.readonly: only views have 'readonly'"),
    (_set(LOAD, "results", []), f"{LOAD}.results: tile.load produces 1 result(s), 0 declared"),
    (lambda d: at(d, f"{LOOP}.regions[0].ops[6].operands").pop(),
     f"{LOOP}.regions[0].ops[6].operands: tile.mma expects 3 operand(s), got 2"),
    (_set(f"{LOOP}.regions[0].ops[6].operands", 2, "A"),
     f"{LOOP}.regions[0].ops[6]: tile.mma cannot infer its result types from operand types "
     "(tile<[32, 16], f32>, tile<[16, 32], f32>, view<[M, K], f32, const>) and its properties"),
    (_set(PAR, "regions", []), f"{PAR}.regions: region.parallel expects 1 region(s), got 0"),
    (_set(LOAD, "loc", {"file": "a.py", "line": "3"}), f"{LOAD}.loc.line: expected an "
                                                       "integer, got string"),
    (_set("$.params[0]", "type", {"kind": "tile", "dtype": "f32", "shape": [4]}),
     "$.params[0].type: kernel parameters must be views, got tile<[4], f32>"),
    (_set("$.body", "args", [{"id": "q", "type": {"kind": "tile", "dtype": "f32",
                                                  "shape": [4]}}]),
     "$.body.args: the kernel body takes no block arguments; parameters go in $.params"),
    (_set("$", "format", "onnx"), "$.format: expected 'planner.tile-ir', got 'onnx'"),
    (_set("$", "version", 2), "$.version: unsupported version 2"),
])
def test_malformed_json_is_a_located_error(mutate: Callable[[dict[str, Any]], None],
                                           message: str) -> None:
    err = invalid(mutate)
    assert err.kind == "invalid-ir"
    (diag,) = err.diagnostics
    assert diag.message.startswith(message), diag.message
    assert diag.loc == UNKNOWN_LOC


def test_top_level_must_be_an_object() -> None:
    with pytest.raises(PlannerError, match=r"\$: expected an object, got array"):
        kernel_from_json([])


def test_file_name_is_the_location() -> None:
    err = invalid(_set(LOAD, "op", "x"), file="req.json")
    assert err.diagnostics[0].loc == SourceLoc("req.json", 0)


def test_max_ops_is_a_too_large_error() -> None:
    doc = gemm_doc()
    kernel_from_json(doc, max_ops=14)
    with pytest.raises(PlannerError) as info:
        kernel_from_json(doc, max_ops=13)
    assert info.value.kind == "too-large"
    assert info.value.diagnostics[0].message == f"{PAR}.regions[0].ops[4]: more than 13 ops"


def test_max_depth_is_a_too_large_error() -> None:
    doc = gemm_doc()
    kernel_from_json(doc, max_depth=2)
    with pytest.raises(PlannerError) as info:
        kernel_from_json(doc, max_depth=1)
    assert info.value.kind == "too-large"
    assert info.value.diagnostics[0].message.startswith(f"{LOOP}.regions[0]: regions nested")


def test_json_text_errors_carry_line_and_column() -> None:
    with pytest.raises(PlannerError) as info:
        kernel_from_json_text('{"name": "k",\n  "params": [,]}', file="k.json")
    assert info.value.kind == "parse"
    assert info.value.diagnostics[0].loc == SourceLoc("k.json", 2, 14)


def test_json_text_round_trip() -> None:
    doc = gemm_doc()
    kernel = kernel_from_json_text(json.dumps(doc))
    assert structurally_equal(kernel, kernel_from_json(copy.deepcopy(doc)), names=True,
                              locs=True)
