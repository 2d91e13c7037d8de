"""The CP-SAT encoding of a priced planning problem (``planner.solve.costs``).

Variables (all Boolean unless noted)

* ``x[e, c]``: edge ``e`` takes choice ``c`` (virtual, fused, recomputed,
  materialized); exactly one per edge.
* ``z[e, q]``: materialized edge ``e`` reads placement ``q`` (a (resource, layout)
  pair of its value); ``sum_q z[e, q] = x[e, materialized]``.
* ``y[v, q]``: value ``v`` has its one buffer in placement ``q``; ``z[e, q] <= y[v, q]``
  and ``sum_q y[v, q] <= 1`` make all materialized edges of a value share one buffer.
* ``u[v, k]``: ``v`` keeps ``k`` versions (only values preserved across pipeline
  stages choose; the others keep one).  ``mv[m, k]`` likewise for explicit Memory.
* ``home[v] >= x[e, virtual | materialized]``: the producer runs once.
* ``reg[v, s]``, ``mat[v, s]``: the value is held in registers / in its buffer over
  segment ``s`` of its live range (``>=`` each covering edge's choice, and ``>=`` a
  guarded cover's choice ∧ some guard of its chain's suffix, one literal per suffix:
  :class:`~planner.solve.problem.GuardChain`).  They are created only for capacity sums
  that can bind (an upper bound of the sum, computed without creating anything, exceeds
  the capacity), so a kernel whose buffers always fit pays no holding literals, nor the
  site guards behind them; and ``x[e, virtual]`` is not created where the value alone
  overflows the registers at a point its edge covers (that sum would force it to 0).
* Guards (``planner.solve.costs.Guard``): ``site`` literals say a value is evaluated at
  a later point (``>=`` home, or an inlined edge ∧ the consumer's site, recursively);
  ``split`` literals say a carry and its yielded value live apart.  Temporaries
  (``planner.solve.costs.Temp``) are held when one of their alternatives (conjunctions
  of choices, placements and guards) holds.  All are implied one way only: they only
  add bytes, so minimization keeps them exact.

Capacity is one linear sum per (resource, checked point) over live holders, never
``AddCumulative``: occupancy terms are products ``mat[v, s] ∧ y[v, q] (∧ u[v, k])``
linearized as ``b >= sum(literals) - (n - 1)``, with ``bytes × k`` coefficients.  A
constraint that cannot bind (its largest possible sum fits) is not emitted.  Redundant
constraints tighten the LP where literals of one edge's choices meet (they exclude each
other): a home or site literal is at least the sum of one edge's implicants, and an
edge delivers its value by exactly one choice wherever its consumer is evaluated
(:func:`_delivery_cuts`).

When CP-SAT finds no solution within its time limit, :func:`solve` returns a heuristic
plan (:func:`fallback_assignment`) checked by the reference evaluator.  A proven optimum
is made unique by a lexicographic tie-break among equal optima (:func:`tiebreak_order`),
so the plan does not depend on the worker count or on thread timing; the tie-break runs
on each independent part of a large model alone (:mod:`planner.solve.decompose`).

Constraint groups (legality of an edge, the policy for a value, a baseline's rule for
an edge, capacity of a resource at a point) can be guarded by assumption literals;
CP-SAT's ``SufficientAssumptionsForInfeasibility`` then names the groups of an
infeasibility core (``planner.solve.explain``).  Without assumptions, forbidden
choices are simply not created.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from ortools.sat.python import cp_model
from ortools.util.python.sorted_interval_list import Domain

from planner.errors import Diagnostic, PlannerError
from planner.plan.decisions import Decision
from planner.solve.baselines import _evict as evict_registers
from planner.solve.baselines import _isolated_price as isolated_price
from planner.solve.baselines import _placements as place_values
from planner.solve.baselines import greedy_assignment
from planner.solve.costs import (
    CHOICES,
    FUSED,
    MATERIALIZED,
    PRESERVING,
    RECOMPUTED,
    VIRTUAL,
    Assignment,
    Edge,
    LivePoint,
    MemoryOccupant,
    Problem,
    Truth,
    Value,
    allowed_choices,
    evaluate,
    segment_live,
    total,
)
from planner.solve.dag_memo import memo_postorder
from planner.solve.problem import OutOfTime as OutOfTime  # the planner catches it
from planner.solve.problem import check_deadline
from planner.solve.problem import paused_gc as paused_gc  # the planner's too

Restrictions = Mapping[int, frozenset[Decision]]
Progress = Callable[[int, int, float], None]  # (best objective, bound, seconds)
Cond: TypeAlias = "cp_model.IntVar | bool"  # a literal, or a constant condition

_EXACT = 2**50  # keep objective sums well inside double precision (CP-SAT's LP)
_RANK = {FUSED: 0, VIRTUAL: 1, RECOMPUTED: 2, MATERIALIZED: 3}
_PREFERENCE = tuple(sorted(_RANK, key=_RANK.__getitem__))  # the tie-break's choice order


def _literal_maker() -> Callable[[cp_model.CpModel, str], cp_model.IntVar]:
    """A 0-1 variable maker: ``CpModel.new_bool_var`` builds a fresh ``Domain(0, 1)`` for
    each (about half its ~2 µs; a 10,000-edge model makes ~100,000); one shared domain
    where this ortools lets a variable be made from the model's proto, else that call."""
    domain = Domain(0, 1)

    def shared(m: cp_model.CpModel, name: str = "") -> cp_model.IntVar:
        var = cp_model.IntVar(m.model_proto).with_domain(domain)
        return var.with_name(name) if name else var

    try:
        probe = cp_model.CpModel()
        lit = shared(probe, "probe")
        if not lit.is_boolean or list(probe.Proto().variables[lit.Index()].domain) != [0, 1]:
            raise TypeError("not a literal")
    except (AttributeError, TypeError, ValueError):  # another ortools' internals
        return lambda m, name="": m.new_bool_var(name)
    return shared


new_literal = _literal_maker()

# ``PRESERVING`` is a frozenset of enums: its iteration order follows string hashes, which
# PYTHONHASHSEED changes between processes.  The model iterates this tuple instead, so
# every process builds the same model, constraint for constraint.
_KEEP = tuple(c for c in CHOICES if c in PRESERVING)


@dataclass(frozen=True, slots=True)
class Group:
    """A named constraint group: what an infeasibility core can point at."""

    name: str
    kind: str  # "legal" | "policy" | "baseline" | "capacity"
    subject: int  # edge, value or live-point index
    resource: str | None = None


