"""The CPU backend compiles a plan for its target catalog's figures, never the host's.

An x86-avx2 plan gets 8-lane (ymm) code and AVX2+FMA features even on an AVX-512 machine
(simulated here by faking LLVM's host detection, and real where the host has AVX-512);
an x86-avx512 plan gets 16-lane (zmm) code, which is only compiled and inspected unless
the host has every AVX-512 feature the catalog lists; elsewhere calling it is refused
with a PlannerError instead of dying on an illegal instruction.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

import numpy as np
import pytest

from planner.catalog import CatalogRegistry, Target
from planner.cli import main
from planner.errors import PlannerError
from planner.ir.examples import list_examples, load_example
from planner.ir.interpreter import interpret, random_inputs
from planner.lower import CompiledKernel, compile_kernel
from planner.lower.cpu import jit
from planner.lower.cpu.config import CodegenConfig
from planner.lower.cpu.gemm import GemmConfig
from planner.lower.cpu.jit import TargetSpec, catalog_target, missing_features
from planner.lower.cpu.runtime import KernelCache, host_refusal
from planner.solve.planner import plan_kernel

EXAMPLES = {p.stem: p for p in list_examples()}
#: The x86-avx512 catalog's AVX-512 features (x86-64-v4), as /proc/cpuinfo spells them.
AVX512 = ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")
ELEMENTWISE = ("softmax", "gelu", "layernorm")


def cpuinfo_flags() -> set[str]:
    path = Path("/proc/cpuinfo")
    if not path.is_file():
        return set()
    for line in path.read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


HOST_HAS_AVX512 = set(AVX512) <= cpuinfo_flags()
needs_x86 = pytest.mark.skipif(not jit.host_target().triple.startswith("x86_64"),
                               reason="x86-64 host only")
pytestmark = needs_x86


@functools.cache
def target(name: str) -> Target:
    return CatalogRegistry().get(name)


@functools.cache
def example(name: str):  # -> planner.ir.examples.Example
    return load_example(EXAMPLES[name])


def compiled(name: str, target_name: str, cache: KernelCache | None = None) -> CompiledKernel:
    ex = example(name)
    tgt = target(target_name)
    return compile_kernel(ex.kernel, plan_kernel(ex.kernel, tgt, ex.bindings), tgt, cache=cache)


def widths(ir_text: str) -> set[int]:
    """The lane counts of every ``<N x float>`` in ``ir_text`` but the halves a row
    reduction's horizontal tree narrows the accumulator to (``w/2`` .. 1 lanes, each
    the result of a ``shufflevector``)."""
    halves = {int(n) for n in re.findall(
        r"= shufflevector <\d+ x float> [^,]+, <\d+ x float> [^,]+, <(\d+) x i32>", ir_text)}
    every = {int(n) for n in re.findall(r"<(\d+) x float>", ir_text)}
    return {n for n in every if n == max(every) or n not in halves} - {1}


def fake_host(monkeypatch: pytest.MonkeyPatch, cpu: str, avx512: bool) -> TargetSpec:
    """Make LLVM's host detection report ``cpu`` with (or without) AVX-512."""
    real = jit.host_target()
    feats = [f for f in real.features.split(",") if not f[1:].startswith("avx512")]
    feats += [f"{'+' if avx512 else '-'}{f}" for f in AVX512]
    spec = TargetSpec(real.triple, cpu, ",".join(feats))
    monkeypatch.setitem(jit._host_state, "spec", spec)
    return spec


def check_avx2_code(ck: CompiledKernel) -> None:
    assert ck.target_spec.cpu == "x86-64-v3"
    feats = ck.target_spec.features.split(",")
    assert {"+avx2", "+fma"} <= set(feats) and "-avx512f" in feats
    assert not any(f.startswith("+avx512") for f in feats)
    assert re.search(r"\bzmm\d", ck.asm) is None, "512-bit registers in x86-avx2 code"
    assert "ymm" in ck.asm


