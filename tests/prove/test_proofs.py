"""The z3 proofs behind every access: one passing and one failing case per obligation."""

from __future__ import annotations

import dataclasses

import pytest
from manual_gemm import GemmConfig, make_manual_gemm

from planner.catalog import CatalogRegistry
from planner.errors import PlannerError, Severity
from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    exec_,
    f32,
    layout,
    mem,
    memory,
    parallel,
    shape,
    stride,
    swizzle,
    tile_kernel,
)
from planner.prove.proofs import (
    PROOF_NAMES,
    ProofReport,
    ProofResult,
    prove_kernel,
)
from planner.realize import bind_execution

INT64_MAX = 2**63 - 1
SMALL = {"M": 100, "N": 70, "K": 37}


@pytest.fixture(scope="module")
def targets():
    reg = CatalogRegistry()
    return {name: reg.get(name) for name in ("x86-avx2", "apple-m2", "nvidia-b200",
                                             "npu-systolic")}


def results(report: ProofReport, name: str, status: str | None = None) -> list[ProofResult]:
    return [r for r in report.results if r.name == name and (status is None or
                                                             r.status == status)]


# --------------------------------------------------------------------------- kernels


def staged_rows(resource=mem.shared, rows: int = 8, lay=None, scope: str = exec_.AUTOMATIC):
    """Row blocks of X staged through one Memory of [rows, N] (symbolic when N is)."""

    @tile_kernel("staged_rows")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        gm = axis("block_m", ceil_div(X.extent(0), rows))
        m = axis("m", rows)
        n = axis("n", X.extent(1))
        for nest in parallel(shape(gm), scope):
            r0 = nest.index(gm) * rows
            S = memory[f32](lay(m, n, X.extent(1)) if lay else shape(m, n), resource)
            S.store(X[coord(r0, 0), shape(m, n)])
            Y(coord(r0, 0), shape(m, n)).store(S.load())

    return kernel


def nested(inner_scope: str, resource, elems: int = 4):
    """A Memory declared inside a nested parallel (its owner is the inner region)."""

    @tile_kernel("nested")
    def kernel(X: TensorView[f32, dims("M")]):
        g = axis("g", ceil_div(X.extent(0), 64 * elems))
        t = axis("t", 64)
        e = axis("e", elems)
        for outer in parallel(shape(g)):
            for inner in parallel(shape(t), inner_scope):
                S = memory[f32](shape(e), resource)
                off = outer.index(g) * (64 * elems) + inner.index(t) * elems
                S.store(X[coord(off), shape(e)])
                X(coord(off), shape(e)).store(S.load())

    return kernel


def root_global():
    """A kernel-owned global Memory of the whole [M, N] input."""

    @tile_kernel("root_global")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        m = axis("m", X.extent(0))
        n = axis("n", X.extent(1))
        G = memory[f32](shape(m, n), mem.global_)
        G.store(X[coord(0, 0), shape(m, n)])
        Y(coord(0, 0), shape(m, n)).store(G.load())

    return kernel


def window(rows: int):
    """Copy the last ``rows`` rows of X to Y, outside every parallel."""

    @tile_kernel("window")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        n = axis("n", X.extent(1))
        r0 = X.extent(0) - rows
        Y(coord(r0, 0), shape(rows, n)).store(X[coord(r0, 0), shape(rows, n)])

    return kernel


# --------------------------------------------------------------------------- 1. can_access


def test_s20_can_access_manual_gemm_on_apple_m2(targets):
    report = prove_kernel(make_manual_gemm(resource=mem.shared), targets["apple-m2"], SMALL)
    access = results(report, "can_access")
    assert len(access) == 7 and all(r.status == "proved" for r in access)
    assert any("tile.load %A at threadgroup → device_memory (read)" in r.subject for r in access)
    loads = [r for r in access if r.subject.startswith("memory.load")]
    assert all("feeds tile.mma: checked as a read" in r.detail for r in loads)
    assert report.ok, [d.render() for d in report.diagnostics()]