@dataclass
class BuiltModel:
    """A CP-SAT model with handles on its variables (mutable while it is built)."""

    problem: Problem
    model: cp_model.CpModel
    x: dict[tuple[int, Decision], cp_model.IntVar] = field(default_factory=dict)
    z: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)
    y: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)
    u: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)
    mv: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)
    mh: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)  # Memory homes
    cross: dict[int, cp_model.IntVar] = field(default_factory=dict)
    reg: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)
    mat: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)
    products: dict[tuple[object, ...], cp_model.IntVar] = field(default_factory=dict)
    conditions: dict[tuple[object, ...], Cond] = field(default_factory=dict)
    groups: list[Group] = field(default_factory=list)
    literals: list[cp_model.IntVar] = field(default_factory=list)
    cost: list[tuple[cp_model.IntVar, int]] = field(default_factory=list)
    tiebreak: list[tuple[cp_model.IntVar, int]] = field(default_factory=list)
    capacity_exprs: dict[tuple[str, int], tuple[list[tuple[cp_model.IntVar, int]], int]] = \
        field(default_factory=dict)
    assumptions: bool = False
    restrictions: Restrictions = field(default_factory=dict)
    no_registers: frozenset[int] = frozenset()  # edges whose value overflows the registers
    most_of: dict[tuple[int, int], dict[str | None, int]] = field(default_factory=dict)
    # value -> its _most_of table when every segment has the same one (None: per segment)
    most_fixed: dict[int, dict[str | None, int] | None] = field(default_factory=dict)
    capacity_order: list[tuple[tuple[str, str], int | None]] = field(default_factory=list)
    buffered: dict[str, frozenset[int]] = field(default_factory=dict)  # resource -> values
    held: set[tuple[int, int, Decision]] = field(default_factory=set)  # what _holds saw
    # value -> (edges that may be virtual, that may be materialized, _most_of's tables)
    holders: dict[int, tuple[frozenset[int], frozenset[int],
                             dict[tuple[bool, bool], dict[str | None, int]]]] = \
        field(default_factory=dict)
    deadline: float | None = None  # past it, :class:`OutOfTime` (see :meth:`tick`)
    ticks: int = 0
    cuts: bool = True  # redundant linking constraints for the LP (see :func:`build_model`)
    suffixes: dict[int, list[list[Cond] | None]] = field(default_factory=dict)  # _holds
    inlinable: dict[int, list[tuple[int, Edge, frozenset[int] | None]]] = field(
        default_factory=dict)  # see _inlinable
    evaluated_at: dict[int, frozenset[int]] = field(default_factory=dict)  # see _site

    def tick(self) -> None:
        """Count one unit of model-building work; every 256th checks the deadline, so
        one capacity sum that creates a long chain's site literals is cut short too."""
        self.ticks += 1
        if not self.ticks & 255:
            check_deadline(self.deadline)

    def guard(self, group: Group | None) -> list[cp_model.IntVar]:
        """The enforcement literal of ``group`` (none when assumptions are off)."""
        if group is None or not self.assumptions:
            return []
        lit = new_literal(self.model, group.name)
        self.groups.append(group)
        self.literals.append(lit)
        return [lit]


def build_model(problem: Problem, restrictions: Restrictions | None = None, *,
                assumptions: bool = False, skip: frozenset[str] = frozenset(),
                hint: Assignment | None = None, deadline: float | None = None,
                cuts: bool = True) -> BuiltModel:
    """Encode ``problem`` (with a baseline's ``restrictions``) as a CP-SAT model.

    ``assumptions`` guards every named group with a literal; groups named in ``skip``
    are left out entirely (used to measure what a core's capacity group would need).
    Past ``deadline`` (a ``time.perf_counter()`` instant) :class:`OutOfTime` is raised.
    ``cuts`` adds redundant constraints that tighten the LP relaxation (one sum per edge
    in the site disjunctions, :func:`_delivery_cuts`); they cost model-building time.
    """
    with paused_gc():
        return _build_model(problem, restrictions, assumptions, skip, hint, deadline, cuts)


def _build_model(problem: Problem, restrictions: Restrictions | None, assumptions: bool,
                 skip: frozenset[str], hint: Assignment | None, deadline: float | None,
                 cuts: bool) -> BuiltModel:
    bm = BuiltModel(problem, cp_model.CpModel(), assumptions=assumptions,
                    restrictions=restrictions or {},
                    no_registers=frozenset() if assumptions else _no_registers(problem),
                    capacity_order=sorted(problem.capacities.items()), deadline=deadline,
                    cuts=cuts)
    for e in problem.edges:
        _edge_choices(bm, e, restrictions or {}, skip)
    for v in problem.values:
        _placement_vars(bm, v, [problem.edges[i] for i in v.edges], skip)
    check_deadline(deadline)
    for v in problem.values:
        _value_vars(bm, v, skip)
        check_deadline(deadline)
    for m in problem.memories:
        _memory_vars(bm, m.index, m.max_versions, m.stall)
        _memory_home_vars(bm, m)
    for lp in problem.live_points:
        _capacity(bm, lp, skip)
        check_deadline(deadline)
    if cuts:
        _delivery_cuts(bm)
    if hint is not None:
        add_hint(bm, hint)
    return bm


def _edge_choices(bm: BuiltModel, e: Edge, restrictions: Restrictions,
                  skip: frozenset[str]) -> None:
    p, m = bm.problem, bm.model
    legal = [c for c in CHOICES if e.legal(c)]
    allowed = allowed_choices(p, e, restrictions)
    policy = legal if e.index in restrictions else allowed_choices(p, e)
    made = CHOICES if bm.assumptions else [
        c for c in allowed if c is not VIRTUAL or e.index not in bm.no_registers]
    for c in made:
        bm.x[(e.index, c)] = new_literal(m, f"x{e.index}_{c.value[0]}")
    m.add_exactly_one([bm.x[(e.index, c)] for c in made])
    if bm.assumptions:
        groups = (
            (Group(f"legal:{e.index}", "legal", e.index), set(CHOICES) - set(legal)),
            (Group(f"policy:{e.value}", "policy", e.value), set(legal) - set(policy)),
            (Group(f"baseline:{e.index}", "baseline", e.index), set(policy) - set(allowed)),
        )
        for group, banned in groups:
            if banned and group.name not in skip:
                lits = _shared_guard(bm, group)
                for c in sorted(banned, key=_RANK.get):
                    m.add(bm.x[(e.index, c)] == 0).only_enforce_if(lits)
    for c in made:
        bm.tiebreak.append((bm.x[(e.index, c)], _RANK[c]))
    if (e.index, FUSED) in bm.x:
        bm.cost.append((bm.x[(e.index, FUSED)], total(e.fused)))
    if (e.index, RECOMPUTED) in bm.x:
        bm.cost.append((bm.x[(e.index, RECOMPUTED)], total(e.recompute)))


def _shared_guard(bm: BuiltModel, group: Group) -> list[cp_model.IntVar]:
    """One literal per group name, even when several edges share it (a value's policy)."""
    for g, lit in zip(bm.groups, bm.literals, strict=True):
        if g.name == group.name:
            return [lit]
    return bm.guard(group)


def _value_vars(bm: BuiltModel, v: Value, skip: frozenset[str]) -> None:
    p, m = bm.problem, bm.model
    edges = [p.edges[i] for i in v.edges]
    preserved = [bm.x[(e.index, c)] for e in edges for c in _KEEP
                 if (e.index, c) in bm.x]
    if total(v.home) and preserved:
        home = new_literal(m, f"home{v.index}")
        for e in edges:  # one sum per edge: its choices exclude each other (a tighter LP)
            lits = [bm.x[(e.index, c)] for c in _KEEP if (e.index, c) in bm.x]
            if lits:
                m.add(cp_model.LinearExpr.sum(lits) <= home)
        bm.cost.append((home, total(v.home)))
    _version_vars(bm, v, edges)


def _holds(bm: BuiltModel, vi: int, si: int, choice: Decision) -> None:
    """Create ``reg[vi, si]`` (``choice`` virtual) or ``mat[vi, si]`` (materialized) where
    something can hold the value there, on first use: only a capacity sum that can bind
    reads them, so a value that no such sum sees costs no holding literals (nor the site
    guards behind them), and a sum over registers creates no buffer literals."""
    key = (vi, si, choice)
    if key in bm.held:
        return
    bm.tick()  # before marking it done: a deadline here leaves nothing half-made
    bm.held.add(key)
    v = bm.problem.values[vi]
    if choice is VIRTUAL and v.register is None:
        return
    seg = v.segments[si]
    x = bm.x
    lits = [x[(i, choice)] for i in seg.edges if (i, choice) in x]
    # A chain's suffixes are derived once per value: ``any[j]`` is implied by guard ``j``
    # and by ``any[j + 1]``, so a segment holding from ``first`` on costs one product per
    # storage, not one per guard (linear in the chain, not in segments × guards).
    chains = v.chains
    if seg.chained:
        suffixes = bm.suffixes.get(vi)
        if suffixes is None:
            suffixes = bm.suffixes[vi] = [None] * len(chains)
        for ci, first in seg.chained:
            edge = chains[ci].edge
            lit = x.get((edge, choice))
            if lit is None:
                continue
            of_chain = suffixes[ci]
            if of_chain is None:
                of_chain = suffixes[ci] = _suffixes(bm, chains[ci].guards)
            guard = of_chain[first] if first < len(of_chain) else False
            if guard is True:
                lits.append(lit)
            elif guard is not False:  # :func:`_held`'s product, inlined (a hot loop)
                lits.append(_product(bm, ("held", edge, choice, "chain", vi, ci, first),
                                     [lit, guard]))
    if lits:
        store = bm.reg if choice is VIRTUAL else bm.mat
        store[(vi, si)] = _at_least_any(bm.model, lits)


