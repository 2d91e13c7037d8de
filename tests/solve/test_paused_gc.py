"""The planner's pause of the cyclic garbage collector (:func:`paused_gc`)."""

from __future__ import annotations

import gc
import weakref

from planner.solve.problem import paused_gc


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_the_pause_leaves_nothing_for_the_next_young_collection_to_scan() -> None:
    assert gc.isenabled()
    gc.collect()
    with paused_gc():
        assert not gc.isenabled()
        kept = [[i] for i in range(200_000)]  # tracked containers, alive after the pause
        assert gc.get_count()[0] >= 200_000
    assert gc.isenabled()
    # in the oldest generation: a young collection (one runs as soon as anything is
    # allocated after the pause) neither scans nor promotes them one generation up
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(x) in oldest for x in kept)
    assert gc.get_freeze_count() == 0  # nothing left frozen
    assert all(gc.is_tracked(x) for x in kept[:10])
    assert len(kept) == 200_000


def test_cycles_made_in_the_pause_are_still_collected() -> None:
    with paused_gc():
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        alive = weakref.ref(a)
        del a, b
    assert alive() is not None  # a cycle: only the collector frees it
    gc.collect()
    assert alive() is None


def test_a_nested_pause_keeps_the_collector_off_until_the_outer_one_ends() -> None:
    with paused_gc():
        with paused_gc():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_pause_entered_with_the_collector_off_leaves_it_off() -> None:
    gc.disable()
    try:
        with paused_gc():
            kept = [[i] for i in range(1_000)]
        assert not gc.isenabled()
        assert gc.get_count()[0] >= len(kept)  # untouched: the caller's pause goes on
    finally:
        gc.enable()
