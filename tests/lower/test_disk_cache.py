"""The on-disk cache of compiled CPU kernels (planner.lower.cpu.jit.DiskCache)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llvmlite")

from planner.lower.cpu.jit import DiskCache, cache_dir

# Compiles softmax (M=37, N=29: not multiples of the tile) on fixed inputs and prints the
# disk cache's counters and the output's checksum as one JSON line.
_CHILD = r"""
import json, sys
import numpy as np
import planner
from planner.lower.cpu.jit import default_disk_cache
x = np.random.default_rng(3).standard_normal((37, 29)).astype(np.float32)
out = planner.run("softmax", bindings={"M": 37, "N": 29}, inputs={"X": x}, check=True)
e = np.exp(x - x.max(axis=1, keepdims=True)); want = e / e.sum(axis=1, keepdims=True)
assert np.allclose(out["Y"], want, rtol=1e-5, atol=1e-6)
print(json.dumps({"stats": default_disk_cache().stats(), "y": out["Y"].tolist()}))
"""


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PLANNER_CACHE_DIR"] = str(root)
    env.pop("PLANNER_DISK_CACHE", None)
    return env


def _child(root: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                         env=_env(root), timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _entries(root: Path) -> list[Path]:
    return sorted((root / "jit").glob("*.obj"))


def test_cache_dir_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PLANNER_CACHE_DIR", str(tmp_path / "a"))
    assert cache_dir() == tmp_path / "a"
    monkeypatch.delenv("PLANNER_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "planner"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "planner"


def test_second_process_hits_the_disk_cache(tmp_path: Path) -> None:
    first = _child(tmp_path)
    assert first["stats"]["misses"] == 1 and first["stats"]["writes"] == 1
    assert first["stats"]["hits"] == 0
    assert len(_entries(tmp_path)) == 1
    second = _child(tmp_path)
    assert second["stats"]["hits"] == 1 and second["stats"]["writes"] == 0
    assert second["stats"]["misses"] == 0
    assert np.array_equal(np.array(first["y"]), np.array(second["y"]))


def test_concurrent_writers_leave_one_valid_entry(tmp_path: Path) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=_env(tmp_path))
             for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    entries = _entries(tmp_path)
    assert len(entries) == 1
    assert not [p for p in (tmp_path / "jit").iterdir() if p.suffix != ".obj"]  # no temps
    key = entries[0].stem
    assert DiskCache(tmp_path).load(key) is not None  # valid
    assert np.array_equal(np.array(results[0]["y"]), np.array(results[1]["y"]))
    third = _child(tmp_path)
    assert third["stats"]["hits"] == 1


@pytest.mark.parametrize("damage", ["truncate", "garbage", "flip"])
def test_corrupt_entry_is_rebuilt(tmp_path: Path, damage: str) -> None:
    first = _child(tmp_path)
    (entry,) = _entries(tmp_path)
    data = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        entry.write_bytes(b"not an entry")
    else:
        entry.write_bytes(data[:-10] + bytes(b ^ 0xFF for b in data[-10:]))
    again = _child(tmp_path)
    assert again["stats"]["corrupt"] == 1 and again["stats"]["writes"] == 1
    assert again["stats"]["hits"] == 0
    assert np.array_equal(np.array(first["y"]), np.array(again["y"]))
    assert entry.read_bytes() == data or DiskCache(tmp_path).load(entry.stem) is not None
    assert _child(tmp_path)["stats"]["hits"] == 1


def test_store_and_load_round_trip(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path)
    key = DiskCache.make_key("memkey", "ctx")
    assert key != DiskCache.make_key("memkey", "other")
    assert cache.load(key) is None and cache.misses == 1
    assert cache.store(key, "; ir", b"\x7fELF...")
    assert cache.load(key) == ("; ir", b"\x7fELF...") and cache.hits == 1
    # an entry stored under another key name is refused
    (tmp_path / "jit" / f"{'0' * 64}.obj").write_bytes((tmp_path / "jit" /
                                                         f"{key}.obj").read_bytes())
    assert cache.load("0" * 64) is None and cache.corrupt == 1


def test_unwritable_cache_dir_only_costs_the_cache(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cache = DiskCache(blocker)  # root is a file: mkdir fails
    assert not cache.store("k" * 64, "", b"obj")
    assert cache.errors == 1


def test_prune_keeps_the_most_recently_used_entries_within_the_cap(tmp_path: Path) -> None:
    """Equal entries against a cap of 2.5 entries: after the fourth store only the two most
    recently used remain, and an entry that was read survives older writes."""
    obj = b"\x7fELF" + bytes(996)
    probe = DiskCache(tmp_path / "probe", max_bytes=1 << 30)
    assert probe.store("f" * 64, "ir", obj)
    size = probe.path("f" * 64).stat().st_size
    cache = DiskCache(tmp_path, max_bytes=size * 5 // 2)
    keys = [f"{i:064x}" for i in range(4)]
    for i, key in enumerate(keys[:3]):
        assert cache.store(key, "ir", obj)
        os.utime(cache.path(key), (1_000 + i, 1_000 + i))
    assert not cache.path(keys[0]).exists()  # the third store pruned the oldest
    assert cache.load(keys[1]) is not None  # a hit makes keys[1] the most recent
    assert cache.store(keys[3], "ir", obj)
    assert {p.stem for p in _entries(tmp_path)} == {keys[1], keys[3]}
    assert cache.stats()["pruned"] == 2


def test_cache_cap_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    monkeypatch.setenv("PLANNER_CACHE_MAX_MB", "0.5")
    assert DiskCache(tmp_path).max_bytes == 512 * 1024
    monkeypatch.setenv("PLANNER_CACHE_MAX_MB", "lots")
    assert DiskCache(tmp_path).max_bytes == 512 << 20