def _no_registers(problem: Problem) -> frozenset[int]:
    """Edges that cannot be virtual: their value alone overflows the registers at a
    checked point that their own cover spans (the capacity sum there forces ``x[e,
    virtual]`` to 0 whatever else holds, so the literal is not created)."""
    out: set[int] = set()
    over: dict[tuple[int, str], bool] = {}  # (value, owner) -> it alone overflows there
    values = problem.values
    for lp in problem.live_points:
        for vi, si in lp.segments:
            alone = over.get((vi, lp.owner))
            if alone is None:
                v = values[vi]
                cap = None if v.register is None else problem.capacity(v.register, lp.owner)
                alone = over[(vi, lp.owner)] = cap is not None and v.reg_bytes > cap
            if alone:
                out.update(values[vi].segments[si].edges)
    return frozenset(out)


def _suffixes(bm: BuiltModel, guards: tuple[int, ...]) -> list[Cond]:
    """``out[j]``: some guard of ``guards[j:]`` holds (a literal implied by each)."""
    out: list[Cond] = [False] * len(guards)
    cur: Cond = False
    for j in range(len(guards) - 1, -1, -1):
        bm.tick()
        lit = guard_literal(bm, guards[j])
        if cur is True or lit is True:
            cur = True
        elif cur is False:
            cur = lit
        elif lit is not False:
            any_ = new_literal(bm.model)
            bm.model.add_implication(lit, any_)  # type: ignore[arg-type]
            bm.model.add_implication(cur, any_)
            cur = any_
        out[j] = cur
    return out


def _at_least_any(m: cp_model.CpModel, lits: list[cp_model.IntVar]) -> cp_model.IntVar:
    """A literal implied by each of ``lits`` (unnamed, like every derived literal: the
    ~100,000 of a 10,000-edge model cost ~0.1 s of formatting and nothing reads them)."""
    if len(lits) == 1:
        return lits[0]
    out = new_literal(m)
    for lit in lits:
        m.add_implication(lit, out)
    return out


def _placement_vars(bm: BuiltModel, v: Value, edges: list[Edge], skip: frozenset[str]
                    ) -> None:
    m = bm.model
    mat_edges = [e for e in edges if (e.index, MATERIALIZED) in bm.x]
    if not mat_edges:
        return
    readers: dict[int, list[cp_model.IntVar]] = {}
    for e in mat_edges:
        zs = []
        for q in range(len(v.placements)):
            if e.reads[q] is None and not bm.assumptions:
                continue
            z = new_literal(m, f"z{e.index}_{q}")
            bm.z[(e.index, q)] = z
            zs.append(z)
            readers.setdefault(q, []).append(z)
            if e.reads[q] is None:
                group = Group(f"legal:{e.index}", "legal", e.index)
                if group.name not in skip:
                    m.add(z == 0).only_enforce_if(_shared_guard(bm, group))
            else:
                bm.cost.append((z, total(e.reads[q])))
                bm.tiebreak.append((z, q))
        m.add(cp_model.LinearExpr.sum(zs) == bm.x[(e.index, MATERIALIZED)])
    ys = []
    for q, zs in sorted(readers.items()):
        y = new_literal(m, f"y{v.index}_{q}")
        bm.y[(v.index, q)] = y
        ys.append(y)
        for z in zs:
            m.add_implication(z, y)
        m.add_bool_or(zs).only_enforce_if(y)
        bm.cost.append((y, total(v.placements[q].write)))
    m.add_at_most_one(ys)


def _version_vars(bm: BuiltModel, v: Value, edges: list[Edge]) -> None:
    if v.max_versions <= 1:
        return
    m = bm.model
    cross = [bm.x[(e.index, c)] for e in edges if e.cross_stage for c in _KEEP
             if (e.index, c) in bm.x]
    us = [new_literal(m, f"u{v.index}_{k}") for k in range(1, v.max_versions + 1)]
    m.add_exactly_one(us)
    for k, lit in enumerate(us, start=1):
        bm.u[(v.index, k)] = lit
        bm.tiebreak.append((lit, v.max_versions - k))
    if not cross:
        m.add(us[0] == 1)
        return
    p = _at_least_any(m, cross)
    if len(cross) > 1:  # exactly "some cross-stage edge is preserved": versions depend on it
        m.add_bool_or(cross).only_enforce_if(p)
    bm.cross[v.index] = p
    m.add_implication(p.Not(), us[0])
    for k, lit in enumerate(us, start=1):
        if v.stall[k - 1]:
            stall = _product(bm, ("stall", v.index, k), [lit, p])
            bm.cost.append((stall, v.stall[k - 1]))


def _memory_vars(bm: BuiltModel, index: int, max_versions: int, stall: tuple[int, ...]
                 ) -> None:
    m = bm.model
    lits = [new_literal(m, f"mv{index}_{k}") for k in range(1, max_versions + 1)]
    m.add_exactly_one(lits)
    for k, lit in enumerate(lits, start=1):
        bm.mv[(index, k)] = lit
        bm.tiebreak.append((lit, max_versions - k))
        if stall[k - 1]:
            bm.cost.append((lit, stall[k - 1]))


def _memory_home_vars(bm: BuiltModel, m: MemoryOccupant) -> None:
    """One Boolean per legal home of an explicit Memory (exactly one), priced by traffic."""
    if len(m.homes) == 1:
        return
    lits = [new_literal(bm.model, f"mh{m.index}_{h}") for h in range(len(m.homes))]
    bm.model.add_exactly_one(lits)
    for h, lit in enumerate(lits):
        bm.mh[(m.index, h)] = lit
        bm.tiebreak.append((lit, h))
        if m.home_cost and m.home_cost[h]:
            bm.cost.append((lit, m.home_cost[h]))


def _product(bm: BuiltModel, key: tuple[object, ...], lits: list[cp_model.IntVar]
             ) -> cp_model.IntVar:
    """A literal implied by the conjunction of ``lits`` (exact enough under minimization)."""
    if len(lits) == 1:
        return lits[0]
    out = bm.products.get(key)
    if out is None:
        out = new_literal(bm.model)
        bm.model.add_bool_or([out, *[lit.Not() for lit in lits]])  # all of lits -> out
        bm.products[key] = out
    return out


def _conjunction(bm: BuiltModel, key: tuple[object, ...], conds: list[Cond]) -> Cond:
    """All of ``conds`` (constants folded; a literal implied by the conjunction)."""
    for c in conds:  # not ``False in conds``: a literal's ``==`` builds a constraint
        if c is False:
            return False
    lits = [c for c in conds if c is not True]
    if not lits:
        return True
    return _product(bm, key, lits)  # type: ignore[arg-type]


