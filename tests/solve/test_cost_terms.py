"""Every cost term, derived by hand from the catalogs' YAML figures.

The expected nanoseconds are computed here from ``catalogs/*.yaml`` read with pyyaml
(never from ``planner.catalog`` or ``planner.solve.costs``) and compared with what the
planner reports: ``build_problem`` + ``evaluate`` for a chosen assignment, and
``plan_kernel``'s per-edge ``cost`` and ``breakdown`` for the plan it picks.

The rules of the cost model (``planner/solve/costs.py``), as these tests restate them:

* a term is ``cycles × executions / clock_ghz`` ns, rounded to an integer per term and
  per component (the producer's run, its write, each consumer's read);
* ``executions = ceil(parallel instances / concurrent_instances) × loop trip counts``;
* compute: ``elements / throughput[cheap | transcendental]`` per elementwise op,
  ``input elements / cheap`` per reduction, ``2·m·n·k / mma`` per mma;
* traffic: ``bytes × share / bandwidth`` where ``share = concurrent_instances`` when the
  resource lives at an ancestor scope of the executing one (DRAM for CPU workers, device
  memory for threadgroups) and 1 otherwise;
* barriers: the resource's sync rule cost once per write of a materialized value, when
  the resource is not coherent and the owner has several members;
* bank conflicts: ``(degree - 1) × read`` for a column reader, with ``degree`` the most
  distinct words one bank serves when ``min(banks, rows)`` rows of one column are read;
* stalls: a value (or explicit Memory) preserved across pipeline stages wants
  ``maxv = min(distance, window - 1) + 1`` versions; with ``k`` it pays
  ``latency × (maxv - k) / (maxv - 1)``, latency being the producer's source latency
  plus its own time.

All tile kernels below work on 8×16 f32 tiles (128 elements, 512 B).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from manual_gemm import GemmConfig, make_manual_gemm
from planning_support import target, with_capacity

from planner.ir.core import Kernel
from planner.ir.frontend import (
    TensorView,
    abs_,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    exp,
    f32,
    mem,
    parallel,
    pipeline,
    reduce_sum,
    serial,
    shape,
    tile_kernel,
    transpose,
)
from planner.solve import Decision, build_problem, evaluate, plan_kernel
from planner.solve.costs import Assignment, Edge, Problem, Value

CATALOGS = Path(__file__).resolve().parents[2] / "planner" / "catalogs"

ROWS, COLS = 8, 16
ELEMENTS = ROWS * COLS  # 128
TILE_BYTES = ELEMENTS * 4  # 512 B of f32

# x86-avx2 sizes: 72 rows = 9 row blocks over 2 workers -> ceil(9 / 2) = 5 waves;
# 48 columns = 3 column tiles -> 3 trips: 15 executions per op in the loop.
X86 = {"M": 72, "N": 48}
# apple-m2 sizes: 200 rows = 25 threadgroups over 10 cores -> ceil(25 / 10) = 3 waves;
# 3 column tiles: 9 executions.
M2 = {"M": 200, "N": 48}


# --------------------------------------------------------------------------- catalog figures


@cache
def catalog(name: str) -> dict[str, Any]:
    with open(CATALOGS / f"{name}.yaml", encoding="utf-8") as f:
        return yaml.safe_load(f)


def costs(name: str) -> dict[str, Any]:
    return catalog(name)["costs"]


def resource(name: str, res: str) -> dict[str, Any]:
    return next(r for r in catalog(name)["resources"] if r["name"] == res)


def sync_rule(name: str, res: str, scope: str) -> dict[str, Any]:
    return next(s for s in resource(name, res)["sync"] if s["scope"] == scope)


def ns(name: str, cycles: float, executions: int) -> int:
    """One rounded term: cycles per execution times executions, at the catalog's clock."""
    return round(cycles * executions / costs(name)["clock_ghz"])


