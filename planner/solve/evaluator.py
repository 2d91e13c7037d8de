"""The reference semantics of a priced problem, in pure Python.

:func:`allowed_choices` (what the policy or a baseline leaves an edge), :func:`evaluate`
(an assignment's constraints checked and every cost term attributed to an edge),
:class:`Truth` (what an assignment implies: where each value is evaluated and stored,
which guards and temporaries hold) and :func:`occupancies` (bytes per resource at every
checked point, with the holders).  Plans are decoded, explained and exhaustively checked
with it; :mod:`planner.solve.model` encodes the same semantics for CP-SAT.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import operator
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from planner.plan.decisions import Decision, register_copy_name
from planner.solve.dag_memo import memo_postorder
from planner.solve.problem import (
    CHOICES,
    FUSED,
    INLINING,
    MATERIALIZED,
    PRESERVING,
    RECOMPUTED,
    STALLS,
    TRAFFIC,
    VIRTUAL,
    Assignment,
    Edge,
    Evaluation,
    Lit,
    Occupancy,
    Problem,
    Segment,
    Temp,
    Terms,
    Value,
    add_terms,
    paused_gc,
    terms,
)


def derived_flags(problem: Problem, choices: Sequence[Decision], v: Value
                  ) -> tuple[bool, bool, bool]:
    """(home, materialized, preserved across stages) of value ``v`` under ``choices``."""
    home, mat, cross = first_holders(problem, choices, v)
    return home is not None, mat is not None, cross is not None


def first_holders(problem: Problem, choices: Sequence[Decision], v: Value
                  ) -> tuple[Edge | None, Edge | None, Edge | None]:
    """The first edge of value ``v`` that keeps it at home (virtual or materialized),
    the first materialized one and the first one kept across stages (None: no such
    edge): the edges its value-level costs go to, in one pass."""
    first_home = first_mat = first_cross = None
    edges = problem.edges
    for i in v.edges:
        c = choices[i]
        if c is VIRTUAL or c is MATERIALIZED:  # ``in PRESERVING`` hashes: a hot loop
            e = edges[i]
            if first_home is None:
                first_home = e
            if first_mat is None and c is MATERIALIZED:
                first_mat = e
            if first_cross is None and e.stage_distance > 0:
                first_cross = e
    return first_home, first_mat, first_cross


def allowed_choices(problem: Problem, e: Edge,
                    restrictions: Mapping[int, frozenset[Decision]] | None = None
                    ) -> list[Decision]:
    """Legal choices of ``e`` under the policy, or under a baseline's restrictions
    (:func:`is_allowed`, in :data:`CHOICES` order)."""
    return [c for c in CHOICES if is_allowed(problem, e, c, restrictions)]


def is_allowed(problem: Problem, e: Edge, c: Decision,
               restrictions: Mapping[int, frozenset[Decision]] | None = None) -> bool:
    """Whether choice ``c`` is legal on ``e`` and allowed by the policy, or by a
    baseline's restrictions.

    A baseline is a complete strategy: where it restricts an edge, the policy does not
    apply.  The ``inline`` policy only inlines edges where inlining is legal (elsewhere
    every legal choice is allowed).
    """
    if c.__class__ is not Decision:  # a plain string naming a choice (or nothing)
        named = next((d for d in CHOICES if d == c), None)
        if named is None:
            return False
        c = named
    if not e.legal(c):
        return False
    if restrictions and e.index in restrictions:
        return c in restrictions[e.index]
    policy = problem.values[e.value].policy
    if policy == "preserve":
        return c in PRESERVING
    if policy == "inline":
        return c in INLINING or not any(e.legal(x) for x in INLINING)
    return True


# Inside :func:`reusing_evaluations` (one planning call), the latest evaluations, newest
# last: (problem, restrictions, assignment, evaluation).  The planner evaluates a plan
# more than once (the repair's own check, the comparison with the search's plan, the
# plan's listing); the problem and the assignment are frozen, so the same question gets
# the same answer.  Per thread: Dask workers and the server's threads plan side by side.
_LOCAL = threading.local()
_RECENT_SIZE = 2


@contextmanager
def reusing_evaluations() -> Iterator[None]:
    """Within the block, :func:`evaluate` answers a repeated question (the same problem
    object, equal assignment and restrictions) from its latest answers; nothing is kept
    after it."""
    outer = getattr(_LOCAL, "recent", None)
    _LOCAL.recent = outer if outer is not None else []
    try:
        yield
    finally:
        _LOCAL.recent = outer


def evaluate(problem: Problem, a: Assignment,
             restrictions: Mapping[int, frozenset[Decision]] | None = None) -> Evaluation:
    """The reference semantics: constraints checked and every cost term attributed to an edge.

    Value-level costs go to one of the value's edges: the home compute to its first
    preserved edge, the write (and barrier) to its first materialized edge, a stall to
    its first preserved cross-stage edge.  Inside :func:`reusing_evaluations` the answers
    to the latest questions are reused.
    """
    return evaluate_held(problem, a, restrictions, None)


def evaluate_held(problem: Problem, a: Assignment,
                  restrictions: Mapping[int, frozenset[Decision]] | None,
                  held: list[tuple[tuple[str, int], list[Held]]] | None) -> Evaluation:
    """:func:`evaluate`, given ``held``: :func:`held_at_points`' answer for ``a`` when
    the caller has it already (None: computed here)."""
    recent = getattr(_LOCAL, "recent", None)
    if recent is None:
        with paused_gc():  # it allocates many small objects and frees none of them
            return _evaluate(problem, a, restrictions, held)
    r = restrictions or {}
    for p, rr, aa, ev in reversed(recent):
        if p is problem and (aa is a or aa == a) and (rr is r or rr == r):
            return ev
    with paused_gc():
        ev = _evaluate(problem, a, restrictions, held)
    if len(recent) >= _RECENT_SIZE:
        del recent[0]
    recent.append((problem, dict(r), a, ev))
    return ev


def _evaluate(problem: Problem, a: Assignment,
              restrictions: Mapping[int, frozenset[Decision]] | None,
              held: list[tuple[tuple[str, int], list[Held]]] | None) -> Evaluation:
    bad: list[str] = []
    edge_terms: list[Terms] = [() for _ in problem.edges]
    for e in problem.edges:
        c = a.choices[e.index]
        if not is_allowed(problem, e, c, restrictions):
            bad.append(f"{e.edge_id}: {c.value} is not allowed")
    for v in problem.values:
        bad += _evaluate_value(problem, a, v, edge_terms)
    memory_terms: list[Terms] = []
    for m in problem.memories:
        k = a.memory_versions[m.index] if a.memory_versions else 1
        if not 1 <= k <= m.max_versions:
            bad.append(f"Memory {m.name}: {k} versions outside 1..{m.max_versions}")
            continue
        h = m.home_of(a)
        if not 0 <= h < len(m.homes):
            bad.append(f"Memory {m.name}: home {h} outside its {len(m.homes)} homes")
            continue
        memory_terms.append(terms(**{STALLS: m.stall[k - 1],
                                     TRAFFIC: m.home_cost[h] if m.home_cost else 0}))
    if held is None:
        held = held_at_points(problem, a)
    occupancy = occupancies(problem, a, held)
    for occ in occupancy:
        if occ.capacity is not None and occ.bytes > occ.capacity:
            bad.append(f"{occ.resource} holds {occ.bytes} B > {occ.capacity} B at point "
                       f"{occ.point}")
    return Evaluation(tuple(bad), tuple(edge_terms), add_terms(*memory_terms),
                      problem.constant, tuple(occupancy), tuple(held))


def _evaluate_value(problem: Problem, a: Assignment, v: Value,
                    edge_terms: list[Terms]) -> list[str]:
    bad: list[str] = []
    choices = a.choices
    q = a.placement[v.index]
    k = a.versions[v.index]
    es = [problem.edges[i] for i in v.edges]
    first_home, first_mat, first_cross = first_holders(problem, choices, v)
    if (first_mat is not None) != (q is not None):
        bad.append(f"{v.name}: placement {q} does not match its materialized edges")
    if not 1 <= k <= v.max_versions or (k != 1 and first_cross is None):
        bad.append(f"{v.name}: {k} versions (allowed 1..{v.max_versions}, 1 unless preserved "
                   "across stages)")
    for e in es:
        c = choices[e.index]
        parts: list[Terms] = []
        if c is FUSED:
            parts.append(e.fused)
        elif c is RECOMPUTED:
            parts.append(e.recompute)
        elif c is MATERIALIZED and q is not None:
            read = e.reads[q] if q < len(e.reads) else None
            if read is None:
                bad.append(f"{e.edge_id}: placement in {v.placements[q].resource} is not "
                           "admissible")
            else:
                parts.append(read)
        if e is first_home:
            parts.append(v.home)
        if e is first_mat and q is not None:
            parts.append(v.placements[q].write)
        if e is first_cross and 1 <= k <= v.max_versions:
            parts.append(terms(**{STALLS: v.stall[k - 1]}))
        # one sum of every part: the same terms as adding them one at a time
        edge_terms[e.index] = add_terms(*parts) if parts else ()
    return bad


class Truth:
    """What an assignment implies beyond its choices: where each value is evaluated, where
    it is stored, and hence which guards and temporaries hold."""

    def __init__(self, problem: Problem, a: Assignment) -> None:
        self.problem = problem
        self.a = a
        self._sites: dict[int, frozenset[int]] = {}
        self._last: dict[tuple[int, int], int] = {}
        self._spans: dict[int, tuple[list[int], list[int]]] = {}
        self._recompute: dict[int, frozenset[int]] = {}
        self._inlines: dict[int, list[Edge]] = {}
        self._recomputing: bool | None = None  # some edge recomputed (asked lazily)

    def last_held(self, v: Value, ci: int) -> int:
        """The last position of ``v.chains[ci]`` whose guard holds (-1: none); a segment
        naming the chain from ``first`` on is held by it iff this is ``>= first``."""
        key = (v.index, ci)
        got = self._last.get(key)
        if got is None and v.chains[ci].site_of >= 0:
            chain = v.chains[ci]
            got = -1
            sites = self._sites.get(chain.site_of)
            for site in sites if sites is not None else self.sites(chain.site_of):
                j = bisect.bisect_left(chain.points, site)
                if j < len(chain.points) and chain.points[j] == site:
                    got = max(got, j)
            self._last[key] = got
        if got is None:
            got = -1
            guards = v.chains[ci].guards
            every = self.problem.guards
            known = self._sites
            recomputed = self._recompute
            recomputing = self._recomputing
            if recomputing is None:  # with no edge recomputed, no ``recompute`` guard holds
                recomputing = self._recomputing = RECOMPUTED in self.a.choices
            for j in range(len(guards) - 1, -1, -1):
                g = every[guards[j]]
                kind = g.kind
                if kind == "site":  # :meth:`guard`, inlined: a hot loop
                    held = known.get(g.a)
                    if g.b in (held if held is not None else self.sites(g.a)):
                        got = j
                        break
                elif kind == "recompute":  # the same
                    if not recomputing:
                        continue
                    held = recomputed.get(g.a)
                    if g.b in (held if held is not None else self.recompute_sites(g.a)):
                        got = j
                        break
                elif self.guard(guards[j]):
                    got = j
                    break
            self._last[key] = got
        return got

    def spans(self, vi: int) -> tuple[list[int], list[int]]:
        """Where value ``vi`` is held (in registers, in its buffer): each a flat sorted
        list ``[start0, end0, start1, end1, ...]`` of disjoint ``[start, end)`` intervals.

        The one rule of holding: an edge covering a point holds the value there in
        registers when virtual, in its buffer when materialized; a :class:`GuardChain`
        of a preserving edge holds it from its start up to the end of its last guard
        that holds.  A segment is held exactly where its start is (its bounds are cuts
        of these intervals)."""
        got = self._spans.get(vi)
        if got is not None:
            return got
        v = self.problem.values[vi]
        choices = self.a.choices
        reg: list[tuple[int, int]] = []
        mat: list[tuple[int, int]] = []
        for i, a, b in v.covers:
            c = choices[i]
            if c is VIRTUAL:
                reg.append((a, b))
            elif c is MATERIALIZED:
                mat.append((a, b))
        known = self._sites
        for ci, chain in enumerate(v.chains):
            c = choices[chain.edge]
            if c is VIRTUAL or c is MATERIALIZED:
                if chain.site_of >= 0:  # :meth:`last_held` of one site, inlined: a hot loop
                    sites = known.get(chain.site_of)
                    if sites is None:
                        sites = self.sites(chain.site_of)
                    points = chain.points
                    j = -1
                    for site in sites:
                        at = bisect.bisect_left(points, site)
                        if at < len(points) and points[at] == site and at > j:
                            j = at
                else:
                    j = self.last_held(v, ci)
                if j >= 0:
                    (reg if c is VIRTUAL else mat).append((chain.start, chain.ends[j]))
        got = self._spans[vi] = (_merged(reg), _merged(mat))
        return got

    def home(self, vi: int) -> bool:
        """Whether value ``vi`` is computed at its own point (into its buffer)."""
        v = self.problem.values[vi]
        if not v.inlinable:
            return True
        choices = self.a.choices
        for i in v.edges:  # (``in PRESERVING`` hashes the enum: a hot loop)
            c = choices[i]
            if c is VIRTUAL or c is MATERIALIZED:
                return True
        return False

    def sites(self, vi: int) -> frozenset[int]:
        """The points where value ``vi``'s expression is evaluated."""
        got = self._sites.get(vi)
        if got is not None:
            return got
        inlined = self._inlined
        if not inlined(vi):  # evaluated at home only, or nowhere: most values
            got = self._sites[vi] = frozenset(
                (self.problem.values[vi].def_point,) if self.home(vi) else ())
            return got

        def compute(vj: int) -> frozenset[int]:
            out = {self.problem.values[vj].def_point} if self.home(vj) else set()
            for e in inlined(vj):
                out |= ({e.consumer_point} if e.consumer_value is None
                        else self._sites[e.consumer_value])
            return frozenset(out)

        return memo_postorder(vi, lambda vj: [e.consumer_value for e in inlined(vj)
                                              if e.consumer_value is not None],
                              compute, self._sites)

    def _inlined(self, vi: int) -> list[Edge]:
        """The edges of value ``vi`` fused or recomputed into their consumer (legally: an
        illegal choice is reported anyway)."""
        got = self._inlines.get(vi)
        if got is None:
            choices = self.a.choices
            edges = self.problem.edges
            got = self._inlines[vi] = [
                e for i in self.problem.values[vi].edges
                if ((c := choices[i]) is FUSED or c is RECOMPUTED) and (e := edges[i]).legal(c)]
        return got

    def recompute_sites(self, vi: int) -> frozenset[int]:
        """The points where value ``vi``'s chain is re-derived (a recomputed edge), cached."""
        got = self._recompute.get(vi)
        if got is None:
            got = self._recompute[vi] = self._recompute_sites(vi)
        return got

    def _recompute_sites(self, vi: int) -> frozenset[int]:
        out: set[int] = set()
        for i in self.problem.values[vi].edges:
            e = self.problem.edges[i]
            if self.a.choices[i] is RECOMPUTED and e.legal(RECOMPUTED):
                out |= ({e.consumer_point} if e.consumer_value is None
                        else self.sites(e.consumer_value))
        return frozenset(out)

    def storage(self, vi: int) -> str | None:
        """The resource of the value's one buffer (its placement, else its registers)."""
        v = self.problem.values[vi]
        q = self.a.placement[vi]
        return v.placements[q].resource if q is not None else v.register

    def guard(self, gi: int) -> bool:
        g = self.problem.guards[gi]
        if g.kind == "site":
            return g.b in self.sites(g.a)
        if g.kind == "recompute":
            return g.b in self.recompute_sites(g.a)
        if g.kind == "versioned":
            return self.a.versions[g.a] > 1
        split = self.storage(g.a) != self.storage(g.b) or self.mixed(g.b)
        if g.kind == "split":
            return split
        return not split and any(x < 0 or self.guard(x) for x in g.any_of)  # pingpong

    def mixed(self, vi: int) -> bool:
        """Kept in registers for some edges and in a buffer for others (two copies)."""
        return self.a.placement[vi] is not None and any(
            self.a.choices[i] is VIRTUAL for i in self.problem.values[vi].edges)

    def lit(self, lit: Lit) -> bool:
        kind, i, arg = lit
        if kind == "x":
            return self.a.choices[i] is arg
        if kind == "y":
            return self.a.placement[i] == arg
        return self.guard(i)

    def temp(self, t: Temp) -> bool:
        return any(all(self.lit(x) for x in alt) for alt in t.when)


