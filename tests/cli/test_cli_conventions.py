"""The command line's conventions (issue 14): ``--version``, exit statuses, no traceback
for a user's mistake, argparse range checks, ``--json`` everywhere, a quick parser and
saved plans lowered only for their own kernel.

In-process through :func:`planner.cli.main` with ``capsys``; the closed pipe and the
parser's imports run in a subprocess.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import planner
from planner.cli import EPILOG, build_parser, main
from planner.cli.common import (
    DEFAULT_SYMBOL_BOUNDS,
    DEFAULT_TARGET,
    EMIT_FORMS,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    write_output,
)
from planner.errors import PlannerError

ROOT = Path(__file__).resolve().parents[2]
MAIN = "import sys; from planner.cli import main; sys.exit(main())"
SMALL_SOFTMAX = ["--bind", "M=5", "--bind", "N=3"]
#: a kernel no npu-systolic plan can hold: its Memory names a class the catalog lacks
TENSOR_GEMM = str(ROOT / "tests" / "solve" / "gpu_kernels" / "tensor_acc_gemm.py")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def argparse_exit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def subprocess_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every leaf command, by its words (``plan``, ``catalog list``)."""
    out: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                prefix = parser.prog.removeprefix("planner").strip()
                words = f"{prefix} {name}".strip()
                inner = subcommands(sub)
                out.update(inner or {words: sub})
    return out


# -- --version and --help ---------------------------------------------------------------


def test_version_prints_the_distribution_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = argparse_exit(capsys, "--version")
    assert code == 0 and out == f"planner {metadata.version('planner')}\n"


def test_version_falls_back_to_the_package_version(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    code, out, _ = argparse_exit(capsys, "--version")
    assert code == 0 and out == f"planner {planner.__version__}\n"


def test_help_documents_the_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = argparse_exit(capsys, "--help")
    assert code == 0 and "--version" in out
    assert "exit status:" in out and EPILOG.splitlines()[1] in out
    lines = {line.split()[0]: line for line in out.split("exit status:", 1)[1].splitlines()
             if line.startswith("  ") and line.split()[0].isdigit()}
    assert sorted(lines, key=int) == ["0", "1", "2", "130"]
    assert "success" in lines["0"] and "refuted" in lines["1"] and "usage error" in lines["2"]
    assert "infeasible plan" in out and "verifier error" in out and "mismatch" not in lines["0"]


# -- exit statuses ------------------------------------------------------------------------


def test_a_usage_planner_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "compare", "softmax")
    assert code == 2 and out == "" and "nothing to compare" in err
    code, _, err = run(capsys, "interpret", "softmax", "--bind", "M=x")
    assert code == 2 and "is not an integer" in err and "Traceback" not in err


def test_an_argparse_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = argparse_exit(capsys, "plan", "softmax", "--no-such-option")
    assert code == 2 and "unrecognized arguments" in err


def test_plan_infeasible_exits_1_after_printing_the_explanation(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "plan", TENSOR_GEMM, "--target", "npu-systolic")
    assert code == 1
    assert "status infeasible" in out and "can_access refuted" in out
    assert "no feasible plan for tensor_acc_gemm on npu-systolic" in err
    code, out, err = run(capsys, "plan", TENSOR_GEMM, "--target", "npu-systolic", "--json")
    assert code == 1 and json.loads(out)["status"] == "infeasible"
    assert "can_access refuted" in err  # the explanation: not in a table on stdout


def test_compare_exits_1_only_when_an_optimum_is_infeasible(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "compare", TENSOR_GEMM, "--target", "x86-avx2", "--target",
                         "npu-systolic")
    assert code == 1 and "npu-systolic" in out
    assert "npu-systolic: no feasible plan for tensor_acc_gemm on npu-systolic" in err
    code, out, err = run(capsys, "compare", "softmax", "--baseline", "all-virtual")
    assert code == 0 and "all-virtual" in out and err == ""  # a baseline's result


def test_lower_and_run_refuse_an_infeasible_plan(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["lower"], ["run", "--check", "--repeat", "1"]):
        code, out, err = run(capsys, *command, "softmax", "--baseline", "all-virtual")
        assert code == 1 and out == ""
        assert "no feasible plan for softmax on x86-avx2" in err and "capacity" in err
    code, out, _ = run(capsys, "plan", "softmax", "--baseline", "all-virtual", "--json")
    assert code == 1
    saved = tmp_path / "infeasible.json"
    saved.write_text(out)
    code, out, err = run(capsys, "lower", "softmax", "--plan", str(saved))
    assert code == 1 and out == "" and "no feasible plan" in err