def executions(name: str, instances: int, trips: int = 1) -> int:
    waves = -(-instances // costs(name)["concurrent_instances"])
    return waves * trips


def x86_execs() -> int:
    return executions("x86-avx2", math.ceil(X86["M"] / ROWS), math.ceil(X86["N"] / COLS))


def m2_execs() -> int:
    return executions("apple-m2", math.ceil(M2["M"] / ROWS), math.ceil(M2["N"] / COLS))


def transfer_cycles(name: str, res: str, nbytes: int, share: int) -> float:
    return nbytes * share / resource(name, res)["bandwidth"]


def test_the_hand_derived_sizes() -> None:
    # the arithmetic the tests below rely on, spelled out once
    assert costs("x86-avx2")["concurrent_instances"] == 2 and x86_execs() == 5 * 3
    assert costs("apple-m2")["concurrent_instances"] == 10 and m2_execs() == 3 * 3
    assert target("x86-avx2").costs.loc.file == str(CATALOGS / "x86-avx2.yaml")
    assert target("apple-m2").costs.loc.file == str(CATALOGS / "apple-m2.yaml")


# --------------------------------------------------------------------------- kernels


def unary_tiles(fn: Callable[..., Any]) -> Kernel:
    """``Y = fn(X)`` tile by tile: one parallel row block, a serial loop over columns."""

    @tile_kernel(f"{fn.__name__}_tiles")
    def unary(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]
              ) -> None:
        gm = axis("block_m", ceil_div(X.extent(0), ROWS))
        nt = axis("n_tiles", ceil_div(X.extent(1), COLS))
        m, n = axis("m", ROWS), axis("n", COLS)
        for nest in parallel(shape(gm)):
            r0 = nest.index(gm) * ROWS
            for step in serial(shape(nt)):
                c0 = step.index() * COLS
                x = X[coord(r0, c0), shape(m, n)]
                Y(coord(r0, c0), shape(m, n)).store(fn(x))

    return unary


@tile_kernel("exp_twice")
def exp_twice(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")],
              Z: TensorView[f32, dims("M", "N")]) -> None:
    """``e = exp(x)`` stored twice: two consumers, so the default policy preserves it."""
    gm = axis("block_m", ceil_div(X.extent(0), ROWS))
    nt = axis("n_tiles", ceil_div(X.extent(1), COLS))
    m, n = axis("m", ROWS), axis("n", COLS)
    for nest in parallel(shape(gm)):
        r0 = nest.index(gm) * ROWS
        for step in serial(shape(nt)):
            c0 = step.index() * COLS
            e = exp(X[coord(r0, c0), shape(m, n)])
            Y(coord(r0, c0), shape(m, n)).store(e)
            Z(coord(r0, c0), shape(m, n)).store(e)


@tile_kernel("exp_and_transpose")
def exp_and_transpose(X: TensorView[const(f32), dims("M", "N")],
                      Y: TensorView[f32, dims("M", "N")],
                      T: TensorView[f32, dims("N", "M")]) -> None:
    """``e = exp(x)`` stored as is (row reads) and transposed (column reads)."""
    gm = axis("block_m", ceil_div(X.extent(0), ROWS))
    nt = axis("n_tiles", ceil_div(X.extent(1), COLS))
    m, n = axis("m", ROWS), axis("n", COLS)
    for nest in parallel(shape(gm)):
        r0 = nest.index(gm) * ROWS
        for step in serial(shape(nt)):
            c0 = step.index() * COLS
            e = exp(X[coord(r0, c0), shape(m, n)])
            Y(coord(r0, c0), shape(m, n)).store(e)
            T(coord(c0, r0), shape(n, m)).store(transpose(e))


@tile_kernel("row_sums")
def row_sums(X: TensorView[const(f32), dims("M", "N")], S: TensorView[f32, dims("M")]
             ) -> None:
    gm = axis("block_m", ceil_div(X.extent(0), ROWS))
    m, n = axis("m", ROWS), axis("n", COLS)
    for nest in parallel(shape(gm)):
        r0 = nest.index(gm) * ROWS
        S(coord(r0), shape(m)).store(reduce_sum(X[coord(r0, 0), shape(m, n)], axis=1))


def staged(window: int, middle: bool) -> Kernel:
    """A pipeline over column tiles: the load in stage 0, ``exp`` and the store one stage
    later, or two when ``middle`` adds an (empty) stage between them."""

    @tile_kernel(f"staged_w{window}")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]
               ) -> None:
        gm = axis("block_m", ceil_div(X.extent(0), ROWS))
        nt = axis("n_tiles", ceil_div(X.extent(1), COLS))
        m, n = axis("m", ROWS), axis("n", COLS)
        for nest in parallel(shape(gm)):
            r0 = nest.index(gm) * ROWS
            for step in pipeline(shape(nt), window=window):
                c0 = step.index() * COLS
                step.stage("load")
                x = X[coord(r0, c0), shape(m, n)]
                if middle:
                    step.stage("wait")
                step.stage("use")
                Y(coord(r0, c0), shape(m, n)).store(exp(x))

    return kernel


