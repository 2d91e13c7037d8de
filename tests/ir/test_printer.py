"""The generic text form: FileCheck goldens, value names, attribute spellings, locations."""

from __future__ import annotations

import contextlib
import io
import math
import struct
from pathlib import Path

import pytest
from filecheck.finput import FInput
from filecheck.matcher import Matcher
from filecheck.options import Options
from filecheck.parser import Parser

from planner.errors import UNKNOWN_LOC, SourceLoc
from planner.ir import core
from planner.ir.core import Block, Kernel, Value
from planner.ir.dtypes import DType
from planner.ir.examples import list_examples, load_example
from planner.ir.expr import const, sym
from planner.ir.parser import parse_kernel
from planner.ir.printer import (
    Printer,
    PrintOptions,
    format_float,
    format_loc,
    print_kernel,
    print_op,
    quote,
    value_names,
)
from planner.ir.types import TileType, ViewType

GOLDEN = Path(__file__).parent / "golden"
GOLDENS = sorted(GOLDEN.glob("*.mlir"))
EXAMPLES = {p.stem: p for p in list_examples()}
ROOT = Path(__file__).resolve().parents[2]


def filecheck(output: str, check_file: Path) -> None:
    """Run the pure-Python FileCheck in process; fail with its report and the output."""
    opts = Options(match_filename=str(check_file))
    report = io.StringIO()
    with contextlib.redirect_stderr(report), contextlib.redirect_stdout(report):
        matcher = Matcher(opts, FInput("<printed IR>", output), Parser.from_opts(opts))
        rc = matcher.run()
    assert rc == 0, f"{report.getvalue()}\n--- printed IR ---\n{output}"


@pytest.mark.parametrize("golden", GOLDENS, ids=[p.stem for p in GOLDENS])
def test_parse_print_matches_checks(golden: Path) -> None:
    kernel = parse_kernel(golden.read_text(), str(golden))
    filecheck(print_kernel(kernel, locations=False), golden)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_prints_matching_checks(name: str) -> None:
    golden = GOLDEN / f"{name}.mlir"
    if not golden.exists():
        pytest.skip(f"no golden CHECK file for example {name}")
    filecheck(print_kernel(load_example(EXAMPLES[name]).kernel, locations=False), golden)


# --------------------------------------------------------------------------- names


def _chain(hints: list[str | None]) -> Kernel:
    """A kernel of unary ops whose results carry ``hints``."""
    x = Value(ViewType(DType.F32, (sym("N"),)), "x")
    kernel = Kernel("k", [x], Block())
    prev = kernel.body.append(core.LoadOp(x, (const(0),), (const(4),))).result
    for hint in hints:
        prev = kernel.body.append(core.UnaryOp(core.UnaryFn.NEG, prev)).result
        prev.name_hint = hint
    return kernel


def _names(kernel: Kernel) -> list[str]:
    printer = Printer()
    printer.print_kernel(kernel)
    return [printer.namer.names[op.result] for op in kernel.body.ops]


def test_hints_are_made_unique_and_the_rest_numbered() -> None:
    assert _names(_chain(["t", "t", None, "t_0", "t", None])) == [
        "0", "t", "t_0", "1", "t_0_0", "t_1", "2"]


def test_hints_that_are_not_identifiers_are_sanitized() -> None:
    assert _names(_chain(["weird name", "9lives", ""])) == ["0", "weird_name", "_9lives", "1"]


def test_value_names_match_the_printed_text() -> None:
    kernel = _chain(["t", None])
    names = value_names(kernel)
    assert [names[op.result] for op in kernel.body.ops] == ["0", "t", "1"]
    assert names[kernel.params[0]] == "x"


def test_parsed_names_become_hints_and_numbers_do_not() -> None:
    kernel = parse_kernel(print_kernel(_chain(["t", "t", None])))
    assert [op.result.name_hint for op in kernel.body.ops] == [None, "t", "t_0", None]


def test_op_lines_map_ops_to_their_printed_line() -> None:
    kernel = _chain(["a", "b"])
    printer = Printer()
    lines = printer.print_kernel(kernel).splitlines()
    for op in kernel.body.ops:
        assert f'"{op.SPEC.name}"' in lines[printer.op_lines[op] - 1]


