"""The steady-state call paths of a CompiledKernel (native gate, cached signatures,
shared worker pool) against the reference interpreter."""

from __future__ import annotations

import multiprocessing
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from planner.catalog import CatalogRegistry
from planner.errors import PlannerError
from planner.ir.interpreter import interpret
from planner.lower import compile_kernel
from planner.lower.cpu import runtime, workpool
from planner.solve import plan_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "planner" / "examples"))
import softmax

TARGET = CatalogRegistry().get("x86-avx2")


def _softmax(threads: int = 1):
    k = softmax.make_softmax(softmax.SoftmaxConfig(block_m=4))
    return k, compile_kernel(k, plan_kernel(k, TARGET, {"M": 8, "N": 16}), TARGET,
                             threads=threads)


def _x(m: int, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((m, n)).astype(np.float32)


def _want(kernel, x: np.ndarray) -> np.ndarray:
    return interpret(kernel, {"X": x, "Y": np.zeros_like(x)},
                     {"M": x.shape[0], "N": x.shape[1]})["Y"]


def test_changing_shapes_stay_correct() -> None:
    k, ck = _softmax()
    shapes = [(3, 8), (37, 100), (3, 8), (37, 100), (1, 1), (3, 8)]
    for i, (m, n) in enumerate(shapes):
        for rep in range(3):
            x = _x(m, n, 10 * i + rep)
            got = ck(X=x, Y=np.empty_like(x))["Y"]
            np.testing.assert_allclose(got, _want(k, x), rtol=1e-5, atol=1e-6)
        y = ck(X=x)["Y"]  # the output allocated by the call
        np.testing.assert_allclose(y, _want(k, x), rtol=1e-5, atol=1e-6)


def test_bad_inputs_after_fast_calls_give_the_checked_errors() -> None:
    _, ck = _softmax()
    x = _x(4, 16, 0)
    for _ in range(3):
        ck(X=x, Y=np.empty_like(x))
    with pytest.raises(PlannerError, match="needs a float32 array, got float64"):
        ck(X=x.astype(np.float64), Y=np.empty_like(x))
    with pytest.raises(PlannerError, match="unit stride in its last dimension"):
        ck(X=np.asfortranarray(_x(4, 16, 1)), Y=np.empty_like(x))
    ro = np.empty_like(x)
    ro.flags.writeable = False
    with pytest.raises(PlannerError, match="is not writeable"):
        ck(X=x, Y=ro)
    with pytest.raises(PlannerError, match="has rank 2"):
        ck(X=x.ravel(), Y=np.empty_like(x))


def test_concurrent_calls_from_four_threads() -> None:
    k, ck = _softmax(threads=2)
    inputs = [_x(5 + 3 * t, 40 + t, t) for t in range(4)]
    wants = [_want(k, x) for x in inputs]
    errors: list[str] = []

    def work(t: int) -> None:
        x = inputs[t]
        for _ in range(200):
            got = ck(X=x, Y=np.empty_like(x))["Y"]
            if not np.allclose(got, wants[t], rtol=1e-5, atol=1e-6):
                errors.append(f"thread {t} wrong")
                return

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors


def test_worker_pool_survives_and_shuts_down() -> None:
    k, ck = _softmax(threads=2)
    x = _x(400, 3000, 3)  # big enough that the segment is split across workers
    want = _want(k, x)
    for _ in range(20):
        np.testing.assert_allclose(ck(X=x, Y=np.empty_like(x))["Y"], want, rtol=1e-5,
                                   atol=1e-6)
    runtime.shutdown_workers()
    assert runtime.worker_threads() == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("planner-cpu")]
    np.testing.assert_allclose(ck(X=x, Y=np.empty_like(x))["Y"], want, rtol=1e-5, atol=1e-6)
    runtime.shutdown_workers()


@pytest.mark.parametrize(("least", "splits"), [(0.0, True), (float("inf"), False)])
def test_a_segment_is_tried_split_only_after_its_first_runs_prove_it_long(
        monkeypatch, least: float, splits: bool) -> None:
    # The first two runs of a segment are timed on one worker; under _SPLIT_MIN_S it is
    # never split (no worker thread starts), else the runs alternate with split ones.
    monkeypatch.setattr(runtime, "_SPLIT_MIN_S", least)
    runtime.shutdown_workers()
    k, ck = _softmax(threads=2)
    x = _x(64, 300, 5)
    want = _want(k, x)
    for _ in range(2):
        np.testing.assert_allclose(ck(X=x, Y=np.empty_like(x))["Y"], want, rtol=1e-5,
                                   atol=1e-6)
    assert runtime.worker_threads() == 0  # still deciding: one worker only
    for _ in range(3):
        np.testing.assert_allclose(ck(X=x, Y=np.empty_like(x))["Y"], want, rtol=1e-5,
                                   atol=1e-6)
    assert (runtime.worker_threads() > 0) is splits
    runtime.shutdown_workers()


