"""A plan records which catalog file (and content hash) it was planned against, so an
override is visible; ``catalog list`` loads every file and marks a broken one."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from planner.catalog import BUILTIN_DIR, CatalogRegistry
from planner.cli import main
from planner.ir.examples import builtin_examples_dir, load_example
from planner.plan import plan_from_json, plan_to_json
from planner.solve import plan_kernel


def test_a_plan_records_its_catalog_file_and_hash(tmp_path: Path) -> None:
    kernel = load_example(builtin_examples_dir() / "softmax.py").kernel
    shipped = BUILTIN_DIR / "x86-avx2.yaml"
    plan = plan_kernel(kernel, CatalogRegistry().get("x86-avx2"), {"M": 16, "N": 70})
    assert plan.catalog_file == str(shipped)
    assert plan.catalog_hash == hashlib.sha256(shipped.read_bytes()).hexdigest()
    doc = plan_to_json(plan)
    assert doc["catalog"] == {"name": "x86-avx2", "file": str(shipped),
                              "content_hash": plan.catalog_hash}
    assert plan_from_json(json.loads(json.dumps(doc))).catalog_hash == plan.catalog_hash
    # an override of the same name is a different file and hash, visible in the plan
    override = tmp_path / "x86-avx2.yaml"
    override.write_text(shipped.read_text() + "\n# tuned copy\n")
    mine = plan_kernel(kernel, CatalogRegistry([tmp_path]).get("x86-avx2"), {"M": 16, "N": 70})
    assert mine.catalog_file == str(override)
    assert mine.catalog_hash == hashlib.sha256(override.read_bytes()).hexdigest()
    assert mine.catalog_hash != plan.catalog_hash


def test_catalog_list_marks_a_broken_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    text = (BUILTIN_DIR / "apple-m2.yaml").read_text()
    (tmp_path / "fine.yaml").write_text(text.replace("name: apple-m2", "name: fine", 1))
    (tmp_path / "broken.yaml").write_text("name: broken\nscopes: [\n")
    assert main(["catalog", "list", "--catalog-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("broken "))
    assert "BROKEN:" in line
    assert "BROKEN" not in next(ln for ln in out.splitlines() if ln.startswith("fine "))
    assert main(["catalog", "list", "--catalog-dir", str(tmp_path), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    by = {t["name"]: t for t in doc["targets"]}
    assert by["broken"]["ok"] is False and by["broken"]["error"]
    assert by["fine"]["ok"] is True and by["x86-avx2"]["ok"] is True
    assert main(["catalog", "list"]) == 0  # the shipped catalogs are all fine
