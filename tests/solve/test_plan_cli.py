"""``planner plan`` and ``planner compare`` through ``planner.cli.main``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import main
from planner.solve import plan_from_json

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = str(ROOT / "planner" / "examples" / "softmax.py")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_prints_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", SOFTMAX)
    assert code == 0
    assert out.startswith("softmax on x86-avx2  policy default  bindings M=100 N=70")
    assert "status optimal" in out and "materialize local" in out


def test_plan_by_example_name_with_bindings_and_target(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    code, out, _ = run(capsys, "plan", "softmax", "--target", "apple-m2", "--bind", "N=4096",
                       "--policy", "expensive-only")
    assert code == 0
    assert "softmax on apple-m2  policy expensive-only  bindings M=100 N=4096" in out


def test_plan_json_and_dot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    dot = tmp_path / "plan.dot"
    code, out, _ = run(capsys, "plan", SOFTMAX, "--json", "--dot", str(dot))
    assert code == 0
    plan = plan_from_json(json.loads(out))
    assert plan.kernel == "softmax" and plan.target == "x86-avx2"
    assert dot.read_text().startswith('digraph "softmax"')


def test_plan_baseline_infeasible_exits_one_with_explanation(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", SOFTMAX, "--baseline", "all-virtual")
    assert code == 1  # an infeasible plan is not success, even a baseline's
    assert "status infeasible" in out and "registers capacity 512 B" in out


def test_plan_errors_are_rendered(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", SOFTMAX, "--target", "x86-avx3")
    assert code == 1 and "unknown target 'x86-avx3'" in err
    code, _, err = run(capsys, "plan", SOFTMAX, "--bind", "N")
    assert code == 2 and "NAME=VALUE" in err  # a usage error


def test_compare_targets(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "compare", SOFTMAX, "--target", "x86-avx2", "--target",
                       "apple-m2")
    assert code == 0
    head = out.splitlines()[0]
    assert "softmax" in head and "x86-avx2" in head and "apple-m2" in head
    assert "apple-m2 vs x86-avx2:" in out and "estimated time" in out


def test_compare_policies_and_baselines(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "compare", SOFTMAX, "--policy", "default", "--policy",
                       "expensive-only")
    assert code == 0 and "expensive-only vs default:" in out
    code, out, _ = run(capsys, "compare", SOFTMAX, "--baseline", "greedy-fusion",
                       "--baseline", "all-virtual", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["labels"] == ["optimal", "greedy-fusion", "all-virtual"]
    assert doc["totals"][2] is None


def test_compare_saved_plans(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for t in ("x86-avx2", "apple-m2"):
        code, out, _ = run(capsys, "plan", SOFTMAX, "--target", t, "--json")
        (tmp_path / f"{t}.json").write_text(out)
    code, out, _ = run(capsys, "compare", "--plans", str(tmp_path / "x86-avx2.json"),
                       str(tmp_path / "apple-m2.json"))
    assert code == 0 and "apple-m2 vs x86-avx2:" in out


def test_compare_usage_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "compare", SOFTMAX)
    assert code == 2 and "nothing to compare" in err
    code, _, err = run(capsys, "compare", SOFTMAX, "--target", "x86-avx2", "--target",
                       "apple-m2", "--policy", "default", "--policy", "expensive-only")
    assert code == 2 and "one thing at a time" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    code, _, err = run(capsys, "compare", "--plans", str(bad), str(bad))
    assert code == 1 and "invalid JSON" in err


def test_plan_text_ir_needs_bindings(capsys: pytest.CaptureFixture[str], tmp_path: Path
                                     ) -> None:
    from planning_support import kernel

    from planner.ir.printer import print_kernel

    path = tmp_path / "softmax.tir"
    path.write_text(print_kernel(kernel("softmax")))
    code, _, err = run(capsys, "plan", str(path))
    assert code == 1 and "unbound symbol(s) M, N" in err
    code, out, _ = run(capsys, "plan", str(path), "--bind", "M=100", "--bind", "N=70", "--json")
    assert code == 0
    _, out2, _ = run(capsys, "plan", SOFTMAX, "--json")
    assert json.loads(out)["objective"] == json.loads(out2)["objective"]


def test_compare_two_catalog_versions(capsys: pytest.CaptureFixture[str], tmp_path: Path
                                      ) -> None:
    from planner.catalog import BUILTIN_DIR

    text = (BUILTIN_DIR / "apple-m2.yaml").read_text()
    small = text.replace("name: apple-m2", "name: small-m2").replace(
        "capacity: 512                # 128", "capacity: 8                  # 128")
    assert small != text
    (tmp_path / "small-m2.yaml").write_text(small)
    code, out, _ = run(capsys, "compare", SOFTMAX, "--target", "apple-m2", "--target",
                       "small-m2", "--catalog-dir", str(tmp_path))
    assert code == 0
    assert "small-m2 vs apple-m2: +" in out  # registers too small: materialize, pay more