def segment_live(problem: Problem, a: Assignment, v: Value, seg: Segment,
                 truth: Truth | None = None) -> tuple[bool, bool]:
    """(in registers, in its materialized buffer) over ``seg`` (:meth:`Truth.spans`)."""
    reg, mat = (truth or Truth(problem, a)).spans(v.index)
    return _inside(reg, seg.start), _inside(mat, seg.start)


def _merged(spans: list[tuple[int, int]]) -> list[int]:
    """Disjoint sorted ``[start, end)`` intervals covering ``spans``, flattened."""
    if len(spans) < 2:
        return list(spans[0]) if spans else []
    out: list[int] = []
    for a, b in sorted(spans):
        if out and a <= out[-1]:
            out[-1] = max(out[-1], b)
        else:
            out += (a, b)
    return out


def _inside(flat: list[int], point: int) -> bool:
    """Whether ``point`` lies in one of the flattened intervals of :func:`_merged`."""
    return bisect.bisect_right(flat, point) & 1 == 1


def _pieces(reg: list[int], mat: list[int]) -> list[tuple[int, int, bool, bool]]:
    """``(start, end, in registers, in its buffer)`` over the union of two flattened
    interval lists, split wherever either changes."""
    if not mat and len(reg) == 2:  # one interval in registers only: most values
        return [(reg[0], reg[1], True, False)] if reg[0] < reg[1] else []
    if not reg and len(mat) == 2:  # or in its buffer only
        return [(mat[0], mat[1], False, True)] if mat[0] < mat[1] else []
    cuts = sorted(set(reg) | set(mat))
    out: list[tuple[int, int, bool, bool]] = []
    for lo, hi in itertools.pairwise(cuts):
        r, m = _inside(reg, lo), _inside(mat, lo)
        if r or m:
            out.append((lo, hi, r, m))
    return out


