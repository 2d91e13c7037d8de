"""Real ``planner serve`` processes sharing one catalog directory.

Server A runs with ``--processes 2`` (two forked servers on one socket), server B is a
second ``planner serve`` on another port; both write the same directory.  Clients in
several threads do read-modify-write (GET the ETag, PUT with If-Match, retry on 412)
against either: every 200 must survive in the final file.  PUT/DELETE races must
never let a write based on a deleted file's ETag succeed (an undone delete).  A server
killed with SIGKILL during writes leaves no temporary once restarted: a forked server
of A (the supervisor replaces it) and all of B.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from live_http import live_server

from planner.catalog import BUILTIN_DIR, load_target_file
from planner.server import Settings

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "procs-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
YAML = {"Accept": "application/yaml"}


@dataclass
class Server:
    proc: subprocess.Popen[str]
    url: str


def launch(directory: Path, log: Path, *extra: str) -> subprocess.Popen[str]:
    """Start ``planner serve --port 0`` on ``directory`` (in its own process group)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PLANNER_TEST_TOKEN": TOKEN}
    with log.open("a") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "planner", "serve", "--port", "0", "--catalog-dir",
             str(directory), "--token-env", "PLANNER_TEST_TOKEN", "--workers", "1", *extra],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err, text=True,
            start_new_session=True)


def ready(proc: subprocess.Popen[str], log: Path) -> Server:
    """The URL ``proc`` printed first, once its /healthz answers."""
    assert proc.stdout is not None
    readable, _, _ = select.select([proc.stdout], [], [], 90)
    line = proc.stdout.readline() if readable else ""
    found = re.search(r"http://[0-9.]+:\d+", line)
    assert found, f"planner serve printed {line!r}; log:\n{log.read_text()}"
    url = found.group(0)
    deadline = time.monotonic() + 90
    while True:
        assert proc.poll() is None, f"planner serve exited; log:\n{log.read_text()}"
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return Server(proc, url)
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "planner serve did not answer"
        time.sleep(0.05)


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@contextmanager
def serve(directory: Path, log: Path, *extra: str) -> Iterator[Server]:
    proc = launch(directory, log, *extra)
    try:
        yield ready(proc, log)
    finally:
        stop(proc)


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def catalog(name: str) -> str:
    return (BUILTIN_DIR / "x86-avx2.yaml").read_text().replace("name: x86-avx2", f"name: {name}", 1)


def with_note(text: str, note: str) -> str:
    """``text`` with `` note`` appended to its description line."""
    return re.sub(r"^(description: .*)$", lambda m: f"{m.group(1)} {note}", text, count=1,
                  flags=re.MULTILINE)


def etag(r: httpx.Response) -> str:
    return str(r.headers["etag"]).strip('"')