def test_print_op_shows_one_op() -> None:
    kernel = _chain(["a"])
    text = print_op(kernel.body.ops[1], PrintOptions(locations=False))
    assert text == ('%a = "tile.unary"(%0) <{fn = #unary<neg>}> : (tile<[4], f32>) '
                    '-> (tile<[4], f32>)\n')


# --------------------------------------------------------------------------- spellings


@pytest.mark.parametrize("value", [0.0, -0.0, 1.0, 0.1, 1e-05, 1e22, -1.5e300, 5e-324,
                                   2.0**-1074, math.inf, -math.inf, math.nan,
                                   struct.unpack(">d", bytes.fromhex("7ff8000000000bad"))[0]])
def test_floats_round_trip_bit_for_bit(value: float) -> None:
    kernel = Kernel("k", [], Block())
    kernel.body.append(core.FullOp((const(2),), DType.F32, value))
    text = print_kernel(kernel)
    assert format_float(value) in text
    back = parse_kernel(text).body.ops[0]
    assert isinstance(back, core.FullOp) and isinstance(back.value, float)
    assert struct.pack(">d", back.value) == struct.pack(">d", value)


def test_float_spellings() -> None:
    assert format_float(1e-05) == "1.0e-05"
    assert format_float(1e22) == "1.0e+22"
    assert format_float(-0.0) == "-0.0"
    assert format_float(math.inf) == "0x7FF0000000000000 : f64"
    assert format_float(-math.inf) == "0xFFF0000000000000 : f64"


@pytest.mark.parametrize("text", ["plain", 'quote " and \\ backslash', "tab\tnew\nline",
                                  "caf\u00e9 \u2713", ""])
def test_strings_round_trip(text: str) -> None:
    kernel = Kernel(text, [], Block())
    printed = print_kernel(kernel)
    assert printed.isascii()
    assert parse_kernel(printed).name == text
    assert quote(text).startswith('"') and quote(text).endswith('"')


# --------------------------------------------------------------------------- locations


def _located() -> Kernel:
    kernel = _chain(["a"])
    kernel.loc = SourceLoc(str(ROOT / "planner" / "examples" / "k.py"), 3)
    kernel.body.ops[0].loc = SourceLoc(str(ROOT / "planner" / "examples" / "k.py"), 7, 4)
    kernel.body.ops[1].loc = SourceLoc("/elsewhere/other.py", 9)
    return kernel


def test_locations_print_absolute_by_default() -> None:
    text = print_kernel(_located())
    assert f'loc("{ROOT}/planner/examples/k.py":7:4)' in text
    assert 'loc("/elsewhere/other.py":9:0)' in text
    assert text.rstrip().endswith(f'}}) : () -> () loc("{ROOT}/planner/examples/k.py":3:0)')


def test_locations_relative_to_a_base_directory() -> None:
    text = print_kernel(_located(), base_dir=str(ROOT))
    assert 'loc("planner/examples/k.py":7:4)' in text
    assert 'loc("/elsewhere/other.py":9:0)' in text  # outside the base: unchanged
    assert parse_kernel(text).body.ops[0].loc == SourceLoc("planner/examples/k.py", 7, 4)


def test_locations_can_be_left_out() -> None:
    text = print_kernel(_located(), PrintOptions(locations=False))
    assert "loc(" not in text


def test_unknown_location() -> None:
    assert format_loc(UNKNOWN_LOC) == "loc(unknown)"
    kernel = _chain([])
    text = print_kernel(kernel)
    assert "loc(unknown)" in text
    assert parse_kernel(text).body.ops[0].loc == UNKNOWN_LOC


def test_ops_without_loc_get_their_text_location() -> None:
    text = print_kernel(_chain(["a"]), locations=False)
    kernel = parse_kernel(text, "k.mlir")
    assert kernel.loc == SourceLoc("k.mlir", 1, 1)
    assert kernel.body.ops[1].loc == SourceLoc("k.mlir", 4, 3)


def test_example_locations_point_at_the_user_source() -> None:
    kernel = load_example(EXAMPLES["manual_gemm"]).kernel
    text = print_kernel(kernel, base_dir=str(ROOT))
    alloc_line = next(line for line in text.splitlines() if '"memory.alloc"' in line)
    assert 'loc("planner/examples/manual_gemm.py":' in alloc_line
    tile = TileType(DType.F32, (const(32), const(32)))
    assert str(tile) in text
