"""The backend registry (``planner.lower.backends``): one answer for CLI, survey and server.

Which backend a shipped catalog maps to is read from its YAML ``backend:`` field here
(pyyaml), never through the registry; a catalog with ``backend: null`` must be refused
as planning-only, with the same words from ``planner lower``/``run`` (in-process) and
from ``POST /v1/lower`` of a real server on loopback.  A plan saved for one target is
never lowered for another.
"""

from __future__ import annotations

import argparse
import json
import typing
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from live_http import checked_client

from planner.catalog import CatalogRegistry, Target
from planner.cli import build_parser, main
from planner.errors import PlannerError
from planner.ir.json_form import kernel_to_json
from planner.ir.load import load_kernel
from planner.lower.backends import (
    BACKENDS,
    backend_for,
    backend_named,
    emit_forms,
    find_backend,
)
from planner.server import Settings
from planner.solve import plan_kernel, plan_to_json

REGISTRY = CatalogRegistry([])  # the shipped catalogs only
SHIPPED = REGISTRY.list()
PLANNING_ONLY = [e.name for e in SHIPPED
                 if yaml.safe_load(e.path.read_text()).get("backend") is None]
#: Small shapes so that planning and lowering stay quick.
GEMM = ["--bind", "M=8", "--bind", "N=8", "--bind", "K=8"]
GEMM_BINDINGS = {"M": 8, "N": 8, "K": 8}


@cache
def target(name: str) -> Target:
    return REGISTRY.get(name)


def _refusal(name: str) -> str:
    with pytest.raises(PlannerError) as info:
        backend_for(target(name))
    assert info.value.kind == "unsupported"
    return info.value.diagnostics[0].message


# -- catalogs map to the backend their YAML names ------------------------------------------


def test_the_shipped_catalogs_include_both_kinds() -> None:
    names = {e.name for e in SHIPPED}
    assert {"x86-avx2", "apple-m2", "nvidia-h100", "npu-systolic"} <= names
    assert {"nvidia-h100", "npu-systolic"} <= set(PLANNING_ONLY)


@pytest.mark.parametrize("entry", SHIPPED, ids=lambda e: e.name)
def test_every_shipped_catalog_maps_to_the_backend_its_yaml_names(entry: Any) -> None:
    declared = yaml.safe_load(entry.path.read_text()).get("backend")
    tgt = target(entry.name)
    if declared is None:
        message = _refusal(entry.name)
        assert find_backend(tgt) is None
        assert f"target {entry.name} is planning-only" in message
        assert "backend: null" in message
        for b in BACKENDS:
            assert f"{b.name} ({b.serves.value})" in message
        return
    backend = backend_for(tgt)
    assert backend.serves.value == declared
    assert [b for b in BACKENDS if b.serves.value == declared] == [backend]
    assert backend is find_backend(tgt)


def test_each_backend_has_its_forms() -> None:
    assert [b.name for b in BACKENDS] == ["cpu", "metal"]
    cpu, metal = backend_named("cpu"), backend_named("metal")
    assert (cpu.serves.value, cpu.forms, cpu.default_form) == \
        ("llvm-cpu", ("loops", "llvm", "asm"), "loops")
    assert (metal.serves.value, metal.forms, metal.default_form) == \
        ("metal", ("loops", "msl"), "msl")
    assert emit_forms() == ("loops", "llvm", "asm", "msl")
    with pytest.raises(PlannerError, match="no backend named 'cuda'"):
        backend_named("cuda")