SHARED_GEMM = make_manual_gemm(GemmConfig(), resource=mem.shared)
GEMM_SIZES = {"M": 100, "N": 70, "K": 37}


# --------------------------------------------------------------------------- assignments


def value(problem: Problem, kind: str) -> Value:
    return next(v for v in problem.values if v.kind == kind)


def edge(problem: Problem, producer_kind: str, consumer_kind: str,
         view: str | None = None) -> Edge:
    """The edge ``producer_kind -> consumer_kind`` (a store: the one into ``view``)."""
    for e in problem.edges:
        if (problem.values[e.value].kind == producer_kind and e.consumer_kind == consumer_kind
                and (view is None or f"(%{view})" in e.consumer)):
            return e
    raise AssertionError(f"no {producer_kind} -> {consumer_kind} edge")


def placement(v: Value, res: str, layout: str = "dense") -> int:
    return next(q for q, p in enumerate(v.placements)
                if p.resource == res and p.layout.kind == layout)


def assign(problem: Problem, materialize: Mapping[str, tuple[str, str]],
           versions: Mapping[str, int] | None = None) -> Assignment:
    """Values whose kind is in ``materialize`` are materialized in (resource, layout) on
    every edge; every other edge is virtual where legal, else fused, else materialized in
    the value's first placement."""
    choices: list[Decision] = []
    for e in problem.edges:
        kind = problem.values[e.value].kind
        if kind in materialize:
            choices.append(Decision.MATERIALIZED)
        else:
            choices.append(next(c for c in (Decision.VIRTUAL, Decision.FUSED,
                                            Decision.MATERIALIZED) if e.legal(c)))
    places: list[int | None] = []
    for v in problem.values:
        mat = any(choices[i] is Decision.MATERIALIZED for i in v.edges)
        places.append(placement(v, *materialize[v.kind]) if v.kind in materialize
                      else 0 if mat else None)
    return Assignment(tuple(choices), tuple(places),
                      tuple((versions or {}).get(v.kind, 1) for v in problem.values),
                      tuple(m.max_versions for m in problem.memories))


def terms_of(problem: Problem, a: Assignment, e: Edge) -> dict[str, int]:
    ev = evaluate(problem, a)
    assert ev.feasible, ev.violations
    return dict(ev.edge_terms[e.index])


# --------------------------------------------------------------------------- compute


@pytest.mark.parametrize(("name", "fn", "cost_class", "sizes", "execs"), [
    ("x86-avx2", exp, "transcendental", X86, x86_execs),
    ("x86-avx2", abs_, "cheap", X86, x86_execs),
    ("apple-m2", exp, "transcendental", M2, m2_execs),
    ("apple-m2", abs_, "cheap", M2, m2_execs),
])
def test_compute_of_an_elementwise_op(name: str, fn: Callable[..., Any], cost_class: str,
                                      sizes: dict[str, int], execs: Callable[[], int]) -> None:
    # x86-avx2 exp: 128 elements / 1 per cycle = 128 cycles x 15 executions / 2.9 GHz
    #   = 662.07 -> 662 ns; abs: 128 / 16 = 8 cycles x 15 / 2.9 = 41.38 -> 41 ns.
    # apple-m2 exp: 128 / 32 = 4 cycles x 9 / 1.398 = 25.75 -> 26 ns;
    #   abs: 128 / 128 = 1 cycle x 9 / 1.398 = 6.44 -> 6 ns.
    expected = ns(name, ELEMENTS / costs(name)[cost_class], execs())
    plan = plan_kernel(unary_tiles(fn), target(name), sizes)
    assert plan.breakdown["compute"] == expected  # the only op that computes
    assert "recompute" not in plan.breakdown
    (out,) = [e for e in plan.edges if e.consumer_kind == "tile.store"]
    assert out.cost["compute"] == expected  # fused into the store or run once: the same


