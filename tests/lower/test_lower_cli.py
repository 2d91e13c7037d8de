"""``planner lower`` / ``run`` dispatch on the catalog's backend; ``planner survey``."""

from __future__ import annotations

from toolchain import needs_clang

from planner.cli import main


@needs_clang
def test_metal_target_lowers_to_msl_and_runs_in_the_emulator(capsys):
    assert main(["lower", "softmax", "--target", "apple-m2"]) == 0
    assert "kernel void softmax(" in capsys.readouterr().out
    assert main(["run", "gemm", "--target", "apple-m2", "--check",
                 "--bind", "M=13", "--bind", "N=9", "--bind", "K=7"]) == 0
    out = capsys.readouterr().out
    assert "forward" in out and "reverse" in out and "check ok" in out


def test_cpu_target_runs_and_checks(capsys):
    assert main(["run", "softmax", "--check", "--bind", "M=5", "--bind", "N=3"]) == 0
    assert "check ok" in capsys.readouterr().out


def test_backend_mismatches_are_diagnostics(capsys):
    assert main(["run", "gemm", "--target", "nvidia-h100", "--check"]) == 1
    assert "planning-only" in capsys.readouterr().err
    assert main(["lower", "gemm", "--emit", "msl"]) == 1
    assert "--emit msl needs a Metal target" in capsys.readouterr().err
    assert main(["lower", "gemm", "--target", "apple-m2", "--emit", "llvm"]) == 1
    assert "needs an llvm-cpu target" in capsys.readouterr().err


@needs_clang
def test_survey_plans_and_runs_every_pair(capsys):
    assert main(["survey", "--example", "softmax", "--target", "x86-avx2",
                 "--target", "apple-m2", "--target", "npu-systolic"]) == 0
    out = capsys.readouterr().out
    assert "matches reference" in out and "emulated Metal matches reference" in out
    assert out.rstrip().splitlines()[-1] == (  # npu-systolic plans (staged by DMA), no backend
        "2 ran and matched, 1 planned, not run (no backend, or the host cannot run the "
        "target), 0 infeasible, 0 failed")