def temporaries(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*.tmp")]


@dataclass
class Shared:
    directory: Path
    log: Path
    a: Server  # --processes 2
    b: Server

    @property
    def urls(self) -> list[str]:
        return [self.a.url, self.b.url]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    directory = tmp_path_factory.mktemp("shared-catalogs")
    log = directory.parent / "servers.log"
    procs = [launch(directory, log, "--processes", "2"), launch(directory, log)]
    try:  # both start at once
        a, b = (ready(p, log) for p in procs)
        yield Shared(directory, log, a, b)
    finally:
        for p in procs:
            stop(p)


def test_contended_read_modify_write_loses_no_update(servers: Shared) -> None:
    directory, urls = servers.directory, servers.urls
    name, threads, updates = "rmw-cpu", 4, 5
    with httpx.Client(timeout=60) as c:
        assert c.put(f"{urls[0]}/v1/catalogs/{name}", content=catalog(name),
                     headers={**AUTH, "If-None-Match": "*"}).status_code == 201
    won: list[str] = []
    statuses: list[int] = []
    barrier = threading.Barrier(threads)

    def client(i: int) -> None:
        with httpx.Client(timeout=60) as c:
            barrier.wait()
            attempt = 0
            while sum(1 for w in won if w.startswith(f"w{i}u")) < updates:
                base = urls[(i + attempt) % len(urls)]
                attempt += 1
                got = c.get(f"{base}/v1/catalogs/{name}", headers=YAML)
                note = f"w{i}u{attempt}"
                r = c.put(f"{base}/v1/catalogs/{name}", content=with_note(got.text, note),
                          headers={**AUTH, "If-Match": got.headers["etag"]})
                statuses.append(r.status_code)
                if r.status_code == 200:
                    won.append(note)

    workers = [threading.Thread(target=client, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=120)
    assert not [t for t in workers if t.is_alive()], "a client hung"
    assert set(statuses) <= {200, 412}, statuses
    assert len(won) == threads * updates
    description = load_target_file(directory / f"{name}.yaml").description
    assert sorted(description.split()[-len(won):]) == sorted(won)  # every 200 is there
    assert not temporaries(directory)


def test_put_delete_races_undo_no_delete(servers: Shared) -> None:
    """Every successful write or delete consumes the state it was conditioned on; no two
    consume the same one (the PUT contents are unique, so their ETags are too)."""
    directory, urls = servers.directory, servers.urls
    name, threads, rounds = "race-del", 4, 8
    consumed: list[str] = []  # the If-Match ETag of every 2xx PUT and DELETE
    created: list[str] = []
    deleted: list[str] = []
    produced: list[str] = []
    statuses: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def client(i: int) -> None:
        with httpx.Client(timeout=60) as c:
            barrier.wait()
            for k in range(rounds):
                base = urls[(i + k) % len(urls)]
                got = c.get(f"{base}/v1/catalogs/{name}", headers=YAML)
                text = with_note(catalog(name), uuid.uuid4().hex)
                if got.status_code == 404:
                    r = c.put(f"{base}/v1/catalogs/{name}", content=text,
                              headers={**AUTH, "If-None-Match": "*"})
                    op = "create"
                elif (i + k) % 2:
                    r = c.delete(f"{base}/v1/catalogs/{name}",
                                 headers={**AUTH, "If-Match": got.headers["etag"]})
                    op = "delete"
                else:
                    r = c.put(f"{base}/v1/catalogs/{name}", content=text,
                              headers={**AUTH, "If-Match": got.headers["etag"]})
                    op = "update"
                with lock:
                    statuses.append(r.status_code)
                    if r.status_code >= 300:
                        continue
                    if op != "create":
                        consumed.append(etag(got))
                    if op == "delete":
                        deleted.append(etag(got))
                    else:
                        produced.append(etag(r))
                    if op == "create":
                        created.append(etag(r))

    workers = [threading.Thread(target=client, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=120)
    assert not [t for t in workers if t.is_alive()], "a client hung"
    assert set(statuses) <= {200, 201, 404, 412}, statuses
    assert deleted, "the race never deleted anything"
    assert len(consumed) == len(set(consumed)), "two writes succeeded on one ETag"
    path = directory / f"{name}.yaml"
    exists = path.exists()
    assert len(created) - len(deleted) == int(exists)
    if exists:  # the visible file is the one write that nothing consumed
        from planner.server.catalog_store import etag_of

        assert set(produced) - set(consumed) == {etag_of(path.read_bytes())}
    else:
        assert set(produced) == set(consumed)
    assert not temporaries(directory)


def write_until_killed(url: str, name: str, accepted: list[str],
                       stop: threading.Event) -> None:
    """PUT new revisions of ``name`` through ``url`` until ``stop`` or the server dies."""
    with httpx.Client(timeout=10) as c:
        try:
            got = c.get(f"{url}/v1/catalogs/{name}", headers=YAML)
            current, n = etag(got), 0
            while not stop.is_set():
                n += 1
                r = c.put(f"{url}/v1/catalogs/{name}",
                          content=with_note(catalog(name), uuid.uuid4().hex),
                          headers={**AUTH, "If-Match": f'"{current}"'})
                if r.status_code == 200:
                    current = etag(r)
                    accepted.append(current)
                elif r.status_code == 412:
                    current = etag(c.get(f"{url}/v1/catalogs/{name}"))
        except httpx.TransportError:
            return


def kill_during_writes(servers: Shared, name: str, url: str, victim: int) -> list[str]:
    """SIGKILL ``victim`` (a pid, or a process group when negative) while a client writes."""
    with httpx.Client(timeout=30) as c:
        r = c.put(f"{url}/v1/catalogs/{name}", content=catalog(name),
                  headers={**AUTH, "If-None-Match": "*"})
        assert r.status_code == 201
    accepted: list[str] = []
    done = threading.Event()
    thread = threading.Thread(target=write_until_killed, args=(url, name, accepted, done))
    thread.start()
    deadline = time.monotonic() + 30
    while len(accepted) < 5 and time.monotonic() < deadline:
        time.sleep(0.005)
    # what a kill between mkstemp and os.replace leaves, in both folders (planted, as
    # the kill itself lands in that window only by chance)
    (servers.directory / f".{name}.deadbeef.tmp").write_text("half a catalog")
    (servers.directory / ".revisions" / name / ".0123abcd.x1y2.tmp").write_text("half")
    if victim < 0:
        os.killpg(-victim, signal.SIGKILL)
    else:
        os.kill(victim, signal.SIGKILL)
    done.set()
    thread.join(timeout=30)
    assert accepted
    return accepted


def check_whole(url: str, name: str, directory: Path) -> None:
    with httpx.Client(timeout=30) as c:
        got = c.get(f"{url}/v1/catalogs/{name}")
        assert got.status_code == 200  # the file is whole
        revisions = c.get(f"{url}/v1/catalogs/{name}/revisions").json()["revisions"]
        assert etag(got) in [r["hash"] for r in revisions]
    assert not temporaries(directory)


def test_a_killed_worker_process_is_replaced_and_cleans_up(servers: Shared) -> None:
    before = children(servers.a.proc.pid)
    assert len(before) == 2  # --processes 2: a supervisor and two servers
    kill_during_writes(servers, "killed-worker", servers.a.url, before[0])
    deadline = time.monotonic() + 30
    while True:  # the supervisor forks a replacement, which removes the temporaries
        now = children(servers.a.proc.pid)
        if len(now) == 2 and before[0] not in now and not temporaries(servers.directory):
            break
        assert time.monotonic() < deadline, (now, temporaries(servers.directory))
        time.sleep(0.05)
    check_whole(servers.a.url, "killed-worker", servers.directory)


def test_kill_9_of_a_server_during_writes_leaves_no_temporaries(servers: Shared) -> None:
    """Runs last: it kills server B and starts a server again on the same directory (in
    this process, under uvicorn, which saves a second interpreter start)."""
    kill_during_writes(servers, "killed", servers.b.url, -servers.b.proc.pid)
    servers.b.proc.wait(timeout=10)
    assert temporaries(servers.directory)
    settings = Settings(writable_catalog_dir=servers.directory, token=TOKEN, pool_workers=1)
    with live_server(settings) as again:
        assert not temporaries(servers.directory)
        check_whole(again.base_url, "killed", servers.directory)
