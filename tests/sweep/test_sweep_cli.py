"""``planner sweep`` end to end: table, --json, --csv, --plot, --measure, exit statuses,
and Ctrl-C keeping the finished points."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planner.cli import main

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ["sweep", "softmax", "--target", "x86-avx2", "--workers", "2", "--time-limit", "5"]


def test_table_csv_and_plot(tmp_path, capsys):
    out_csv, out_html = tmp_path / "s.csv", tmp_path / "s.html"
    assert main([*SOFTMAX, "--csv", str(out_csv), "--plot", str(out_html)]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].split()[:5] == ["#", "config", "status", "predicted", "vector_registers"] \
        or lines[0].split()[:4] == ["#", "config", "status", "predicted"]
    assert sum(line.lstrip().startswith(str(n) + " ") for n in range(1, 7)
               for line in lines[1:7]) == 6
    assert "6/6 points: 6 feasible, 0 infeasible, 0 failed" in captured.out
    assert "[6/6] 100%" in captured.err and "ETA" in captured.err
    rows = list(csv.DictReader(out_csv.open()))
    assert [int(r["rank"]) for r in rows] == [1, 2, 3, 4, 5, 6]
    assert sorted(int(r["block_m"]) for r in rows) == [1, 2, 4, 8, 16, 32]
    page = out_html.read_text()
    assert "<svg" in page and 'data-points="6"' in page and "://" not in page


def test_json_ranks_by_predicted_time_and_marks_infeasible_points(capsys):
    argv = ["sweep", "manual_gemm", "--target", "apple-m2", "--space", "resource=shared",
            "--space", "window=2", "--space", "block_k=64", "--space", "block_n=64,128",
            "--json", "--workers", "2", "--time-limit", "5"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["total"] == doc["done"] == 7 and doc["kernel"] == "manual_gemm"
    feasible = [r for r in doc["results"] if r["status"] == "optimal"]
    times = [r["predicted_ns"] for r in feasible]
    assert times == sorted(times)
    bad = [r for r in doc["results"] if r["status"] == "infeasible"]
    assert bad and all("> threadgroup_memory capacity 32,768 B" in r["reason"] for r in bad)
    assert doc["results"][-len(bad):] == bad  # infeasible after feasible


def test_measure_reports_spearman_rho(capsys):
    assert main([*SOFTMAX, "--measure", "--top", "4"]) == 0
    out = capsys.readouterr().out
    assert "measured" in out.splitlines()[0]
    assert "predicted vs measured rank over 4 points: Spearman rho = " in out


@pytest.mark.parametrize("bad", [["--space", "block_m=two"], ["--space", "nope=1"],
                                 ["--space", "block_m"], ["--policy", "fastest"]])
def test_a_bad_space_is_a_usage_error(bad, capsys):
    try:
        status = main([*SOFTMAX, *bad])
    except SystemExit as exc:  # argparse's own refusals
        status = exc.code
    assert status == 2
    assert "error" in capsys.readouterr().err


def test_a_kernel_without_a_space_is_a_usage_error(tmp_path, capsys):
    ir = tmp_path / "k.mlir"
    assert main(["show", "softmax", "--no-loc"]) == 0
    ir.write_text(capsys.readouterr().out)
    assert main(["sweep", str(ir)]) == 2
    assert "declares no configuration space" in capsys.readouterr().err


def test_ctrl_c_prints_the_finished_points(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PLANNER_CACHE_DIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "planner", "sweep", "manual_gemm", "--target", "apple-m2",
         "--space", "resource=shared", "--json", "--workers", "1", "--time-limit", "5"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    for line in proc.stderr:  # the first progress line: some points are done
        if line.startswith("[") or time.monotonic() > deadline:
            break
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130
    doc = json.loads(out)
    assert doc["interrupted"] is True
    assert 1 <= doc["done"] < doc["total"] == 135
    assert all(r["status"] in ("optimal", "infeasible") for r in doc["results"])