def _trial(single: list[float], split: list[float]) -> bool | runtime._SplitTrial:
    """Feed a trial its runs in the order it asks for them."""
    t = runtime._SplitTrial()
    single, split = list(single), list(split)
    state: bool | runtime._SplitTrial = t
    while isinstance(state, runtime._SplitTrial) and (single or split):
        apart = t.split_next()
        state = t.record(apart, (split if apart else single).pop(0))
    return state


def test_the_split_decision_compares_the_fastest_runs_of_each_way() -> None:
    n = runtime._SPLIT_SAMPLES
    ms = 1e-3
    # alternating after two 1-worker runs: n split runs and n + 1 one-worker runs decide
    assert _trial([9 * ms, 4 * ms] + [4 * ms] * (n - 1), [2 * ms] * n) is True
    assert _trial([9 * ms, 4 * ms] + [4 * ms] * (n - 1), [3.7 * ms] * n) is False  # > 0.9x
    # one fast split run among slow ones is what counts (minima, not means)
    assert _trial([4 * ms] * (n + 1), [8 * ms] * (n - 1) + [1 * ms]) is True
    assert isinstance(_trial([4 * ms] * n, [2 * ms] * (n - 1)), runtime._SplitTrial)
    # split runs no worker joined are not counted, and too many of them keep one worker
    t = runtime._SplitTrial()
    t.record(False, 4 * ms)
    t.record(False, 4 * ms)
    assert t.split_next() and t.record(True, 9 * ms, joined=False) is t and not t.split
    for _ in range(3 * n - 2):
        assert t.record(True, 9 * ms, joined=False) is t
    assert t.record(True, 9 * ms, joined=False) is False
    # short: decided after the first two 1-worker runs, no split run at all
    t = runtime._SplitTrial()
    assert t.record(False, 5e-6) is t and t.record(False, 50e-6) is False and not t.split


def _call_matches(ck, x, want) -> None:  # type: ignore[no-untyped-def]
    """One call of ``ck`` on ``x``, checked against ``want``."""
    np.testing.assert_allclose(ck(X=x, Y=np.empty_like(x))["Y"], want, rtol=1e-5, atol=1e-6)


def _count_checked(monkeypatch) -> list[int]:  # type: ignore[no-untyped-def]
    """A list that grows by one on every call that takes the checked path."""
    checked: list[int] = []
    real = runtime.CompiledKernel._run_checked
    monkeypatch.setattr(runtime.CompiledKernel, "_run_checked",
                        lambda self, *a, **kw: checked.append(1) or real(self, *a, **kw))
    return checked


def _prep(ck) -> tuple:  # type: ignore[no-untyped-def]
    """The prepared call of ``ck``'s one call signature."""
    (p,) = [c[4] for c in ck._calls.values()]
    return p


def _splits_settled(ck) -> bool:  # type: ignore[no-untyped-def]
    p = _prep(ck)
    return all(isinstance(st, bool) for n, st in zip(p[3], p[6], strict=True) if n > 1)


def _until_settled(ck, x, want, checked) -> None:  # type: ignore[no-untyped-def]
    """Call until every split is decided (two 1-worker runs, then alternating; a split
    run no worker joined, the other core busy, e.g. under xdist, is not counted, so
    deciding may take a few more calls)."""
    while not checked or not _splits_settled(ck):
        _call_matches(ck, x, want)
        assert len(checked) <= 6 * runtime._SPLIT_SAMPLES


def _settled_softmax(monkeypatch):  # type: ignore[no-untyped-def]
    """A 2-thread softmax called on one 64x300 signature until its splits are decided:
    (compiled kernel, x, the reference, the checked-path counter)."""
    k, ck = _softmax(threads=2)
    x = _x(64, 300, 5)
    want = _want(k, x)
    checked = _count_checked(monkeypatch)
    _until_settled(ck, x, want, checked)
    return ck, x, want, checked


def _measured_again_after(ck, x, want, checked, calls: int) -> None:  # type: ignore[no-untyped-def]
    """``calls`` steady calls stay on the fast path and the last forgets the split
    decisions; the next call measures them again on the checked path."""
    before = len(checked)
    for _ in range(calls):
        _call_matches(ck, x, want)
    assert len(checked) == before and not _splits_settled(ck)
    _call_matches(ck, x, want)
    assert len(checked) == before + 1  # measuring again, on the checked path


def test_a_split_decision_is_measured_again_after_many_steady_calls(monkeypatch) -> None:
    monkeypatch.setattr(runtime, "_SPLIT_MIN_S", 0.0)
    monkeypatch.setattr(runtime, "_REDECIDE_CALLS", 7)
    ck, x, want, checked = _settled_softmax(monkeypatch)
    assert len(checked) >= 2 * runtime._SPLIT_SAMPLES + 1
    # steady: the fast path, until the 7th call forgets the decision
    _measured_again_after(ck, x, want, checked, 7)
    runtime.shutdown_workers()


