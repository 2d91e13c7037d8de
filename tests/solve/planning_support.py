"""Shared helpers for the planner tests: loading examples, targets, exhaustive search."""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Mapping
from functools import cache

from planner.catalog import CatalogRegistry, Target
from planner.ir.core import Kernel
from planner.ir.examples import Example, builtin_examples_dir, load_example
from planner.ir.frontend import (
    TensorView,
    axis,
    broadcast,
    ceil_div,
    const,
    coord,
    dims,
    exp,
    f32,
    parallel,
    reduce_sum,
    shape,
    tile_kernel,
)
from planner.plan.decisions import Decision
from planner.solve.costs import (
    MATERIALIZED,
    Assignment,
    Problem,
    allowed_choices,
    derived_flags,
    evaluate,
    total,
)


@cache
def registry() -> CatalogRegistry:
    return CatalogRegistry()


def target(name: str) -> Target:
    return registry().get(name)


@cache
def example(name: str) -> Example:
    return load_example(builtin_examples_dir() / f"{name}.py")


def kernel(name: str) -> Kernel:
    return example(name).kernel


def bindings(name: str) -> dict[str, int]:
    return dict(example(name).bindings)


# --------------------------------------------------------------------------- exhaustive


def _own_cost(problem: Problem, choices: tuple[Decision, ...], vi: int, q: int | None,
              k: int, cross: bool) -> int:
    """What value ``vi``'s placement and version count add on their own (separable)."""
    v = problem.values[vi]
    cost = v.stall[k - 1] if cross else 0
    if q is not None:
        cost += total(v.placements[q].write)
        cost += sum(total(problem.edges[i].reads[q] or ()) for i in v.edges
                    if choices[i] is MATERIALIZED)
    return cost


def exhaustive_optimum(problem: Problem,
                       restrictions: Mapping[int, frozenset[Decision]] | None = None
                       ) -> tuple[int | None, int]:
    """The least objective over every decision combination, and how many were visited.

    Every combination of allowed edge choices is enumerated; for each, every
    (placement, versions) of every value and every Memory's version count, with exact
    branch and bound (costs of placements and versions are separable per value; only
    capacity couples them), each leaf checked by the pure-Python reference evaluator.
    """
    best: int | None = None
    visited = 0
    options = [allowed_choices(problem, e, restrictions) for e in problem.edges]
    for choices in itertools.product(*options):
        cands = _candidates(problem, choices)
        if cands is None:
            continue
        visited += 1
        best = _search(problem, choices, cands, restrictions, best)
    return best, visited


def _candidates(problem: Problem, choices: tuple[Decision, ...]
                ) -> list[list[tuple[int, int | None, int]]] | None:
    """Per value: (own cost, placement, versions); per Memory: (own cost, home, versions);
    cheapest first."""
    out = []
    for v in problem.values:
        _, mat, cross = derived_flags(problem, choices, v)
        qs: list[int | None] = [None]
        if mat:
            qs = [q for q in range(len(v.placements))
                  if all(problem.edges[i].reads[q] is not None for i in v.edges
                         if choices[i] is MATERIALIZED)]
            if not qs:
                return None
        ks = range(1, v.max_versions + 1) if cross else [1]
        out.append(sorted((_own_cost(problem, choices, v.index, q, k, cross), q if q is not None
                           else -1, k) for q in qs for k in ks))
    for m in problem.memories:  # (cost, home, versions)
        out.append(sorted((m.stall[k - 1] + (m.home_cost[h] if m.home_cost else 0), h, k)
                          for h in range(len(m.homes)) for k in range(1, m.max_versions + 1)))
    return [[(c, None if q == -1 else q, k) for c, q, k in opts] for opts in out]


def _search(problem: Problem, choices: tuple[Decision, ...],
            cands: list[list[tuple[int, int | None, int]]],
            restrictions: Mapping[int, frozenset[Decision]] | None, best: int | None
            ) -> int | None:
    mins = [c[0][0] for c in cands]
    lower = _choice_cost(problem, choices) + sum(mins)  # every value at its cheapest
    if best is not None and lower >= best:
        return best
    if _registers_overflow(problem, choices):
        return best  # registers hold only virtual values: no placement can fix it

    def dfs(i: int, picked: list[tuple[int, int | None, int]], bound: int) -> None:
        nonlocal best
        if best is not None and bound >= best:
            return
        if i == len(cands):
            ev = evaluate(problem, _assignment(problem, choices, picked), restrictions)
            if ev.feasible and (best is None or ev.objective < best):
                best = ev.objective
            return
        for cand in cands[i]:
            dfs(i + 1, [*picked, cand], bound - mins[i] + cand[0])

    dfs(0, [], lower)
    return best