def _disjunction(bm: BuiltModel, key: tuple[object, ...], conds: list[Cond],
                 exclusive: list[list[Cond]] = ()) -> Cond:  # type: ignore[assignment]
    """Any of ``conds`` (a literal implied by each; constants folded).  Each group of
    ``exclusive`` (conds of which at most one holds: one edge's choices) is implied by
    its sum instead, a tighter LP than one implication per cond."""
    if any(c is True for c in conds):
        return True
    lits = [c for c in conds if c is not False]
    if not lits:
        return False
    if len(lits) == 1:
        return lits[0]
    out = bm.products.get(key)
    if out is None:
        out = _at_least_any(bm.model, lits)  # type: ignore[arg-type]
        bm.products[key] = out
        for group in exclusive if bm.cuts else ():
            some = [c for c in group if c is not False]
            if len(some) > 1:
                bm.model.add(cp_model.LinearExpr.sum(some) <= out)  # type: ignore[arg-type]
    return out


def _home(bm: BuiltModel, vi: int) -> Cond:
    """Value ``vi`` is computed at its own point (some edge stores it)."""
    v = bm.problem.values[vi]
    if not v.inlinable:
        return True
    groups = [[bm.x[(i, c)] for c in _KEEP if (i, c) in bm.x] for i in v.edges]
    return _disjunction(bm, ("home", vi), [lit for g in groups for lit in g], groups)


def _inlinable(bm: BuiltModel, vi: int) -> list[tuple[int, Edge, frozenset[int] | None]]:
    """(index, edge, the points where its consumer value may be evaluated: None for a
    consumer op) of every edge of ``vi`` that may be fused or recomputed."""
    got = bm.inlinable.get(vi)
    if got is None:
        p = bm.problem
        got = bm.inlinable[vi] = [
            (i, e, None if e.consumer_value is None else _evaluated_at(bm, e.consumer_value))
            for i in p.values[vi].edges if (i, FUSED) in bm.x or (i, RECOMPUTED) in bm.x
            for e in (p.edges[i],)]
    return got


def _evaluated_at(bm: BuiltModel, vi: int) -> frozenset[int]:
    """The points where value ``vi`` may be evaluated: its own and its inlining sites."""
    got = bm.evaluated_at.get(vi)
    if got is None:
        v = bm.problem.values[vi]
        got = bm.evaluated_at[vi] = frozenset((v.def_point, *v.sites))
    return got


def _site(bm: BuiltModel, vi: int, point: int) -> Cond:
    """Value ``vi`` is evaluated at ``point`` (at home, or inlined into a consumer there)."""
    key = ("site", vi, point)
    got = bm.conditions.get(key)
    if got is not None:
        return got
    p = bm.problem
    if point != p.values[vi].def_point and not any(
            point in at if at is not None else e.consumer_point == point
            for _, e, at in _inlinable(bm, vi)):
        bm.conditions[key] = False  # no consumer is evaluated there: what compute() finds
        return False

    def later(key: tuple[str, int, int]) -> list[tuple[str, int, int]]:
        _, vj, pt = key
        if pt == p.values[vj].def_point:
            return []
        return [("site", e.consumer_value, pt) for _, e, at in _inlinable(bm, vj)
                if at is not None and pt in at]

    def compute(key: tuple[str, int, int]) -> Cond:
        bm.tick()
        _, vj, pt = key
        if pt == p.values[vj].def_point:
            return _home(bm, vj)
        groups: list[list[Cond]] = []
        for i, e, at in _inlinable(bm, vj):
            if at is None:
                there: Cond = e.consumer_point == pt
            else:
                there = bm.conditions[("site", e.consumer_value, pt)] if pt in at else False
            groups.append([_conjunction(bm, ("via", i, c, pt), [bm.x[(i, c)], there])
                           for c in (FUSED, RECOMPUTED) if (i, c) in bm.x and e.legal(c)])
        return _disjunction(bm, key, [c for g in groups for c in g], groups)

    return memo_postorder(key, later, compute, bm.conditions)


def _recompute(bm: BuiltModel, vi: int, point: int) -> Cond:
    """Value ``vi``'s chain is re-derived at ``point`` (an edge of it recomputed into a
    consumer evaluated there)."""
    key = ("recompute", vi, point)
    if key in bm.conditions:
        return bm.conditions[key]
    p = bm.problem
    parts: list[Cond] = []
    for i in p.values[vi].edges:
        e = p.edges[i]
        if (i, RECOMPUTED) not in bm.x or not e.legal(RECOMPUTED):
            continue
        if e.consumer_value is None:
            there: Cond = e.consumer_point == point
        else:
            t = p.values[e.consumer_value]
            there = _site(bm, t.index, point) if (point == t.def_point
                                                  or point in t.sites) else False
        parts.append(_conjunction(bm, ("via", i, RECOMPUTED, point), [bm.x[(i, RECOMPUTED)],
                                                                       there]))
    out = _disjunction(bm, key, parts)
    bm.conditions[key] = out
    return out


def _split(bm: BuiltModel, carry: int, yielded: int) -> cp_model.IntVar:
    """The carry and its yielded value live in different storage (resource or registers),
    or the yielded value is kept both in registers and in a buffer; reified exactly (the
    ``pingpong`` guard holds when it is false)."""
    key = ("split", carry, yielded)
    if key in bm.conditions:
        return bm.conditions[key]  # type: ignore[return-value]
    p, m = bm.problem, bm.model

    def storage(vi: int) -> dict[str | None, object]:
        v = p.values[vi]
        ys = {q: y for (w, q), y in bm.y.items() if w == vi}
        out: dict[str | None, object] = {}
        for q, y in ys.items():
            r = v.placements[q].resource
            out[r] = out.get(r, 0) + y
        out[v.register] = out.get(v.register, 0) + 1 - sum(ys.values())
        return out

    def exact_and(name: str, a: object, b: object) -> object:
        if isinstance(a, int) or isinstance(b, int):
            return a * b  # type: ignore[operator]
        z = new_literal(m, name)
        m.add(z <= a)  # type: ignore[operator]
        m.add(z <= b)  # type: ignore[operator]
        m.add(z >= a + b - 1)  # type: ignore[operator]
        return z

    a, b = storage(carry), storage(yielded)
    same = sum(exact_and(f"same{carry}_{yielded}_{n}", a[r], b[r])  # type: ignore[misc]
               for n, r in enumerate(sorted(a.keys() & b.keys(),
                                            key=lambda r: (r is not None, r or ""))))
    lits = [bm.x[(i, VIRTUAL)] for i in p.values[yielded].edges if (i, VIRTUAL) in bm.x]
    buffered = sum(y for (w, _), y in bm.y.items() if w == yielded)
    mixed: object = 0
    if lits and not isinstance(buffered, int):  # kept in two places
        virtual = new_literal(m, f"virtual{yielded}")
        m.add_max_equality(virtual, lits)
        mixed = exact_and(f"mixed{yielded}", virtual, buffered)
    d = new_literal(m, f"split{carry}_{yielded}")
    m.add(d >= 1 - same)  # type: ignore[operator]
    m.add(d >= mixed)  # type: ignore[operator]
    m.add(d <= 1 - same + mixed)  # type: ignore[operator]
    bm.conditions[key] = d
    return d


def _pingpong(bm: BuiltModel, gi: int) -> Cond:
    """The yielded value is computed into the carry's buffer (not split) and the old value
    is read afterwards: two versions for the whole loop."""
    g = bm.problem.guards[gi]
    key = ("pingpong", g.a, g.b)
    if key in bm.conditions:
        return bm.conditions[key]
    split = _split(bm, g.a, g.b)
    alias = new_literal(bm.model, f"alias{g.a}_{g.b}")
    bm.model.add(alias + split == 1)
    late = _disjunction(bm, ("late", g.a, g.b),
                        [True if x < 0 else guard_literal(bm, x) for x in g.any_of])
    out = _conjunction(bm, key, [alias, late])
    bm.conditions[key] = out
    return out


