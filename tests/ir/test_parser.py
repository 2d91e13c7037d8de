"""Parse errors of the text IR: expected-error files, plus columns, notes and carets."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from planner.errors import PlannerError, SourceLoc
from planner.ir.examples import list_examples, load_example
from planner.ir.parser import parse_kernel, source_excerpt
from planner.ir.printer import print_kernel

ERRORS = Path(__file__).parent / "golden" / "errors"
_MARK = re.compile(r"//\s*expected-error\s*(?:@([+-]\d+))?\s*\{\{(.*)\}\}")


@dataclass(frozen=True)
class ErrorCase:
    """One ``// -----`` chunk, padded with blank lines so its line numbers are the file's."""

    file: Path
    text: str
    line: int
    message: str

    @property
    def id(self) -> str:
        return f"{self.file.stem}:{self.line}"


def _cases() -> list[ErrorCase]:
    cases = []
    for path in sorted(ERRORS.glob("*.mlir")):
        lines = path.read_text().splitlines(keepends=True)
        cuts = [i for i, line in enumerate(lines) if line.strip() == "// -----"]
        for start, end in zip([-1, *cuts], [*cuts, len(lines)], strict=True):
            chunk = lines[start + 1:end]
            marks = [(start + 2 + i, m) for i, line in enumerate(chunk)
                     if (m := _MARK.search(line))]
            assert len(marks) == 1, f"{path}:{start + 2}: one expected-error per chunk"
            line, m = marks[0]
            text = "\n" * (start + 1) + "".join(chunk)
            cases.append(ErrorCase(path, text, line + int(m.group(1) or 0), m.group(2)))
    return cases


CASES = _cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_expected_parse_error(case: ErrorCase) -> None:
    with pytest.raises(PlannerError) as info:
        parse_kernel(case.text, str(case.file))
    err = info.value
    assert err.kind == "parse"
    (diag,) = err.diagnostics
    first_line = diag.message.splitlines()[0]
    assert case.message in first_line, diag.render()
    assert (diag.loc.file, diag.loc.line) == (str(case.file), case.line), diag.render()


# --------------------------------------------------------------------------- columns


KERNEL = """\
"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32>):
  %t = "tile.load"(%X) <{offsets = [0], shape = [4]}> : (view<[N], f32>) -> (tile<[4], f32>)
  LINE
}) : () -> ()
"""


def parse_error(line: str) -> tuple[SourceLoc, str, PlannerError]:
    with pytest.raises(PlannerError) as info:
        parse_kernel(KERNEL.replace("LINE", line), "t.mlir")
    (diag,) = info.value.diagnostics
    return diag.loc, diag.message.splitlines()[0], info.value


def col_of(line: str, token: str, nth: int = 0) -> int:
    """1-based column of ``token`` in ``line`` as it sits in KERNEL (indented by 2)."""
    pos = -1
    for _ in range(nth + 1):
        pos = line.index(token, pos + 1)
    return 3 + pos


