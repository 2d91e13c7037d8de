"""S6: resource classes only a catalog defines are nameable from kernels.

``memory.alloc``'s constraint is a :class:`ResourceConstraint`: a built-in class or a name
such as ``psum`` (text ``#resource<psum>``, JSON ``"psum"``, DSL ``mem.custom("psum")``).
The IR accepts any well-formed name; ``planner check --target`` refuses one the target's
catalog does not define, naming the class, the Memory, its line and the catalog's classes.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from pathlib import Path

import pytest
import yaml

from planner.catalog import normalize_class
from planner.cli import main
from planner.errors import PlannerError
from planner.ir import core
from planner.ir.core import ResourceClass, ResourceConstraint
from planner.ir.dtypes import DType
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
    parallel,
    shape,
    tile_kernel,
)
from planner.ir.json_form import kernel_from_json, kernel_json_schema, kernel_to_json
from planner.ir.layout import strided
from planner.ir.parser import parse_kernel
from planner.ir.printer import PrintOptions, print_kernel
from planner.ir.structural import structural_diff
from planner.ir.verify import collect_diagnostics

ROOT = Path(__file__).resolve().parents[2]
NPU_YAML = ROOT / "planner" / "catalogs" / "npu-systolic.yaml"


def npu_catalog() -> dict:
    return yaml.safe_load(NPU_YAML.read_text())


def npu_custom_classes() -> list[str]:
    return [c["name"] for c in npu_catalog()["classes"]]


def npu_builtin_classes() -> list[str]:
    """Built-in classes npu-systolic has resources of, in file order."""
    own = npu_custom_classes()
    return list(dict.fromkeys(r["class"] for r in npu_catalog()["resources"]
                              if r["class"] not in own))


def staged(cls: str | ResourceConstraint):
    """Rows staged through a Memory of class ``cls``, owned by the parallel region."""
    resource = cls if isinstance(cls, ResourceConstraint) else mem.custom(cls)

    @tile_kernel("staged")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        gm = axis("block_m", ceil_div(X.extent(0), 4))
        for nest in parallel(shape(gm)):
            r0 = nest.index(gm) * 4
            S = memory[f32](shape(4, 8), resource)  # the-alloc
            S.store(X[coord(r0, 0), shape(4, 8)])
            Y(coord(r0, 0), shape(4, 8)).store(S.load())

    return kernel


def alloc_of(kernel: core.Kernel) -> core.AllocOp:
    (op,) = [op for op in kernel.walk() if isinstance(op, core.AllocOp)]
    return op


def line_of(marker: str) -> int:
    src, start = inspect.getsourcelines(staged)
    return start + next(i for i, t in enumerate(src) if marker in t)


# --------------------------------------------------------------------------- the type


def test_s6_constraint_holds_a_builtin_class_or_a_catalog_name():
    assert ResourceConstraint("shared") == ResourceConstraint(ResourceClass.SHARED) == mem.shared
    assert ResourceConstraint("private_").builtin is ResourceClass.PRIVATE  # the seed spelling
    assert ResourceConstraint("auto_") == mem.auto_ and mem.auto_.value == "auto"
    psum = ResourceConstraint("psum")
    assert psum.is_custom and psum.builtin is None and psum.value == str(psum) == "psum"
    assert not mem.global_.is_custom and mem.global_.value == "global"
    assert psum == mem.custom("psum") and hash(psum) == hash(mem.custom("psum"))
    assert psum != ResourceConstraint("weight_buffer")
    with pytest.raises(dataclasses.FrozenInstanceError):
        psum.cls = "other"  # type: ignore[misc]
    for bad in ("", "9lives", "ps um", "a.b", "psüm"):
        with pytest.raises(ValueError, match="invalid resource class name"):
            ResourceConstraint(bad)
    with pytest.raises(TypeError):
        ResourceConstraint(3)  # type: ignore[arg-type]


def test_s6_catalog_spelling_of_a_constraint():
    assert normalize_class(mem.private_) == "private"
    assert normalize_class(mem.auto_) == "auto_"
    assert normalize_class(ResourceConstraint("psum")) == "psum"
    assert normalize_class(ResourceConstraint("acc_")) == "acc_"  # a catalog's own name is kept
    assert normalize_class(ResourceClass.GLOBAL) == "global" == normalize_class("global_")


def test_s6_alloc_wraps_a_class_or_a_name():
    lay = strided((4,), (1,))
    op = core.AllocOp(DType.F32, lay, ResourceClass.SHARED, "kernel")
    assert op.resource == mem.shared and isinstance(op.resource, ResourceConstraint)
    assert core.AllocOp(DType.F32, lay, "psum", "kernel").resource == ResourceConstraint("psum")


# --------------------------------------------------------------------------- DSL


def test_s6_dsl_names_a_catalog_class_on_the_users_line():
    op = alloc_of(staged("psum"))
    assert op.resource == ResourceConstraint("psum") and op.resource.is_custom
    assert op.loc.line == line_of("the-alloc") and op.loc.file.endswith("test_resource_classes.py")


def test_s6_dsl_rejects_a_malformed_class_name_at_the_users_line():
    with pytest.raises(PlannerError) as info:
        mem.custom("ps um")  # bad-name
    (d,) = info.value.diagnostics
    assert d.rule == "S6" and "invalid resource class name 'ps um'" in d.message
    src, start = inspect.getsourcelines(
        test_s6_dsl_rejects_a_malformed_class_name_at_the_users_line)
    assert d.loc.line == start + next(i for i, t in enumerate(src) if "# bad-name" in t)


def test_s6_custom_class_at_the_kernel_root_is_still_an_s5_error():
    @tile_kernel("k")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        buf = memory[f32](shape(4, 4), mem.custom("psum"))
        buf.store(X[coord(0, 0), shape(4, 4)])
        Y(coord(0, 0), shape(4, 4)).store(buf.load())

    (d,) = collect_diagnostics(kernel)
    assert d.rule == "S5" and "constrained to 'psum'" in d.message


# --------------------------------------------------------------------------- text and JSON


TEXT = ('"tile.kernel"() <{sym_name = "k"}> ({\n'
        "^bb0(%X: view<[8], f32, const>):\n"
        '  %m, %s = "memory.alloc"() <{dtype = f32, layout = #layout<[8] stride [1]>, '
        'resource = #resource<psum>, owner = "kernel"}> : () -> (memory<[8], f32>, '
        "state<[8], f32>)\n"
        "}) : () -> ()\n")


def test_s6_text_form_prints_and_parses_a_catalog_class():
    kernel = staged("psum")
    text = print_kernel(kernel)
    assert "resource = #resource<psum>" in text
    parsed = parse_kernel(text, "rt.mlir")
    assert structural_diff(kernel, parsed, locs=True) is None
    assert alloc_of(parsed).resource == ResourceConstraint("psum")
    assert print_kernel(parsed) == text
    bare = print_kernel(kernel, PrintOptions(locations=False))
    assert print_kernel(parse_kernel(bare), PrintOptions(locations=False)) == bare
    handwritten = parse_kernel(TEXT)
    assert alloc_of(handwritten).resource.value == "psum"
    assert "#resource<psum>" in print_kernel(handwritten)


def test_s6_text_form_refuses_a_malformed_class_name_with_a_caret():
    with pytest.raises(PlannerError) as info:
        parse_kernel(TEXT.replace("#resource<psum>", "#resource<ps.um>"), "bad.mlir")
    (d,) = info.value.diagnostics
    assert info.value.kind == "parse" and "invalid resource class name 'ps.um'" in d.message
    assert (d.loc.file, d.loc.line) == ("bad.mlir", 3)
    assert d.loc.col == TEXT.splitlines()[2].index("psum") + 1


def test_s6_structural_equality_tells_classes_apart():
    a, b = staged("psum"), staged("weight_buffer")
    diff = structural_diff(a, b)
    assert diff is not None and "attrs.resource" in diff and "psum" in diff
    assert structural_diff(staged("psum"), staged("psum")) is None
    assert structural_diff(staged(mem.shared), staged("shared")) is None


def test_s6_json_form_and_schema_carry_a_catalog_class():
    jsonschema = pytest.importorskip("jsonschema")
    kernel = staged("psum")
    doc = kernel_to_json(kernel)
    wire = json.dumps(doc, allow_nan=False)
    assert '"resource": "psum"' in wire
    back = kernel_from_json(json.loads(wire))
    assert structural_diff(kernel, back, names=True, locs=True) is None
    assert kernel_to_json(back) == doc
    validator = jsonschema.Draft202012Validator(kernel_json_schema())
    validator.validate(json.loads(wire))
    alloc_json = next(o for o in _json_ops(doc) if o["op"] == "memory.alloc")
    alloc_json["attrs"]["resource"] = "ps um"
    assert any("ps um" in e.message for e in validator.iter_errors(doc))
    with pytest.raises(PlannerError) as info:
        kernel_from_json(doc)
    message = info.value.diagnostics[0].message
    assert message.startswith("$.body.") and ".attrs.resource: invalid resource class name" \
        in message


def _json_ops(doc: dict) -> list[dict]:
    out, stack = [], [doc["body"]]
    while stack:
        for op in stack.pop()["ops"]:
            out.append(op)
            stack.extend(op["regions"])
    return out


# --------------------------------------------------------------------------- with a target


KERNEL_FILE = '''
from planner.ir.frontend import (TensorView, axis, ceil_div, const, coord, dims, f32, mem,
                                 memory, parallel, shape, tile_kernel)


def kernel():
    @tile_kernel("staged")
    def staged(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        gm = axis("block_m", ceil_div(X.extent(0), 4))
        for nest in parallel(shape(gm)):
            r0 = nest.index(gm) * 4
            S = memory[f32](shape(4, 8), mem.custom({cls!r}))
            S.store(X[coord(r0, 0), shape(4, 8)])
            Y(coord(r0, 0), shape(4, 8)).store(S.load())

    return staged


BINDINGS = {{"M": 16, "N": 8}}


def reference(X):
    return {{"Y": X.copy()}}
'''


def check_on_npu(tmp_path: Path, capsys: pytest.CaptureFixture[str], cls: str
                 ) -> tuple[int, str, int]:
    path = tmp_path / f"staged_{cls}.py"
    path.write_text(KERNEL_FILE.format(cls=cls))
    line = next(i for i, t in enumerate(KERNEL_FILE.splitlines(), 1) if "S = memory" in t)
    rc = main(["check", str(path), "--target", "npu-systolic"])
    captured = capsys.readouterr()
    return rc, captured.out + captured.err, line


def test_s6_unknown_class_is_refused_with_the_catalogs_classes(tmp_path, capsys):
    rc, out, line = check_on_npu(tmp_path, capsys, "psm")
    assert rc == 1
    builtin, own = npu_builtin_classes(), npu_custom_classes()
    assert builtin and own  # the YAML has both kinds
    expected = (f"Memory %S (line {line}) names resource class 'psm', which target "
                f"npu-systolic's catalog does not define (its classes: built-in "
                f"{', '.join(builtin)}; catalog-defined {', '.join(own)})")
    assert expected in out, out
    assert re.search(rf"staged_psm\.py:{line}:\d+: error \[S6\]", out), out  # line and column


@pytest.mark.parametrize("cls", npu_custom_classes())
def test_s6_class_the_catalog_defines_passes_the_class_check(tmp_path, capsys, cls):
    rc, out, _ = check_on_npu(tmp_path, capsys, cls)
    assert "verifier ok" in out
    assert "does not define" not in out and "has no resource of class" not in out, out
    homes = [r["name"] for r in npu_catalog()["resources"] if r["class"] == cls]
    # the class was accepted and explained with one of its own resources (the proofs may
    # still refute the kernel for other reasons, e.g. access or factorization)
    assert any(f"{cls} → {name}" in out for name in homes), out
    assert rc in (0, 1)
