"""Sweeps on real executors: the manual GEMM's capacity frontier on apple-m2, a local
pool against a dask.distributed LocalCluster, the plan cache, failures and stops."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from planner.catalog import CatalogRegistry
from planner.sweep.cache import default_plan_cache
from planner.sweep.execute import DaskExecutor, LocalPool
from planner.sweep.run import SweepSpec, run_sweep

HERE = Path(__file__).resolve().parent
F32 = 4

#: apple-m2 manual GEMM, As/Bs forced into threadgroup memory, one window
GEMM_SHARED = SweepSpec("manual_gemm", ("apple-m2",), space={"resource": ("shared",),
                                                              "window": ("2",)},
                        time_limit_s=5.0)


def explicit_bytes(config: dict) -> tuple[int, int]:
    """One version of As and Bs, from manual_gemm.py's layouts: As is block_m rows of
    block_k elements with row stride block_k + 1 (a padded row), Bs is block_k × block_n
    stored column-major with column stride block_k (dense)."""
    bm, bn, bk = config["block_m"], config["block_n"], config["block_k"]
    a_s = bm * (bk + 1) * F32  # block_m padded rows of block_k + 1 elements
    b_s = bn * bk * F32  # block_n columns of block_k elements
    return a_s, b_s


@pytest.fixture(scope="module")
def shared_sweep():
    pool = LocalPool(2)
    try:
        return run_sweep(GEMM_SHARED, pool)
    finally:
        pool.close()


def test_exactly_the_configurations_over_32_kib_are_infeasible(shared_sweep):
    cap = CatalogRegistry.from_environment().get("apple-m2").resource(
        "threadgroup_memory").capacity
    assert cap == 32 * 1024
    assert shared_sweep.counts()["failed"] == 0 and not shared_sweep.interrupted
    assert len(shared_sweep.results) == 4 * 4 * 3 - 3  # block_m*block_n <= 8192
    over = []
    for r in shared_sweep.results:
        a_s, b_s = explicit_bytes(r.config)
        # The smallest threadgroup footprint: each Memory in one version (the planner may
        # drop the second pipeline version); operand staging goes to device memory when
        # threadgroup memory has no room, so no temporary is forced in.
        if a_s + b_s > cap:
            over.append(r.config)
            assert r.status == "infeasible", r.config
            assert r.reason.startswith(f"%As {a_s:,} B + %Bs {b_s:,} B = {a_s + b_s:,} B > "
                                       f"threadgroup_memory capacity {cap:,} B"), r.reason
            assert r.binding == "capacity of threadgroup_memory"
        else:
            assert r.status == "optimal", (r.config, r.reason)
            peak = {res: (p, c) for res, p, c in r.peaks}["threadgroup_memory"]
            assert a_s + b_s <= peak[0] <= cap == peak[1]
    assert 3 <= len(over) < len(shared_sweep.results) - 3  # both sides are populated


def test_local_pool_and_dask_local_cluster_agree(shared_sweep):
    from distributed import Client, LocalCluster

    spec = SweepSpec(GEMM_SHARED.kernel, GEMM_SHARED.targets,
                     space={**GEMM_SHARED.space, "block_k": ("64",)},
                     time_limit_s=GEMM_SHARED.time_limit_s)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp://",
                      host="127.0.0.1", dashboard_address=None) as cluster, \
            Client(cluster) as client:
        dask = DaskExecutor(client)
        assert "2 workers" in dask.name
        on_dask = run_sweep(spec, dask)
    # the same points of the local pool's sweep (task indices differ: a smaller space)
    local = [r.figures() for r in shared_sweep.results if r.config["block_k"] == 64]
    assert len(on_dask.results) == len(local) == 15
    assert [{**r.figures(), "index": None} for r in on_dask.results] == \
        [{**f, "index": None} for f in local]


def test_a_repeat_is_served_from_the_plan_cache(fresh_plan_cache):
    spec = SweepSpec("softmax", ("x86-avx2",), time_limit_s=5.0)
    cache = default_plan_cache()
    assert cache is not None and str(cache.root).startswith(str(fresh_plan_cache))
    pool = LocalPool(2)
    try:
        first = run_sweep(spec, pool, cache=cache)
        second = run_sweep(spec, pool, cache=cache)
    finally:
        pool.close()
    assert not any(r.cached for r in first.results)
    assert all(r.cached for r in second.results) and len(second.results) == 6
    assert [r.figures() for r in first.results] == [r.figures() for r in second.results]
    assert len(list(cache.root.rglob("*.json"))) == 6


def test_one_failing_point_does_not_stop_the_sweep():
    spec = SweepSpec(str(HERE / "flaky_example.py"), ("x86-avx2",), time_limit_s=5.0)
    pool = LocalPool(2)
    try:
        result = run_sweep(spec, pool)
    finally:
        pool.close()
    by_mode = {(r.config["block_m"], r.config["mode"]): r for r in result.results}
    assert len(by_mode) == 4
    for (_, mode), r in by_mode.items():
        if mode == "bad":
            assert r.status == "error" and "[S10]" in r.reason
        else:
            assert r.status == "optimal"


def test_a_stop_keeps_the_finished_points():
    stop = threading.Event()
    seen = []

    def on_result(r):
        seen.append(r)
        if len(seen) == 3:
            stop.set()

    pool = LocalPool(1)
    try:
        result = run_sweep(GEMM_SHARED, pool, on_result=on_result, stop=stop)
    finally:
        pool.close()
    assert result.interrupted
    assert 3 <= len(result.results) < result.total
    assert {r.index for r in result.results} == {r.index for r in seen}
    assert all(r.status in ("optimal", "infeasible") for r in result.results)
