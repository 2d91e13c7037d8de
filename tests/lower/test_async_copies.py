"""Asynchronous copies planned and lowered (issue 12): engines, versions, CPU and Metal runs.

Expected engines and versions are computed here from the catalogs' own numbers (issue
cycles + bytes / bandwidth, ``in_flight``, the pipeline window); results are compared
with numpy on sizes that are not tile multiples, empty and single-element ones.
"""

from __future__ import annotations

import jsonschema
import numpy as np
import pytest

import planner
from planner.catalog import CatalogRegistry, CopyMode
from planner.examples.async_gemm import AsyncGemmConfig, make_async_gemm
from planner.lower.loops import build_loop_program
from planner.lower.loops import program as lp
from planner.plan.plan_io import plan_from_json, plan_json_schema, plan_to_json
from planner.realize.binding import bind_execution
from planner.realize.copies import realize_copies
from planner.solve import plan_kernel
from planner.solve.compare import compare_plans, format_comparison

REG = CatalogRegistry()
SHAPES = [(37, 29, 41), (1, 1, 1), (0, 5, 3), (4, 3, 0), (9, 8, 4)]


def _kernel(form: str, window: int, bm: int = 8, bn: int = 8, bk: int = 4):
    return make_async_gemm(AsyncGemmConfig(bm, bn, bk, window, form))


def _run(kernel, target: str, M: int, N: int, K: int) -> np.ndarray:
    rng = np.random.default_rng(M * 131 + N * 7 + K)
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    out = planner.run(kernel, target=target, bindings={"M": M, "N": N, "K": K},
                      inputs={"A": A, "B": B}, check=True)
    want = A.astype(np.float64) @ B.astype(np.float64)
    np.testing.assert_allclose(out["C"], want, rtol=1e-4, atol=1e-4)
    return out["C"]


# --------------------------------------------------------------------------- engines


def _cost(engine, nbytes: int) -> float:
    return engine.issue + nbytes / engine.bandwidth


@pytest.mark.parametrize(("bm", "bk"), [(32, 16), (128, 64)])
def test_the_cheapest_engine_of_the_catalog_moves_each_copy(bm, bk):
    target = REG.get("nvidia-h100")
    k = _kernel("staged", 2, bm, 32, bk)
    env = {"M": 300, "N": 200, "K": 130}
    copies = realize_copies(k, target, bind_execution(k, target, env), env)
    assert len(copies) == 2
    engines = {e.name: e for e in target.copy_engines}
    for c, rows, cols in zip(copies, (bm, bk), (bk, 32), strict=True):
        nbytes = rows * cols * 4
        # hbm -> smem at block: tma and cp_async; the cheaper one for this size
        want = min(("tma", "cp_async"), key=lambda n: _cost(engines[n], nbytes))
        assert c.engine.name == want and c.nbytes == nbytes
        assert (c.source_resource, c.destination, c.scope) == ("hbm", "smem", "block")
    # small tiles favour cp.async (cheap issue), large ones TMA (twice the bandwidth)
    assert copies[0].engine.name == ("cp_async" if bm == 32 else "tma")


@pytest.mark.parametrize(("form", "window"), [("staged", 2), ("staged", 3), ("carried", 2),
                                              ("carried", 3)])
def test_overlapped_async_copies_get_their_versions(form, window):
    target = REG.get("nvidia-h100")
    plan = plan_kernel(_kernel(form, window), target, {"M": 37, "N": 29, "K": 41})
    assert plan.status.value == "optimal"
    cp = REG.get("nvidia-h100").copy_engines
    in_flight = {e.name: e.in_flight for e in cp}
    assert [c.memory for c in plan.copies] == (["%As", "%Bs"] if form == "staged"
                                               else ["%As", "%Bs", "%As", "%Bs"])
    for c in plan.copies:
        if c.line and form == "carried" and c is plan.copies[0]:
            # the copies before the loop are waited for at the first iteration: exposed
            assert not c.overlapped
        assert c.mode == CopyMode.ASYNC.value and c.engine == "cp_async"
    inside = plan.copies[-2:]
    want = min(in_flight["cp_async"], window - 1) + 1
    for c in inside:
        assert c.overlapped and c.wanted_versions == want and c.versions == want
    mem = {m.name: m for m in plan.memories}
    assert mem["%As"].versions == want and mem["%Bs"].versions == want


def test_without_an_engine_a_copy_is_synchronous_and_the_plan_says_so():
    plan = plan_kernel(_kernel("carried", 2), REG.get("apple-m2"), {"M": 9, "N": 8, "K": 4})
    assert REG.get("apple-m2").copy_engines == ()
    assert {(c.engine, c.mode, c.overlapped) for c in plan.copies} == {
        (None, "synchronous", False)}
    assert all("no copy engine" in c.detail for c in plan.copies)


