"""The native work pool: every instance of a split segment runs exactly once, on no
more threads than asked, with the worker's own arena, however the workers arrive."""

from __future__ import annotations

import ctypes
import threading
import time

import numpy as np
import pytest

from planner.lower.cpu import workpool
from planner.lower.cpu.jit import compile_module

# A segment function with the kernels' signature (lo, hi, syms, views, strides, arena,
# garena, table): for each instance i in [lo, hi) it adds 1 to count[i] (count is the
# `syms` array) and writes the arena it was given into who[i] (`views`), after a little
# busy work proportional to `strides[0]` so that pieces overlap in time.
_RECORDER = r"""
define void @record(i64 %lo, i64 %hi, i8* %syms, i8* %views, i8* %str, i8* %arena,
                    i8* %garena, i8* %tab) {
entry:
  %count = bitcast i8* %syms to i64*
  %who = bitcast i8* %views to i64*
  %spin.p = bitcast i8* %str to i64*
  %spin = load i64, i64* %spin.p
  %ar = ptrtoint i8* %arena to i64
  br label %loop
loop:
  %i = phi i64 [%lo, %entry], [%i1, %busy.done]
  %end = icmp sge i64 %i, %hi
  br i1 %end, label %out, label %body
body:
  %c.p = getelementptr i64, i64* %count, i64 %i
  %old = atomicrmw add i64* %c.p, i64 1 seq_cst
  %w.p = getelementptr i64, i64* %who, i64 %i
  store atomic i64 %ar, i64* %w.p monotonic, align 8
  br label %busy
busy:
  %k = phi i64 [0, %body], [%k1, %busy]
  %k1 = add i64 %k, 1
  %more = icmp slt i64 %k1, %spin
  br i1 %more, label %busy, label %busy.done
busy.done:
  %i1 = add i64 %i, 1
  br label %loop
out:
  ret void
}
"""


@pytest.fixture(scope="module")
def recorder():
    module = compile_module(_RECORDER, disk=False, opt_level=0)
    fn = module.ctypes_function("record", None, [ctypes.c_int64, ctypes.c_int64]
                                + [ctypes.c_void_p] * 6)
    return module, fn, module.address("record")


def _job(pool: workpool.WorkPool, recorder, n: int, chunks: int, spin: int = 0,
         arenas: int = 8, joined: list[bool] | None = None
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    _, fn, addr = recorder
    count = np.zeros(max(n, 1), np.int64)
    who = np.zeros(max(n, 1), np.int64)
    work = np.array([spin], np.int64)
    table = np.arange(1, arenas + 1, dtype=np.int64) * 4096  # fake, distinct arenas

    def alone() -> None:
        fn(0, n, count.ctypes.data, who.ctypes.data, work.ctypes.data, int(table[0]), 0, 0)

    got = pool.run(addr, n, chunks, (count.ctypes.data, who.ctypes.data, work.ctypes.data),
                   table.ctypes.data, (0, 0), alone)
    if joined is not None:
        joined.append(got)
    return count[:n], who[:n], table


@pytest.fixture
def pool():
    p = workpool.WorkPool()
    yield p
    p.stop()
    assert p.threads == 0


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 8, 9, 100, 1001])
@pytest.mark.parametrize("chunks", [1, 2, 3, 5])
def test_every_instance_runs_exactly_once_with_one_of_the_first_arenas(pool, recorder, n,
                                                                       chunks):
    count, who, table = _job(pool, recorder, n, chunks, spin=200)
    assert count.tolist() == [1] * n
    assert set(who.tolist()) <= set(table[:chunks].tolist())
    assert pool.threads == (chunks - 1 if chunks > 1 else 0)


def test_a_job_never_uses_more_threads_than_it_asked_for(pool, recorder):
    _job(pool, recorder, 64, 5)  # start four workers
    for _ in range(50):
        count, who, table = _job(pool, recorder, 400, 2, spin=2000)
        assert count.tolist() == [1] * 400
        assert set(who.tolist()) <= set(table[:2].tolist())


