"""Every example in ``examples/`` against its own numpy reference, through the interpreter.

The examples are globbed, so a new example is checked on its default bindings, on
ragged shapes (every extent odd, so no tile size divides it), on single-element
shapes and on an empty domain per symbol, without touching this file.
"""

import numpy as np
import pytest

from planner.errors import PlannerError
from planner.ir.examples import Example, builtin_examples_dir, list_examples, load_example
from planner.ir.interpreter import interpret, random_inputs

EXAMPLE_PATHS = list_examples()


def variants(ex: Example) -> list[tuple[str, dict[str, int]]]:
    b = ex.bindings
    out = [("default", dict(b)),
           ("ragged", {s: v - 1 if v > 1 and v % 2 == 0 else v for s, v in b.items()}),
           ("ones", dict.fromkeys(b, 1))]
    out += [(f"{s}=0", {**b, s: 0}) for s in b]
    return out


def cases() -> list:
    out = []
    for p in EXAMPLE_PATHS:
        try:
            ex = load_example(p)
        except PlannerError:  # reported by the test itself, not as a collection error
            out.append(pytest.param(p, "load", {}, id=f"{p.stem}-load"))
            continue
        out += [pytest.param(p, name, b, id=f"{p.stem}-{name}") for name, b in variants(ex)]
    return out


def test_builtin_examples_are_found():
    assert builtin_examples_dir().is_dir()
    names = {p.stem for p in EXAMPLE_PATHS}
    assert {"gemm", "manual_gemm"} <= names
    assert all(not p.name.startswith("_") for p in EXAMPLE_PATHS)


@pytest.mark.parametrize(("path", "variant", "bindings"), cases())
def test_example_matches_reference(path, variant, bindings):
    ex = load_example(path)
    inputs = random_inputs(ex.kernel, bindings, seed=1)
    before = {n: a.copy() for n, a in inputs.items()}
    got = interpret(ex.kernel, inputs, bindings)
    want = ex.expected(inputs)
    assert set(want) <= set(got), f"reference outputs {set(want)} vs kernel outputs {set(got)}"
    for name, ref in want.items():
        assert got[name].shape == ref.shape, name
        assert got[name].dtype == ref.dtype, name
        np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{ex.name} {variant} output {name}")
    for name, a in inputs.items():  # inputs (writable ones included) are not mutated
        np.testing.assert_array_equal(a, before[name])


def test_example_fields():
    ex = load_example(builtin_examples_dir() / "gemm.py")
    assert ex.name == "gemm"
    assert ex.kernel.name == "gemm"
    assert ex.bindings == {"M": 100, "N": 70, "K": 37}
    assert [p.name_hint for p in ex.kernel.params] == ["A", "B", "C"]
    inputs = random_inputs(ex.kernel, {"M": 3, "N": 2, "K": 4})
    np.testing.assert_allclose(ex.expected(inputs)["C"], inputs["A"] @ inputs["B"], rtol=1e-6)


def test_load_example_reports_missing_file(tmp_path):
    with pytest.raises(PlannerError, match="no example file"):
        load_example(tmp_path / "nope.py")


def test_load_example_reports_missing_attributes(tmp_path):
    p = tmp_path / "partial.py"
    p.write_text("BINDINGS = {}\n")
    with pytest.raises(PlannerError, match="does not define kernel, reference"):
        load_example(p)


def test_load_example_reports_import_errors(tmp_path):
    p = tmp_path / "broken.py"
    p.write_text("import definitely_not_a_module_xyz\n")
    with pytest.raises(PlannerError, match=r"broken\.py failed to import: ModuleNotFoundError"):
        load_example(p)


def test_load_example_rejects_a_non_kernel(tmp_path):
    p = tmp_path / "odd.py"
    p.write_text("BINDINGS = {}\ndef kernel():\n    return 3\ndef reference():\n    return {}\n")
    with pytest.raises(PlannerError, match="returned int, not a Kernel"):
        load_example(p)


def test_list_examples_of_a_directory_skips_helpers(tmp_path):
    (tmp_path / "b.py").write_text("")
    (tmp_path / "a.py").write_text("")
    (tmp_path / "_helper.py").write_text("")
    (tmp_path / "notes.txt").write_text("")
    assert [p.name for p in list_examples(tmp_path)] == ["a.py", "b.py"]


def test_an_example_outside_the_repo_loads_with_dataclasses(tmp_path):
    src = (builtin_examples_dir() / "manual_gemm.py").read_text()
    p = tmp_path / "copied_gemm.py"
    p.write_text(src)
    ex = load_example(p)
    assert ex.name == "copied_gemm"
    inputs = random_inputs(ex.kernel, ex.bindings)
    np.testing.assert_allclose(interpret(ex.kernel, inputs)["C"], ex.expected(inputs)["C"],
                               rtol=1e-4, atol=1e-5)