def test_the_cli_and_the_server_offer_the_registry_forms() -> None:
    from planner.server.models import LowerRequest

    sub = next(a for a in build_parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    emit = next(a for a in sub.choices["lower"]._actions if a.dest == "emit")
    assert tuple(emit.choices) == emit_forms()
    from planner.server.models import EmitForm
    assert LowerRequest.model_fields["emit"].default is None  # the backend's default form
    assert set(typing.get_args(EmitForm)) == set(emit_forms())


# -- emitting --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gemm() -> Any:
    return load_kernel("gemm").kernel


@pytest.fixture(scope="module")
def x86_plan(gemm: Any) -> Any:
    return plan_kernel(gemm, target("x86-avx2"), GEMM_BINDINGS, time_limit_s=5)


@pytest.fixture(scope="module")
def m2_plan(gemm: Any) -> Any:
    return plan_kernel(gemm, target("apple-m2"), GEMM_BINDINGS, time_limit_s=5)


def test_each_form_emits(gemm: Any, x86_plan: Any, m2_plan: Any) -> None:
    x86, m2 = target("x86-avx2"), target("apple-m2")
    cpu, metal = backend_for(x86), backend_for(m2)
    assert cpu.emit(gemm, x86_plan, x86, "loops") == cpu.emit(gemm, x86_plan, x86)
    assert "define " in cpu.emit(gemm, x86_plan, x86, "llvm")
    assert cpu.emit(gemm, x86_plan, x86, "asm").strip()
    assert "kernel void gemm(" in metal.emit(gemm, m2_plan, m2)
    assert metal.emit(gemm, m2_plan, m2, "loops").strip()


@pytest.mark.parametrize(("name", "form", "supported"), [
    ("x86-avx2", "msl", "loops, llvm, asm"),
    ("apple-m2", "llvm", "loops, msl"),
    ("apple-m2", "asm", "loops, msl"),
])
def test_an_unsupported_form_is_refused_with_the_supported_ones(
        gemm: Any, x86_plan: Any, name: str, form: str, supported: str) -> None:
    tgt = target(name)
    with pytest.raises(PlannerError) as info:
        backend_for(tgt).emit(gemm, x86_plan, tgt, form)
    message = info.value.diagnostics[0].message
    assert info.value.kind == "unsupported"
    assert message.startswith(f"emit {form} needs ") and f"which emits {supported}" in message
    assert name in message


def test_an_unknown_form_and_a_foreign_target_are_refused(gemm: Any, x86_plan: Any) -> None:
    x86 = target("x86-avx2")
    with pytest.raises(PlannerError, match=r"'ptx' is not a form any backend emits \(forms: "
                       r"loops, llvm, asm, msl\)"):
        backend_for(x86).emit(gemm, x86_plan, x86, "ptx")
    with pytest.raises(PlannerError, match="the metal backend lowers metal targets; x86-avx2 "
                       "has backend: llvm-cpu"):
        backend_named("metal").emit(gemm, x86_plan, x86, "loops")
    with pytest.raises(PlannerError, match="nvidia-h100 has backend: null"):
        backend_named("cpu").run(gemm, x86_plan, target("nvidia-h100"), GEMM_BINDINGS)


def test_run_checks_against_the_interpreter(gemm: Any, x86_plan: Any) -> None:
    x86 = target("x86-avx2")
    result = backend_for(x86).run(gemm, x86_plan, x86, GEMM_BINDINGS, threads=1)
    assert result.ok is True and result.verdict.startswith("check ok")
    assert result.summary.startswith("matches reference")
    strict = backend_for(x86).run(gemm, x86_plan, x86, {"M": 40, "N": 40, "K": 40},
                                  rtol=0, atol=0, threads=1)
    assert strict.ok is False and "MISMATCH" in strict.report
    assert "disagrees with the reference interpreter on C" in strict.verdict
    unchecked = backend_for(x86).run(gemm, x86_plan, x86, GEMM_BINDINGS, check=False)
    assert unchecked.ok is None and unchecked.lines == ()


def test_unavailable_says_why_this_machine_cannot_run_a_target() -> None:
    from planner.catalog import missing_host_features
    from planner.lower.metal.emulator import clang_available

    for name in ("x86-avx2", "x86-avx512"):
        missing = missing_host_features(target(name))
        reason = backend_for(target(name)).unavailable(target(name))
        assert (reason is None) == (not missing)
        assert reason is None or all(f in reason for f in missing)
    m2 = target("apple-m2")
    assert (backend_for(m2).unavailable(m2) is None) == clang_available()


def test_survey_runs_what_this_machine_can_and_skips_the_rest(
        capsys: pytest.CaptureFixture[str]) -> None:
    from planner.catalog import missing_host_features

    assert main(["survey", "--example", "softmax", "--target", "x86-avx512",
                 "--target", "nvidia-h100"]) == 0
    lines = capsys.readouterr().out.splitlines()
    avx512 = next(line for line in lines if " x86-avx512 " in line)
    want = "skipped: this machine's CPU" if missing_host_features(target("x86-avx512")) \
        else "matches reference"
    assert want in avx512
    assert next(line for line in lines if " nvidia-h100 " in line).endswith("  -")


# -- CLI and server: one answer for a planning-only target ----------------------------------


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    settings = Settings(writable_catalog_dir=tmp_path_factory.mktemp("catalogs"),
                        pool_workers=2, default_time_limit_s=5.0, max_time_limit_s=5.0)
    with checked_client(settings) as client:
        yield client


@pytest.mark.parametrize("name", PLANNING_ONLY)
def test_cli_and_server_refuse_a_planning_only_target_alike(
        name: str, http: httpx.Client, gemm: Any, capsys: pytest.CaptureFixture[str]) -> None:
    message = _refusal(name)
    for argv in (["lower", "gemm", "--target", name, *GEMM],
                 ["lower", "gemm", "--target", name, "--emit", "loops", *GEMM],
                 ["run", "gemm", "--target", name, "--check", *GEMM]):
        assert main(argv) == 1
        out, err = capsys.readouterr()
        assert out == "" and message in err, (argv, err)
    for emit in ("loops", "llvm", "msl"):
        r = http.post("/v1/lower", json={"kernel": kernel_to_json(gemm),
                                         "bindings": GEMM_BINDINGS, "target": name,
                                         "emit": emit})
        assert r.status_code == 400, r.text
        assert r.json()["kind"] == "unsupported"  # an RFC 9457 problem
        assert r.json()["detail"] == message


def test_cli_and_server_refuse_an_unsupported_form_alike(
        http: httpx.Client, gemm: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lower", "gemm", "--target", "apple-m2", "--emit", "llvm", *GEMM]) == 1
    err = capsys.readouterr().err
    r = http.post("/v1/lower", json={"kernel": kernel_to_json(gemm), "bindings": GEMM_BINDINGS,
                                     "target": "apple-m2", "emit": "llvm"})
    assert r.status_code == 400, r.text
    message = r.json()["detail"]
    assert message.startswith("emit llvm needs an llvm-cpu target; apple-m2")
    assert f"--{message}" in err


def test_the_server_lowers_msl_for_a_metal_target(http: httpx.Client, gemm: Any) -> None:
    r = http.post("/v1/lower", json={"kernel": kernel_to_json(gemm), "bindings": GEMM_BINDINGS,
                                     "target": "apple-m2", "emit": "msl"})
    assert r.status_code == 200, r.text
    assert "kernel void gemm(" in r.json()["code"]


# -- a plan is lowered only for its own target ----------------------------------------------


@pytest.fixture(scope="module")
def m2_plan_file(tmp_path_factory: pytest.TempPathFactory, m2_plan: Any) -> Path:
    path = tmp_path_factory.mktemp("plans") / "gemm-apple-m2.json"
    path.write_text(json.dumps(plan_to_json(m2_plan)))
    return path


@pytest.mark.parametrize("command", [["lower"], ["run", "--check"]])
def test_a_plan_for_apple_m2_is_refused_on_x86(command: list[str], m2_plan_file: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    name, *rest = command
    assert main([name, "gemm", *rest, "--plan", str(m2_plan_file), "--target", "x86-avx2",
                 *GEMM]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "was made for target apple-m2, not x86-avx2" in err


def test_a_plan_lowers_for_its_own_target(m2_plan_file: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    for extra in ([], ["--target", "apple-m2"]):
        assert main(["lower", "gemm", "--plan", str(m2_plan_file), *extra, *GEMM]) == 0
        assert "kernel void gemm(" in capsys.readouterr().out
