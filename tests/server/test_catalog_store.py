"""The catalog store in one process: storage faults, revisions, races with a gone file.

Faults are injected by replacing ``os.replace`` (or ``tempfile.mkstemp``) in the store's
module for one request: the answer must be 507 / 503 with a ``kind`` naming the fault,
and the directory must hold exactly what it held before.  The same faults are also
produced for real: a read-only directory where ``chmod`` means something (not as root),
and a full and a read-only tmpfs where the test may mount one (as root).
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from planner.catalog import BUILTIN_DIR, CatalogRegistry
from planner.cli import main
from planner.server import Settings, catalog_store, create_app

TOKEN = "store-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def catalog(name: str, note: str = "") -> str:
    text = (BUILTIN_DIR / "x86-avx2.yaml").read_text().replace("name: x86-avx2", f"name: {name}", 1)
    return text.replace("512 KiB L2 per core", f"512 KiB L2 per core{note}", 1)


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    d = tmp_path / "catalogs"
    d.mkdir()
    return d


@pytest.fixture
def client(store_dir: Path) -> Iterator[TestClient]:
    app = create_app(Settings(writable_catalog_dir=store_dir, token=TOKEN, pool_workers=1))
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` except the lock file, with its bytes."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file() and p.name != catalog_store.LOCK_FILE}


def create(client: TestClient, name: str, note: str = "") -> str:
    r = client.put(f"/v1/catalogs/{name}", content=catalog(name, note),
                   headers={**AUTH, "If-None-Match": "*"})
    assert r.status_code == 201, r.text
    return str(r.headers["etag"]).strip('"')


@pytest.mark.parametrize(("code", "status", "kind"), [
    (errno.ENOSPC, 507, "insufficient-storage"),
    (errno.EROFS, 503, "read-only-storage"),
    (errno.EACCES, 503, "storage-permission-denied"),
])
def test_storage_faults_are_507_or_503_and_change_nothing(
        client: TestClient, store_dir: Path, monkeypatch: pytest.MonkeyPatch,
        code: int, status: int, kind: str) -> None:
    etag = create(client, "faulty")
    before = snapshot(store_dir)

    def refuse(src: str, dst: str) -> None:
        raise OSError(code, os.strerror(code), dst)

    monkeypatch.setattr(catalog_store.os, "replace", refuse)
    r = client.put("/v1/catalogs/faulty", content=catalog("faulty", " edited"),
                   headers={**AUTH, "If-Match": f'"{etag}"'})
    assert r.status_code == status, r.text
    body = r.json()
    assert body["kind"] == kind and "faulty" in body["detail"]
    assert str(store_dir) not in r.text and ".tmp" not in r.text
    new = client.put("/v1/catalogs/fresh", content=catalog("fresh"),
                     headers={**AUTH, "If-None-Match": "*"})
    assert new.status_code == status
    monkeypatch.undo()
    assert snapshot(store_dir) == before  # no temporary, no revision, no new file
    assert client.get("/v1/catalogs/faulty").headers["etag"] == f'"{etag}"'
    assert client.get("/v1/catalogs/fresh").status_code == 404


def test_a_fault_creating_the_temporary_is_a_problem_too(
        client: TestClient, store_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*args: object, **kwargs: object) -> tuple[int, str]:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(catalog_store.tempfile, "mkstemp", full)
    r = client.put("/v1/catalogs/nospace", content=catalog("nospace"),
                   headers={**AUTH, "If-None-Match": "*"})
    assert r.status_code == 507 and r.json()["kind"] == "insufficient-storage"
    assert snapshot(store_dir) == {}


@pytest.mark.skipif(os.geteuid() == 0, reason="chmod does not stop root from writing")
def test_a_read_only_directory_is_503(client: TestClient, store_dir: Path) -> None:
    etag = create(client, "ro")
    before = snapshot(store_dir)
    store_dir.chmod(0o555)
    try:
        r = client.put("/v1/catalogs/ro", content=catalog("ro", " edited"),
                       headers={**AUTH, "If-Match": f'"{etag}"'})
        gone = client.delete("/v1/catalogs/ro", headers={**AUTH, "If-Match": f'"{etag}"'})
    finally:
        store_dir.chmod(0o755)
    assert r.status_code == 503 and r.json()["kind"] == "storage-permission-denied"
    assert gone.status_code == 503
    assert snapshot(store_dir) == before


def test_delete_of_a_file_already_gone_is_404(client: TestClient, store_dir: Path) -> None:
    etag = create(client, "gone")
    (store_dir / "gone.yaml").unlink()  # another process deleted it
    r = client.delete("/v1/catalogs/gone", headers={**AUTH, "If-Match": f'"{etag}"'})
    assert r.status_code == 404 and r.json()["kind"] == "unknown-target"
    # the same name written again by someone else: the old ETag no longer matches
    create(client, "gone", " again")
    stale = client.delete("/v1/catalogs/gone", headers={**AUTH, "If-Match": f'"{etag}"'})
    assert stale.status_code == 412


def test_every_accepted_revision_is_kept_and_served(client: TestClient,
                                                    store_dir: Path) -> None:
    first = create(client, "rev")
    r = client.put("/v1/catalogs/rev", content=catalog("rev", " v2"),
                   headers={**AUTH, "If-Match": f'"{first}"'})
    second = str(r.headers["etag"]).strip('"')
    listed = client.get("/v1/catalogs/rev/revisions").json()
    assert [x["hash"] for x in listed["revisions"]] == [first, second]
    assert [x["current"] for x in listed["revisions"]] == [False, True]
    old = client.get(f"/v1/catalogs/rev/revisions/{first[:10]}")
    assert old.status_code == 200 and old.text == catalog("rev")
    assert old.headers["etag"] == f'"{first}"'
    assert client.get(f"/v1/catalogs/rev/revisions/{'0' * 64}").status_code == 404
    assert client.get("/v1/catalogs/rev/revisions/xyz").status_code == 422
    deleted = client.delete("/v1/catalogs/rev", headers={**AUTH, "If-Match": f'"{second}"'})
    assert deleted.status_code == 200
    kept = client.get("/v1/catalogs/rev/revisions").json()["revisions"]
    assert [x["hash"] for x in kept] == [first, second] and not any(x["current"] for x in kept)
    assert client.get("/v1/catalogs/nothing/revisions").status_code == 404


def test_overriding_a_builtin_keeps_the_builtin_revision(client: TestClient) -> None:
    builtin = client.get("/v1/catalogs/apple-m2", headers={"Accept": "application/yaml"})
    etag = str(builtin.headers["etag"]).strip('"')
    text = builtin.text.replace("threadgroup memory 32 KiB", "overridden", 1)
    r = client.put("/v1/catalogs/apple-m2", content=text, headers={**AUTH, "If-Match": f'"{etag}"'})
    assert r.status_code == 200
    hashes = [x["hash"] for x in client.get("/v1/catalogs/apple-m2/revisions").json()["revisions"]]
    assert etag in hashes and str(r.headers["etag"]).strip('"') in hashes


def test_stale_temporaries_are_removed_at_start(store_dir: Path) -> None:
    (store_dir / ".revisions" / "t").mkdir(parents=True)
    (store_dir / ".t.abc123.tmp").write_text("half")
    (store_dir / ".revisions" / "t" / ".0123.xyz.tmp").write_text("half")
    (store_dir / "keep.txt").write_text("not ours")
    create_app(Settings(writable_catalog_dir=store_dir, token=TOKEN, pool_workers=1))
    assert sorted(snapshot(store_dir)) == ["keep.txt"]


def test_catalog_errors_name_the_catalog_not_the_server_path(client: TestClient,
                                                             store_dir: Path) -> None:
    (store_dir / "broken.yaml").write_text(catalog("broken").replace("capacity: 512",
                                                                      "capacity: lots"))
    r = client.get("/v1/catalogs/broken")
    assert r.status_code == 422
    assert str(store_dir) not in r.text and r.json()["location"]["file"] == "broken.yaml"


def test_a_target_at_a_revision_by_name_at_hash(client: TestClient, store_dir: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    first = create(client, "cmp")
    r = client.put("/v1/catalogs/cmp", content=catalog("cmp").replace(
        "capacity: 512", "capacity: 256", 1),  # 8 ymm registers in the second revision
        headers={**AUTH, "If-Match": f'"{first}"'})
    assert r.status_code == 200, r.text
    second = str(r.headers["etag"]).strip('"')
    assert second != first
    registry = CatalogRegistry([store_dir])
    assert registry.get(f"cmp@{first[:8]}").content_hash == first
    store = client.app.state.service.catalogs  # type: ignore[attr-defined]
    assert store.target(f"cmp@{first[:8]}").content_hash == first  # the server's lookup
    assert store.target("cmp").content_hash == second
    assert registry.get(f"cmp@{second}").content_hash == second
    assert main(["compare", "softmax", "--catalog-dir", str(store_dir), "--time-limit", "5",
                 "--target", f"cmp@{first[:8]}", "--target", f"cmp@{second[:8]}",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert f"cmp@{first[:8]}" in json.dumps(out) and f"cmp@{second[:8]}" in json.dumps(out)
    assert main(["plan", "softmax", "--catalog-dir", str(store_dir), "--time-limit", "5",
                 "--target", f"cmp@{first[:8]}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["catalog"]["content_hash"] == first
    assert main(["plan", "softmax", "--catalog-dir", str(store_dir),
                 "--target", "cmp@abcdef0"]) != 0
    assert "unknown revision" in capsys.readouterr().err


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 256 KiB tmpfs (root only, where the machine lets a test mount one), so
    disk-full and read-only faults come from the kernel, not from a replaced function."""
    import shutil
    import subprocess

    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"this machine refuses a tmpfs mount: {made.stderr.strip()}")
    try:
        (mnt / "catalogs").mkdir()
        yield mnt / "catalogs"
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fs_client(directory: Path) -> TestClient:
    app = create_app(Settings(writable_catalog_dir=directory, token=TOKEN, pool_workers=1))
    return TestClient(app, raise_server_exceptions=False)