# --------------------------------------------------------------------------- x86-avx2


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_avx2_plan_uses_8_lanes_and_no_zmm(name: str) -> None:
    ck = compiled(name, "x86-avx2")
    assert widths(ck.emitted_ir) == {8}  # the elementwise loops: <8 x float> only
    assert "<8 x float>" in ck.llvm_ir and "<16 x float>" not in ck.llvm_ir
    check_avx2_code(ck)


@pytest.mark.parametrize("name", [*ELEMENTWISE, "gemm", "attention"])
def test_avx2_plan_ignores_an_avx512_host(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With LLVM reporting an AVX-512 host, the code is the same ymm code (compiled only:
    the faked host is not the real one)."""
    fake_host(monkeypatch, "sapphirerapids", avx512=True)
    assert jit.host_target().has_feature("avx512f")
    ck = compiled(name, "x86-avx2", cache=KernelCache())
    assert ck.runnable
    assert 16 not in widths(ck.emitted_ir) and 8 in widths(ck.emitted_ir)
    check_avx2_code(ck)


def test_avx2_plan_runs_where_the_host_has_avx512_too() -> None:
    """On a real AVX-512 machine (or this one) the x86-avx2 code runs and is correct."""
    ex = example("softmax")
    ck = compiled("softmax", "x86-avx2")
    check_avx2_code(ck)
    inputs = random_inputs(ex.kernel, ex.bindings, 3)
    want = interpret(ex.kernel, inputs, ex.bindings)
    got = ck({k: v.copy() for k, v in inputs.items()})
    np.testing.assert_allclose(got["Y"], want["Y"], rtol=2e-5, atol=2e-5)


def test_config_comes_from_the_catalog_figures() -> None:
    avx2, avx512 = target("x86-avx2"), target("x86-avx512")
    assert CodegenConfig.for_target(avx2) == CodegenConfig(
        vector_width=8, registers=16, gemm=GemmConfig.avx2())  # 512 B / 32 B
    assert CodegenConfig.for_target(avx512) == CodegenConfig(
        vector_width=16, registers=32, gemm=GemmConfig.avx512())  # 2048 B / 64 B
    with pytest.raises(PlannerError, match="no 'cpu' section"):
        CodegenConfig.for_target(target("apple-m2"))


def test_register_budget_sizes_the_gemm_tile() -> None:
    """A catalog with half the registers gets a smaller micro-kernel tile, still correct."""
    base = target("x86-avx2")
    small = dataclasses.replace(base, resources=tuple(
        dataclasses.replace(r, capacity=256) if r.name == "registers" else r
        for r in base.resources))
    config = CodegenConfig.for_target(small)
    assert config.registers == 8 and config.vector_width == 8
    assert config.gemm is not None and (config.gemm.mr, config.gemm.nr) == (2, 16)
    assert 2 * config.gemm.mr + 2 + 1 <= config.registers  # accumulators + B + broadcast
    ex = example("gemm")
    bindings = dict(M=70, N=45, K=300)
    ck = compile_kernel(ex.kernel, plan_kernel(ex.kernel, small, bindings), small,
                        cache=KernelCache())
    inputs = random_inputs(ex.kernel, bindings, 1)
    got = ck({k: v.copy() for k, v in inputs.items()}, bindings=bindings)
    want = interpret(ex.kernel, inputs, bindings)
    np.testing.assert_allclose(got["C"], want["C"], rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- x86-avx512


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_avx512_plan_uses_16_lanes(name: str) -> None:
    ck = compiled(name, "x86-avx512")
    assert widths(ck.emitted_ir) == {16}
    assert "<16 x float>" in ck.llvm_ir
    assert ck.target_spec.cpu == "x86-64-v4" and ck.target_spec.has_feature("avx512f")
    assert re.search(r"\bzmm\d", ck.asm)
    assert ck.runnable == (not missing_features(ck.target_spec))


def test_avx512_plan_is_refused_where_avx512_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiling works (IR, asm); calling names the target, the features and the host."""
    fake_host(monkeypatch, "fake-avx2-only", avx512=False)
    ex = example("softmax")
    ck = compiled("softmax", "x86-avx512", cache=KernelCache())
    assert not ck.runnable and "zmm" in ck.asm
    with pytest.raises(PlannerError) as info:
        ck(random_inputs(ex.kernel, ex.bindings, 0))
    assert info.value.kind == "unsupported"
    message = info.value.diagnostics[0].message
    assert ck.refusal == message == host_refusal("x86-avx512")
    assert host_refusal(target("x86-avx2")) is None and host_refusal() is None
    assert "'x86-avx512'" in message and "'fake-avx2-only'" in message
    assert ", ".join(AVX512) in message


@pytest.mark.skipif(HOST_HAS_AVX512, reason="the host has AVX-512")
def test_avx512_plan_is_refused_on_this_avx2_host() -> None:
    ex = example("gelu")
    ck = compiled("gelu", "x86-avx512")
    assert not ck.runnable
    with pytest.raises(PlannerError, match=r"target 'x86-avx512' .* host CPU "
                       rf"'{re.escape(jit.host_target().cpu)}' lacks avx512f"):
        ck(random_inputs(ex.kernel, ex.bindings, 0))


@pytest.mark.skipif(not HOST_HAS_AVX512, reason="the host has no AVX-512")
@pytest.mark.parametrize("name", ["softmax", "gelu", "layernorm", "gemm", "attention"])
def test_avx512_plan_matches_interpreter_on_an_avx512_host(name: str) -> None:
    ex = example(name)
    ck = compiled(name, "x86-avx512")
    assert ck.runnable
    inputs = random_inputs(ex.kernel, ex.bindings, 2)
    want = interpret(ex.kernel, inputs, ex.bindings)
    got = ck({k: v.copy() for k, v in inputs.items()})
    for k, w in want.items():
        np.testing.assert_allclose(got[k], w, rtol=2e-5, atol=2e-5, equal_nan=True)


# --------------------------------------------------------------------------- jit and CLI


def test_catalog_target_spec() -> None:
    spec = catalog_target(target("x86-avx2").cpu)
    assert spec.triple == jit.host_target().triple and spec.cpu == "x86-64-v3"
    assert spec.features.split(",")[-1] == "-avx512f"
    assert spec.features.count("+") == len(target("x86-avx2").cpu.llvm_features)
    wide = catalog_target(target("x86-avx512").cpu)
    assert wide.cpu == "x86-64-v4" and "-avx512f" not in wide.features
    assert all(wide.has_feature(f) for f in AVX512)


def test_missing_features_against_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    wide = catalog_target(target("x86-avx512").cpu)
    assert missing_features(catalog_target(target("x86-avx2").cpu)) == ()
    assert missing_features(wide) == (() if HOST_HAS_AVX512 else AVX512)
    fake_host(monkeypatch, "fake", avx512=False)
    assert missing_features(wide) == AVX512


def test_cli_lower_asm_follows_the_target(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lower", "softmax", "--target", "x86-avx2", "--emit", "asm"]) == 0
    out = capsys.readouterr().out
    assert "ymm" in out and re.search(r"\bzmm\d", out) is None
    assert main(["lower", "softmax", "--target", "x86-avx512", "--emit", "asm"]) == 0
    assert re.search(r"\bzmm\d", capsys.readouterr().out)
    assert main(["lower", "gelu", "--target", "x86-avx512", "--emit", "llvm"]) == 0
    assert "<16 x float>" in capsys.readouterr().out


@pytest.mark.skipif(HOST_HAS_AVX512, reason="the host has AVX-512")
def test_cli_run_avx512_on_this_host_is_a_diagnostic(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "softmax", "--target", "x86-avx512", "--check",
                 "--bind", "M=5", "--bind", "N=3"]) == 1
    err = capsys.readouterr().err
    assert "target 'x86-avx512'" in err and "lacks avx512f" in err


def test_cli_run_host_target_checks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "softmax", "--target", "host", "--check", "--repeat", "1",
                 "--bind", "M=5", "--bind", "N=19"]) == 0
    out = capsys.readouterr().out
    expected = "x86-avx512" if HOST_HAS_AVX512 else "x86-avx2"
    assert f"softmax on {expected} " in out and "check ok" in out
