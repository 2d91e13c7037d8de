"""Solving runs in the worker pool: a long solve leaves /healthz answering at once, and
identical concurrent requests share one solve."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from planner.ir.examples import builtin_examples_dir, load_example
from planner.ir.json_form import kernel_to_json
from planner.server import Settings, create_app
from planner.server.service import Service, get_service

SPIN_S = 2.0


def _spin(seconds: float) -> None:
    """Pure-Python busy work: holds the GIL between switch intervals, like a Python solve."""
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1


class SlowService(Service):
    """Every plan first spends SPIN_S of CPU in the worker pool."""

    async def plan(self, *args: Any, **kwargs: Any) -> Any:
        await self.run(_spin, SPIN_S)
        return await super().plan(*args, **kwargs)


def test_slow_plan_does_not_stall_healthz(tmp_path: Path,
                                          start_server: Callable[..., Any]) -> None:
    settings = Settings(writable_catalog_dir=tmp_path, pool_workers=1)
    app = create_app(settings)
    slow = SlowService(settings)
    app.dependency_overrides[get_service] = lambda: slow
    ex = load_example(builtin_examples_dir() / "softmax.py")
    body = {"kernel": kernel_to_json(ex.kernel), "bindings": ex.bindings}
    result: dict[str, httpx.Response] = {}
    try:
        with start_server(settings, app) as live, live.client() as c:
            def plan() -> None:
                with live.client() as own:
                    result["plan"] = own.post("/v1/plan", json=body)

            worker = threading.Thread(target=plan)
            started = time.perf_counter()
            worker.start()
            while c.get("/healthz").json()["solves_in_flight"] == 0:
                assert time.perf_counter() - started < SPIN_S / 2, "the plan never started"
            latencies = []
            for _ in range(5):
                t0 = time.perf_counter()
                assert c.get("/healthz").status_code == 200
                latencies.append(time.perf_counter() - t0)
            still_solving = worker.is_alive()
            worker.join(timeout=60)
        assert still_solving, "the plan finished before /healthz was measured"
        assert max(latencies) < 0.5, latencies
        assert result["plan"].status_code == 200, result["plan"].text
        assert time.perf_counter() - started >= SPIN_S
    finally:
        slow.close()


def test_identical_concurrent_requests_share_one_solve(live: Any) -> None:
    ex = load_example(builtin_examples_dir() / "layernorm.py")
    body = {"kernel": kernel_to_json(ex.kernel), "bindings": {**ex.bindings, "M": 777}}
    misses = live.service.cache.misses
    responses: list[httpx.Response] = []
    barrier = threading.Barrier(4)

    def post() -> None:
        with live.client() as c:
            barrier.wait()
            responses.append(c.post("/v1/plan", json=body))

    threads = [threading.Thread(target=post) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status_code for r in responses] == [200] * 4
    assert len({r.text for r in responses}) == 1
    assert live.service.cache.misses == misses + 1
    assert sorted(r.headers["x-plan-cache"] for r in responses) == ["hit"] * 3 + ["miss"]
