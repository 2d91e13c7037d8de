"""Where the planner offers *recomputed* (S3): only where it is a program of its own.

Recomputation re-derives the producer chain from the kernel's inputs; it is not offered
where it would be the same program as fusion (the chain is the producer alone), into an
mma accumulator, through a Memory snapshot (read once), or through a load of
a view the kernel also stores.
"""

from __future__ import annotations

from planning_support import bindings, kernel, target

from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    exp,
    f32,
    memory,
    parallel,
    shape,
    tile_kernel,
)
from planner.plan.decisions import Decision
from planner.solve.costs import Edge, Problem, allowed_choices, build_problem

FUSED, RECOMPUTED = Decision.FUSED, Decision.RECOMPUTED


def _problem(name: str) -> Problem:
    return build_problem(kernel(name), target("x86-avx2"), bindings(name))


def _edge(p: Problem, edge_id: str) -> Edge:
    return next(e for e in p.edges if e.edge_id == edge_id)


def test_an_mma_accumulator_is_fused_not_recomputed() -> None:
    p = _problem("attention")
    into_acc = [e for e in p.edges if e.consumer_kind == "tile.mma" and e.operand == 2]
    # zeros for s = q @ k^T and acc * alpha for acc = p @ v + acc * alpha: evaluated once
    # per element into the mma's output buffer (fused), never re-derived
    assert {p.values[e.value].kind for e in into_acc} == {"tile.full", "tile.binary.mul"}
    for e in into_acc:
        allowed = allowed_choices(p, e)
        assert FUSED in allowed and RECOMPUTED not in allowed, e.edge_id
        assert "mma accumulator" in e.why_illegal(RECOMPUTED)


def test_recompute_is_offered_only_where_it_differs_from_fusion() -> None:
    p = _problem("softmax")
    # x = load X: fusing it re-reads X in the consumer, which is what recomputing it does
    for edge_id in ("%x -> %mx#0", "%x -> %sh#0"):
        e = _edge(p, edge_id)
        assert e.legal(FUSED) and not e.legal(RECOMPUTED)  # (the default policy keeps x)
        assert "same program as fused" in e.why_illegal(RECOMPUTED)
    # broadcast(max): its operand is a reduction, which stops the chain
    assert "same program as fused" in _edge(p, "%0 -> %sh#1").why_illegal(RECOMPUTED)
    # sh = x - broadcast(max): fused reads x as its edges decided, recomputed re-reads X
    sh = _edge(p, "%sh -> %e#0")
    assert {FUSED, RECOMPUTED} <= set(allowed_choices(p, sh))
    assert dict(sh.recompute)["recompute"] > dict(sh.fused)["compute"]


def test_recompute_of_a_load_stays_where_fusion_is_illegal() -> None:
    """A load across pipeline stages cannot be fused, and recomputing it is a re-read in
    the later stage (a program of its own)."""
    p = _problem("attention")
    cross = next(e for e in p.edges if p.values[e.value].kind == "tile.load"
                 and e.consumer_kind == "tile.transpose")
    assert cross.stage_distance == 1 and not cross.legal(FUSED)
    assert cross.legal(RECOMPUTED)


def _memory_chain() -> object:
    @tile_kernel("memory_chain")
    def k(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        gm = axis("bm", ceil_div(X.extent(0), 4))
        m, n = axis("m", 4), axis("n", 8)
        for nest in parallel(shape(gm)):
            r0 = nest.index(gm) * 4
            s = memory[f32](shape(m, n))
            s.store(X[coord(r0, 0), shape(m, n)])
            y = s.load() * s.load()
            Y(coord(r0, 0), shape(m, n)).store(exp(y))
            Y(coord(r0, 0), shape(m, n)).store(exp(y) + y)

    return k


def _in_place() -> object:
    @tile_kernel("in_place")
    def k(Y: TensorView[f32, dims("M", "N")]):
        gm = axis("bm", ceil_div(Y.extent(0), 4))
        m, n = axis("m", 4), axis("n", 8)
        for nest in parallel(shape(gm)):
            r0 = nest.index(gm) * 4
            a = Y[coord(r0, 0), shape(m, n)] + Y[coord(r0, 0), shape(m, n)]
            Y(coord(r0, 0), shape(m, n)).store(exp(a))

    return k


def test_recompute_through_a_snapshot_or_a_stored_view_is_refused() -> None:
    x86 = target("x86-avx2")
    mem = build_problem(_memory_chain(), x86, {"M": 9, "N": 8})
    y_edges = [e for e in mem.edges if mem.values[e.value].kind == "tile.binary.mul"]
    assert y_edges
    assert all("Memory snapshot" in e.why_illegal(RECOMPUTED) for e in y_edges)
    inplace = build_problem(_in_place(), x86, {"M": 9, "N": 8})
    a_edge = next(e for e in inplace.edges if inplace.values[e.value].kind == "tile.binary.add")
    assert "which the kernel also stores" in a_edge.why_illegal(RECOMPUTED)