def guard_literal(bm: BuiltModel, gi: int) -> Cond:
    g = bm.problem.guards[gi]
    if g.kind == "site":
        return _site(bm, g.a, g.b)
    if g.kind == "recompute":
        return _recompute(bm, g.a, g.b)
    if g.kind == "pingpong":
        return _pingpong(bm, gi)
    if g.kind == "versioned":
        v = bm.problem.values[g.a]
        return _disjunction(bm, ("versioned", g.a), [
            bm.u[(g.a, k)] for k in range(2, v.max_versions + 1) if (g.a, k) in bm.u])
    return _split(bm, g.a, g.b)


def temp_literal(bm: BuiltModel, ti: int) -> Cond:
    """The temporary is allocated: every literal of some alternative holds."""
    key = ("temp", ti)
    if key in bm.conditions:
        return bm.conditions[key]
    t = bm.problem.temps[ti]
    alts: list[Cond] = []
    for n, alt in enumerate(t.when):
        conds: list[Cond] = []
        for kind, i, arg in alt:
            if kind == "x":
                conds.append(bm.x.get((i, arg), False))  # type: ignore[arg-type]
            elif kind == "y":
                conds.append(bm.y.get((i, arg), False))  # type: ignore[arg-type]
            else:
                conds.append(guard_literal(bm, i))
        alts.append(_conjunction(bm, ("alt", ti, n), conds))
    out = _disjunction(bm, key, alts)
    bm.conditions[key] = out
    return out


def occupancy_terms(bm: BuiltModel, lp: LivePoint, resource: str
                    ) -> tuple[list[tuple[cp_model.IntVar, int]], int, int]:
    """(variable terms, fixed bytes, largest possible bytes) held in ``resource`` at ``lp``."""
    p = bm.problem
    out: list[tuple[cp_model.IntVar, int]] = []
    fixed, most = 0, 0
    buffered = bm.buffered.get(resource)
    if buffered is None:  # the values with a placement in ``resource``
        buffered = bm.buffered[resource] = frozenset(
            v.index for v in p.values if any(pl.resource == resource for pl in v.placements))
    seen = bm.held  # checked here too: most segments recur in many sums
    for vi, si in lp.segments:
        v = p.values[vi]
        if v.register == resource and (vi, si, VIRTUAL) not in seen:
            _holds(bm, vi, si, VIRTUAL)
        if vi in buffered and (vi, si, MATERIALIZED) not in seen:
            _holds(bm, vi, si, MATERIALIZED)
        reg = bm.reg.get((vi, si)) if v.register == resource else None
        mat = bm.mat.get((vi, si))
        if reg is None and mat is None:
            continue
        versions = [(k, bm.u.get((vi, k))) for k in range(1, v.max_versions + 1)] \
            if v.max_versions > 1 else [(1, None)]
        if reg is not None:
            for k, uk in versions:
                held = reg if uk is None else _product(bm, ("r", vi, si, k), [reg, uk])
                out.append((held, v.reg_bytes * k))
            most += v.reg_bytes * v.max_versions
        if mat is None:
            continue
        qs = [q for q, pl in enumerate(v.placements)
              if pl.resource == resource and (vi, q) in bm.y]
        for q in qs:
            for k, uk in versions:
                lits = [mat, bm.y[(vi, q)]] + ([uk] if uk is not None else [])
                out.append((_product(bm, ("m", vi, si, q, k), lits),
                            v.placements[q].bytes * k))
        if qs:
            most += max(v.placements[q].bytes for q in qs) * v.max_versions
    for mi in lp.memories:
        mem = p.memories[mi]
        if resource not in mem.homes:
            continue
        h = mem.homes.index(resource)
        nbytes = mem.home_bytes[h]
        home = bm.mh.get((mi, h))
        if mem.max_versions == 1 and home is None:
            fixed += nbytes
        elif mem.max_versions == 1:
            out.append((home, nbytes))
            most += nbytes
        else:
            out += [(bm.mv[(mi, k)] if home is None
                     else _product(bm, ("mh", mi, h, k), [bm.mv[(mi, k)], home]), nbytes * k)
                    for k in range(1, mem.max_versions + 1)]
            most += nbytes * mem.max_versions
    for ti in lp.temps:
        t = p.temps[ti]
        if t.resource != resource:
            continue
        held = temp_literal(bm, ti)
        if held is True:
            fixed += t.bytes
        elif held is not False:
            out.append((held, t.bytes))  # type: ignore[arg-type]
            most += t.bytes
    return out, fixed, most + fixed


def _most(bm: BuiltModel, lp: LivePoint) -> dict[str | None, int]:
    """Upper bounds of :func:`occupancy_terms`' largest possible bytes per resource,
    creating nothing: a capacity sum under its bound cannot bind and is not built."""
    p = bm.problem
    most: dict[str | None, int] = {}
    fixed = bm.most_fixed
    for vi, si in lp.segments:
        per = fixed.get(vi, False)
        if per is False:
            per = fixed[vi] = _most_everywhere(bm, vi)
        if per is None:
            per = bm.most_of.get((vi, si))
            if per is None:
                per = bm.most_of[(vi, si)] = _most_of(bm, vi, si)
        for r, nbytes in per.items():
            most[r] = most.get(r, 0) + nbytes
    for mi in lp.memories:
        mem = p.memories[mi]
        for r in dict.fromkeys(mem.homes):
            most[r] = most.get(r, 0) + mem.home_bytes[mem.homes.index(r)] * mem.max_versions
    for ti in lp.temps:
        t = p.temps[ti]
        most[t.resource] = most.get(t.resource, 0) + t.bytes
    return most


def _holder_edges(bm: BuiltModel, vi: int) -> tuple[frozenset[int], frozenset[int],
                                                     dict[tuple[bool, bool],
                                                          dict[str | None, int]]]:
    """(edges of ``vi`` that may be virtual, that may be materialized, _most_of's tables)."""
    holders = bm.holders.get(vi)
    if holders is None:
        v = bm.problem.values[vi]
        holders = bm.holders[vi] = (
            frozenset(i for i in v.edges if (i, VIRTUAL) in bm.x),
            frozenset(i for i in v.edges if (i, MATERIALIZED) in bm.x), {})
    return holders


def _most_everywhere(bm: BuiltModel, vi: int) -> dict[str | None, int] | None:
    """:func:`_most_of` of every segment of ``vi`` when the value alone decides it (no
    edge, or every edge, may hold it in registers; likewise in its buffer): a segment
    names some edge of the value (covering or chained), so it is held exactly where one
    of them may be.  None: it depends on the segment."""
    v = bm.problem.values[vi]
    virt, mats, tables = _holder_edges(bm, vi)
    n = len(v.edges)
    if v.register is None or not virt:
        may_v = False
    elif len(virt) == n:
        may_v = True
    else:
        return None
    if not mats or len(mats) == n:
        return _most_table(bm, vi, tables, may_v, bool(mats))
    return None


def _most_of(bm: BuiltModel, vi: int, si: int) -> dict[str | None, int]:
    """The most bytes ``vi`` may hold over segment ``si``, per resource: one of four
    tables of the value (may it be held in registers, in its buffer), built once."""
    v = bm.problem.values[vi]
    virt, mats, tables = _holder_edges(bm, vi)
    seg = v.segments[si]
    may_v = v.register is not None and (not virt.isdisjoint(seg.edges) or any(
        v.chains[ci].edge in virt for ci, _ in seg.chained))
    may_m = not mats.isdisjoint(seg.edges) or any(
        v.chains[ci].edge in mats for ci, _ in seg.chained)
    return _most_table(bm, vi, tables, may_v, may_m)


