"""Threadgroup memory on Metal is laid out as the plan accounts it (S17, S18).

The planner counts threadgroup bytes live at once, whatever their element type, and
reports the peak per resource (``plan.peaks``).  The emitter lays threadgroup memory out
as one byte arena (``threadgroup float4 tg_arena_[n]`` with typed views at byte
offsets), buffers whose lifetimes do not overlap sharing bytes, and never needs more
than that peak.  Expectations here come from the plan (``plan.peaks``), from the emitted
source (the arena's declaration) and from the reference interpreter, never from the
emitter's own report.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toolchain import needs_clang

from planner.catalog import CatalogRegistry, Target
from planner.errors import PlannerError
from planner.ir.examples import builtin_examples_dir, load_example
from planner.ir.frontend import mem
from planner.ir.interpreter import interpret, random_inputs
from planner.lower.loops import program as lp
from planner.lower.metal.arena import _live_peak, _pack
from planner.lower.metal.emitter import emit_msl
from planner.lower.metal.emulator import check_msl
from planner.lower.metal.runtime import run_msl_kernel
from planner.plan.decisions import MaterializationPlan
from planner.solve import plan_kernel

CAPACITY = 32_768  # apple-m2 threadgroup memory per threadgroup
_ARENA = re.compile(r"^\s*threadgroup float4 tg_arena_\[(\d+)\];$", re.M)
_TG_ARRAY = re.compile(r"^\s*threadgroup \w+ \w+\[\d+\];$", re.M)
_VIEW = re.compile(r"^\s*threadgroup (\w+)\* (\w+) = reinterpret_cast<threadgroup \1\*>"
                   r"\(tg_bytes_ \+ (\d+)\);$", re.M)


@pytest.fixture(scope="module")
def m2() -> Target:
    return CatalogRegistry().get("apple-m2")


def _module(name: str):  # -> the example's module
    return load_example(builtin_examples_dir() / f"{name}.py").module


def planned_peak(plan: MaterializationPlan) -> int:
    return next((p.peak_bytes for p in plan.peaks if p.resource == "threadgroup_memory"), 0)


def arena_of(source: str) -> tuple[int, dict[str, tuple[str, int]]]:
    """(bytes of the arena, view -> (element type, byte offset)), read from the source;
    the arena is the only threadgroup array."""
    found = _ARENA.findall(source)
    assert len(found) == 1 and len(_TG_ARRAY.findall(source)) == 1, source
    return int(found[0]) * 16, {v: (t, int(o)) for t, v, o in _VIEW.findall(source)}


def check_runs(kernel, msl, bindings: dict[str, int], what: str) -> None:
    inputs = random_inputs(kernel, bindings, seed=11)
    ref = interpret(kernel, inputs, bindings)
    for order in ("forward", "reverse"):
        out = run_msl_kernel(kernel, msl, inputs, bindings, order=order).outputs
        for name, want in ref.items():
            assert np.allclose(out[name], want, rtol=1e-4, atol=1e-4, equal_nan=True), \
                f"{what}, {order} order: {name} differs from the reference interpreter"


# ----------------------------------------------------------------- near the capacity

#: manual_gemm configurations whose optimal plan on apple-m2 peaks within a few hundred
#: bytes of 32 KiB: (64, 64, 32) pipelines (two versions of Bs in threadgroup memory,
#: the staging copy and acc sharing bytes), (64, 48, 28) keeps two versions of As.
TIGHT = [((64, 64, 32), "auto_", True), ((64, 48, 28), "shared", False)]
TIGHT_SHAPE = {"M": 70, "N": 67, "K": 45}


@needs_clang
@pytest.mark.parametrize(("cfg", "resource", "overlapped"), TIGHT, ids=str)
def test_plan_near_capacity_is_emitted_in_its_peak_and_runs(cfg: tuple[int, int, int],
                                                            resource: str, overlapped: bool,
                                                            m2: Target) -> None:
    module = _module("manual_gemm")
    kernel = module.make_manual_gemm(module.GemmConfig(*cfg),
                                     resource=getattr(mem, resource))
    plan = plan_kernel(kernel, m2, TIGHT_SHAPE)
    peak = planned_peak(plan)
    assert CAPACITY - 512 <= peak <= CAPACITY, (cfg, plan.peaks)
    program = lp.build_loop_program(kernel, plan, m2)
    pipelined = any(isinstance(s, lp.Pipeline) for s in lp.walk_stmts(program.segments[0].body))
    assert pipelined == overlapped, "software-pipelined (load of t overlaps compute of t-1)"
    msl = emit_msl(kernel, plan, m2)
    check = check_msl(msl.source)
    assert check.ok and not check.warnings, check.render()
    nbytes, views = arena_of(msl.source)
    assert nbytes == peak, f"arena {nbytes:,} B, plan's peak {peak:,} B"
    assert {"tg_As", "tg_Bs"} & set(views)  # explicit Memory lives in the arena too
    check_runs(kernel, msl, TIGHT_SHAPE, f"manual_gemm {cfg}")


@needs_clang
def test_element_types_share_one_arena(m2: Target) -> None:
    """All-materialize attention at 64 x 64 keeps 32 KiB of f32 live early and i32 (the
    mask's iota and bound) later: one pool per element type needed far more than the
    capacity; one arena takes exactly the plan's peak, f32 and i32 views on the same
    bytes, and the result is right in both thread orders."""
    module = _module("attention")
    kernel = module.make_attention(module.AttentionConfig(64, 64))
    bindings = {"L": 70, "S": 70, "D": 64}
    plan = plan_kernel(kernel, m2, bindings, baseline="all-materialize")
    peak = planned_peak(plan)
    assert peak == CAPACITY
    msl = emit_msl(kernel, plan, m2)
    nbytes, views = arena_of(msl.source)
    assert nbytes == peak
    offsets = {t: {o for tt, o in views.values() if tt == t} for t in ("float", "int")}
    assert offsets["int"] and offsets["int"] <= offsets["float"]  # ints reuse float bytes
    check_runs(kernel, msl, bindings, "attention 64x64 all-materialize")


def test_side_by_side_when_the_peak_allows(m2: Target) -> None:
    """Where everything fits the plan's peak side by side (manual GEMM: As, Bs and the
    staging copy all live together) no buffer shares bytes."""
    module = _module("manual_gemm")
    kernel = module.kernel()
    plan = plan_kernel(kernel, m2, {"M": 37, "N": 29, "K": 45})
    msl = emit_msl(kernel, plan, m2)
    nbytes, views = arena_of(msl.source)
    assert nbytes == planned_peak(plan)
    assert "side by side" in msl.source
    assert len({o for _, o in views.values()}) == len(views)


# ----------------------------------------------------------------- the packing itself

_items = st.dictionaries(
    st.text("abcdefgh", min_size=1, max_size=3),
    st.tuples(st.integers(1, 64).map(lambda n: n * 16),
              st.tuples(st.integers(0, 12), st.integers(0, 6)).map(
                  lambda t: (t[0], t[0] + t[1]))),
    min_size=1, max_size=10)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(items=_items, slack=st.integers(0, 256))
def test_packing_never_overlaps_live_buffers(items, slack: int) -> None:
    lower = _live_peak(items)[1]
    for bound in (None, lower + slack * 16):
        offsets, end = _pack(items, bound)
        assert set(offsets) == set(items)
        assert end == max(offsets[n] + items[n][0] for n in items) >= lower
        for a in items:
            assert offsets[a] % 16 == 0
            for b in items:
                (sa, la), (sb, lb) = items[a], items[b]
                if a < b and la[0] <= lb[1] and lb[0] <= la[1]:  # live together
                    assert offsets[a] + sa <= offsets[b] or offsets[b] + sb <= offsets[a]


def test_packing_reaches_the_live_peak_on_a_staircase() -> None:
    """A chain of buffers each live with the next fits in two buffers' bytes."""
    items = {"a": (16, (0, 1)), "b": (16, (1, 2)), "c": (16, (2, 3)), "d": (32, (5, 6)),
             "e": (16, (3, 4))}
    assert _live_peak(items)[1] == 32
    assert _pack(items)[1] == 32
    spread, end = _pack(items, 80)  # room: buffers get bytes of their own where they fit
    assert end <= 80 and len({spread[n] for n in "abc"}) == 3


def test_arena_above_the_capacity_is_refused_with_what_is_live(m2: Target) -> None:
    """S17: a plan for 32 KiB emitted for a target with 16 KiB of threadgroup memory is
    refused, naming the bytes live together where the arena is fullest."""
    module = _module("softmax")
    kernel = module.make_softmax(module.SoftmaxConfig(block_m=4))
    plan = plan_kernel(kernel, m2, {"M": 64, "N": 2048})
    assert planned_peak(plan) == CAPACITY
    res = m2.resource("threadgroup_memory")
    small = dataclasses.replace(m2, resources=tuple(
        dataclasses.replace(r, capacity=16_384) if r.name == res.name else r
        for r in m2.resources))
    with pytest.raises(PlannerError) as info:
        emit_msl(kernel, plan, small)
    text = info.value.render()
    assert "[S17]" in text and "the arena needs 32,768 B > capacity 16,384 B" in text, text
    assert "B live" in text
