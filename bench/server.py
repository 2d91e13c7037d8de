"""Benchmark the HTTP planning service: plan requests per second and latency.

Usage::

    python bench/server.py [--clients 8] [--hit-requests 400] [--cold-requests 160]
                           [--workers 2] [--max-seconds 60]

Starts ``planner serve`` in a subprocess on a free 127.0.0.1 port (so the load
generator does not share the server's GIL), then drives ``POST /v1/plan`` from
``--clients`` concurrent clients (one keep-alive connection each) in two modes:

``cache-hit``
    the same softmax request every time (warmed once first): parse, hash, cache
    lookup and JSON encoding only;
``cold``
    every request binds a different ``M``, so each one misses the cache and is parsed,
    proved and solved in the server's worker pool.

Each mode stops after its request count or ``--max-seconds``, whichever comes first.
Prints requests/s and p50/p99 latency per mode, and the server's cache counters.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.ir.examples import builtin_examples_dir, load_example  # noqa: E402
from planner.ir.json_form import kernel_to_json  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(port: int, workers: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-c", "import sys; from planner.cli import main; sys.exit(main())",
           "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
           "--cache-size", "4096"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("server did not start within 60 s")


async def drive(base: str, clients: int, total: int, max_seconds: float,
                body_for: Callable[[int], dict[str, Any]]) -> tuple[list[float], int, float]:
    """``total`` requests from ``clients`` tasks; latencies (s), errors, wall time."""
    latencies: list[float] = []
    errors = 0
    next_index = 0
    deadline = time.perf_counter() + max_seconds

    async def client() -> None:
        nonlocal next_index, errors
        async with httpx.AsyncClient(base_url=base, timeout=120) as c:
            while next_index < total and time.perf_counter() < deadline:
                i = next_index
                next_index += 1
                t0 = time.perf_counter()
                r = await c.post("/v1/plan", json=body_for(i))
                latencies.append(time.perf_counter() - t0)
                errors += r.status_code != 200

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return latencies, errors, time.perf_counter() - start


def percentile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def metric(base: str, name: str) -> float:
    text = httpx.get(f"{base}/metrics").text
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--hit-requests", type=int, default=400)
    parser.add_argument("--cold-requests", type=int, default=160)
    parser.add_argument("--workers", type=int, default=2, help="server worker threads")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="per mode")
    args = parser.parse_args()

    ex = load_example(builtin_examples_dir() / "softmax.py")
    kernel = kernel_to_json(ex.kernel)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_server(port, args.workers)
    try:
        warm = httpx.post(f"{base}/v1/plan", json={"kernel": kernel, "bindings": ex.bindings},
                          timeout=60)
        assert warm.status_code == 200, warm.text
        modes = [
            ("cache-hit", args.hit_requests,
             lambda i: {"kernel": kernel, "bindings": ex.bindings}),
            ("cold", args.cold_requests,
             lambda i: {"kernel": kernel, "bindings": {**ex.bindings, "M": 1000 + i}}),
        ]
        rows = []
        for name, total, body_for in modes:
            lat, errors, wall = asyncio.run(drive(base, args.clients, total, args.max_seconds,
                                                  body_for))
            rows.append((name, len(lat), args.clients, len(lat) / wall,
                         statistics.median(lat) * 1e3, percentile(lat, 0.99) * 1e3, errors))
        hits, misses = (metric(base, "planner_plan_cache_hits_total"),
                        metric(base, "planner_plan_cache_misses_total"))
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    print(f"planner serve --workers {args.workers}, {os.cpu_count()} CPUs, softmax "
          f"(M={ex.bindings['M']}, N={ex.bindings['N']}) on x86-avx2, {args.clients} clients")
    header = f"{'mode':<10} {'requests':>8} {'clients':>7} {'req/s':>8} {'p50 ms':>8} " \
             f"{'p99 ms':>8} {'errors':>6}"
    print(header)
    print("-" * len(header))
    for name, n, clients, rps, p50, p99, errors in rows:
        print(f"{name:<10} {n:>8} {clients:>7} {rps:>8.1f} {p50:>8.2f} {p99:>8.2f} {errors:>6}")
    print(f"server cache: {hits:.0f} hits, {misses:.0f} misses")
    return 0 if all(row[-1] == 0 for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