@dataclass(frozen=True, slots=True)
class Held:
    """One buffer held at one checked point: which (``key``), its printed name, role,
    resource, bytes (every version) and versions."""

    key: tuple[object, ...]
    name: str
    role: str  # value | register copy | carry | memory | staging | exchange
    resource: str
    bytes: int
    versions: int
    sync: str | None = None  # the catalog sync rule ordering its writes before reads


#: The guards that decide where a yielded value is held (in its carry's buffer or not).
_CARRY_GUARDS = frozenset({"split", "pingpong"})
_KIND = operator.attrgetter("kind")


def held_at_points(problem: Problem, a: Assignment
                   ) -> list[tuple[tuple[str, int], list[Held]]]:
    """The buffers held at every checked point ``(owner, point)``.

    A value yielded to a loop carry and kept in the carry's storage is computed into the
    carry's buffer: it is held under the carry's key (one buffer; two versions, the old
    value and the yielded one, when the guard ``pingpong`` holds).  :func:`evaluate`
    keeps its answer (:attr:`Evaluation.held`): pass that on rather than asking again."""
    truth = Truth(problem, a)
    into: dict[int, tuple[int, bool]] = {}  # yielded value -> (its carry, two versions)
    kinds = list(map(_KIND, problem.guards))
    carries = [gi for gi, k in enumerate(kinds) if k in _CARRY_GUARDS] \
        if "split" in kinds or "pingpong" in kinds else []  # (a scan in C: most have none)
    for gi in carries:
        g = problem.guards[gi]
        if g.kind == "split" and not truth.guard(gi):
            into.setdefault(g.b, (g.a, False))
    for gi in carries:
        g = problem.guards[gi]
        if g.kind == "pingpong" and truth.guard(gi):
            into[g.b] = (g.a, True)
    pingpong = {c for c, two in into.values() if two}
    # Each value's holders are laid onto the checked points inside its held intervals
    # (:meth:`Truth.spans`), by bisection: linear in what the plan actually holds, not
    # in every segment some other plan might hold.
    at = [lp.point for lp in problem.live_points]
    values_at: list[list[Held]] = [[] for _ in at]
    edges = problem.edges
    held_somewhere = {edges[i].value for i, c in enumerate(a.choices)
                      if c is VIRTUAL or c is MATERIALIZED}  # else every edge inlined
    for v in problem.values:
        if v.index not in held_somewhere:
            continue
        kinds: dict[tuple[bool, bool], list[Held]] = {}
        for lo, hi, reg, mat in _pieces(*truth.spans(v.index)):
            seg = kinds.get((reg, mat))
            if seg is None:
                seg = kinds[(reg, mat)] = _segment_held(problem, a, v.index, reg, mat, into,
                                                        pingpong)
            if seg:
                for j in range(bisect.bisect_left(at, lo), bisect.bisect_left(at, hi)):
                    values_at[j] += seg
    if not into and not problem.memories and not problem.temps:  # values alone
        return [((lp.owner, lp.point), held)
                for lp, held in zip(problem.live_points, values_at, strict=True)]
    memories: dict[int, Held] = {}  # the same at every point
    out: list[tuple[tuple[str, int], list[Held]]] = []
    for lp, held in zip(problem.live_points, values_at, strict=True):
        for mi in lp.memories:
            mem = memories.get(mi)
            if mem is None:
                m = problem.memories[mi]
                k = a.memory_versions[mi] if a.memory_versions else 1
                h = m.home_of(a)
                mem = memories[mi] = Held(("memory", mi), m.name, "memory", m.homes[h],
                                          m.home_bytes[h] * k, k,
                                          m.home_sync[h] if m.home_sync else None)
            held.append(mem)
        for ti in lp.temps:
            t = problem.temps[ti]
            if truth.temp(t):
                role = "exchange" if t.name.startswith("exchange") else "staging"
                held.append(Held(("temp", ti), t.name, role, t.resource, t.bytes, 1, t.sync))
        if not into:  # one key per holder: a value has one segment at a point
            out.append(((lp.owner, lp.point), held))
            continue
        merged: dict[tuple[object, ...], Held] = {}
        for h in held:  # a carry and the value computed into its second version
            o = merged.get(h.key)
            merged[h.key] = h if o is None else dataclasses.replace(o, bytes=o.bytes + h.bytes)
        out.append(((lp.owner, lp.point), list(merged.values())))
    return out


