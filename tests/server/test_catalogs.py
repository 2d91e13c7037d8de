"""Catalog endpoints: reads by Accept, guarded writes (token, ETag), atomic replacement."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from planner.catalog import load_target_file
from planner.server import Settings

Text = Callable[[str], str]
Headers = dict[str, str]


def test_list_shows_builtins_with_etags(client: httpx.Client) -> None:
    body = client.get("/v1/catalogs").json()
    names = {c["name"]: c for c in body["catalogs"]}
    assert {"x86-avx2", "apple-m2"} <= names.keys()
    assert names["x86-avx2"]["origin"] == "builtin"
    assert len(names["x86-avx2"]["etag"]) == 64
    assert body["writes_enabled"] is True


def test_get_yaml_or_json_by_accept(client: httpx.Client) -> None:
    as_yaml = client.get("/v1/catalogs/x86-avx2", headers={"Accept": "application/yaml"})
    assert as_yaml.status_code == 200
    assert as_yaml.headers["content-type"].startswith("application/yaml")
    as_json = client.get("/v1/catalogs/x86-avx2", headers={"Accept": "application/json"})
    assert as_json.headers["content-type"].startswith("application/json")
    assert as_yaml.headers["etag"] == as_json.headers["etag"]
    assert as_json.json()["content"] == yaml.safe_load(as_yaml.text)
    assert client.get("/v1/catalogs/x86-avx2").json()["name"] == "x86-avx2"
    ranked = client.get("/v1/catalogs/x86-avx2",
                        headers={"Accept": "application/json;q=0.5, application/yaml"})
    assert ranked.headers["content-type"].startswith("application/yaml")


def test_unknown_catalog_is_404(client: httpx.Client) -> None:
    r = client.get("/v1/catalogs/no-such-target")
    assert r.status_code == 404
    assert r.json()["kind"] == "unknown-target"


def test_write_needs_the_token(client: httpx.Client, catalog_text: Text) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic eDp5"}):
        r = client.put("/v1/catalogs/no-token", content=catalog_text("no-token"),
                       headers={**headers, "If-None-Match": "*"})
        assert r.status_code == 401, r.text
        assert r.json()["kind"] == "unauthorized"
        assert r.headers["www-authenticate"] == "Bearer"
    assert client.get("/v1/catalogs/no-token").status_code == 404


def test_writes_disabled_without_a_token(tmp_path: Path, catalog_text: Text,
                                         start_server: Callable[..., Any]) -> None:
    with start_server(Settings(writable_catalog_dir=tmp_path)) as other, other.client() as c:
        r = c.put("/v1/catalogs/x", content=catalog_text("x"),
                  headers={"Authorization": "Bearer anything", "If-None-Match": "*"})
        assert r.status_code == 403
        assert r.json()["kind"] == "writes-disabled"
        assert c.get("/v1/catalogs").json()["writes_enabled"] is False
    assert list(tmp_path.iterdir()) == []


def test_create_then_update_with_etags(client: httpx.Client, auth: Headers, catalog_text: Text,
                                       writable_dir: Path) -> None:
    name = "etag-cpu"
    missing = client.put(f"/v1/catalogs/{name}", content=catalog_text(name), headers=auth)
    assert missing.status_code == 428
    assert missing.json()["kind"] == "precondition-required"
    created = client.put(f"/v1/catalogs/{name}", content=catalog_text(name),
                         headers={**auth, "If-None-Match": "*"})
    assert created.status_code == 201, created.text
    assert created.headers["location"] == f"/v1/catalogs/{name}"
    assert created.json()["created"] is True
    etag = created.headers["etag"]
    again = client.put(f"/v1/catalogs/{name}", content=catalog_text(name),
                       headers={**auth, "If-None-Match": "*"})
    assert again.status_code == 412

    edited = catalog_text(name).replace("512 KiB L2 per core", "edited")
    ok = client.put(f"/v1/catalogs/{name}", content=edited, headers={**auth, "If-Match": etag})
    assert ok.status_code == 200, ok.text
    assert ok.headers["etag"] != etag
    stale = client.put(f"/v1/catalogs/{name}", content=catalog_text(name),
                       headers={**auth, "If-Match": etag})
    assert stale.status_code == 412
    assert stale.json()["kind"] == "precondition-failed"
    assert stale.headers["etag"] == ok.headers["etag"]
    got = client.get(f"/v1/catalogs/{name}")
    assert got.headers["etag"] == ok.headers["etag"]
    assert got.json()["description"].endswith("edited")
    assert got.json()["origin"] == "user"
    assert (writable_dir / f"{name}.yaml").read_text() == edited


def test_invalid_catalog_is_422_with_located_messages(client: httpx.Client, auth: Headers,
                                                      catalog_text: Text) -> None:
    bad = catalog_text("bad-cpu").replace("capacity: 512", "capacity: lots")
    r = client.put("/v1/catalogs/bad-cpu", content=bad, headers={**auth, "If-None-Match": "*"})
    assert r.status_code == 422
    err = r.json()
    assert err["kind"] == "catalog"
    assert err["location"]["file"] == "bad-cpu.yaml" and err["location"]["line"] > 1
    assert client.get("/v1/catalogs/bad-cpu").status_code == 404
    wrong_name = client.put("/v1/catalogs/other-name", content=catalog_text("bad-cpu"),
                            headers={**auth, "If-None-Match": "*"})
    assert wrong_name.status_code == 422
    assert "does not match" in wrong_name.json()["detail"]


def test_validate_endpoint(client: httpx.Client, catalog_text: Text) -> None:
    ok = client.post("/v1/catalogs/validate", content=catalog_text("v-cpu"),
                     headers={"Content-Type": "application/yaml"}).json()
    assert ok["valid"] is True and ok["name"] == "v-cpu"
    bad = client.post("/v1/catalogs/validate", content="name: [1\n")
    assert bad.status_code == 422
    err = bad.json()
    assert err["kind"] == "catalog" and err["location"] == {"file": "<request>", "line": 2,
                                                            "col": 1}
    assert err["detail"].startswith("invalid YAML")


def test_override_builtin_then_delete_restores_it(client: httpx.Client, auth: Headers,
                                                  writable_dir: Path) -> None:
    builtin = client.get("/v1/catalogs/apple-m2", headers={"Accept": "application/yaml"})
    etag = builtin.headers["etag"]
    text = builtin.text.replace("threadgroup memory 32 KiB", "overridden", 1)
    r = client.put("/v1/catalogs/apple-m2", content=text, headers={**auth, "If-Match": etag})
    assert r.status_code == 200, r.text
    assert r.json()["overrides_builtin"] is True and "overrides the built-in" in r.json()["note"]
    got = client.get("/v1/catalogs/apple-m2").json()
    assert got["origin"] == "user" and got["overrides_builtin"] is True
    assert client.delete("/v1/catalogs/apple-m2", headers=auth).status_code == 428
    stale = client.delete("/v1/catalogs/apple-m2", headers={**auth, "If-Match": etag})
    assert stale.status_code == 412
    deleted = client.delete("/v1/catalogs/apple-m2",
                            headers={**auth, "If-Match": r.headers["etag"]})
    assert deleted.status_code == 200 and deleted.json()["builtin_restored"] is True
    assert client.get("/v1/catalogs/apple-m2").headers["etag"] == etag
    builtin_delete = client.delete("/v1/catalogs/apple-m2", headers={**auth, "If-Match": etag})
    assert builtin_delete.status_code == 409
    assert not (writable_dir / "apple-m2.yaml").exists()


def test_concurrent_puts_one_winner_per_etag(live: Any, auth: Headers, catalog_text: Text,
                                             writable_dir: Path) -> None:
    name, writers = "race-cpu", 6
    path = writable_dir / f"{name}.yaml"
    with live.client() as c:
        r = c.put(f"/v1/catalogs/{name}", content=catalog_text(name),
                  headers={**auth, "If-None-Match": "*"})
    etag = r.headers["etag"]
    for round_ in range(3):
        statuses: list[int] = []
        etags: list[str] = []
        barrier = threading.Barrier(writers)

        def put(i: int, etag: str = etag, round_: int = round_,
                statuses: list[int] = statuses, etags: list[str] = etags,
                barrier: threading.Barrier = barrier) -> None:
            text = catalog_text(name).replace("512 KiB L2 per core", f"round {round_} writer {i}")
            with live.client() as c:
                barrier.wait()
                r = c.put(f"/v1/catalogs/{name}", content=text,
                          headers={**auth, "If-Match": etag})
            statuses.append(r.status_code)
            if r.status_code == 200:
                etags.append(r.headers["etag"])

        done = threading.Event()
        reads: list[str] = []

        def read_while_writing(reads: list[str] = reads, done: threading.Event = done) -> None:
            while not done.is_set():  # a reader never sees a half-written file
                try:
                    reads.append(load_target_file(path).description)
                except Exception as exc:
                    reads.append(f"INVALID: {exc}")

        threads = [threading.Thread(target=put, args=(i,)) for i in range(writers)]
        reader = threading.Thread(target=read_while_writing)
        reader.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        reader.join()
        assert reads and not [r for r in reads if r.startswith("INVALID")]
        assert sorted(statuses) == [200] + [412] * (writers - 1), statuses
        target = load_target_file(path)  # always one whole, valid catalog
        assert f"round {round_} writer" in target.description
        etag = etags[0]
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