def test_s20_tensor_memory_is_reached_by_the_mma_and_by_async_copies(targets):
    # block may not read/write tmem plainly: the stores are asynchronous copies and the
    # snapshots feeding the mma are read in place (planner/prove/engines.py)
    report = prove_kernel(make_manual_gemm(resource=mem.tensor), targets["nvidia-b200"], SMALL)
    # ...but only A may come from tensor memory (tcgen05.mma: mma_operands [a, c])
    (bad,) = results(report, "can_access", "refuted")
    assert bad.subject == "memory.load %Bs at block → tmem (mma_read)"
    assert bad.detail.startswith("tile.mma operand b reads %Bs in tmem in place")
    tmem = {r.subject for r in results(report, "can_access") if "tmem" in r.subject}
    assert tmem == {
        "memory.store %As at block → tmem (copy_async)",
        "memory.load %As at block → tmem (mma_read)",
        "memory.store %Bs at block → tmem (copy_async)",
        "memory.load %Bs at block → tmem (mma_read)"}
    store = next(r for r in results(report, "can_access") if "store %As" in r.subject)
    assert "may not write tmem but may copy_async it" in store.detail
    assert "tcgen05.commit" in store.detail and store.rule == "S20"


def test_s5_class_without_a_resource_is_refuted_with_names(targets):
    report = prove_kernel(make_manual_gemm(resource=mem.tensor), targets["x86-avx2"], SMALL)
    bad = results(report, "can_access", "refuted")
    assert [r.subject for r in bad] == ["memory %As", "memory %Bs"]
    assert bad[0].rule == "S5"
    assert "x86-avx2 has no resource of class 'tensor'" in bad[0].detail
    assert "global, private, shared" in bad[0].detail


def test_s6_non_monotone_access_refutes_plain_view_loads_on_the_npu(targets):
    # core reaches weight_dram by copy_async only: without an engine that stages the
    # tile (the catalog's dma removed) the plain read is refuted; with it, it is staged
    npu = targets["npu-systolic"]
    no_dma = dataclasses.replace(npu, copy_engines=tuple(
        e for e in npu.copy_engines if e.name != "dma"))
    report = prove_kernel(staged_rows(), no_dma, SMALL)
    bad = results(report, "can_access", "refuted")
    assert any(r.subject == "tile.load %X at core → weight_dram (read)" for r in bad)
    assert "allowed: copy_async" in bad[0].detail
    staged = prove_kernel(staged_rows(), npu, SMALL)
    load = next(r for r in results(staged, "can_access") if r.subject.startswith("tile.load"))
    assert load.status == "proved" and "staged by dma via unified_buffer" in load.subject


# --------------------------------------------------------------------------- 2. factorization


def test_s20_factorization_proved_for_group_owned_shared(targets):
    report = prove_kernel(make_manual_gemm(resource=mem.shared), targets["apple-m2"], SMALL)
    fac = results(report, "factorization")
    assert [r.status for r in fac] == ["proved", "proved"]
    assert "function of the owner coordinate at threadgroup" in fac[0].detail


def test_s17_group_owned_private_is_refuted_with_two_coordinates(targets):
    report = prove_kernel(make_manual_gemm(resource=mem.private_), targets["apple-m2"], SMALL)
    fac = results(report, "factorization", "refuted")
    assert len(fac) == 2 and fac[0].rule == "S17"
    cex = fac[0].counterexample
    owner = ("grid", "threadgroup")
    assert all(cex[f"e1.{s}"] == cex[f"e2.{s}"] for s in owner)
    assert (cex["e1.simdgroup"], cex["e1.thread"]) != (cex["e2.simdgroup"], cex["e2.thread"])
    assert "thread_registers" in fac[0].subject and "never re-owned" in fac[0].detail
    assert report.placements == (("As", None), ("Bs", None))


def test_s17_thread_owned_shared_without_slicing_is_refuted(targets):
    report = prove_kernel(nested("thread", mem.shared), targets["apple-m2"], {"M": 1024})
    (fac,) = results(report, "factorization")
    assert fac.status == "refuted" and fac.rule == "S17"
    cex = fac.counterexample
    assert cex["p1.threadgroup"] == cex["p2.threadgroup"]
    assert (cex["p1.simdgroup"], cex["p1.thread"]) != (cex["p2.simdgroup"], cex["p2.thread"])
    assert "slicing: false" in fac.detail


