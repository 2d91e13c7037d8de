"""``planner catalog ...`` through the real entry point, output captured."""

from __future__ import annotations

import json

import pytest

import planner.cli
from planner.catalog import BUILTIN_DIR, CATALOG_PATH_ENV


@pytest.fixture(autouse=True)
def no_environment_catalogs(monkeypatch):
    monkeypatch.delenv(CATALOG_PATH_ENV, raising=False)


def test_catalog_module_is_registered():
    assert "planner.cli.catalog_cmds" in planner.cli.COMMAND_MODULES


def test_list_reports_overrides(tmp_path, tiny, capsys):
    (tmp_path / "apple-m2.yaml").write_text(tiny.replace("name: tiny", "name: apple-m2"))
    assert planner.cli.main(["catalog", "list", "--catalog-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if row.startswith("apple-m2"))
    assert str(tmp_path / "apple-m2.yaml") in line
    assert f"overrides {BUILTIN_DIR / 'apple-m2.yaml'}" in line
    assert "x86-avx2" in out


def test_list_honours_environment(tmp_path, tiny, capsys, monkeypatch):
    (tmp_path / "tiny.yaml").write_text(tiny)
    monkeypatch.setenv(CATALOG_PATH_ENV, str(tmp_path))
    assert planner.cli.main(["catalog", "list"]) == 0
    assert str(tmp_path / "tiny.yaml") in capsys.readouterr().out


def test_show_summarizes_a_target(capsys):
    assert planner.cli.main(["catalog", "show", "nvidia-b200"]) == 0
    out = capsys.readouterr().out
    assert "           └─ thread  (extent 32)" in out
    assert "tmem       tensor   block     256 KiB" in out
    assert "  thread   rw         rwa   rwa    -         rwa" in out  # threads never touch tmem
    assert "148 concurrent block instances" in out


def test_show_names_the_mma_operands_an_access_entry_narrows_to(capsys):
    # nvidia-b200.yaml: {scope: block, resource: tmem, ..., mma_operands: [a, c]}
    assert planner.cli.main(["catalog", "show", "nvidia-b200"]) == 0
    out = capsys.readouterr().out
    access = out[out.index("\naccess"):out.index("\ncosts")]
    header, *rows = [ln.split() for ln in access.strip().splitlines()[1:]]
    block = dict(zip(header[1:], next(r for r in rows if r[0] == "block")[1:], strict=True))
    assert block["tmem"] == "mMc(a,c)"
    assert "(" not in block["smem"]  # every operand: no list shown


def test_show_accepts_a_file(tmp_path, tiny, capsys):
    path = tmp_path / "tiny.yaml"
    path.write_text(tiny)
    assert planner.cli.main(["catalog", "show", str(path)]) == 0
    assert "scratch  shared  worker    48 KiB" in capsys.readouterr().out


def test_show_unknown_target_fails_cleanly(capsys):
    assert planner.cli.main(["catalog", "show", "no-such-gpu"]) == 1
    captured = capsys.readouterr()
    assert "unknown target 'no-such-gpu'" in captured.err
    assert "Traceback" not in captured.err


def test_validate_ok(capsys):
    files = [str(BUILTIN_DIR / "x86-avx2.yaml"), str(BUILTIN_DIR / "npu-systolic.yaml")]
    assert planner.cli.main(["catalog", "validate", *files]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"ok  {files[0]}  (x86-avx2: 3 scopes, 3 resources")
    assert out[1].startswith(f"ok  {files[1]}  (npu-systolic:")


def test_validate_reports_every_error_of_every_file(tmp_path, tiny, capsys):
    bad = tmp_path / "tiny.yaml"
    bad.write_text(tiny.replace("capacity: 48 KiB", "capacity: 48KB")
                   .replace("scope: worker, resource: scratch", "scope: gpu, resource: scratch"))
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: broken\nscopes: [\n")
    good = BUILTIN_DIR / "apple-m2.yaml"
    assert planner.cli.main(["catalog", "validate", str(bad), str(good), str(broken)]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith(f"ok  {good}")
    assert captured.err.splitlines() == [
        f"{bad}:11:15: error: resources[0].capacity: '48KB' is not a byte size "
        '(write 49152 or "48 KiB")',
        f"{bad}:27:13: error: access[0].scope: unknown scope 'gpu' (known: root, worker)",
        f"{broken}:3:1: error: invalid YAML: expected the node content, but found "
        "'<stream end>' (while parsing a flow node)",
    ]


def test_schema_prints_json_schema(capsys):
    assert planner.cli.main(["catalog", "schema", "--catalog-dir", str(BUILTIN_DIR)]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["$ref"] == "#/$defs/Target"
    assert "Resource" in schema["$defs"]
