"""The LP helper process: windows solved in a child match this process's own solve, a
failed or silent child leaves them to this process, and no child outlives its planner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from planning_support import bindings, kernel, small_dag, target
from scipy import sparse

import planner.solve.lp_helper as helper_module
import planner.solve.planner as planner_module
from planner.solve import Status, plan_kernel
from planner.solve.costs import build_problem
from planner.solve.lp import relax
from planner.solve.lp_helper import LpHelper, WindowLp
from planner.solve.model import build_model, solve

WINDOW = 40  # columns: the attention model on the M2 falls into several windows


@pytest.fixture
def helper() -> LpHelper:
    started = LpHelper.start()
    assert started is not None
    yield started
    started.close()


def _attention_model():  # type: ignore[no-untyped-def]
    return build_model(build_problem(kernel("attention"), target("apple-m2"),
                                     bindings("attention")))


def test_windows_solved_beside_match_the_windows_solved_in_turn(helper: LpHelper) -> None:
    bm = _attention_model()
    alone = relax(bm, window_columns=WINDOW)
    beside = relax(bm, window_columns=WINDOW, helper=helper)
    assert alone is not None and beside is not None and not beside.partial
    assert helper.answered >= 2  # every other window of at least four went to the child
    assert beside.bound == alone.bound
    assert np.array_equal(beside.values, alone.values)
    # a bound: below the proved optimum
    proved = solve(bm, time_limit_s=30)
    assert proved.status == "optimal" and beside.bound <= proved.objective


def test_a_dead_helper_leaves_its_windows_to_this_process(helper: LpHelper) -> None:
    bm = _attention_model()
    os.kill(helper.pid, signal.SIGKILL)
    helper._process.wait()
    alone = relax(bm, window_columns=WINDOW)
    beside = relax(bm, window_columns=WINDOW, helper=helper)
    assert alone is not None and beside is not None
    assert helper.failed and helper.answered == 0
    assert beside.bound == alone.bound
    assert np.array_equal(beside.values, alone.values)


def test_a_silent_helper_counts_as_failed_after_its_limit(helper: LpHelper,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setattr(helper_module, "REPLY_GRACE_S", 0.2)
    os.kill(helper.pid, signal.SIGSTOP)  # stopped: it reads and answers nothing
    lp = WindowLp(np.zeros(1), np.ones(1), np.ones(1),
                  sparse.csr_matrix(np.ones((1, 1))),
                  np.zeros(1), np.ones(1))
    started = time.perf_counter()
    answer = helper.solve(lp, 0.1).result(timeout=10)
    assert answer is None and helper.failed
    assert time.perf_counter() - started < 0.1 + 0.2 + 1.0
    helper._process.wait(timeout=5)  # killed, not left stopped


def _hard_lp() -> WindowLp:
    """A random sparse LP HiGHS takes far longer than a second on (~30 s)."""
    rng = np.random.default_rng(0)
    n = 30_000
    matrix = sparse.random(n, n, density=8 / n, random_state=1, format="csr")
    matrix.data = rng.uniform(-1, 1, matrix.nnz)
    return WindowLp(np.zeros(n), np.full(n, 10.0), rng.uniform(-1, 1, n), matrix,
                    np.full(n, -1.0), np.ones(n))


def test_windows_sent_together_share_one_deadline(helper: LpHelper) -> None:
    # four hard windows sent at once with 0.3 s: the child solves them in turn, so the
    # later ones get what is left of the same 0.3 s (nothing), not 0.3 s each
    lp, limit = _hard_lp(), 0.3
    started = time.perf_counter()
    answers = [f.result(timeout=30) for f in [helper.solve(lp, limit) for _ in range(4)]]
    took = time.perf_counter() - started
    assert took < limit + helper_module.reply_grace(limit), took
    assert answers[0] is not None and not answers[0].optimal  # out of time, answered
    assert answers[1:] == [None] * 3 and not helper.failed
    assert helper.answered == 1


def test_closing_ends_the_child(helper: LpHelper) -> None:
    helper.close()
    assert helper._process.poll() is not None
    assert helper.solve(WindowLp(*(np.zeros(0),) * 3, None, *(np.zeros(0),) * 2),
                        1.0).result(timeout=5) is None


def _gone(pid: int) -> bool:
    if not Path("/proc/self").exists():  # no procfs: ask the kernel (orphans are reaped)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" in state  # a zombie waiting for its reaper has ended too


def _wait_for_ortools(pid: int) -> None:
    """Until ``pid`` has mapped ortools, which it imports after asking to die with its
    parent."""
    until = time.monotonic() + 30
    while time.monotonic() < until:
        try:
            if "ortools" in Path(f"/proc/{pid}/maps").read_text():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"the helper {pid} never imported ortools")


def test_the_child_dies_with_its_planner() -> None:
    # a planner process killed mid-plan (a server worker past its deadline): its helper
    # must not stay behind.  On Linux it is stopped first, so that only PR_SET_PDEATHSIG
    # can end it; elsewhere it ends when it reads its pipe closed
    linux = sys.platform.startswith("linux")
    script = ("import os, sys\nfrom planner.solve.lp_helper import LpHelper\n"
              "h = LpHelper.start()\nprint(h.pid, flush=True)\nsys.stdin.read()\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        if linux:
            _wait_for_ortools(child)  # past its start, where it asks to die with its parent
            assert not _gone(child)
            os.kill(child, signal.SIGSTOP)
        parent.kill()
        parent.wait()
        until = time.monotonic() + (5 if linux else 30)  # elsewhere: after its imports
        while not _gone(child) and time.monotonic() < until:
            time.sleep(0.05)
        assert _gone(child)
    finally:
        if not _gone(child):
            os.kill(child, signal.SIGKILL)


def test_a_large_problem_plans_the_same_with_and_without_the_helper(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the large-problem path (no whole-model search, no windows' search): the plan is
    # the LP heuristic's, so the same LP values give the same plan; the helper is
    # started for it and ended with the call
    def no_search(*a: object, **k: object) -> object:
        raise AssertionError("the search must not run")

    monkeypatch.setattr(planner_module, "_EARLY_FALLBACK_EDGES", 1)
    monkeypatch.setattr(planner_module, "_MIN_LARGE_SEARCH_S", 1e9)
    monkeypatch.setattr(planner_module, "solve", no_search)
    monkeypatch.setattr(planner_module, "prepare", lambda bm, message=None: None)
    monkeypatch.setattr(planner_module, "WINDOW_COLUMNS", 10)
    monkeypatch.setattr(planner_module, "_solved_whole", lambda *a: False)  # in windows
    started: list[LpHelper | None] = []
    real_start = LpHelper.start

    def start() -> LpHelper | None:
        started.append(real_start())
        return started[-1]

    monkeypatch.setattr(LpHelper, "start", staticmethod(start))
    args = (small_dag(4, ops=5), target("x86-avx2"), {"M": 8, "N": 16})
    with_helper = plan_kernel(*args, time_limit_s=120)  # never partial on a busy machine
    assert len(started) == 1 and started[0] is not None
    assert started[0].answered >= 1 and started[0]._process.poll() is not None
    monkeypatch.setenv("PLANNER_LP_HELPER", "0")
    without = plan_kernel(*args, time_limit_s=120)
    assert len(started) == 1  # not started again
    assert with_helper.status is without.status is Status.FEASIBLE
    assert with_helper.objective == without.objective and with_helper.bound == without.bound
    assert [e.decision for e in with_helper.edges] == [e.decision for e in without.edges]