def test_s17_lane_owned_shared_is_sliced_in_worker_local_storage(targets):
    report = prove_kernel(nested(exec_.AUTOMATIC, mem.shared), targets["x86-avx2"], {"M": 1024})
    (fac,) = results(report, "factorization")
    assert fac.status == "proved" and "8 owner instances share one local instance" in fac.detail
    assert report.placements == (("S", "local"),)


def test_nested_parallel_binding_problems_are_reported(targets):
    report = prove_kernel(nested("bogus", mem.private_), targets["apple-m2"], {"M": 1024})
    (bind,) = [r for r in results(report, "factorization") if r.subject == "parallel t"]
    assert bind.status == "refuted" and "scopes: grid, threadgroup, simdgroup, thread" in \
        bind.detail
    report = prove_kernel(nested("threadgroup", mem.private_), targets["apple-m2"], {"M": 1024})
    assert any("not below the enclosing parallel's scope" in r.detail
               for r in results(report, "factorization", "refuted"))


def test_execution_binding_follows_automatic_scopes(targets):
    k = nested(exec_.AUTOMATIC, mem.shared)
    binding = bind_execution(k, targets["apple-m2"])
    assert binding.parallel_scope == {"g": "threadgroup", "t": "simdgroup"}
    assert binding.parallel_parent == {"g": "kernel", "t": "g"}


# --------------------------------------------------------------------------- 3. capacity


def test_capacity_manual_gemm_64x64x128_does_not_fit_apple_m2(targets):
    k = make_manual_gemm(GemmConfig(block_m=64, block_n=64, block_k=128), resource=mem.shared)
    report = prove_kernel(k, targets["apple-m2"], SMALL)
    (cap,) = results(report, "capacity")
    assert cap.status == "refuted"
    # As [64, 128] stride [129, 1]: 8,255 floats = 33,020 B, rounded to 16 B alignment.
    assert cap.detail == ("As 33,024 B + Bs 32,768 B = 65,792 B > threadgroup_memory capacity "
                          "32,768 B per threadgroup")
    assert cap.counterexample == {"As_bytes": 33024, "Bs_bytes": 32768, "total_bytes": 65792,
                                  "capacity": 32768}
    assert [note for _, note in cap.notes] == ["memory %As is declared here",
                                               "memory %Bs is declared here"]
    with pytest.raises(PlannerError) as info:
        report.raise_if_refuted()
    assert info.value.kind == "proof"
    assert "65,792 B > threadgroup_memory capacity 32,768 B" in info.value.render()


def test_capacity_manual_gemm_32x32x16_fits(targets):
    report = prove_kernel(make_manual_gemm(resource=mem.shared), targets["apple-m2"], SMALL)
    (cap,) = results(report, "capacity")
    assert cap.status == "proved"
    assert cap.detail.startswith("As 2,176 B + Bs 2,048 B = 4,224 B ≤")


def test_capacity_counts_planner_temporaries(targets):
    report = prove_kernel(make_manual_gemm(resource=mem.shared), targets["apple-m2"], SMALL,
                          extra_occupants=[("x_tmp", "threadgroup_memory", 30_000)])
    (cap,) = results(report, "capacity")
    assert cap.status == "refuted"
    assert "As 2,176 B + Bs 2,048 B + x_tmp 30,000 B = 34,224 B >" in cap.detail
    assert cap.counterexample["x_tmp_bytes"] == 30_000


