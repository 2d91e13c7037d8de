"""The search path: user directories before the built-in one, overrides, cache, unknowns."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from planner.catalog import (
    BUILTIN_DIR,
    CATALOG_PATH_ENV,
    CatalogEntry,
    CatalogRegistry,
    env_catalog_dirs,
)
from planner.errors import PlannerError


def _write(directory: Path, text: str, name: str = "tiny") -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(text.replace("name: tiny", f"name: {name}", 1))
    return path


def test_catalog_in_extra_dir_is_found_and_used(tmp_path, tiny):
    path = _write(tmp_path, tiny)
    registry = CatalogRegistry([tmp_path])
    assert CatalogEntry("tiny", path, None) in registry.list()
    target = registry.get("tiny")
    assert target.source == str(path) and target.resource("scratch").capacity == 49152
    assert "x86-avx2" in registry.names()  # the built-ins stay visible


def test_user_file_overrides_builtin_and_list_says_so(tmp_path, tiny):
    path = _write(tmp_path, tiny, "x86-avx2")
    registry = CatalogRegistry([tmp_path])
    entry = next(e for e in registry.list() if e.name == "x86-avx2")
    assert entry == (("x86-avx2", path, BUILTIN_DIR / "x86-avx2.yaml"))
    assert registry.get("x86-avx2").source == str(path)
    assert registry.get("x86-avx2").resources[0].name == "scratch"
    assert next(e for e in registry.list() if e.name == "apple-m2").overrides is None


def test_earlier_directory_wins(tmp_path, tiny):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    _write(first, tiny)
    _write(second, tiny.replace("latency: 20", "latency: 21"))
    registry = CatalogRegistry([first, second])
    assert registry.get("tiny").resource("scratch").latency == 20
    entry = next(e for e in registry.list() if e.name == "tiny")
    assert entry == ("tiny", first / "tiny.yaml", second / "tiny.yaml")


def test_environment_directories(tmp_path, tiny):
    _write(tmp_path, tiny)
    environ = {CATALOG_PATH_ENV: os.pathsep.join(["", str(tmp_path), str(tmp_path / "gone")])}
    assert env_catalog_dirs(environ) == [tmp_path]
    assert CatalogRegistry.from_environment([], environ).get("tiny").name == "tiny"
    assert "tiny" not in CatalogRegistry.from_environment([], {}).names()


def test_unknown_target_lists_known_names():
    registry = CatalogRegistry()
    with pytest.raises(PlannerError) as info:
        registry.get("nvidia-h10")
    assert info.value.kind == "unknown-target"
    message = info.value.diagnostics[0].message
    assert message.startswith("unknown target 'nvidia-h10' (did you mean 'nvidia-h100'?); "
                              "known targets: apple-m2, ")
    with pytest.raises(PlannerError, match=r"unknown target '\.\./catalogs/x86-avx2'"):
        registry.get("../catalogs/x86-avx2")  # names never reach outside the search path


def test_missing_extra_directory_is_an_error(tmp_path):
    with pytest.raises(PlannerError, match="does not exist") as info:
        CatalogRegistry([tmp_path / "nope"])
    assert info.value.kind == "catalog"


def test_cache_by_mtime_and_content_hash(tmp_path, tiny):
    path = _write(tmp_path, tiny)
    registry = CatalogRegistry([tmp_path])
    first = registry.get("tiny")
    assert registry.get("tiny") is first
    os.utime(path, ns=(1, 1))  # touched, same text: the hash keeps the cached target
    assert registry.get("tiny") is first
    path.write_text(path.read_text().replace("latency: 20", "latency: 25"))
    os.utime(path, ns=(2, 2))
    changed = registry.get("tiny")
    assert changed.resource("scratch").latency == 25
    assert changed.content_hash != first.content_hash


def test_invalid_user_catalog_reports_its_path(tmp_path, tiny):
    path = _write(tmp_path, tiny.replace("capacity: 48 KiB", "capacity: 48KB"))
    with pytest.raises(PlannerError) as info:
        CatalogRegistry([tmp_path]).get("tiny")
    assert info.value.render().startswith(f"{path}:11:15: error: resources[0].capacity:")
