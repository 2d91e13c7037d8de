"""``planner show``, ``check`` and ``interpret`` through the real CLI entry point."""

from __future__ import annotations

import json

from planner.cli import main
from planner.ir.examples import builtin_examples_dir


def test_show_prints_text_ir_and_json(capsys):
    assert main(["show", "manual_gemm", "--no-loc"]) == 0
    out = capsys.readouterr().out
    assert '"region.loop"' in out and "#layout<[32, 16] stride [17, 1]>" in out
    assert main(["show", str(builtin_examples_dir() / "softmax.py"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "softmax"


def test_show_then_check_a_text_ir_file(tmp_path, capsys):
    assert main(["show", "gemm"]) == 0
    path = tmp_path / "gemm.mlir"
    path.write_text(capsys.readouterr().out)
    assert main(["check", str(path)]) == 0
    assert "verifier ok" in capsys.readouterr().out


def test_check_with_target_runs_the_proofs(capsys):
    assert main(["check", "manual_gemm", "--target", "apple-m2"]) == 0
    out = capsys.readouterr().out
    assert "capacity" in out and "no proof refuted on apple-m2; all proved" in out


def test_check_rejects_with_rendered_diagnostics(tmp_path, capsys):
    assert main(["show", "softmax", "--no-loc"]) == 0
    text = capsys.readouterr().out.replace('dims = [0]', 'dims = [1]', 1)
    path = tmp_path / "bad.mlir"
    path.write_text(text)
    assert main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    assert "bad.mlir:" in err and "cannot broadcast" in err


def test_interpret_compares_with_the_reference(capsys):
    assert main(["interpret", "attention", "--bind", "S=5"]) == 0
    out = capsys.readouterr().out
    assert "S=5" in out and "ok" in out


def test_usage_errors_are_diagnostics_not_tracebacks(capsys):
    assert main(["interpret", "softmax", "--bind", "M=x"]) == 2  # a usage error
    assert "is not an integer" in capsys.readouterr().err
    assert main(["show", "no_such_kernel"]) == 1
    assert "no such kernel file or built-in example" in capsys.readouterr().err