def _most_table(bm: BuiltModel, vi: int,
                tables: dict[tuple[bool, bool], dict[str | None, int]], may_v: bool,
                may_m: bool) -> dict[str | None, int]:
    v = bm.problem.values[vi]
    out = tables.get((may_v, may_m))
    if out is not None:
        return out
    out = {}
    if may_v:
        out[v.register] = v.reg_bytes * v.max_versions
    if may_m:
        buffer: dict[str | None, int] = {}
        for q, pl in enumerate(v.placements):
            if (vi, q) in bm.y:
                buffer[pl.resource] = max(buffer.get(pl.resource, 0), pl.bytes)
        for r, nbytes in buffer.items():
            out[r] = out.get(r, 0) + nbytes * v.max_versions
    tables[(may_v, may_m)] = out
    return out


def _capacity(bm: BuiltModel, lp: LivePoint, skip: frozenset[str]) -> None:
    most: dict[str | None, int] | None = None
    for (resource, owner), cap in bm.capacity_order:
        if owner != lp.owner or cap is None:
            continue
        name = f"capacity:{resource}@{lp.point}"
        if most is None:
            most = _most(bm, lp)
        if name in skip or most.get(resource, 0) <= cap:
            continue
        out, fixed, largest = occupancy_terms(bm, lp, resource)
        if largest <= cap:
            continue
        bm.capacity_exprs[(resource, lp.point)] = (out, fixed)
        lits = bm.guard(Group(name, "capacity", lp.point, resource))
        expr = cp_model.LinearExpr.weighted_sum([lit for lit, _ in out], [c for _, c in out])
        bm.model.add(expr + fixed <= cap).only_enforce_if(lits)


def _delivery_cuts(bm: BuiltModel) -> None:
    """Redundant cuts for the LP: where consumer ``w`` of edge ``e`` is evaluated at a
    later point (``site(w, pt)``), ``e`` delivers its value there by exactly one choice,
    so ``held(e, virtual) + via(e, fused) + via(e, recomputed) + x[e, materialized] >=
    site(w, pt)``.  Each conjunction alone is linearized as ``>= x + site - 1``, which
    lets fractional ``x`` and ``site`` hold nothing (the synthetic graphs' bound gap)."""
    p, x = bm.problem, bm.x
    firsts: dict[tuple[int, int, int], list[int]] = {}  # (edge, value, chain) -> firsts
    for key in bm.products:
        if key[0] == "held" and key[2] is VIRTUAL and key[3] == "chain":
            firsts.setdefault((key[1], key[4], key[5]), []).append(key[6])
    held_at: dict[tuple[int, int, int], list[Cond]] = {}  # (edge, w, pt) -> held literals
    for (i, vi, ci), fs in firsts.items():
        guards = p.values[vi].chains[ci].guards
        fs.sort()
        for n, first in enumerate(fs):  # the latest first <= j covers guard j tightest
            lit = bm.products[("held", i, VIRTUAL, "chain", vi, ci, first)]
            for j in range(first, fs[n + 1] if n + 1 < len(fs) else len(guards)):
                g = p.guards[guards[j]]
                if g.kind == "site":
                    held_at.setdefault((i, g.a, g.b), []).append(lit)
    # (edge, its consumer, point) with a product (a chain's guards may name other values)
    pairs = {(i, w, pt) for i, w, pt in held_at if p.edges[i].consumer_value == w}
    for key in bm.products:
        if key[0] == "via" and (w := p.edges[key[1]].consumer_value) is not None:
            pairs.add((key[1], w, key[3]))
    for i, w, pt in sorted(pairs):  # sorted: the same model in every process
        site = bm.conditions.get(("site", w, pt))
        if site is None or isinstance(site, bool):
            continue
        parts = [_delivered(bm, held_at, i, c, w, pt) for c in CHOICES if (i, c) in x]
        bm.model.add(cp_model.LinearExpr.sum(parts) >= site)


def _delivered(bm: BuiltModel, held_at: dict[tuple[int, int, int], list[Cond]], i: int,
               c: Decision, w: int, pt: int) -> cp_model.IntVar:
    """A literal implied by ``x[i, c]`` ∧ ``site(w, pt)`` (``x[i, c]`` where no product
    exists)."""
    if c is VIRTUAL and (i, w, pt) in held_at:
        return held_at[(i, w, pt)][0]  # type: ignore[return-value]
    return bm.products.get(("via", i, c, pt), bm.x[(i, c)])


def add_hint(bm: BuiltModel, a: Assignment) -> None:
    """Hint CP-SAT with a known assignment (a heuristic plan): its decision literals,
    written to the proto in two calls (one ``add_hint`` per literal took 0.2 s for the
    ~60,000 of 10,000 edges)."""
    edges = bm.problem.edges
    pairs = [*((lit, a.choices[e] is c) for (e, c), lit in bm.x.items()),
             *((lit, a.placement[vi] == q) for (vi, q), lit in bm.y.items()),
             *((lit, a.choices[e] is MATERIALIZED and a.placement[edges[e].value] == q)
               for (e, q), lit in bm.z.items()),
             *((lit, a.versions[vi] == k) for (vi, k), lit in bm.u.items())]
    indices = [lit.Index() for lit, _ in pairs]
    hint = bm.model.Proto().solution_hint
    hint.vars.extend([i if i >= 0 else -i - 1 for i in indices])
    hint.values.extend([int(value if i >= 0 else not value)
                        for i, (_, value) in zip(indices, pairs, strict=True)])


def set_hint_values(bm: BuiltModel, values: Sequence[int]) -> None:
    """Hint every variable of ``bm``: ``values[i]`` for variable ``i`` (a complete
    assignment, replacing any hint)."""
    values = [int(v) for v in values]
    bm.model.clear_hints()
    hint = bm.model.Proto().solution_hint
    hint.vars.extend(range(len(values)))
    hint.values.extend(values)


# --------------------------------------------------------------------------- solving


@dataclass(frozen=True, slots=True)
class SolveResult:
    status: str  # "optimal" | "feasible" | "infeasible" | "unknown"
    assignment: Assignment | None
    objective: int
    bound: int
    wall_s: float
    # the assignment is the tie-break's canonical optimum (see :func:`solve`); False when
    # the search stopped at its limit, or the tie-break did before it proved its choice
    canonical: bool = False


class _Progress(cp_model.CpSolverSolutionCallback):
    def __init__(self, report: Progress, offset: int, weight: int) -> None:
        super().__init__()
        self._report = report
        self._offset = offset
        self._weight = weight

    def on_solution_callback(self) -> None:
        self._report(round(self.ObjectiveValue()) // self._weight + self._offset,
                     round(self.BestObjectiveBound()) // self._weight + self._offset,
                     self.WallTime())


def _solver(time_limit_s: float, workers: int, seed: int = 0) -> cp_model.CpSolver:
    """Fixed seed; the LP-heavy search first (capacity sums need it to prove optima)."""
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.max_time_in_seconds = max(0.01, time_limit_s)
    params.num_workers = max(1, workers)
    params.random_seed = seed
    params.log_search_progress = False
    if workers <= 1:
        params.linearization_level = 2
    elif workers == 2:
        params.subsolvers.extend(["max_lp", "default_lp"])
    return solver