def test_an_unknown_survey_example_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "survey", "--example", "softmax", "--example", "nope")
    assert code == 2 and out == ""
    assert "'nope'" in err and "softmax" in err and "gemm" in err and "attention" in err


# -- no traceback for a user's mistake ----------------------------------------------------


def test_a_closed_stdout_ends_quietly_in_process(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    class ClosedPipe:
        def write(self, text: str) -> int:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["catalog", "list"]) == 0
    monkeypatch.undo()
    assert "Traceback" not in capsys.readouterr().err


def test_head_closing_the_pipe_after_one_line_ends_quietly() -> None:
    """``planner plan softmax --target x86-avx2 | head -1``."""
    proc = subprocess.Popen([sys.executable, "-c", MAIN, "plan", "softmax", "--target",
                             "x86-avx2"], cwd=ROOT, env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert first.startswith(b"softmax on x86-avx2") and "Traceback" not in err, err


def test_a_pipe_closed_before_the_first_write_ends_quietly() -> None:
    """The reader is gone before the plan is printed, so the write surely fails."""
    proc = subprocess.Popen([sys.executable, "-c", MAIN, "plan", "softmax", "--target",
                             "x86-avx2"], cwd=ROOT, env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def _one_line_naming(err: str, path: object) -> None:
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and str(path) in err, err


def test_show_a_directory_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "show", str(tmp_path))
    assert code == 1 and out == ""
    _one_line_naming(err, tmp_path)
    assert "Is a directory" in err


def test_a_missing_kernel_path_names_it(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nowhere" / "k.mlir"
    for command in ("show", "check", "plan"):
        code, out, err = run(capsys, command, str(path))
        assert code == 1 and out == ""
        _one_line_naming(err, path)


def test_an_unreadable_kernel_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "secret.mlir"
    path.write_text("kernel")
    read_text = Path.read_text

    def denied(self: Path, *args: object, **kwargs: object) -> str:
        if self == path:  # chmod 000 does not stop root: refuse the read itself
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return read_text(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", denied)
    code, out, err = run(capsys, "show", str(path))
    assert code == 1 and out == ""
    _one_line_naming(err, path)
    assert "Permission denied" in err


def test_dot_into_a_missing_directory_is_refused_before_planning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import planner.solve

    def never(*args: object, **kwargs: object) -> None:
        pytest.fail("planned although --dot cannot be written")

    monkeypatch.setattr(planner.solve, "plan_kernel", never)
    for target in (tmp_path / "nowhere" / "x.dot", tmp_path):
        code, out, err = run(capsys, "plan", "softmax", "--dot", str(target))
        assert code == 1 and out == ""
        _one_line_naming(err, target)
        assert "--dot" in err


def test_any_oserror_writing_an_output_file_is_a_clean_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def full(self: Path, *args: object, **kwargs: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(Path, "write_text", full)
    path = tmp_path / "plan.dot"
    with pytest.raises(PlannerError, match="No space left on device") as exc:
        write_output(path, "digraph {}", "--dot")
    assert str(path) in exc.value.render()
    code, out, err = run(capsys, "plan", "softmax", "--dot", str(path))
    assert code == 1 and out == ""
    _one_line_naming(err, path)


def test_dot_dash_prints_graphviz_on_stdout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "plan", "softmax", "--dot", "-")
    assert code == 0 and out.startswith('digraph "softmax"') and "status" not in out
    assert not (tmp_path / "-").exists()
    code, out, err = run(capsys, "plan", "softmax", "--dot", "-", "--json")
    assert code == 2 and out == "" and "--dot -" in err


# -- numeric arguments ---------------------------------------------------------------------

OUT_OF_RANGE = [
    (["run", "softmax", "--threads", "0"], "--threads", ">= 1"),
    (["run", "softmax", "--repeat", "0"], "--repeat", ">= 1"),
    (["run", "softmax", "--seed", "-1"], "--seed", ">= 0"),
    (["run", "softmax", "--rtol", "-0.001"], "--rtol", ">= 0"),
    (["run", "softmax", "--atol", "nan"], "--atol", ">= 0"),
    (["run", "softmax", "--time-limit", "0"], "--time-limit", "> 0"),
    (["lower", "softmax", "--time-limit", "-1"], "--time-limit", "> 0"),
    (["plan", "softmax", "--time-limit", "-1"], "--time-limit", "> 0"),
    (["plan", "softmax", "--time-limit", "0"], "--time-limit", "> 0"),
    (["plan", "softmax", "--time-limit", "inf"], "--time-limit", "> 0"),
    (["plan", "softmax", "--workers", "0"], "--workers", ">= 1"),
    (["compare", "softmax", "--workers", "-2"], "--workers", ">= 1"),
    (["compare", "softmax", "--time-limit", "0"], "--time-limit", "> 0"),
    (["check", "softmax", "--time-limit-ms", "0"], "--time-limit-ms", ">= 1"),
    (["interpret", "softmax", "--seed", "-5"], "--seed", ">= 0"),
    (["survey", "--time-limit", "0"], "--time-limit", "> 0"),
    (["serve", "--workers", "0"], "--workers", ">= 1"),
    (["serve", "--cache-size", "-1"], "--cache-size", ">= 0"),
    (["serve", "--max-time-limit", "0"], "--max-time-limit", "> 0"),
    (["serve", "--max-body-bytes", "0"], "--max-body-bytes", ">= 1"),
    (["serve", "--max-graph-ops", "0"], "--max-graph-ops", ">= 1"),
    (["plan", "softmax", "--workers", "two"], "--workers", ">= 1"),
]


@pytest.mark.parametrize(("argv", "option", "allowed"), OUT_OF_RANGE,
                         ids=[" ".join(a[0]) for a in OUT_OF_RANGE])
def test_out_of_range_numbers_are_refused_by_argparse(
        argv: list[str], option: str, allowed: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = argparse_exit(capsys, *argv)
    assert code == 2 and out == ""
    assert f"argument {option}: expected " in err and allowed in err, err
    assert repr(argv[-1]) in err


def test_the_number_types() -> None:
    assert positive_int("3") == 3 and non_negative_int("0") == 0
    assert positive_float("0.5") == 0.5 and non_negative_float("0") == 0.0
    for parse, bad in ((positive_int, "0"), (positive_int, "1.5"), (non_negative_int, "-1"),
                       (positive_float, "0"), (positive_float, "nan"),
                       (non_negative_float, "-0.1"), (non_negative_float, "inf")):
        with pytest.raises(argparse.ArgumentTypeError, match="expected"):
            parse(bad)


def test_defaults_are_within_the_ranges() -> None:
    args = build_parser().parse_args(["run", "softmax"])
    assert (args.repeat, args.seed, args.time_limit, args.threads) == (3, 0, 10.0, None)


# -- --json everywhere -----------------------------------------------------------------------

#: Commands that print no result of their own: ``serve`` runs a server, ``catalog
#: schema`` always prints JSON.
NO_JSON = {"serve", "catalog schema"}


def test_every_command_that_prints_a_result_has_json() -> None:
    commands = subcommands(build_parser())
    assert {"show", "check", "interpret", "plan", "compare", "run", "lower", "survey",
            "catalog list", "catalog show", "catalog validate"} <= set(commands)
    for words, sub in commands.items():
        options = {s for a in sub._actions for s in a.option_strings}
        if words in NO_JSON:
            continue
        assert "--json" in options, words
        action = next(a for a in sub._actions if "--json" in a.option_strings)
        assert action.help and "JSON" in action.help, words


def test_json_of_show_check_and_interpret(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "softmax", "--json")
    assert code == 0 and json.loads(out)["name"] == "softmax"
    code, out, _ = run(capsys, "check", "softmax", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["verifier"] == "ok" and doc["proofs"] == [] and doc["ok"]
    code, out, _ = run(capsys, "check", "softmax", "--target", "x86-avx2", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["target"] == "x86-avx2" and doc["proofs"]
    assert {"name", "status", "subject", "location"} <= set(doc["proofs"][0])
    code, out, _ = run(capsys, "interpret", "softmax", "--json", *SMALL_SOFTMAX)
    doc = json.loads(out)
    assert code == 0 and doc["compared"] and doc["ok"] and doc["bindings"] == {"M": 5, "N": 3}
    assert doc["outputs"][0]["name"] == "Y" and doc["outputs"][0]["shape"] == [5, 3]


def test_json_of_check_with_a_refuted_proof_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", TENSOR_GEMM, "--target", "npu-systolic", "--json")
    doc = json.loads(out)
    assert code == 1 and not doc["ok"] and "refuted" in {p["status"] for p in doc["proofs"]}
    assert "can_access refuted" in err


def test_json_of_the_catalog_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "catalog", "list", "--json")
    names = [t["name"] for t in json.loads(out)["targets"]]
    assert code == 0 and "apple-m2" in names and "x86-avx2" in names
    code, out, _ = run(capsys, "catalog", "show", "apple-m2", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["name"] == "apple-m2" and doc["backend"] == "metal"
    assert doc["content"]["name"] == "apple-m2" and len(doc["content_hash"]) == 64
    good = Path(doc["source"])
    code, out, _ = run(capsys, "catalog", "validate", str(good), str(good.parent / "no.yaml"),
                       "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False
    assert [f["ok"] for f in doc["files"]] == [True, False]
    assert doc["files"][0]["target"] == "apple-m2" and doc["files"][1]["errors"]


def test_json_of_survey(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "survey", "--example", "softmax", "--target", "x86-avx2",
                       "--target", "npu-systolic", "--no-run", "--json")
    doc = json.loads(out)
    assert code == 0 and (doc["passed"], doc["failed"]) == (2, 0)
    by_target = {r["target"]: r for r in doc["results"]}
    assert by_target["x86-avx2"]["status"] == "optimal"
    assert by_target["x86-avx2"]["objective_ns"] > 0
    assert by_target["npu-systolic"]["status"] == "optimal"  # staged by its DMA
    assert by_target["npu-systolic"]["objective_ns"] > 0


def test_json_of_lower_and_run(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "lower", "softmax", "--json")
    doc = json.loads(out)
    assert code == 0 and (doc["kernel"], doc["target"], doc["emit"]) == (
        "softmax", "x86-avx2", "loops")
    assert doc["code"].startswith("loop program softmax")
    assert doc["plan"]["kernel"] == "softmax" and doc["plan"]["content_hash"]
    code, out, _ = run(capsys, "run", "softmax", "--check", "--repeat", "1", "--json",
                       *SMALL_SOFTMAX)
    doc = json.loads(out)
    assert code == 0 and doc["checked"] and doc["ok"] is True
    assert doc["verdict"].startswith("check ok") and doc["plan"]["status"] == "optimal"


# -- a quick parser ------------------------------------------------------------------------


def test_building_the_parser_imports_no_heavy_module() -> None:
    code = ("import planner.cli, sys; planner.cli.build_parser(); "
            "print(sorted(m for m in ('ortools','z3','llvmlite','fastapi','numpy','networkx') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_the_parser_constants_agree_with_the_library() -> None:
    from planner.catalog import DEFAULT_TARGET as LIBRARY_DEFAULT_TARGET
    from planner.ir.load import DEFAULT_SYMBOL_BOUNDS as LIBRARY_BOUNDS
    from planner.lower.backends import emit_forms

    assert DEFAULT_TARGET == LIBRARY_DEFAULT_TARGET
    assert DEFAULT_SYMBOL_BOUNDS == LIBRARY_BOUNDS
    assert emit_forms() == EMIT_FORMS


# -- a saved plan is lowered only for its own target and kernel ----------------------------


def _save(capsys: pytest.CaptureFixture[str], path: Path, *argv: str) -> Path:
    code, out, _ = run(capsys, "plan", *argv, "--json")
    assert code == 0
    path.write_text(out)
    return path


def test_a_saved_plan_for_another_kernel_is_refused(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    gemm = _save(capsys, tmp_path / "gemm.json", "gemm")
    for command in (["lower"], ["run", "--check", "--repeat", "1"]):
        code, out, err = run(capsys, *command, "softmax", "--plan", str(gemm))
        assert code == 1 and out == ""
        assert "was made for kernel gemm, not softmax" in err and str(gemm) in err


def test_a_saved_plan_must_match_the_kernels_content_hash(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = _save(capsys, tmp_path / "softmax.json", "softmax")
    code, out, _ = run(capsys, "lower", "softmax", "--plan", str(saved))
    assert code == 0 and out.startswith("loop program softmax")
    code, out, err = run(capsys, "lower", "softmax", "--plan", str(saved), "--bind", "N=64")
    assert code == 1 and out == ""
    assert "does not match kernel softmax" in err and "bindings M=100 N=70" in err
    code, _, err = run(capsys, "lower", "softmax", "--plan", str(saved), "--bound", "M=1..100")
    assert code == 1 and "planned without the --bound" in err
    doc = json.loads(saved.read_text())
    doc["content_hash"] = "0" * 64  # same name, other IR (or catalog)
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(doc))
    code, out, err = run(capsys, "run", "softmax", "--plan", str(tampered))
    assert code == 1 and out == "" and "content hash 000000000000" in err
    assert "kernel's IR, the target catalog" in err


def test_a_saved_plan_for_another_target_is_still_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = _save(capsys, tmp_path / "m2.json", "softmax", "--target", "apple-m2")
    code, out, err = run(capsys, "lower", "softmax", "--plan", str(saved), "--target",
                         "x86-avx2")
    assert code == 1 and out == ""
    assert "was made for target apple-m2, not x86-avx2" in err