def test_redecide_calls_scale_with_the_seconds_a_lost_split_costs() -> None:
    # 0.25 s of 1-worker runs, at least 8 calls, at most 512 (the constants' own text)
    assert runtime._redecide_calls([0.0, 0.0]) == 512  # nothing declined: the default
    assert runtime._redecide_calls([0.023]) == 10  # 0.25 / 0.023 = 10.9
    assert runtime._redecide_calls([0.020, 0.005]) == 10
    assert runtime._redecide_calls([1.0]) == 8
    assert runtime._redecide_calls([1e-5]) == 512


def test_a_split_that_lost_is_measured_again_soon(monkeypatch) -> None:
    # splitting never wins (gain 0): the segment stays on one worker, and that decision,
    # unlike a won split, is measured again after _MIN_REDECIDE_CALLS steady calls
    monkeypatch.setattr(runtime, "_SPLIT_MIN_S", 0.0)
    monkeypatch.setattr(runtime, "_SPLIT_GAIN", 0.0)
    monkeypatch.setattr(runtime, "_REDECIDE_S", 0.0)
    ck, x, want, checked = _settled_softmax(monkeypatch)
    p = _prep(ck)
    assert all(st is False for n, st in zip(p[3], p[6], strict=True) if n > 1)
    assert any(t > 0 for t in p[7])  # the lost split's 1-worker seconds are kept
    _measured_again_after(ck, x, want, checked, runtime._MIN_REDECIDE_CALLS)
    assert _prep(ck)[9] == [1]  # once in a row with a lost split: the next wait doubles
    runtime.shutdown_workers()


def _child(queue) -> None:  # runs in the forked child
    x = _x(400, 3000, 3)
    k, ck = _FORK_STATE["kernel"]
    got = ck(X=x, Y=np.empty_like(x))["Y"]
    small = _x(3, 8, 4)
    ok = np.allclose(got, _want(k, x), rtol=1e-5, atol=1e-6) and np.allclose(
        ck(X=small, Y=np.empty_like(small))["Y"], _want(k, small), rtol=1e-5, atol=1e-6)
    queue.put(bool(ok))


_FORK_STATE: dict[str, object] = {}


def test_call_in_a_forked_child() -> None:
    k, ck = _softmax(threads=2)
    x = _x(400, 3000, 3)
    for _ in range(runtime._SPLIT_SAMPLES + 2):  # the parent used its workers, fast path
        ck(X=x, Y=np.empty_like(x))
        ck(X=_x(3, 8, 4), Y=np.empty((3, 8), np.float32))
    _FORK_STATE["kernel"] = (k, ck)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue,))
    proc.start()
    ok = queue.get(timeout=120)
    proc.join(timeout=60)
    assert ok and proc.exitcode == 0


def test_a_split_segment_runs_through_the_native_gate_and_the_work_pool(monkeypatch) -> None:
    # Force the split decision (any 1-worker time counts as long, any split time as a
    # gain): once every segment is decided, steady calls skip the checked path and the
    # gate hands the split segment to the pool, whose workers take pieces.
    monkeypatch.setattr(runtime, "_SPLIT_MIN_S", 0.0)
    monkeypatch.setattr(runtime, "_SPLIT_GAIN", float("inf"))
    record = runtime._SplitTrial.record  # count split runs a busy machine kept the worker
    monkeypatch.setattr(runtime._SplitTrial, "record",  # out of too (xdist's other worker)
                        lambda self, split, seconds, joined=True: record(self, split, seconds))
    runtime.shutdown_workers()
    k, ck = _softmax(threads=2)
    x = _x(803, 3000, 11)  # 201 row blocks, the last one partial; ~1 ms a call, so a
    want = _want(k, x)     # worker joins a split run even with the other core busy
    for i in range(6 * runtime._SPLIT_SAMPLES):  # decide: alternating runs (a split run
        _call_matches(ck, x, want)  # no worker joined is not counted)
        if i > 2 * runtime._SPLIT_SAMPLES and ck._last is not None and ck._last.settled:
            break
    checked = []
    real = runtime.CompiledKernel._run_checked
    monkeypatch.setattr(runtime.CompiledKernel, "_run_checked",
                        lambda self, *a, **kw: checked.append(1) or real(self, *a, **kw))
    jobs_before = int(workpool.shared_pool()._block[0])  # the pool's generation word
    for seed in range(20):
        x2 = _x(803, 3000, 100 + seed)
        np.testing.assert_allclose(ck(X=x2, Y=np.empty_like(x2))["Y"], _want(k, x2),
                                   rtol=1e-5, atol=1e-6)
    assert not checked
    assert int(workpool.shared_pool()._block[0]) - jobs_before == 2 * 20  # 20 jobs
    assert ck._last is not None and ck._last.helpers == 1
    assert runtime.worker_threads() == 1
    # the same signature on one thread is not the 2-thread plan: it takes the checked
    # path once, then its own fast plan
    np.testing.assert_allclose(ck(X=x, Y=np.empty_like(x), threads=1)["Y"], want, rtol=1e-5,
                               atol=1e-6)
    assert checked
    runtime.shutdown_workers()