def test_a_really_full_disk_is_507_and_nothing_changes(small_fs: Path) -> None:
    with _fs_client(small_fs) as client:
        etag = create(client, "full")
        before = snapshot(small_fs)
        with open(small_fs.parent / "filler", "wb", buffering=0) as f:  # every free block
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
        r = client.put("/v1/catalogs/full", content=catalog("full", " edited"),
                       headers={**AUTH, "If-Match": f'"{etag}"'})
        assert r.status_code == 507 and r.json()["kind"] == "insufficient-storage", r.text
        assert snapshot(small_fs) == before


def test_a_really_read_only_filesystem_is_503_and_nothing_changes(small_fs: Path) -> None:
    import subprocess

    with _fs_client(small_fs) as client:
        etag = create(client, "ro")
        before = snapshot(small_fs)
        subprocess.run(["mount", "-o", "remount,ro", str(small_fs.parent)], check=True)
        try:
            r = client.put("/v1/catalogs/ro", content=catalog("ro", " edited"),
                           headers={**AUTH, "If-Match": f'"{etag}"'})
            gone = client.delete("/v1/catalogs/ro", headers={**AUTH, "If-Match": f'"{etag}"'})
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(small_fs.parent)], check=True)
        assert r.status_code == 503 and r.json()["kind"] == "read-only-storage", r.text
        assert gone.status_code == 503, gone.text
        assert snapshot(small_fs) == before