def solve(bm: BuiltModel, *, time_limit_s: float = 10.0, workers: int = 2,
          progress: Progress | None = None, deadline: float | None = None,
          fallback: Assignment | None = None, tie_break: bool = True) -> SolveResult:
    """Minimize estimated time; among equal optima, return one fixed plan (unless
    ``tie_break`` is False: the optimum found first).

    The objective is ``W × cost + preference`` with ``W`` larger than any preference
    sum, so the cost is minimized first and, among equal-cost plans, the preference
    (fused before virtual before recomputed before materialized, catalog order of
    placements, more versions) decides.  Different plans can still have the same
    objective, and which of them the parallel search reaches first depends on thread
    timing, so a proven optimum then goes through a tie-break (:func:`_tie_break`): the
    lexicographically greatest optimum over :func:`tiebreak_order`, which depends on the
    problem alone (not on the worker count, timing, the hint or the model's constraint
    order).  The tie-break has its own time budget, ``max(1, time_limit_s)``; where it
    runs out, the optimum found last is kept (still optimal, ``canonical`` False).  A
    search stopped by ``time_limit_s`` (status "feasible") is not tie-broken: what it
    finds depends on timing by nature.  ``deadline`` (a ``time.perf_counter()`` instant)
    caps the tie-break and the fallback heuristic too, so the whole call ends by then
    (give the search a ``time_limit_s`` that leaves the caller its own remainder).
    ``fallback``: the heuristic plan already computed (used instead of computing it
    when the search finds nothing).
    """
    start = time.perf_counter()
    offset = total(bm.problem.constant)
    terms, weight, scale = objective_terms(bm)
    bm.model.Minimize(sum(c * lit for lit, c in terms))
    solver = _solver(time_limit_s, workers)
    callback = _Progress(progress, offset, weight) if progress is not None else None
    status = solver.Solve(bm.model, callback)
    seconds = time.perf_counter() - start
    if status == cp_model.MODEL_INVALID:
        raise PlannerError(Diagnostic("internal error: CP-SAT rejected the planning model: "
                                      + bm.model.Validate()[:500]), kind="internal")
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        name = "infeasible" if status == cp_model.INFEASIBLE else "unknown"
        until = time.perf_counter() + max(5.0, time_limit_s)
        if name != "unknown":
            fallback = None
        elif fallback is None:
            fallback = fallback_assignment(bm.problem, bm.restrictions,
                                           deadline=until if deadline is None
                                           else min(until, deadline))
        if fallback is None:
            return SolveResult(name, None, 0, 0, seconds)
        bound = solver.BestObjectiveBound()
        bound = offset + max(0, round(bound) // weight * scale) if math.isfinite(bound) \
            else offset
        ev = evaluate(bm.problem, fallback, bm.restrictions)
        return SolveResult("feasible", fallback, ev.objective, min(bound, ev.objective),
                           time.perf_counter() - start)
    value = round(solver.ObjectiveValue())
    best = value // weight * scale
    bound = round(solver.BestObjectiveBound()) // weight * scale
    if status != cp_model.OPTIMAL:
        return SolveResult("feasible", decode(bm, solver), best + offset, bound + offset,
                           seconds)
    if not tie_break:
        return SolveResult("optimal", decode(bm, solver), best + offset, bound + offset,
                           seconds, False)
    until = time.perf_counter() + max(1.0, time_limit_s)
    assignment, canonical = _tie_break(bm, terms, value, solver, workers,
                                       deadline=until if deadline is None
                                       else min(until, deadline))
    return SolveResult("optimal", assignment, best + offset, bound + offset,
                       time.perf_counter() - start, canonical)


def objective_terms(bm: BuiltModel) -> tuple[list[tuple[cp_model.IntVar, int]], int, int]:
    """(terms, weight, scale) of :func:`solve`'s objective ``sum(c × lit)``: every cost
    divided by ``scale`` (rounded up) and times ``weight``, plus the preference."""
    # Huge shapes give costs whose sum would overflow CP-SAT's 64-bit objective: search
    # on costs divided by ``scale`` (rounded up); the plan's reported cost is re-evaluated
    # exactly afterwards, so only near-ties between plans can be lost to the rounding.
    cost_sum = sum(c for _, c in bm.cost)
    scale = max(1, -(-cost_sum // _EXACT))
    costs = [(lit, -(-c // scale)) for lit, c in bm.cost]
    weight = sum(c for _, c in bm.tiebreak) + 1
    if scale > 1 or weight * cost_sum >= _EXACT:
        weight = 1  # a preference would cost the LP its precision: plain cost only
    terms = [(lit, c * weight) for lit, c in costs if c]
    if weight > 1:
        terms += [(lit, c) for lit, c in bm.tiebreak if c]
    return terms, weight, scale


def tiebreak_order(bm: BuiltModel) -> list[cp_model.IntVar]:
    """The decision literals, most significant first, that :func:`_tie_break` orders plans
    by: every edge's choices in preference order (fused, virtual, recomputed,
    materialized; edges by index), then every value's placements in catalog order, the
    version counts of values and then of explicit Memory (more versions first), and the
    homes of explicit Memory in catalog order.  They determine :func:`decode`'s result."""
    out = [bm.x[(e.index, c)] for e in bm.problem.edges for c in _PREFERENCE
           if (e.index, c) in bm.x]
    out += [bm.y[key] for key in sorted(bm.y)]
    out += [bm.u[key] for key in sorted(bm.u, key=lambda vk: (vk[0], -vk[1]))]
    out += [bm.mv[key] for key in sorted(bm.mv, key=lambda mk: (mk[0], -mk[1]))]
    out += [bm.mh[key] for key in sorted(bm.mh)]
    return out


def _tie_break(bm: BuiltModel, terms: list[tuple[cp_model.IntVar, int]], value: int,
               first: cp_model.CpSolver, workers: int, deadline: float
               ) -> tuple[Assignment, bool]:
    """The lexicographically greatest optimum over :func:`tiebreak_order` (a literal set
    to 1 beats 0 at the first position where two optima differ), and whether it is proved.

    ``value`` is the proven optimum of ``terms`` and ``first`` the search that found it.
    Starting from that solution, each round asks CP-SAT (on a copy of the model, with the
    objective bounded by ``value``) for an optimum lexicographically greater than the
    current one; "infeasible" proves the current one is the greatest.  Only proofs and the
    problem decide the outcome, so parallel workers stay usable; rounds are few (each one
    moves strictly up) and, without ties, one proof.  When ``deadline`` passes first, the
    current optimum is returned with False.
    """
    from planner.solve.decompose import tie_break_parts  # it builds on this module

    by_parts = tie_break_parts(bm, terms, first, workers, deadline)
    if by_parts is not None:
        return by_parts
    best, proved = lex_greatest(bm.model, terms, tiebreak_order(bm), value, first, workers,
                                deadline)
    return decode(bm, best), proved


def lex_greatest(model: cp_model.CpModel, terms: list[tuple[cp_model.IntVar, int]],
                 order: list[cp_model.IntVar], value: int, first: cp_model.CpSolver,
                 workers: int, deadline: float, max_rounds: int | None = None
                 ) -> tuple[cp_model.CpSolver, bool]:
    """:func:`_tie_break`'s rounds on ``model``: the search holding the lexicographically
    greatest optimum over ``order`` (its variables keep ``model``'s indices), and whether
    that is proved before ``deadline`` (or within ``max_rounds`` rounds)."""
    current = [first.BooleanValue(lit) for lit in order]
    best = first
    rounds = 0
    while (left := deadline - time.perf_counter()) > 0.01 and (
            max_rounds is None or rounds < max_rounds):
        rounds += 1
        m = model.Clone()
        if terms:
            objective = sum(c * _twin(m, lit) for lit, c in terms)
            m.Add(objective <= value)
            m.Minimize(objective)  # the LP's reduced costs prune like the first search's
        _lex_greater(m, [_twin(m, lit) for lit in order], current)
        solver = _solver(left, workers)
        solver.parameters.stop_after_first_solution = True  # any witness moves us up
        status = solver.Solve(m)
        if status == cp_model.INFEASIBLE:
            return best, True
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        current = [solver.BooleanValue(lit) for lit in order]
        best = solver
    return best, False


def _twin(m: cp_model.CpModel, lit: cp_model.IntVar) -> cp_model.IntVar:
    """``lit`` in ``m``, a clone of its model (same variable indices)."""
    i = lit.Index()
    return m.GetBoolVarFromProtoIndex(i) if i >= 0 else \
        m.GetBoolVarFromProtoIndex(-i - 1).Not()  # type: ignore[return-value]


def _lex_greater(m: cp_model.CpModel, lits: list[cp_model.IntVar], values: list[bool]
                 ) -> None:
    """Require ``lits`` lexicographically greater than ``values``: equal up to some
    position where ``values`` has 0 and the literal is 1."""
    last = max((i for i, v in enumerate(values) if not v), default=-1)
    prefix: cp_model.IntVar | None = None  # implies: every literal so far equals its value
    ups = []
    for i, (lit, v) in enumerate(zip(lits[:last + 1], values, strict=False)):
        if not v:
            up = m.NewBoolVar(f"lex_up{i}")
            m.AddImplication(up, lit)
            if prefix is not None:
                m.AddImplication(up, prefix)
            ups.append(up)
        if i < last:
            same = m.NewBoolVar(f"lex_same{i}")
            m.AddImplication(same, lit if v else lit.Not())
            if prefix is not None:
                m.AddImplication(same, prefix)
            prefix = same
    m.AddBoolOr(ups)


def fallback_assignment(problem: Problem, restrictions: Restrictions | None = None,
                        deadline: float | None = None) -> Assignment | None:
    """A feasible plan when the solver found none in time: the greedy heuristic of
    :mod:`planner.solve.baselines`, else its choices repaired against the evaluator's
    occupancy (which also sees the registers a value holds while a reader of it is
    inlined into a later consumer): the biggest register holder at the first overflow
    leaves registers, until the plan fits or nothing is left to move."""
    with paused_gc():
        return _fallback_assignment(problem, restrictions, deadline)


def _fallback_assignment(problem: Problem, restrictions: Restrictions | None,
                         deadline: float | None) -> Assignment | None:
    found = greedy_assignment(problem, restrictions)
    if found is not None:
        return found
    choices: list[Decision] = []
    for e in problem.edges:
        allowed = allowed_choices(problem, e, restrictions)
        if not allowed:
            return None
        priced = [(p, i, c) for i, c in enumerate(allowed)
                  if (p := isolated_price(problem, e, c)) is not None]
        choices.append(min(priced)[2] if priced else allowed[-1])
    for _ in range(len(problem.values) + 1):
        if deadline is not None and time.perf_counter() > deadline:
            return None
        placement, versions = place_values(problem, tuple(choices))
        if placement is None:
            return None
        a = Assignment(tuple(choices), placement, tuple(1 for _ in versions),
                       tuple(1 for _ in problem.memories))
        ev = evaluate(problem, a, restrictions)
        if ev.feasible:
            return a
        truth = Truth(problem, a)
        points = {lp.point: lp for lp in problem.live_points}
        in_regs: dict[tuple[int, int], bool] = {}
        overflows: list[list[int]] = []
        for o in ev.occupancy:
            if o.capacity is None or o.bytes <= o.capacity:
                continue
            held = []
            for vi, si in points[o.point].segments:
                v = problem.values[vi]
                if v.register != o.resource:
                    continue
                if (vi, si) not in in_regs:
                    in_regs[(vi, si)] = segment_live(problem, a, v, v.segments[si], truth)[0]
                if in_regs[(vi, si)]:
                    held.append(vi)
            if not held:
                return None  # not a register overflow: nothing this repair can move
            overflows.append(held)
        # the holders present at the most overflowing points leave first (long-lived ones)
        count: dict[int, int] = {}
        for held in overflows:
            for vi in held:
                count[vi] = count.get(vi, 0) + 1
        evict: set[int] = set()
        for held in overflows:
            if not evict & set(held):
                evict.add(max(held, key=lambda i: (count[i], problem.values[i].reg_bytes, i)))
        if not evict:
            return None
        for vi in sorted(evict):
            for i in problem.values[vi].edges:  # buffered: held, but not in registers
                if choices[i] is VIRTUAL:
                    allowed = allowed_choices(problem, problem.edges[i], restrictions)
                    if MATERIALIZED in allowed:
                        choices[i] = MATERIALIZED
                    elif not evict_registers(problem, vi, choices, restrictions):
                        return None
    return None


class LiteralValues:
    """``BooleanValue`` of a literal (CpSolver's name for it) from a value per variable
    of the model: what :func:`decode` reads, for an assignment no solver holds."""

    def __init__(self, values: Sequence[int | bool]) -> None:
        self.values = values

    def BooleanValue(self, lit: cp_model.IntVar) -> bool:
        i = lit.Index()
        return bool(self.values[i]) if i >= 0 else not self.values[-i - 1]


def decode_values(bm: BuiltModel, values: Sequence[int | bool]) -> Assignment:
    """The plan an assignment of ``bm``'s variables (a value per variable) holds."""
    return decode(bm, LiteralValues(values))  # type: ignore[arg-type]


def decode(bm: BuiltModel, solver: cp_model.CpSolver) -> Assignment:
    """The assignment ``solver`` (anything with ``BooleanValue(literal)``) holds."""
    p = bm.problem
    choices = []
    for e in p.edges:
        chosen = [c for c in CHOICES if (e.index, c) in bm.x
                  and solver.BooleanValue(bm.x[(e.index, c)])]
        choices.append(chosen[0])
    placement: list[int | None] = [None] * len(p.values)
    for (vi, q), lit in bm.y.items():
        if solver.BooleanValue(lit):
            placement[vi] = q
    versions = [1] * len(p.values)
    for (vi, k), lit in bm.u.items():
        if solver.BooleanValue(lit):
            versions[vi] = k
    memv = [1] * len(p.memories)
    for (mi, k), lit in bm.mv.items():
        if solver.BooleanValue(lit):
            memv[mi] = k
    homes = [0] * len(p.memories)
    for (mi, h), lit in bm.mh.items():
        if solver.BooleanValue(lit):
            homes[mi] = h
    return Assignment(tuple(choices), tuple(placement), tuple(versions), tuple(memv),
                      tuple(homes))


def core_groups(bm: BuiltModel, time_limit_s: float = 5.0) -> list[Group] | None:
    """The groups of an infeasibility core, or None when the model is feasible/unknown."""
    bm.model.ClearAssumptions()
    bm.model.AddAssumptions(bm.literals)
    solver = _solver(time_limit_s, 1)
    status = solver.Solve(bm.model)
    if status != cp_model.INFEASIBLE:
        return None
    index = {lit.Index(): g for lit, g in zip(bm.literals, bm.groups, strict=True)}
    return [index[i] for i in solver.SufficientAssumptionsForInfeasibility() if i in index]


def minimum_occupancy(bm: BuiltModel, resource: str, point: int,
                      active: list[cp_model.IntVar], time_limit_s: float = 2.0
                      ) -> Assignment | None:
    """An assignment holding as little as possible in ``resource`` at ``point``, with
    only the ``active`` group literals assumed."""
    lp = next(lp for lp in bm.problem.live_points if lp.point == point)
    out, _, _ = occupancy_terms(bm, lp, resource)
    bm.model.ClearAssumptions()
    bm.model.AddAssumptions(active)
    bm.model.Minimize(sum(c * lit for lit, c in out) if out else 0)
    solver = _solver(time_limit_s, 1)
    status = solver.Solve(bm.model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return decode(bm, solver)
    return None