def test_capacity_symbolic_extent_gets_a_counterexample(targets):
    report = prove_kernel(staged_rows(), targets["apple-m2"])  # S: [8, N] floats
    (cap,) = results(report, "capacity")
    assert cap.status == "refuted"
    cex = cap.counterexample
    assert cex["N"] > 1024  # 8 rows x 4 B x N > 32 KiB
    assert cex["S_bytes"] == -(-8 * cex["N"] * 4 // 16) * 16 == cex["total_bytes"] > 32768
    assert f"N={cex['N']}" in cap.detail
    bounded = prove_kernel(staged_rows(), targets["apple-m2"], symbol_bounds={"N": (0, 1024)})
    assert results(bounded, "capacity")[0].status == "proved"


def test_capacity_multiplies_slices_per_resource_instance(targets):
    fits = prove_kernel(nested(exec_.AUTOMATIC, mem.shared, 16384), targets["x86-avx2"],
                        {"M": 2**20})
    assert results(fits, "capacity")[0].detail.startswith("S 8 × 65,536 B ≤ local capacity")
    over = prove_kernel(nested(exec_.AUTOMATIC, mem.shared, 16400), targets["x86-avx2"],
                        {"M": 2**20})
    (cap,) = results(over, "capacity")
    assert cap.status == "refuted"
    assert cap.counterexample["S_bytes"] == 8 * 65_600 > 524_288


# --------------------------------------------------------------------------- 4. layouts


def test_s13_injective_and_in_bounds_swizzled_symbolic_layout(targets):
    lay = lambda m, n, N: layout(shape(m, n), stride(N + 4, 1), swizzle(3, 2, 3))  # noqa: E731
    report = prove_kernel(staged_rows(lay=lay), targets["x86-avx2"])
    for name in ("injectivity", "bounds"):
        (r,) = results(report, name)
        assert r.status == "proved", r.detail


def test_s13_overlapping_symbolic_layout_is_refuted(targets):
    lay = lambda m, n, N: layout(shape(m, n), stride(N + (-1), 1))  # noqa: E731
    report = prove_kernel(staged_rows(lay=lay), targets["x86-avx2"])
    (inj,) = results(report, "injectivity")
    assert inj.status == "refuted" and inj.rule == "S13"
    cex = inj.counterexample
    stride0 = cex["N"] - 1
    assert cex["u0"] * stride0 + cex["u1"] == cex["v0"] * stride0 + cex["v1"] == cex["offset"]
    assert (cex["u0"], cex["u1"]) != (cex["v0"], cex["v1"])
    assert all(0 <= cex[f"{p}1"] < cex["N"] and 0 <= cex[f"{p}0"] < 8 for p in "uv")


def test_s20_negative_symbolic_stride_is_out_of_bounds(targets):
    lay = lambda m, n, N: layout(shape(m, n), stride(N + (-2000), 1))  # noqa: E731
    report = prove_kernel(staged_rows(lay=lay), targets["x86-avx2"])
    (bnd,) = results(report, "bounds")
    assert bnd.status == "refuted"
    cex = bnd.counterexample
    assert cex["N"] < 2000 and cex["offset"] < 0
    assert cex["offset"] == cex["u0"] * (cex["N"] - 2000) + cex["u1"]


# --------------------------------------------------------------------------- 5. int64


def test_s14_view_addressing_overflows_with_huge_bound_extents(targets):
    report = prove_kernel(window(1), targets["x86-avx2"], {"M": 2**31, "N": 2**31})
    bad = results(report, "int64", "refuted")
    assert len(bad) == 2
    cex = bad[0].counterexample
    n = 2**31
    assert 0 <= cex["x0"] < n and 0 <= cex["x1"] < n
    assert cex["byte_offset"] == (cex["x0"] * n + cex["x1"]) * 4 > INT64_MAX


def test_s14_unbound_view_extents_assume_the_storage_exists(targets):
    """Default bounds (0 .. 2**31 - 1) allow an M x N f32 view too large to address: the
    access holds only if the caller's storage exists, an assumption reported with z3's
    witness (an element of the window at a byte offset beyond 2**63 - 1)."""
    report = prove_kernel(window(1), targets["x86-avx2"])
    views = results(report, "int64")
    assert len(views) == 2
    for r in views:
        assert r.status == "assumed" and "assuming the view's storage exists" in r.detail
        cex = r.counterexample
        m, n = cex["M"], cex["N"]
        assert 0 <= cex["x0"] < m <= 2**31 - 1 and 0 <= cex["x1"] < n <= 2**31 - 1
        assert cex["byte_offset"] == (cex["x0"] * n + cex["x1"]) * 4 > INT64_MAX
    assert [r.name for r in report.assumed] == ["int64", "int64"]


def test_s14_view_addressing_fits_with_bindings_or_bounds(targets):
    report = prove_kernel(window(1), targets["x86-avx2"], {"M": 4096, "N": 4096})
    assert all(r.status == "proved" for r in results(report, "int64"))
    report = prove_kernel(window(1), targets["x86-avx2"],
                          symbol_bounds={"M": (0, 2**20), "N": (0, 2**20)})
    assert all(r.status == "proved" for r in results(report, "int64"))


def test_s14_empty_window_and_known_zero_factor_have_no_address_events(targets):
    report = prove_kernel(window(0), targets["x86-avx2"])
    assert [r.status for r in results(report, "int64")] == ["proved", "proved"]
    report = prove_kernel(window(1), targets["x86-avx2"], {"M": 0, "N": 2**80})
    assert all("empty domain" in r.detail for r in results(report, "int64"))


def test_s14_memory_bytes_overflow_signed_64_bit(targets):
    report = prove_kernel(root_global(), targets["x86-avx2"])
    (mem_r,) = [r for r in results(report, "int64") if r.subject.startswith("memory")]
    assert mem_r.status == "refuted"
    cex = mem_r.counterexample
    assert cex["bytes"] == -(-cex["M"] * cex["N"] * 4 // 64) * 64 > INT64_MAX
    fine = prove_kernel(root_global(), targets["x86-avx2"], {"M": 1024, "N": 1024})
    assert fine.ok, [d.render() for d in fine.diagnostics()]


# --------------------------------------------------------------------------- report


def test_report_diagnostics_and_json(targets):
    k = make_manual_gemm(GemmConfig(block_m=64, block_n=64, block_k=128), resource=mem.shared)
    report = prove_kernel(k, targets["apple-m2"], SMALL)
    assert not report.ok and len(report.refuted) == 1
    (diag,) = report.diagnostics()
    assert diag.rule == "S17" and diag.severity == Severity.ERROR
    assert diag.loc.file.endswith("manual_gemm.py")
    assert "counterexample: As_bytes=33024" in diag.message
    data = report.to_json()
    assert data["summary"]["capacity"] == {"refuted": 1}
    assert {r["name"] for r in data["results"]} <= set(PROOF_NAMES)


def test_unknown_results_become_warnings():
    unknown = ProofResult("injectivity", "memory %S", "unknown", "z3 gave up", None)
    report = ProofReport("x", (unknown,))
    assert not report.ok and report.unknown == (unknown,)
    (diag,) = report.diagnostics()
    assert diag.severity == Severity.WARNING
    report.raise_if_refuted()  # unknown is not a refutation


def test_every_check_is_fast_on_concrete_kernels(targets):
    report = prove_kernel(make_manual_gemm(resource=mem.shared), targets["apple-m2"], SMALL)
    assert report.elapsed_ms < 1000
    assert max(r.elapsed_ms for r in report.results) < 200


def test_empty_symbol_bounds_are_rejected(targets):
    with pytest.raises(PlannerError, match="is empty"):
        prove_kernel(window(1), targets["x86-avx2"], symbol_bounds={"N": (5, 1)})


def test_concurrent_runs_use_private_z3_contexts(targets):
    from concurrent.futures import ThreadPoolExecutor

    def run(_: int) -> tuple[str, dict[str, int] | None]:
        report = prove_kernel(staged_rows(), targets["apple-m2"])
        (cap,) = results(report, "capacity")
        return cap.status, cap.counterexample

    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(run, range(8)))
    assert all(status == "refuted" and cex["total_bytes"] > 32768 for status, cex in outcomes)


@pytest.mark.parametrize("example", ["gemm", "manual_gemm", "softmax", "layernorm", "gelu",
                                     "attention"])
@pytest.mark.parametrize("target", ["x86-avx2", "apple-m2"])
def test_shipped_examples_prove_with_their_bindings(targets, example, target):
    import importlib

    mod = importlib.import_module(example)
    report = prove_kernel(mod.kernel(), targets[target], mod.BINDINGS)
    assert report.ok, [d.render() for d in report.diagnostics()]
