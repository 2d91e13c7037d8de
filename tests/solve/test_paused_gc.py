"""The planner's pause of the cyclic garbage collector (:func:`paused_gc`)."""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Iterator

import pytest
from planning_support import small_dag, target

from planner.solve import plan_kernel
from planner.solve.problem import paused_gc


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_a_plan_call_collects_its_cyclic_garbage_before_it_returns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a CP-SAT model is cyclic garbage once the call is done (ortools binds methods to
    # the instance): the collection the pause held back frees it inside the call, and
    # nothing of it waits for a full collection
    import planner.solve.planner as planner_module

    real_build = planner_module.build_model
    models: list[weakref.ref[object]] = []

    def spy(*a: object, **k: object):  # type: ignore[no-untyped-def]
        bm = real_build(*a, **k)  # type: ignore[arg-type]
        models.append(weakref.ref(bm.model))
        return bm

    monkeypatch.setattr(planner_module, "build_model", spy)
    assert gc.isenabled()
    plan = plan_kernel(small_dag(4, ops=5), target("x86-avx2"), {"M": 8, "N": 16})
    assert plan.status.value == "optimal"
    assert len(models) == 1 and models[0]() is None
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_a_plan_call_drops_the_evaluators_answers_before_the_collector_resumes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # they hold the problem: the held-back collection would otherwise scan all of it
    import planner.solve.planner as planner_module

    real = planner_module.reusing_evaluations
    collector_on_at_exit: list[bool] = []

    @contextlib.contextmanager
    def spy() -> Iterator[None]:
        with real():
            yield
        collector_on_at_exit.append(gc.isenabled())

    monkeypatch.setattr(planner_module, "reusing_evaluations", spy)
    plan_kernel(small_dag(4, ops=5), target("x86-avx2"), {"M": 8, "N": 16})
    assert collector_on_at_exit == [False]
    assert gc.isenabled()


def test_cycles_made_in_the_pause_are_collected_as_it_ends() -> None:
    with paused_gc():
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        alive = weakref.ref(a)
        del a, b
        assert alive() is not None  # a cycle: only the collector frees it
    assert alive() is None  # no gc.collect() needed: the pause's end ran it


def test_a_nested_pause_keeps_the_collector_off_until_the_outer_one_ends() -> None:
    with paused_gc():
        with paused_gc():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_pause_entered_with_the_collector_off_leaves_it_off() -> None:
    # the caller's pause goes on: no collection when the inner one ends
    runs: list[str] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        runs.append(phase)

    gc.disable()
    gc.callbacks.append(seen)
    try:
        with paused_gc():
            kept = [[i] for i in range(1_000)]
        assert not gc.isenabled()
        assert runs == [] and len(kept) == 1_000
    finally:
        gc.callbacks.remove(seen)
        gc.enable()
