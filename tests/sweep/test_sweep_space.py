"""Configuration spaces, the example contract, and the configuration in both IR forms."""

from __future__ import annotations

import pytest

from planner.errors import PlannerError
from planner.ir.examples import builtin_examples_dir, load_example
from planner.ir.json_form import kernel_from_json, kernel_to_json
from planner.ir.parser import parse_kernel
from planner.ir.printer import print_kernel
from planner.ir.structural import structurally_equal
from planner.sweep import Space, parse_space_overrides, where


def test_points_are_the_product_less_the_constraints():
    space = Space({"a": (1, 2, 4), "b": (1, 2)}, where("a*b <= 4", lambda a, b: a * b <= 4))
    assert list(space.points()) == [{"a": 1, "b": 1}, {"a": 1, "b": 2}, {"a": 2, "b": 1},
                                    {"a": 2, "b": 2}, {"a": 4, "b": 1}]
    assert space.rejected_by({"a": 4, "b": 2}).name == "a*b <= 4"


def test_overrides_are_typed_and_checked():
    space = Space({"a": (1, 2), "s": ("x", "y")})
    narrowed = space.restrict(parse_space_overrides(["a=2,8", "s=y"]))
    assert list(narrowed.points()) == [{"a": 2, "s": "y"}, {"a": 8, "s": "y"}]
    for bad in (["a=two"], ["nope=1"]):
        with pytest.raises(PlannerError) as e:
            space.restrict(parse_space_overrides(bad))
        assert e.value.kind == "usage"
    with pytest.raises(PlannerError):
        parse_space_overrides(["a"])
    with pytest.raises(PlannerError):
        Space({"a": (1,)}, where("reads b", lambda b: b > 0))


@pytest.mark.parametrize("name", ["gemm", "manual_gemm", "softmax", "layernorm", "attention"])
def test_every_example_declares_a_space_whose_default_is_kernel(name):
    ex = load_example(builtin_examples_dir() / f"{name}.py")
    assert ex.space is not None and ex.space.size() > 1
    assert ex.kernel.config == {}  # the plain default instance records nothing
    default = ex.instance({})
    assert set(default.config) == set(ex.space.params)
    assert structurally_equal(default, ex.kernel)


def test_an_instance_records_its_configuration_in_both_ir_forms():
    ex = load_example(builtin_examples_dir() / "manual_gemm.py",
                      {"block_m": 64, "resource": "shared"})
    k = ex.kernel
    assert k.config == {"block_m": 64, "block_n": 32, "block_k": 16, "window": 2,
                        "resource": "shared"}
    text = print_kernel(k)
    assert text.splitlines()[0] == (
        '"tile.kernel"() <{sym_name = "manual_gemm", config = {block_m = 64, block_n = 32, '
        'block_k = 16, window = 2, resource = "shared"}}> ({')
    again = parse_kernel(text)
    assert again.config == k.config and print_kernel(again) == text
    via_json = kernel_from_json(kernel_to_json(k))
    assert via_json.config == k.config and structurally_equal(via_json, k)
    assert kernel_to_json(k)["config"]["resource"] == "shared"


def test_a_configuration_that_breaks_a_constraint_is_refused():
    with pytest.raises(PlannerError) as e:
        load_example(builtin_examples_dir() / "manual_gemm.py", {"block_m": 128, "block_n": 128})
    assert "acc tile <= 8192 elements" in str(e.value.render())
    with pytest.raises(PlannerError):
        load_example(builtin_examples_dir() / "softmax.py", {"window": 2})


def test_the_configuration_is_in_the_json_schema_and_checked_by_both_readers():
    import jsonschema

    from planner.ir.json_form import kernel_json_schema

    ex = load_example(builtin_examples_dir() / "softmax.py", {"block_m": 8})
    obj = kernel_to_json(ex.kernel)
    jsonschema.validate(obj, kernel_json_schema())
    with pytest.raises(PlannerError) as e:
        kernel_from_json({**obj, "config": {"block_m": 1.5}})
    assert "$.config.block_m" in e.value.render()
    text = print_kernel(ex.kernel).replace("config = {block_m = 8}",
                                           "config = {block_m = 8, block_m = 4}")
    with pytest.raises(PlannerError) as e:
        parse_kernel(text)
    assert "duplicate configuration parameter 'block_m'" in e.value.render()
