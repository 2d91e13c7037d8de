"""Benchmark the HTTP planning service: plan requests per second and latency.

Usage::

    python bench/server.py [--clients 8,32] [--hit-requests 400] [--cold-requests 160]
                           [--workers 4] [--long 2] [--long-limit 10] [--max-seconds 60]

Starts ``planner serve`` in a subprocess on a free 127.0.0.1 port (so the load
generator does not share the server's GIL), then drives ``POST /v1/plan`` from
``--clients`` concurrent clients (one keep-alive connection each) in two modes:

``cache-hit``
    the same softmax request every time (warmed once first): parse, hash, cache
    lookup and JSON encoding only;
``cold``
    every request binds a different ``M``, so each one misses the cache and is parsed,
    proved and solved in the server's worker pool.

Each mode runs once per ``--clients`` count, first on an idle server, then while
``--long`` background clients keep solves at the time-limit cap running (softmax with
400 chained ``exp``, ``time_limit`` = ``--long-limit`` = the server's cap): cold requests
must not wait behind them (the server's worker processes outnumber the long solves).
Each mode stops after its request count or ``--max-seconds``, whichever comes first.
Prints requests/s, p50/p99 latency and non-200 answers (503 overloaded counted apart)
per mode, and the server's cache counters.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
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


def start_server(port: int, workers: int, max_time_limit: float) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-c", "import sys; from planner.cli import main; sys.exit(main())",
           "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
           "--cache-size", "4096", "--max-time-limit", str(max_time_limit)]
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
                body_for: Callable[[int], dict[str, Any]]
                ) -> tuple[list[float], int, int, float]:
    """``total`` requests from ``clients`` tasks; latencies (s), errors, 503s, wall time."""
    latencies: list[float] = []
    errors = busy = 0
    next_index = 0
    deadline = time.perf_counter() + max_seconds

    async def client() -> None:
        nonlocal next_index, errors, busy
        async with httpx.AsyncClient(base_url=base, timeout=120) as c:
            while next_index < total and time.perf_counter() < deadline:
                i = next_index
                next_index += 1
                t0 = time.perf_counter()
                r = await c.post("/v1/plan", json=body_for(i))
                if r.status_code != 503:  # refused at once: not a latency of planning
                    latencies.append(time.perf_counter() - t0)
                busy += r.status_code == 503
                errors += r.status_code not in (200, 503)

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return latencies, errors, busy, time.perf_counter() - start


def chained(kernel: dict[str, Any], n: int) -> dict[str, Any]:
    """``kernel`` (softmax's JSON IR) with its ``exp`` replaced by ``n`` chained ones."""
    kernel = copy.deepcopy(kernel)
    ops = kernel["body"]["ops"][0]["regions"][0]["ops"]
    i = next(j for j, op in enumerate(ops) if op["attrs"].get("fn") == "exp")
    exp, source, new = ops[i], ops[i]["operands"][0], []
    for j in range(n):
        op = copy.deepcopy(exp)
        op["operands"] = [source]
        source = op["results"][0]["id"] = f"c{j}" if j < n - 1 else exp["results"][0]["id"]
        op["results"][0].pop("name", None)
        new.append(op)
    ops[i:i + 1] = new
    return kernel


class Background:
    """``n`` clients that keep long solves running (each a fresh, uncached request)."""

    def __init__(self, base: str, n: int, body_for: Callable[[int], dict[str, Any]]) -> None:
        self.base, self.n, self.body_for = base, n, body_for
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(k,), daemon=True)
                        for k in range(n)]
        self.done: list[int] = []

    def _run(self, k: int) -> None:
        i = 0
        with httpx.Client(base_url=self.base, timeout=300) as c:
            while not self.stop.is_set():
                r = c.post("/v1/plan", json=self.body_for(k * 100_000 + i))
                self.done.append(r.status_code)
                i += 1

    def __enter__(self) -> Background:
        for t in self.threads:
            t.start()
        time.sleep(3.0 if self.n else 0.0)  # let the long solves get going
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()


def percentile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def metric(base: str, name: str) -> float:
    text = httpx.get(f"{base}/metrics").text
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="8,32", help="comma-separated client counts")
    parser.add_argument("--hit-requests", type=int, default=400)
    parser.add_argument("--cold-requests", type=int, default=160)
    parser.add_argument("--workers", type=int, default=4, help="server worker processes")
    parser.add_argument("--long", type=int, default=2, help="background solves at the cap")
    parser.add_argument("--long-limit", type=float, default=10.0,
                        help="their time_limit, also the server's --max-time-limit")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="per mode")
    args = parser.parse_args()
    client_counts = [int(c) for c in args.clients.split(",")]

    ex = load_example(builtin_examples_dir() / "softmax.py")
    kernel = kernel_to_json(ex.kernel)
    long_kernel = chained(kernel, 400)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_server(port, args.workers, args.long_limit)
    cold_index = [0]

    def cold(i: int) -> dict[str, Any]:
        cold_index[0] += 1
        return {"kernel": kernel, "bindings": {**ex.bindings, "M": 1000 + cold_index[0]}}

    def long_body(i: int) -> dict[str, Any]:
        return {"kernel": long_kernel, "bindings": {**ex.bindings, "M": 500_000 + i},
                "time_limit": args.long_limit}

    rows = []
    try:
        warm = httpx.post(f"{base}/v1/plan", json={"kernel": kernel, "bindings": ex.bindings},
                          timeout=60)
        assert warm.status_code == 200, warm.text
        modes = [("cache-hit", args.hit_requests,
                  lambda i: {"kernel": kernel, "bindings": ex.bindings}),
                 ("cold", args.cold_requests, cold)]
        for background in sorted({0, args.long}):
            with Background(base, background, long_body):
                for clients in client_counts:
                    for name, total, body_for in modes:
                        lat, errors, busy, wall = asyncio.run(
                            drive(base, clients, total, args.max_seconds, body_for))
                        rows.append((name, background, len(lat), clients, len(lat) / wall,
                                     statistics.median(lat) * 1e3,
                                     percentile(lat, 0.99) * 1e3, busy, errors))
        hits, misses = (metric(base, "planner_plan_cache_hits_total"),
                        metric(base, "planner_plan_cache_misses_total"))
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    print(f"planner serve --workers {args.workers} --max-time-limit {args.long_limit:g}, "
          f"{os.cpu_count()} CPUs, softmax (M={ex.bindings['M']}, N={ex.bindings['N']}) on "
          "x86-avx2; long = background solves of softmax + 400 exps at the time-limit cap")
    header = f"{'mode':<10} {'long':>4} {'requests':>8} {'clients':>7} {'req/s':>8} " \
             f"{'p50 ms':>8} {'p99 ms':>8} {'503':>5} {'errors':>6}"
    print(header)
    print("-" * len(header))
    for name, background, n, clients, rps, p50, p99, busy, errors in rows:
        print(f"{name:<10} {background:>4} {n:>8} {clients:>7} {rps:>8.1f} {p50:>8.2f} "
              f"{p99:>8.2f} {busy:>5} {errors:>6}")
    print(f"server cache: {hits:.0f} hits, {misses:.0f} misses")
    return 0 if all(row[-1] == 0 for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