def _choice_cost(problem: Problem, choices: tuple[Decision, ...]) -> int:
    """Costs fixed by the edge choices alone: inlining, producers' home runs, constants."""
    cost = total(problem.constant)
    for e in problem.edges:
        if choices[e.index] is Decision.FUSED:
            cost += total(e.fused)
        elif choices[e.index] is Decision.RECOMPUTED:
            cost += total(e.recompute)
    for v in problem.values:
        if any(choices[i] in (Decision.VIRTUAL, MATERIALIZED) for i in v.edges):
            cost += total(v.home)
    return cost


def _registers_overflow(problem: Problem, choices: tuple[Decision, ...]) -> bool:
    """Virtual values alone (one version each) exceed some register capacity."""
    for lp in problem.live_points:
        held: dict[str, int] = {}
        for vi, si in lp.segments:
            v = problem.values[vi]
            if v.register and any(choices[i] is Decision.VIRTUAL
                                  for i in v.segments[si].edges):
                held[v.register] = held.get(v.register, 0) + v.reg_bytes
        for mi in lp.memories:
            m = problem.memories[mi]
            if len(m.homes) == 1:  # a Memory with a choice of homes may move elsewhere
                held[m.homes[0]] = held.get(m.homes[0], 0) + m.home_bytes[0]
        for res, n in held.items():
            cap = problem.capacity(res, lp.owner)
            if cap is not None and n > cap:
                return True
    return False


def _assignment(problem: Problem, choices: tuple[Decision, ...],
                picked: list[tuple[int, int | None, int]]) -> Assignment:
    nv = len(problem.values)
    return Assignment(choices, tuple(p[1] for p in picked[:nv]),
                      tuple(p[2] for p in picked[:nv]), tuple(p[2] for p in picked[nv:]),
                      tuple(p[1] or 0 for p in picked[nv:]))


# --------------------------------------------------------------------------- variants


def with_capacity(t: Target, resource: str, capacity: int | None) -> Target:
    """A copy of ``t`` whose ``resource`` holds ``capacity`` bytes."""
    resources = tuple(dataclasses.replace(r, capacity=capacity) if r.name == resource else r
                      for r in t.resources)
    return dataclasses.replace(t, resources=resources)


def small_dag(seed: int, ops: int = 6) -> Kernel:
    """A random elementwise DAG over 4×8 f32 tiles: loads, exps, products, row sums."""
    rng = random.Random(seed)
    plan = [("load", ())]
    for _ in range(ops):
        a, b = rng.randrange(len(plan)), rng.randrange(len(plan))
        plan.append(rng.choice([("exp", (a,)), ("mul", (a, b)), ("rowsum", (a,)),
                                ("load", ())]))
    used = {a for _, args in plan for a in args}

    @tile_kernel(f"dag{seed}")
    def dag(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]
            ) -> None:
        gm = axis("block_m", ceil_div(X.extent(0), 4))
        m, n = axis("m", 4), axis("n", 8)
        for nest in parallel(shape(gm)):
            r0 = nest.index(gm) * 4
            vals = []
            for i, (op, args) in enumerate(plan):
                x = [vals[a] for a in args]
                if op == "load":
                    vals.append(X[coord(r0, i % 2 * 8), shape(m, n)])
                elif op == "exp":
                    vals.append(exp(x[0]))
                elif op == "mul":
                    vals.append(x[0] * x[1])
                else:
                    vals.append(broadcast(reduce_sum(x[0], axis=1), shape(m, n), dims=(0,)))
            for i, v in enumerate(vals):
                if i not in used:
                    Y(coord(r0, 0), shape(m, n)).store(v)

    return dag


def chain_kernel(length: int) -> Kernel:
    """``y = ((x * x) * x) ...`` with ``length`` multiplies, stored twice (two consumers)."""

    @tile_kernel(f"chain{length}")
    def chain(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]
              ) -> None:
        gm = axis("block_m", ceil_div(X.extent(0), 4))
        m, n = axis("m", 4), axis("n", 8)
        for nest in parallel(shape(gm)):
            r0 = nest.index(gm) * 4
            x = X[coord(r0, 0), shape(m, n)]
            y = x
            for _ in range(length):
                y = y * x
            Y(coord(r0, 0), shape(m, n)).store(y)
            Y(coord(r0, 8), shape(m, n)).store(y)

    return chain
