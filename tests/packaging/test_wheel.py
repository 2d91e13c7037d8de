"""The wheel stands alone: built from the checkout, installed into a fresh virtual
environment, it has its catalogs, its examples and the service, and ``planner survey``
runs from a directory outside the checkout.

The venv sees the already-installed dependencies (``--system-site-packages``, so no
network is needed) but its own copy of ``planner`` from the wheel, which the test checks
by the imported file's location.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("wheel")
    # build isolation: the build backend comes from the package index, as on a user's machine
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True)
    (wheel,) = out.glob("planner-*.whl")
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, capture_output=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True)
    return wheel, venv


def test_the_wheel_holds_catalogs_examples_and_the_service(wheel_env) -> None:
    wheel, _ = wheel_env
    names = zipfile.ZipFile(wheel).namelist()
    catalogs = sorted(p.name for p in (ROOT / "planner" / "catalogs").glob("*.yaml"))
    examples = sorted(p.name for p in (ROOT / "planner" / "examples").glob("*.py"))
    assert catalogs and examples
    assert all(f"planner/catalogs/{c}" in names for c in catalogs)
    assert all(f"planner/examples/{e}" in names for e in examples)
    assert "planner/server/app.py" in names
    assert not any(n.startswith("server/") for n in names)  # no top-level 'server' package


def test_survey_runs_from_the_installed_wheel(wheel_env, tmp_path: Path) -> None:
    _, venv = wheel_env
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import planner, planner.server; print(planner.__file__)"],
                           cwd=tmp_path, env=env, check=True, capture_output=True, text=True)
    assert str(venv) in where.stdout and str(ROOT) not in where.stdout
    listed = subprocess.run([str(venv / "bin" / "planner"), "catalog", "list"], cwd=tmp_path,
                            env=env, capture_output=True, text=True)
    assert listed.returncode == 0 and "x86-avx2" in listed.stdout and "apple-m2" in listed.stdout
    run = subprocess.run([str(venv / "bin" / "planner"), "survey", "--example", "softmax",
                          "--target", "x86-avx2", "--json"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["counts"]["ran"] == 1 and doc["failed"] == 0