def _segment_held(problem: Problem, a: Assignment, vi: int, reg: bool, mat: bool,
                  into: Mapping[int, tuple[int, bool]], pingpong: set[int]) -> list[Held]:
    """The buffers value ``vi`` holds over a segment where it is in registers (``reg``)
    and in its buffer (``mat``) as :func:`segment_live` says."""
    v = problem.values[vi]
    k = a.versions[vi]
    q = a.placement[vi]
    owner = problem.values[into[vi][0]] if vi in into else v
    role = "carry" if owner.kind == "loop.carry" else "value"
    kk = 2 if owner.index in pingpong else k
    out: list[Held] = []
    if reg and v.register is not None:
        copy = q is not None
        out.append(Held(("value", owner.index, "reg" if copy else "main"),
                        register_copy_name(owner.name) if copy else owner.name,
                        "register copy" if copy else role, v.register, v.reg_bytes * k, kk))
    if mat and q is not None:
        pl = v.placements[q]
        out.append(Held(("value", owner.index, "main"), owner.name, role, pl.resource,
                        pl.bytes * k, kk, pl.sync))
    return out


def overflows(problem: Problem, held: Sequence[tuple[tuple[str, int], list[Held]]]
              ) -> list[tuple[str, str, int]]:
    """``(resource, owner, point)`` of each of :func:`occupancies` over its capacity, in
    its order, from ``held`` (:func:`held_at_points`' answer): the capacity violations
    of :func:`evaluate`, without listing every holder."""
    out: list[tuple[str, str, int]] = []
    for (owner, point), held_here in held:
        per: dict[str, int] = {}
        for h in held_here:
            per[h.resource] = per.get(h.resource, 0) + h.bytes
        for res, used in sorted(per.items()) if len(per) > 1 else per.items():
            cap = problem.capacity(res, owner)
            if cap is not None and used > cap:
                out.append((res, owner, point))
    return out


def occupancies(problem: Problem, a: Assignment,
                held: Sequence[tuple[tuple[str, int], list[Held]]] | None = None
                ) -> list[Occupancy]:
    """Bytes held per resource at every checked point, with the holders (from ``held``,
    :func:`held_at_points`' answer for ``a``, when given)."""
    out: list[Occupancy] = []
    # id(holder) -> (resource, (label, bytes)): holders are shared between points
    labels: dict[int, tuple[str, tuple[str, int]]] = {}
    listing = held if held is not None else held_at_points(problem, a)
    for (owner, point), held_here in listing:
        per: dict[str, list[tuple[str, int]]] = {}
        for h in held_here:
            got = labels.get(id(h))
            if got is None:
                got = labels[id(h)] = (h.resource, (h.name if h.versions == 1
                                                    else f"{h.name} ×{h.versions}", h.bytes))
            items = per.get(got[0])
            if items is None:
                per[got[0]] = [got[1]]
            else:
                items.append(got[1])
        for res, holders in sorted(per.items()) if len(per) > 1 else per.items():
            out.append(Occupancy(res, owner, point, sum([b for _, b in holders]),
                                 problem.capacity(res, owner), tuple(holders)))
    return out