def test_compute_of_a_reduction() -> None:
    # 128 input elements / cheap 16 = 8 cycles per execution; 9 row blocks over 2 workers
    # -> 5 waves, no loop: 8 x 5 / 2.9 = 13.79 -> 14 ns
    name = "x86-avx2"
    expected = ns(name, ELEMENTS / costs(name)["cheap"], executions(name, 9))
    plan = plan_kernel(row_sums, target(name), {"M": 72, "N": COLS})
    assert plan.breakdown["compute"] == expected
    problem = build_problem(row_sums, target(name), {"M": 72, "N": COLS})
    assert dict(value(problem, "tile.reduce.sum").home) == {"compute": expected}


def test_compute_of_an_mma() -> None:
    # manual_gemm 32x32x16 blocks: 2 x 32 x 32 x 16 = 32,768 flops / mma 256 = 128 cycles;
    # ceil(100/32) x ceil(70/32) = 4 x 3 = 12 threadgroups over 10 cores -> 2 waves,
    # ceil(37/16) = 3 k tiles: 6 executions; 128 x 6 / 1.398 = 549.36 -> 549 ns
    name = "apple-m2"
    flops = 2 * 32 * 32 * 16
    expected = ns(name, flops / costs(name)["mma"], executions(name, 4 * 3, 3))
    plan = plan_kernel(SHARED_GEMM, target(name), GEMM_SIZES)
    assert plan.breakdown["compute"] == expected
    (mma,) = [e for e in plan.edges if e.producer_kind == "tile.mma"
              and e.consumer_kind == "loop.carry"]
    assert mma.cost["compute"] == expected


# --------------------------------------------------------------------------- traffic


@pytest.mark.parametrize(("name", "global_res", "sizes", "execs"), [
    ("x86-avx2", "dram", X86, x86_execs),
    ("apple-m2", "device_memory", M2, m2_execs),
])
def test_traffic_of_loads_and_stores_shares_global_bandwidth(
        name: str, global_res: str, sizes: dict[str, int], execs: Callable[[], int]) -> None:
    # Global memory lives at the root scope, an ancestor of the workers / threadgroups
    # that run concurrently: each gets bandwidth / concurrent_instances.
    # x86-avx2: 512 B x 2 / 6.5 B per cycle = 157.54 cycles x 15 / 2.9 = 814.9 -> 815 ns.
    # apple-m2: 512 B x 10 / 71.5 = 71.61 cycles x 9 / 1.398 = 461.0 -> 461 ns.
    share = costs(name)["concurrent_instances"]
    one = ns(name, transfer_cycles(name, global_res, TILE_BYTES, share), execs())
    plan = plan_kernel(unary_tiles(exp), target(name), sizes)
    assert plan.breakdown["traffic"] == 2 * one  # the load and the store
    (load,) = [e for e in plan.edges if e.producer_kind == "tile.load"]
    assert load.cost == {"traffic": one}  # fused into exp: read at exp's executions


def test_traffic_of_a_materialized_edge_in_worker_local_storage() -> None:
    # Registers of 4 B cannot hold e: it is materialized, cheapest in "local" (the
    # worker's own L2, instance per worker: no sharing): one write and one read per
    # consumer, each 512 B / 32 B per cycle = 16 cycles x 15 / 2.9 = 82.76 -> 83 ns.
    name = "x86-avx2"
    one = ns(name, transfer_cycles(name, "local", TILE_BYTES, 1), x86_execs())
    compute = ns(name, ELEMENTS / costs(name)["transcendental"], x86_execs())
    dram = ns(name, transfer_cycles(name, "dram", TILE_BYTES, 2), x86_execs())
    plan = plan_kernel(exp_twice, with_capacity(target(name), "registers", 4), X86)
    stores = {e.consumer: e for e in plan.edges if e.producer_kind == "tile.unary.exp"}
    y, z = stores["tile.store(%Y)"], stores["tile.store(%Z)"]
    assert y.decision is z.decision is Decision.MATERIALIZED
    assert y.resource == z.resource == "local" and y.sync is None
    # the first materialized edge carries exp's run and the write; each edge its read
    assert y.cost == {"compute": compute, "traffic": one + one}
    assert z.cost == {"traffic": one}
    # load (fused into exp) + write + 2 reads + the two stores into DRAM
    assert plan.breakdown == {"compute": compute, "traffic": dram + 3 * one + 2 * dram}


