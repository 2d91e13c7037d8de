"""The sweep job API over real HTTP (uvicorn on loopback): start, poll, cancel."""

from __future__ import annotations

import time

from live_http import live_server

from planner.server import Settings


def _poll(client, url, until, timeout=90.0):
    deadline = time.monotonic() + timeout
    while True:
        job = client.get(url).json()
        if until(job) or time.monotonic() > deadline:
            return job
        time.sleep(0.1)


def test_start_poll_cancel_and_errors():
    with live_server(Settings(port=0)) as live, live.client() as client:
        r = client.post("/v1/sweeps", json={"kernel": "softmax", "targets": ["x86-avx2"],
                                            "time_limit": 5})
        assert r.status_code == 202, r.text
        url = r.headers["Location"]
        assert url == r.json()["url"] and url.startswith("/v1/sweeps/")
        job = _poll(client, url, lambda j: j["state"] != "running")
        assert job["state"] == "done" and job["done"] == job["total"] == 6
        assert job["feasible"] == 6
        times = [x["predicted_ns"] for x in job["results"]]
        assert times == sorted(times)

        # a long sweep: cancel it once a point is in, the finished points stay
        r = client.post("/v1/sweeps", json={"kernel": "manual_gemm", "targets": ["apple-m2"],
                                            "space": {"resource": ["shared"]},
                                            "time_limit": 5})
        assert r.status_code == 202, r.text
        url = r.headers["Location"]
        first = _poll(client, url, lambda j: j["done"] >= 1)
        assert first["state"] == "running" and first["total"] == 135
        assert client.delete(url).status_code == 202
        job = _poll(client, url, lambda j: j["state"] != "running")
        assert job["state"] == "cancelled"
        assert 1 <= job["done"] < job["total"]
        assert len(job["results"]) == job["done"]

        # problems, as the other routers answer them
        missing = client.get("/v1/sweeps/nope")
        assert missing.status_code == 404
        assert missing.headers["content-type"].startswith("application/problem+json")
        unknown = client.post("/v1/sweeps", json={"kernel": "no_such_example"})
        assert unknown.status_code == 404 and unknown.json()["kind"] == "not-found"
        bad = client.post("/v1/sweeps", json={"kernel": "softmax", "space": {"nope": [1]}})
        assert bad.status_code == 400 and "not a parameter" in bad.json()["detail"]
        assert client.post("/v1/sweeps", json={"kernel": "../x"}).status_code == 422
        assert live.service.metrics.server_errors() == 0


def test_server_shutdown_cancels_running_sweeps():
    with live_server(Settings(port=0)) as live, live.client() as client:
        r = client.post("/v1/sweeps", json={"kernel": "manual_gemm", "targets": ["apple-m2"],
                                            "space": {"resource": ["shared"]},
                                            "time_limit": 5})
        assert r.status_code == 202, r.text
        _poll(client, r.headers["Location"], lambda j: j["done"] >= 1)
        (job,) = live.app.state.sweeps.jobs.values()
        assert job.state == "running"
    # the lifespan's end cancelled the job and joined its thread
    assert job.stop.is_set() and job.thread is not None and not job.thread.is_alive()
    assert job.state == "cancelled" and 1 <= len(job.results) < job.total
