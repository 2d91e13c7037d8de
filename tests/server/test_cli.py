"""``planner serve``: flags become Settings; the command really serves."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from planner.cli import build_parser
from planner.cli.serve_cmds import settings_from_args
from planner.errors import PlannerError

ROOT = Path(__file__).resolve().parents[2]


def test_flags_become_settings(tmp_path: Path) -> None:
    args = build_parser().parse_args(["serve", "--port", "8123", "--catalog-dir", str(tmp_path),
                                      "--token-env", "MY_TOKEN", "--workers", "3"])
    settings = settings_from_args(args, {"MY_TOKEN": "s3cret"})
    assert (settings.host, settings.port, settings.pool_workers) == ("127.0.0.1", 8123, 3)
    assert settings.writable_catalog_dir == tmp_path and settings.catalog_dirs == ()
    assert settings.token is not None and settings.token.get_secret_value() == "s3cret"
    assert settings.writes_enabled
    defaults = settings_from_args(build_parser().parse_args(["serve"]), {})
    assert defaults.token is None and defaults.writable_catalog_dir is None
    assert not defaults.writes_enabled


def test_bad_flags_are_a_planner_error() -> None:
    with pytest.raises(PlannerError, match="port"):
        settings_from_args(build_parser().parse_args(["serve", "--port", "70000"]), {})


def test_planner_serve_answers_on_loopback() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = "import sys; from planner.cli import main; sys.exit(main())"
    proc = subprocess.Popen([sys.executable, "-c", code, "serve", "--port", str(port)],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "planner serve exited"
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "planner serve did not answer"
                time.sleep(0.1)
        assert r.json()["status"] == "ok" and r.json()["targets"] >= 5
        catalogs = httpx.get(f"http://127.0.0.1:{port}/v1/catalogs").json()
        assert catalogs["writes_enabled"] is False
    finally:
        proc.terminate()
        proc.wait(timeout=30)