def test_traffic_of_a_materialized_edge_in_dram() -> None:
    # The same value in DRAM: write and reads each 512 B x 2 / 6.5 = 157.54 cycles
    # x 15 / 2.9 = 814.9 -> 815 ns; DRAM is coherent: no barrier despite its sync rule.
    name = "x86-avx2"
    problem = build_problem(exp_twice, target(name), X86)
    a = assign(problem, {"tile.unary.exp": ("dram", "dense")})
    one = ns(name, transfer_cycles(name, "dram", TILE_BYTES, 2), x86_execs())
    compute = ns(name, ELEMENTS / costs(name)["transcendental"], x86_execs())
    assert resource(name, "dram")["coherence"] == "coherent"
    assert terms_of(problem, a, edge(problem, "tile.unary.exp", "tile.store", "Y")) == {
        "compute": compute, "traffic": one + one}
    assert terms_of(problem, a, edge(problem, "tile.unary.exp", "tile.store", "Z")) == {
        "traffic": one}


# --------------------------------------------------------------------------- barriers


def test_barrier_of_a_value_materialized_in_threadgroup_memory() -> None:
    # Threadgroup memory is ordered by barriers and a threadgroup has several SIMD-groups:
    # the write pays the threadgroup_barrier rule, 20 cycles x 9 / 1.398 = 128.76 -> 129
    # ns, once (not per read); traffic 512 B / 128 B per cycle = 4 x 9 / 1.398 = 25.75
    # -> 26 ns for the write and for each read.
    name = "apple-m2"
    rule = sync_rule(name, "threadgroup_memory", "threadgroup")
    barrier = ns(name, rule["cost"], m2_execs())
    one = ns(name, transfer_cycles(name, "threadgroup_memory", TILE_BYTES, 1), m2_execs())
    compute = ns(name, ELEMENTS / costs(name)["transcendental"], m2_execs())
    plan = plan_kernel(exp_twice, with_capacity(target(name), "thread_registers", 4), M2)
    stores = {e.consumer: e for e in plan.edges if e.producer_kind == "tile.unary.exp"}
    y, z = stores["tile.store(%Y)"], stores["tile.store(%Z)"]
    assert y.resource == z.resource == "threadgroup_memory"
    assert y.sync == z.sync == rule["name"] == "threadgroup_barrier"
    assert y.cost == {"barriers": barrier, "compute": compute, "traffic": one + one}
    assert z.cost == {"traffic": one}
    assert plan.breakdown["barriers"] == barrier


def test_barrier_of_a_value_materialized_in_device_memory() -> None:
    # Device memory needs threadgroup_barrier_mem_device: 40 cycles x 9 / 1.398 = 257.5
    # -> 258 ns; traffic 512 B x 10 / 71.5 = 71.61 cycles x 9 / 1.398 = 461.0 -> 461 ns.
    name = "apple-m2"
    rule = sync_rule(name, "device_memory", "threadgroup")
    problem = build_problem(exp_twice, target(name), M2)
    v = value(problem, "tile.unary.exp")
    a = assign(problem, {"tile.unary.exp": ("device_memory", "dense")})
    one = ns(name, transfer_cycles(name, "device_memory", TILE_BYTES, 10), m2_execs())
    compute = ns(name, ELEMENTS / costs(name)["transcendental"], m2_execs())
    assert v.placements[placement(v, "device_memory")].sync == rule["name"]
    assert terms_of(problem, a, edge(problem, "tile.unary.exp", "tile.store", "Y")) == {
        "barriers": ns(name, rule["cost"], m2_execs()), "compute": compute,
        "traffic": one + one}


def test_no_barrier_on_coherent_cpu_storage() -> None:
    problem = build_problem(exp_twice, target("x86-avx2"), X86)
    for v in problem.values:
        for p in v.placements:
            assert p.sync is None and "barriers" not in dict(p.write)


# --------------------------------------------------------------------------- bank conflicts