@pytest.mark.parametrize(("line", "token", "nth", "message"), [
    ('%u = "tile.lod"(%t) : (tile<[4], f32>) -> (tile<[4], f32>)', '"tile.lod"', 0,
     "unknown op 'tile.lod' (did you mean 'tile.load'?)"),
    ('%u = "tile.unary"(%s) <{fn = #unary<neg>}> : (tile<[4], f32>) -> (tile<[4], f32>)', "%s",
     0, "use of undefined value '%s'"),
    ('%u = "tile.unary"(%t) <{fn = #unary<neg>}> : (tile<[4], f32>) -> (tile<[4], f16>)',
     "tile<[4], f16>", 0, "result #0 of 'tile.unary' is declared tile<[4], f16> but the op "
                          "produces tile<[4], f32>"),
    ('%u = "tile.unary"(%X) <{fn = #unary<neg>}> : (view<[M], f32>) -> (tile<[4], f32>)',
     "%X", 0, "operand #0 of 'tile.unary' has type view<[N], f32> but the signature says "
              "view<[M], f32>"),
    ('%u = "tile.broadcast"(%t) <{shape = [4, N + * 2], dims = [0]}> : (tile<[4], f32>) -> '
     '(tile<[4, 4], f32>)', "*", 0, "invalid expression 'N + * 2': unexpected '*' in "
                                    "expression"),
    ('%u = "tile.cast"(%t) <{dtype = f8}> : (tile<[4], f32>) -> (tile<[4], f32>)', "f8", 0,
     "unknown element type 'f8'"),
    ('%u = "tile.cast"(%t) <{dtype = f16} : (tile<[4], f32>) -> (tile<[4], f16>)', "}", 0,
     "expected ',' or '}>', found '}'"),
    ('"region.yield"(%t) : (tile<[4], f32>) -> () loc("a.py":3)', ")", 3,
     "expected ':', found ')'"),
])
def test_error_points_at_the_offending_token(line: str, token: str, nth: int,
                                             message: str) -> None:
    loc, first, _ = parse_error(line)
    assert first.startswith(message)
    assert loc == SourceLoc("t.mlir", 4, col_of(line, token, nth))


def test_error_shows_the_line_with_a_caret() -> None:
    line = '%u = "tile.lod"(%t) : (tile<[4], f32>) -> (tile<[4], f32>)'
    _, _, err = parse_error(line)
    rendered = err.render().splitlines()
    assert rendered[0] == ("t.mlir:4:8: error: unknown op 'tile.lod' (did you mean "
                           "'tile.load'?)")
    assert rendered[1] == "  " + line
    assert rendered[2] == " " * 7 + "^"


def test_redefinition_notes_the_first_definition() -> None:
    line = '%t = "tile.unary"(%t) <{fn = #unary<neg>}> : (tile<[4], f32>) -> (tile<[4], f32>)'
    loc, first, err = parse_error(line)
    assert first == "redefinition of value '%t'"
    assert loc == SourceLoc("t.mlir", 4, 3)
    assert err.diagnostics[0].notes == ((SourceLoc("t.mlir", 3, 3), "previously defined here"),)


def test_source_excerpt_keeps_tabs_under_the_caret() -> None:
    assert source_excerpt("a\n\tbc d\n", 2, 4) == "\tbc d\n\t  ^"
    assert source_excerpt("a\n", 5, 1) == ""


def test_empty_input() -> None:
    with pytest.raises(PlannerError) as info:
        parse_kernel("  // nothing\n", "e.mlir")
    assert info.value.diagnostics[0].loc == SourceLoc("e.mlir", 2, 1)
    assert "found end of input" in info.value.diagnostics[0].message


def test_unclosed_region() -> None:
    with pytest.raises(PlannerError, match="expected '}' to close the region, found end of input"):
        parse_kernel(KERNEL.replace("LINE", "").rsplit("})", 1)[0])


# --------------------------------------------------------------------------- limits


def test_max_ops_is_a_too_large_error() -> None:
    text = print_kernel(load_example(next(p for p in list_examples()
                                          if p.stem == "manual_gemm")).kernel)
    parse_kernel(text, max_ops=20)
    with pytest.raises(PlannerError) as info:
        parse_kernel(text, max_ops=5)
    assert info.value.kind == "too-large"
    assert "more than 5 ops" in info.value.diagnostics[0].message


def test_max_depth_is_a_too_large_error() -> None:
    region = '"region.parallel"() <{label = "p", axes = [#axis<i = 2>], scope = "s"}> ({\n'
    depth = 5
    text = ('"tile.kernel"() <{sym_name = "k"}> ({\n' + region * depth
            + "}) : () -> ()\n" * (depth + 1))
    parse_kernel(text, max_depth=depth)
    with pytest.raises(PlannerError) as info:
        parse_kernel(text, max_depth=depth - 1)
    assert info.value.kind == "too-large"
    assert info.value.diagnostics[0].loc.line == depth + 1