def test_thousands_of_back_to_back_jobs_lose_no_piece(pool, recorder):
    # the workers spin between jobs and enter them late or early: the generation
    # protocol must neither run a stale job nor miss a piece
    for i in range(3000):
        n = 1 + i % 13
        count, _, _ = _job(pool, recorder, n, 3)
        assert count.tolist() == [1] * n, i


def test_sleeping_workers_are_woken_and_late_ones_do_no_harm(monkeypatch, recorder):
    monkeypatch.setenv("PLANNER_SPIN_US", "0")  # workers park in Python at once
    p = workpool.WorkPool()
    try:
        seen: set[int] = set()
        for _ in range(200):
            count, who, _ = _job(p, recorder, 50, 3, spin=30_000)  # ~0.5 ms: time to wake
            assert count.tolist() == [1] * 50
            seen |= set(who.tolist())
        assert p.threads == 2
        assert len(seen) > 1  # a woken worker did take pieces
    finally:
        p.stop()


def test_a_busy_pool_runs_the_other_callers_segment_alone(pool, recorder):
    errors: list[str] = []

    def caller(c: int) -> None:
        for i in range(300):
            count, who, table = _job(pool, recorder, 37, 2, spin=100)
            if count.tolist() != [1] * 37 or not set(who.tolist()) <= set(table[:2].tolist()):
                errors.append(f"caller {c} job {i}: {count.tolist()}")

    threads = [threading.Thread(target=caller, args=(c,)) for c in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert pool.threads == 1


def test_the_shared_pool_stops_and_starts_again(recorder):
    workpool.shutdown()
    assert workpool.started_threads() == 0
    count, _, _ = _job(workpool.shared_pool(), recorder, 20, 2)
    assert count.tolist() == [1] * 20
    assert workpool.started_threads() == 1
    workpool.shutdown()
    assert workpool.started_threads() == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("planner-cpu")]


def test_a_job_says_whether_a_worker_took_part(pool, recorder):
    joined: list[bool] = []
    _job(pool, recorder, 1, 1, joined=joined)  # one thread asked for: the caller alone
    assert joined == [False]
    # Long pieces: the worker takes some once the OS schedules it. On a loaded machine
    # (CI runs two test processes on two cores) that can take many jobs, so the loop
    # runs until a worker joined or 20 s have passed, checking every job on the way.
    deadline = time.monotonic() + 20.0
    while not any(joined[1:]) and time.monotonic() < deadline:
        _, who, table = _job(pool, recorder, 64, 2, spin=50_000, joined=joined)
        # checked against what the recorder saw: a piece ran with worker 1's arena
        assert joined[-1] == (int(table[1]) in set(who.tolist()))
    assert any(joined[1:]), f"no worker took part in {len(joined) - 1} jobs"


def test_a_job_no_worker_joined_says_so(monkeypatch, recorder):
    monkeypatch.setenv("PLANNER_SPIN_US", "0")  # the worker parks at once, wakes late
    p = workpool.WorkPool()
    try:
        joined: list[bool] = []
        for _ in range(30):
            _, who, table = _job(p, recorder, 1, 2, joined=joined)
            assert joined[-1] == (int(table[1]) in set(who.tolist()))
        assert not all(joined)  # the caller ran the one piece before the worker woke
    finally:
        p.stop()


@pytest.mark.parametrize(("n", "chunks", "per", "want"), [
    (100, 2, 4, 8),  # up to 4 pieces per thread
    (3, 2, 4, 3),  # never more pieces than instances
    (17, 2, 1, 2),  # one contiguous piece per thread (packs kept across instances)
    (8, 2, 1, 8),  # ... but at most 4 instances per thread: one piece each
    (6, 2, 1, 6),
    (16, 4, 1, 16),
    (9, 1, 1, 1),  # one thread: one piece
    (0, 2, 4, 0),
])
def test_piece_count(n, chunks, per, want):
    assert workpool.piece_count(n, chunks, per) == want