def test_bank_conflicts_of_a_transpose_by_layout() -> None:
    # apple-m2 threadgroup memory: 32 banks of 4 B.  A transpose reads e column by
    # column: row i of column 0 is word 16 i of the dense 8x16 tile, in bank 16 i mod 32,
    # i.e. banks 0 and 16 only: 8 rows / 2 banks = 4 words per bank, degree 4, so the
    # read pays 3 more reads: 512 B / 128 = 4 cycles x 3 x 9 / 1.398 = 77.25 -> 77 ns.
    # Rows padded by one element: word 17 i, banks 0, 17, 2, 19, ... all distinct: none.
    # XOR swizzle (3, 0, 4): word 16 i ^ i = 17 i, distinct too, but every write and read
    # pays one cheap op per element: 128 / 128 = 1 cycle x 9 / 1.398 = 6.44 -> 6 ns.
    name = "apple-m2"
    banks = resource(name, "threadgroup_memory")["banks"]
    row_words = COLS * 4 // banks["width"]
    distinct = banks["count"] // math.gcd(row_words, banks["count"])
    degree = ROWS // distinct
    assert (row_words, degree) == (16, 4)
    read = transfer_cycles(name, "threadgroup_memory", TILE_BYTES, 1)
    one = ns(name, read, m2_execs())
    layout = ns(name, ELEMENTS / costs(name)["cheap"], m2_execs())
    problem = build_problem(exp_and_transpose, target(name), M2)
    to_t = edge(problem, "tile.unary.exp", "tile.transpose")
    to_y = edge(problem, "tile.unary.exp", "tile.store", "Y")
    assert to_t.column_reader and not to_y.column_reader

    dense = assign(problem, {"tile.unary.exp": ("threadgroup_memory", "dense")})
    assert terms_of(problem, dense, to_t) == {
        "bank_conflicts": ns(name, read * (degree - 1), m2_execs()), "traffic": one}
    assert "bank_conflicts" not in terms_of(problem, dense, to_y)  # rows: no conflict

    padded = assign(problem, {"tile.unary.exp": ("threadgroup_memory", "padded")})
    assert terms_of(problem, padded, to_t) == {"traffic": one}

    swizzled = assign(problem, {"tile.unary.exp": ("threadgroup_memory", "swizzled")})
    assert terms_of(problem, swizzled, to_t) == {"layout": layout, "traffic": one}
    # one write and two reads through the swizzle
    assert sum(terms_of(problem, swizzled, e).get("layout", 0) for e in (to_y, to_t)) \
        == 3 * layout


def test_planner_pads_a_column_read_buffer_instead_of_paying_conflicts() -> None:
    name = "apple-m2"
    plan = plan_kernel(exp_and_transpose,
                       with_capacity(target(name), "thread_registers", 4), M2)
    es = [e for e in plan.edges if e.producer_kind == "tile.unary.exp"]
    assert es and all(e.resource == "threadgroup_memory" for e in es)
    assert {str(e.layout) for e in es} == {"padded +1"}
    assert "bank_conflicts" not in plan.breakdown and "layout" not in plan.breakdown
    one = ns(name, transfer_cycles(name, "threadgroup_memory", TILE_BYTES, 1), m2_execs())
    (to_t,) = [e for e in es if e.consumer_kind == "tile.transpose"]
    assert to_t.cost.get("traffic") == one


# --------------------------------------------------------------------------- stalls


def _load_latency_ns(name: str) -> float:
    """A tile load's exposed latency per x86 execution, unrounded: DRAM latency plus its
    transfer, 260 + 512 B x 2 / 6.5 = 417.54 cycles."""
    cycles = resource(name, "dram")["latency"] + transfer_cycles(name, "dram", TILE_BYTES, 2)
    return cycles * x86_execs() / costs(name)["clock_ghz"]


