"""The ``cpu`` section (what llvm-cpu code is compiled for) and ``--target host``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import planner.cli
from planner.catalog import (
    BUILTIN_DIR,
    CATALOG_PATH_ENV,
    HOST_CANDIDATES,
    HOST_TARGET,
    Backend,
    CatalogRegistry,
    CpuIsa,
    catalog_json_schema,
    host_target_name,
    load_target_file,
    load_target_text,
    missing_host_features,
)
from planner.errors import PlannerError


def edit(text: str, *replacements: tuple[str, str]) -> str:
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text

CPU = "cpu:\n  vector_width: 8\n  llvm_cpu: x86-64-v3\n  llvm_features: [avx2, fma]\n"
LLVM = ("backend: null", "backend: llvm-cpu")
AVX512 = ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")
CPU_CATALOGS = [p for p in sorted(BUILTIN_DIR.glob("*.yaml"))
                if load_target_file(p).backend is Backend.LLVM_CPU]


def cpuinfo_flags() -> set[str]:
    path = Path("/proc/cpuinfo")
    for line in path.read_text().splitlines() if path.is_file() else ():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@pytest.fixture(autouse=True)
def no_environment_catalogs(monkeypatch):
    monkeypatch.delenv(CATALOG_PATH_ENV, raising=False)


# --------------------------------------------------------------------------- the section


def test_cpu_section_is_read(tiny):
    target = load_target_text(edit(tiny, LLVM) + CPU, "tiny.yaml")
    assert target.cpu == CpuIsa(8, "x86-64-v3", ("avx2", "fma"))
    assert (target.cpu.loc.line, target.cpu.loc.col) == (31, 3)
    assert load_target_text(tiny, "tiny.yaml").cpu is None  # optional without llvm-cpu


def test_shipped_cpu_catalogs():
    assert {p.stem for p in CPU_CATALOGS} == {"x86-avx2", "x86-avx512"}
    for path in CPU_CATALOGS:
        target = load_target_file(path)
        assert target.cpu is not None
        lanes = target.children(target.default_parallel_scope)[0]
        assert lanes.extent == target.cpu.vector_width  # the lane scope says the same
        regs = target.resolve("private", target.default_parallel_scope)
        assert regs is not None and regs.alignment == 4 * target.cpu.vector_width
    avx2 = load_target_file(BUILTIN_DIR / "x86-avx2.yaml")
    avx512 = load_target_file(BUILTIN_DIR / "x86-avx512.yaml")
    assert (avx2.cpu.vector_width, avx2.resource("registers").capacity) == (8, 512)
    assert (avx512.cpu.vector_width, avx512.resource("registers").capacity) == (16, 2048)
    assert {"avx2", "fma"} <= set(avx2.cpu.llvm_features)
    assert not any(f.startswith("avx512") for f in avx2.cpu.llvm_features)
    assert set(avx2.cpu.llvm_features) < set(avx512.cpu.llvm_features)
    assert set(AVX512) <= set(avx512.cpu.llvm_features)


def test_llvm_cpu_backend_needs_the_section(catalog_errors):
    assert catalog_errors(LLVM) == [
        "tiny.yaml:2:10: error: backend: backend llvm-cpu needs a 'cpu' section "
        "(vector_width, llvm_cpu, llvm_features): code is compiled for the target, not the "
        "host",
    ]


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("width: 8", "width: 12", "tiny.yaml:31:17: error: cpu.vector_width: expected a vector "
                              "width in fp32 lanes (4, 8, 16), got '12'"),
    ("width: 8", "width: true", "tiny.yaml:31:17: error: cpu.vector_width: expected a vector "
                                "width in fp32 lanes (4, 8, 16), got 'true'"),
    ("x86-64-v3", "native", "tiny.yaml:32:13: error: cpu.llvm_cpu: 'native' names the machine "
                            "the code happens to be compiled on; name the CPU the target "
                            "describes (e.g. x86-64-v3)"),
    ("[avx2, fma]", "[avx2, fma, avx2]",
     "tiny.yaml:33:30: error: cpu.llvm_features[2]: feature 'avx2' listed twice"),
    ("[avx2, fma]", "[+avx2]", "tiny.yaml:33:19: error: cpu.llvm_features[0]: '+avx2' is not a "
                               "valid LLVM name (lower-case letters, digits, '-', '_' and '.', "
                               "without a leading '+' or '-')"),
])
def test_bad_cpu_values_are_located(catalog_errors, tiny, old, new, expected):
    assert catalog_errors(text=edit(tiny, LLVM) + edit(CPU, (old, new))) == [expected]


def test_unknown_cpu_key(catalog_errors, tiny):
    assert catalog_errors(text=edit(tiny, LLVM) + edit(CPU, ("llvm_cpu", "llvm_cpus"))) == [
        "tiny.yaml:31:3: error: cpu: missing required key 'llvm_cpu'",
        "tiny.yaml:32:3: error: cpu: unknown key 'llvm_cpus' (did you mean 'llvm_cpu'?)",
    ]


def test_json_schema_has_the_section():
    jsonschema = pytest.importorskip("jsonschema")
    schema = catalog_json_schema()
    cpu = schema["$defs"]["Cpu"]
    assert cpu["properties"]["vector_width"]["enum"] == [4, 8, 16]
    assert set(cpu["required"]) == {"vector_width", "llvm_cpu", "llvm_features"}
    validator = jsonschema.Draft202012Validator(schema)
    document = yaml.safe_load((BUILTIN_DIR / "x86-avx2.yaml").read_text())
    assert not list(validator.iter_errors(document))
    document["cpu"]["vector_width"] = 12
    assert [e.json_path for e in validator.iter_errors(document)] == ["$.cpu.vector_width"]
    del document["cpu"]  # llvm-cpu without cpu: the schema says so too
    assert [e.validator for e in validator.iter_errors(document)] == ["required"]
    document["backend"] = None
    assert not list(validator.iter_errors(document))


def test_validate_command_accepts_the_new_catalog(capsys):
    assert planner.cli.main(["catalog", "validate", str(BUILTIN_DIR / "x86-avx512.yaml")]) == 0
    assert "ok" in capsys.readouterr().out


# --------------------------------------------------------------------------- host


def expected_host_target() -> str:
    """What ``host`` must be here, from /proc/cpuinfo (not from LLVM, as the code does)."""
    return "x86-avx512" if set(AVX512) <= cpuinfo_flags() else "x86-avx2"


needs_x86_linux = pytest.mark.skipif(not {"avx2", "fma"} <= cpuinfo_flags(),
                                     reason="needs an x86-64 Linux host with AVX2+FMA")


@needs_x86_linux
def test_host_resolves_to_the_matching_catalog():
    registry = CatalogRegistry()
    name = expected_host_target()
    assert HOST_CANDIDATES == ("x86-avx512", "x86-avx2")
    assert host_target_name(registry) == registry.resolve_name(HOST_TARGET) == name
    assert registry.get("host").name == name
    assert registry.get("host") is registry.get(name)
    assert registry.path("host") == BUILTIN_DIR / f"{name}.yaml"
    assert missing_host_features(registry.get(name)) == ()
    assert registry.resolve_name("apple-m2") == "apple-m2"


@needs_x86_linux
def test_host_candidates_need_every_listed_feature(tmp_path):
    """A candidate that lists a feature the machine lacks is passed over."""
    text = (BUILTIN_DIR / "x86-avx512.yaml").read_text()
    (tmp_path / "x86-avx512.yaml").write_text(
        edit(text, ("avx512vl]", "avx512vl, nosuchfeature]")))
    registry = CatalogRegistry([tmp_path])
    assert "nosuchfeature" in missing_host_features(registry.get("x86-avx512"))
    assert registry.get("host").name == "x86-avx2"


@needs_x86_linux
def test_no_matching_catalog_is_an_error(tmp_path):
    text = (BUILTIN_DIR / "x86-avx2.yaml").read_text()
    (tmp_path / "x86-avx2.yaml").write_text(edit(text, ("xsave]", "xsave, nosuchfeature]")))
    registry = CatalogRegistry(builtin_dir=tmp_path)  # no x86-avx512 at all
    with pytest.raises(PlannerError) as info:
        registry.get("host")
    assert info.value.kind == "unknown-target"
    message = info.value.diagnostics[0].message
    assert message.startswith("no target catalog matches this machine (host CPU '")
    assert message.endswith("x86-avx2 (lacks nosuchfeature)")
    with pytest.raises(PlannerError, match="none of x86-avx512, x86-avx2 is a known target"):
        CatalogRegistry(builtin_dir=tmp_path / "empty").get("host")


@needs_x86_linux
@pytest.mark.parametrize("command", [["plan", "softmax"], ["check", "softmax"],
                                     ["catalog", "show"], ["lower", "gelu"]])
def test_cli_commands_accept_host(command, capsys):
    args = [*command, "host"] if command[0] == "catalog" else [*command, "--target", "host"]
    assert planner.cli.main(args) == 0
    out = capsys.readouterr().out
    assert expected_host_target() in out