def test_copies_on_npu_systolic_go_by_dma():
    target = REG.get("npu-systolic")
    k = _kernel("staged", 2)
    env = {"M": 37, "N": 29, "K": 41}
    copies = realize_copies(k, target, bind_execution(k, target, env), env)
    assert {(c.engine.name, c.source_resource, c.destination) for c in copies} == {
        ("dma", "weight_dram", "unified_buffer")}


# --------------------------------------------------------------------------- proofs, plans


def test_proofs_check_the_operation_the_realization_applies():
    h100 = plan_kernel(_kernel("staged", 2), REG.get("nvidia-h100"), {"M": 9, "N": 8, "K": 4})
    x86 = plan_kernel(_kernel("staged", 2), REG.get("x86-avx2"), {"M": 9, "N": 8, "K": 4})
    h = [p.detail for p in h100.proofs if "copy_async" in p.detail and p.name == "can_access"]
    assert any("block may copy_async smem" in d for d in h)
    assert any("block may copy_async hbm" in d for d in h)
    x = [p.detail for p in x86.proofs if p.name == "can_access"]
    assert any("worker may write local; prefetch copy by prefetch" in d for d in x)
    assert not any("(copy_async)" in d for d in x)  # plain read and write only


def test_plan_json_keeps_the_copies_and_matches_the_schema():
    plan = plan_kernel(_kernel("carried", 3), REG.get("nvidia-h100"), {"M": 9, "N": 8, "K": 4})
    doc = plan_to_json(plan)
    jsonschema.validate(doc, plan_json_schema())
    assert plan_from_json(doc).copies == plan.copies
    assert [c["engine"] for c in doc["copies"]] == ["cp_async"] * 4


def test_compare_shows_the_engine_and_the_versions_of_sync_and_async_variants():
    from planner.examples.manual_gemm import GemmConfig, make_manual_gemm

    target = REG.get("nvidia-h100")
    b = {"M": 100, "N": 70, "K": 37}
    sync = plan_kernel(make_manual_gemm(GemmConfig(32, 32, 16, 2)), target, b)
    asyn = plan_kernel(make_async_gemm(AsyncGemmConfig(32, 32, 16, 2)), target, b)
    text = format_comparison(compare_plans([("sync", sync), ("async", asyn)]))
    rows = {line.split()[1]: line for line in text.splitlines() if line.startswith("memory ")}
    assert "smem ×2, stores" in rows["%As"]
    assert "smem ×2, cp_async (async, overlapped)" in rows["%As"]
    assert asyn.objective < sync.objective  # the overlapped transfer is not paid


# --------------------------------------------------------------------------- lowering


def test_cpu_prefetches_the_next_window_of_each_copy():
    k = _kernel("staged", 2)
    plan = plan_kernel(k, REG.get("x86-avx2"), {"M": 37, "N": 29, "K": 41})
    program = build_loop_program(k, plan, REG.get("x86-avx2"))

    found: list[lp.Prefetch] = []

    def walk(stmts):
        for s in stmts:
            if isinstance(s, lp.Prefetch):
                found.append(s)
            for attr in ("body",):
                walk(getattr(s, attr, ()) or ())
            for st in getattr(s, "stages", ()) or ():
                walk(st.body)

    for seg in program.segments:
        walk(seg.body)
    assert [f.window.view for f in found] == ["A", "B"]
    # one k-step (4 columns of A, 4 rows of B) ahead of the copy it precedes
    assert str(found[0].window.offsets[1]) == "4 * (%k_tiles + 1)"
    assert str(found[1].window.offsets[0]) == "4 * (%k_tiles + 1)"


@pytest.mark.parametrize("window", [2, 3])
@pytest.mark.parametrize("form", ["staged", "carried"])
@pytest.mark.parametrize(("M", "N", "K"), SHAPES)
def test_cpu_matches_numpy(form, window, M, N, K):
    _run(_kernel(form, window), "x86-avx2", M, N, K)


@pytest.mark.parametrize("window", [2, 3])
@pytest.mark.parametrize("form", ["staged", "carried"])
@pytest.mark.parametrize(("M", "N", "K"), [(37, 29, 41), (1, 1, 1), (0, 5, 3), (9, 8, 4)])
def test_metal_matches_numpy_in_both_thread_orders(form, window, M, N, K):
    # planner.run with check=True runs the emulator forward and in reverse thread order
    _run(_kernel(form, window), "apple-m2", M, N, K)