@pytest.mark.parametrize(("window", "middle", "maxv"), [(2, False, 2), (3, True, 3), (2, True, 2)])
def test_stalls_of_a_tile_value_with_fewer_versions(window: int, middle: bool, maxv: int
                                                    ) -> None:
    # The load is in stage 0, its consumer `distance` stages later: it wants
    # min(distance, window - 1) + 1 versions.  With k it stalls latency x (maxv - k) /
    # (maxv - 1) per execution: 417.54 cycles x 15 / 2.9 = 2159.7 -> 2160 ns with one
    # version (any maxv), 1079.8 -> 1080 ns with 2 of 3, nothing with all.
    name = "x86-avx2"
    problem = build_problem(staged(window, middle), target(name), X86)
    x = value(problem, "tile.load")
    assert x.max_versions == maxv
    cross = edge(problem, "tile.load", "tile.unary.exp")
    assert cross.stage_distance == (2 if middle else 1)
    latency = _load_latency_ns(name)
    for k in range(1, maxv + 1):
        a = assign(problem, {"tile.load": ("local", "dense")}, {"tile.load": k})
        got = terms_of(problem, a, cross)
        assert got.get("stalls", 0) == round(latency * (maxv - k) / (maxv - 1)), k
    one = assign(problem, {"tile.load": ("local", "dense")})
    assert terms_of(problem, one, cross)["stalls"] == 2160


def test_planner_reports_the_stall_of_the_versions_it_chose() -> None:
    name = "x86-avx2"
    load = ns(name, transfer_cycles(name, "dram", TILE_BYTES, 2), x86_execs())
    local = ns(name, transfer_cycles(name, "local", TILE_BYTES, 1), x86_execs())
    # Roomy: two versions of x in local storage (write + read, 83 ns each) beat the
    # 2160 ns stall; the load itself is 815 ns.
    roomy = plan_kernel(staged(2, False), target(name), X86)
    (cross,) = [e for e in roomy.edges if e.producer_kind == "tile.load"]
    assert (cross.decision, cross.resource, cross.versions) == (
        Decision.MATERIALIZED, "local", 2)
    assert cross.cost == {"traffic": load + 2 * local} and "stalls" not in roomy.breakdown
    # Local storage of 600 B holds one version of x (512 B) and DRAM none: x stays in
    # registers (512 B, one version) and stalls 2160 ns.
    t = with_capacity(with_capacity(target(name), "local", 600), "dram", 0)
    tight = plan_kernel(staged(2, False), t, X86)
    (cross,) = [e for e in tight.edges if e.producer_kind == "tile.load"]
    assert cross.versions == 1
    assert cross.cost == {"stalls": round(_load_latency_ns(name)), "traffic": load}
    assert tight.breakdown["stalls"] == round(_load_latency_ns(name))


def _memory_stall_ns() -> int:
    """A manual_gemm Memory short of one of its 2 versions (apple-m2, shared).

    Its store waits for the tile load that feeds it and for itself, each of the 6
    executions (2 waves x 3 k tiles): device latency 400 + 2,048 B x 10 / 71.5 = 286.43
    cycles, plus the store into threadgroup memory 2,048 / 128 = 16 cycles: 702.43 cycles
    x 6 / 1.398 = 3014.7 -> 3015 ns (As is 32x16 f32, Bs 16x32 f32: both 2,048 B).
    """
    name = "apple-m2"
    nbytes = 32 * 16 * 4
    cycles = (resource(name, "device_memory")["latency"]
              + transfer_cycles(name, "device_memory", nbytes, 10)
              + transfer_cycles(name, "threadgroup_memory", nbytes, 1))
    return ns(name, cycles, executions(name, 4 * 3, 3))


@pytest.mark.parametrize(("capacity", "versions"), [(32768, (2, 2)), (6400, (2, 1)),
                                                     (4224, (1, 1))])
def test_stalls_of_explicit_memory_short_of_versions(capacity: int, versions: tuple[int, int]
                                                     ) -> None:
    # As takes 32 x 17 x 4 = 2,176 B, Bs 16 x 32 x 4 = 2,048 B per version: 8,448 B hold
    # both doubled, 6,400 B = 2 x 2,176 + 2,048 only As doubled, 4,224 B one of each.
    expected = _memory_stall_ns()
    assert expected == 3015
    t = with_capacity(target("apple-m2"), "threadgroup_memory", capacity)
    plan = plan_kernel(SHARED_GEMM, t, GEMM_SIZES)
    assert tuple(m.versions for m in plan.memories) == versions
    missing = sum(m.max_versions - m.versions for m in plan.memories)
    assert plan.breakdown.get("stalls", 0) == missing * expected
    problem = build_problem(SHARED_GEMM, t, GEMM_SIZES)
    assert [m.stall for m in problem.memories] == [(expected, 0), (expected, 0)]
