"""Independent parts of a CP-SAT model, each a model of its own.

Two variables belong to one part when some constraint mentions both (its enforcement
literals included): parts share no variable and no constraint, capacity sums included.
The objective is a sum of per-variable terms, so the optimum of the whole model is the
union of its parts' optima, and its lower bound the sum of their bounds.  The lexicographic
tie-break of :func:`planner.solve.model.tiebreak_order` decomposes too: the greatest
optimum of a product of parts is the product of each part's greatest optimum over the
order restricted to it.  Each search and each optimality proof then only sees its own part
(CP-SAT proves many small bounds much faster than their sum).

:func:`split` walks the model once (connected components over variable indices) and
copies every part's constraints into a fresh model: with all the variables and their
indices for a few parts, remapping indices for many.  Small parts are
batched into one model, so a kernel of many tiny independent pieces costs a few searches,
not thousands.

The planner searches by parts (:func:`solve_parts`) below the size where it starts
from the heuristic and the LP (:data:`planner.solve.planner._EARLY_FALLBACK_EDGES`):
each part with one deterministic CP-SAT worker, ``workers`` parts at a time on threads.
On the 1,000-edge synthetic graph of ``bench/solve.py`` (two large parts, 7,739 and
2,649 variables) the two searches prove their optima in 1.1 s and 0.7 s side by side,
against 4.6 s for the whole model on two workers and then 4-6 s per round of the
lexicographic tie-break.  One worker's search is deterministic, so a part it proves needs
no tie-break to be canonical.  :func:`tie_break_parts` tie-breaks a whole-model optimum
part by part (:func:`planner.solve.model._tie_break`): one small proof per part instead
of one proof over everything; on 200 independent softmaxes that went from 5.6 s (not
finished in 11 s) to a few milliseconds per part.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from ortools.sat import cp_model_pb2
from ortools.sat.python import cp_model
from scipy import sparse
from scipy.sparse.csgraph import connected_components

from planner.errors import Diagnostic, PlannerError
from planner.solve.costs import Assignment, evaluate, total
from planner.solve.model import (
    BuiltModel,
    LiteralValues,
    Progress,
    SolveResult,
    _solver,
    decode,
    fallback_assignment,
    lex_greatest,
    objective_terms,
    tiebreak_order,
)
from planner.solve.proto import model_message

#: Components are batched into parts of at least this many variables (fewer searches).
BATCH_VARS = 2000
#: The tie-break batches components under ``TIE_SMALL_VARS`` variables into parts of
#: ``TIE_BATCH_VARS`` (one CP-SAT call costs ~1 ms whatever its size).
TIE_SMALL_VARS = 64
TIE_BATCH_VARS = 1000
#: Up to this many parts keep the whole model's variable indices (no renumbering).
FEW_PARTS = 8
#: Models with fewer variables are solved whole: splitting cannot pay for itself there.
MIN_SPLIT_VARS = 2 * BATCH_VARS

_LITERAL_KINDS = ("bool_and", "bool_or", "exactly_one", "at_most_one")


@dataclass(frozen=True, slots=True)
class Part:
    """One independent part: its own model, and where the whole model's variables are."""

    model: cp_model.CpModel
    index: dict[int, int]  # variable index in the whole model -> index in ``model``
    terms: tuple[tuple[int, int], ...]  # objective (part variable literal, coefficient)
    components: int = 1  # independent components batched into it

    def literal(self, lit: int) -> cp_model.IntVar:
        """The part's literal for the whole model's literal index ``lit`` (negated < 0)."""
        if lit >= 0:
            return self.model.GetBoolVarFromProtoIndex(self.index[lit])
        return self.model.GetBoolVarFromProtoIndex(self.index[-lit - 1]).Not()  # type: ignore[return-value]


def _var(lit: int) -> int:
    return lit if lit >= 0 else -lit - 1


def _map(index: dict[int, int], lits: Sequence[int]) -> list[int]:
    return [index[v] if v >= 0 else -index[-v - 1] - 1 for v in lits]


def _mentions(c: cp_model_pb2.ConstraintProto) -> list[int] | None:
    """The variable indices constraint ``c`` mentions; None for a kind not handled."""
    enforce = list(c.enforcement_literal)
    kind = c.WhichOneof("constraint")
    if kind is None:
        return enforce
    if kind in _LITERAL_KINDS:
        return enforce + list(getattr(c, kind).literals)
    if kind == "linear":
        return enforce + list(c.linear.vars)
    if kind == "lin_max":
        out = enforce + list(c.lin_max.target.vars)
        for e in c.lin_max.exprs:
            out += list(e.vars)
        return out
    return None


def split(model: cp_model.CpModel, terms: Sequence[tuple[cp_model.IntVar, int]],
          batch: int = BATCH_VARS, min_vars: int = MIN_SPLIT_VARS,
          small: int | None = None) -> list[Part] | None:
    """The independent parts of ``model`` with its objective ``terms`` (literal,
    coefficient) split among them, its solution hint too; None when it is one part (or
    has fewer than ``min_vars`` variables, or assumptions, or a constraint kind this
    module does not copy).  Components of fewer than ``small`` variables (default
    ``batch``) share parts, each filled until it has ``batch`` variables.  Up to
    :data:`FEW_PARTS` parts keep the whole model's variable indices (every part holds
    every variable, the others unconstrained and out of the objective, which presolve
    drops at once); more parts are renumbered."""
    small = batch if small is None else small
    proto = model.Proto()
    n = len(proto.variables)
    if n < min_vars or proto.assumptions or len(proto.search_strategy):
        return None
    message = model_message(model)
    if message is None:
        return None
    mentions: list[list[int]] = []
    heads: list[int] = []
    tails: list[int] = []
    for c in message.constraints:
        vs = _mentions(c)
        if vs is None:
            return None
        mentions.append(vs)
        if len(vs) > 1:
            head = _var(vs[0])
            for lit in vs[1:]:
                heads.append(head)
                tails.append(_var(lit))
    links = sparse.coo_matrix((np.ones(len(heads), dtype=bool), (heads, tails)),
                              shape=(n, n)).tocsr()
    count, labels = connected_components(links, directed=False)
    if count == 1:
        return None
    roots = labels.tolist()
    size: dict[int, int] = {}
    for r in roots:
        size[r] = size.get(r, 0) + 1
    group: dict[int, int] = {}  # component -> part number, in first-variable order
    filled: list[int] = []
    last_small = False  # the last part holds small components (more may join it)
    for r in roots:
        if r in group:
            continue
        if filled and filled[-1] < batch and size[r] < small and last_small:
            group[r] = len(filled) - 1
            filled[-1] += size[r]
        else:
            group[r] = len(filled)
            filled.append(size[r])
        last_small = size[r] < small
    if len(filled) == 1:
        return None
    models = [cp_model.CpModel() for _ in filled]
    index: list[dict[int, int]] = [{} for _ in filled]
    whole = len(filled) <= FEW_PARTS
    for i, r in enumerate(roots):
        p = group[r]
        index[p][i] = i if whole else len(index[p])
        if not whole:
            models[p].Proto().variables.add().copy_from(proto.variables[i])
    owned: list[list[int]] = [[] for _ in filled]
    for j, vs in enumerate(mentions):
        owned[group[roots[_var(vs[0])]] if vs else 0].append(j)  # a constant one: any part
    constraints = proto.constraints
    for p, m in enumerate(models):
        if whole:
            m.Proto().variables.extend(proto.variables)
            m.Proto().constraints.extend([constraints[j] for j in owned[p]])
            continue
        for j in owned[p]:
            nc = m.Proto().constraints.add()
            nc.copy_from(constraints[j])
            _remap(nc, index[p])
    hint = message.solution_hint
    for v, value in zip(hint.vars, hint.values, strict=True):
        p = group[roots[v]]
        models[p].Proto().solution_hint.vars.append(index[p][v])
        models[p].Proto().solution_hint.values.append(value)
    parts_terms: list[list[tuple[int, int]]] = [[] for _ in filled]
    for lit, coeff in terms:
        i = lit.Index()
        p = group[roots[_var(i)]]
        parts_terms[p].append((_map(index[p], [i])[0], coeff))
    components = [0] * len(filled)
    for r in group:
        components[group[r]] += 1
    return [Part(m, ix, tuple(t), k)
            for m, ix, t, k in zip(models, index, parts_terms, components, strict=True)]


def _remap(c: object, index: dict[int, int]) -> None:
    """Rewrite the variable indices of constraint ``c`` (a copy) into a part's."""
    enforce = c.enforcement_literal  # type: ignore[attr-defined]
    if len(enforce):
        new = _map(index, list(enforce))
        enforce.clear()
        enforce.extend(new)
    for kind in _LITERAL_KINDS:
        if getattr(c, "has_" + kind)():
            lits = getattr(c, kind).literals
            new = _map(index, list(lits))
            lits.clear()
            lits.extend(new)
            return
    if not c.has_linear() and not c.has_lin_max():  # type: ignore[attr-defined]
        return  # no kind (enforcement literals only): reading one would add it
    exprs = ([c.linear] if c.has_linear()  # type: ignore[attr-defined]
             else [c.lin_max.target, *c.lin_max.exprs])  # type: ignore[attr-defined]
    for e in exprs:
        new = _map(index, list(e.vars))
        e.vars.clear()
        e.vars.extend(new)


class _Joint(LiteralValues):
    """The parts' solutions as one: ``BooleanValue`` of a literal of the whole model."""

    def __init__(self, n: int) -> None:
        super().__init__([False] * n)

    def take(self, part: Part, solver: cp_model.CpSolver) -> None:
        solution = list(solver.ResponseProto().solution)
        for whole, own in part.index.items():
            self.values[whole] = bool(solution[own])

    def fill(self, bm: BuiltModel, a: Assignment, unsolved: set[int]) -> None:
        """Set the decision literals among the variables ``unsolved`` (of parts without
        a solution) to plan ``a``'s choices, placements, versions and Memory homes.
        Parts share no constraint, so ``a`` (legal as a whole) is legal on those parts,
        and the parts' solutions on theirs."""
        values = (
            ((lit, a.choices[e] is c) for (e, c), lit in bm.x.items()),
            ((lit, a.placement[vi] == q) for (vi, q), lit in bm.y.items()),
            ((lit, a.versions[vi] == k) for (vi, k), lit in bm.u.items()),
            # a heuristic plan leaves the Memory fields empty: 1 version, the first home
            ((lit, (a.memory_versions[mi] if a.memory_versions else 1) == k)
             for (mi, k), lit in bm.mv.items()),
            ((lit, (a.memory_homes[mi] if a.memory_homes else 0) == h)
             for (mi, h), lit in bm.mh.items()),
        )
        for group in values:
            for lit, value in group:
                i = lit.Index()
                if _var(i) in unsolved:
                    self.values[_var(i)] = value if i >= 0 else not value


class _PartView:
    """A part's literals read from the whole model's solution (``BooleanValue``)."""

    def __init__(self, part: Part, joint: _Joint) -> None:
        self.back = {own: whole for whole, own in part.index.items()}
        self.joint = joint

    def BooleanValue(self, lit: cp_model.IntVar) -> bool:  # CpSolver's name for it
        i = lit.Index()
        if i >= 0:
            return self.joint.values[self.back[i]]
        return not self.joint.values[self.back[-i - 1]]


def tie_break_parts(bm: BuiltModel, terms: list[tuple[cp_model.IntVar, int]],
                    first: cp_model.CpSolver, workers: int, deadline: float,
                    batch: int = TIE_BATCH_VARS, min_vars: int = MIN_SPLIT_VARS
                    ) -> tuple[Assignment, bool] | None:
    """:func:`planner.solve.model._tie_break` part by part: the whole model's proven
    optimum ``first`` restricted to each part is that part's optimum (the objective is a
    sum over parts), so each part's greatest optimum over its share of the order is
    searched, and proved, on the part alone; None when the model is one part.

    The search for the optimum stays on the whole model (one time budget, no share to
    guess per part); the tie-break's proofs, which otherwise re-prove the whole optimum
    once more, become one small proof per part (components are not batched here: one
    proof over two independent components is much harder than the two proofs), except
    tiny ones (under :data:`TIE_SMALL_VARS` variables), shared ``batch`` variables to a
    part: a softmax with 1,073 chained exps has a thousand components of about 13, each
    already its greatest optimum (a thousand 1 ms proofs against eight).  A batch that
    one proof does not settle (some component moves up) is redone component by
    component, so ties cost what they did unbatched."""
    parts = split(bm.model, terms, batch, min_vars, small=TIE_SMALL_VARS)
    if parts is None:
        return None
    joint = _Joint(0)
    joint.values = [bool(x) for x in first.ResponseProto().solution]
    whole_order = tiebreak_order(bm)
    unsettled: set[int] = set()  # whole-model variables of batches one proof did not settle
    proved = _greatest_parts(parts, whole_order, joint, workers, deadline, unsettled)
    if unsettled:
        singles = [part for part in split(bm.model, terms, batch=1, min_vars=0) or []
                   if next(iter(part.index)) in unsettled]
        proved = _greatest_parts(singles, whole_order, joint, workers, deadline) and proved
    return decode(bm, joint), proved


def _greatest_parts(parts: list[Part], whole_order: list[cp_model.IntVar], joint: _Joint,
                    workers: int, deadline: float, unsettled: set[int] | None = None
                    ) -> bool:
    """Each part's greatest optimum from ``joint``'s values, written back into it; with
    ``unsettled``, a batch of components gets one proof, and its variables go there when
    that does not settle it (``joint`` keeps them).  Whether every part was proved."""
    order = _orders(parts, whole_order)
    proved = True
    for part in parts:
        if not order[id(part)]:
            continue  # nothing the plan reads: any of its optima will do
        own = [(_literal(part, i), c) for i, c in part.terms]
        view = _PartView(part, joint)
        value = sum(c for lit, c in own if view.BooleanValue(lit))
        batched = unsettled is not None and part.components > 1
        winner, ok = lex_greatest(part.model, own, order[id(part)], value, view,  # type: ignore[arg-type]
                                  workers, deadline, max_rounds=1 if batched else None)
        if batched and not ok and time.perf_counter() < deadline:
            unsettled.update(part.index)  # type: ignore[union-attr]
            continue
        if winner is not view:
            joint.take(part, winner)
        proved = proved and ok
    return proved


def solve_parts(bm: BuiltModel, *, time_limit_s: float = 10.0, workers: int = 2,
                progress: Progress | None = None, deadline: float | None = None,
                batch: int = BATCH_VARS, min_vars: int = MIN_SPLIT_VARS
                ) -> SolveResult | None:
    """:func:`planner.solve.model.solve` part by part (:func:`split`); None when the
    model is one part.

    Each part is searched by one CP-SAT worker (``linearization_level`` 2, seed 0:
    :func:`planner.solve.model._solver`), ``workers`` parts at a time on threads
    (CP-SAT releases the GIL), largest first.  One worker's search is deterministic, so
    a part proved optimal in that first search has one answer whatever the worker
    count, the thread timing or the time limit: the plan is canonical without the
    lexicographic tie-break, whose proofs cost several times the search (3 rounds of
    4-6 s against a 1.1 s search on the 7,739-variable part of the 1,000-edge synthetic
    graph of ``bench/solve.py``).  The canonical plan is this search's, not
    :func:`~planner.solve.model.tiebreak_order`'s greatest optimum: both minimize the
    same objective (cost, then preference) and differ only among exact ties.

    A first pass gives each part the time left in proportion to its variables, times
    the threads (two parts on two threads each get it all), at least :data:`MIN_PART_S`
    where that leaves every part its turn; parts it leaves unproved are searched again
    from the start with what is left when that is more than they had (the same
    deterministic search, only longer: a part it proves is canonical too), and keep the
    better of their two solutions and bounds.  The result is optimal only when every
    part is, and its bound is the sum of the parts' bounds.  A part without a
    solution takes the heuristic plan's decisions (:meth:`_Joint.fill`), the other
    parts keep theirs; an
    infeasible part makes the model infeasible and stops the searches still running
    (:class:`_Running`).  ``progress`` is called once, with the final objective and
    bound.
    """
    start = time.perf_counter()
    end = start + time_limit_s if deadline is None else min(start + time_limit_s, deadline)
    terms, weight, scale = objective_terms(bm)
    parts = split(bm.model, terms, batch, min_vars)
    if parts is None:
        return None
    for part in parts:
        part.model.Minimize(sum(c * _literal(part, i) for i, c in part.terms))
    offset = total(bm.problem.constant)
    threads = max(1, min(workers, len(parts)))
    all_vars = sum(len(p.index) for p in parts)
    largest_first = sorted(range(len(parts)), key=lambda i: -len(parts[i].index))
    found = [_PartSearch() for _ in parts]
    running = _Running()

    def search(i: int, share: float) -> None:
        left = end - time.perf_counter()
        if left <= 0.01:
            return
        solver = _solver(min(left, share), 1)
        # probing in presolve costs more than it saves on these parts: the 1,000-edge
        # synthetic graph's two large parts proved optimal in 1.04 and 0.73 s without
        # it, 1.23 and 0.81 s with it (one worker each, AMD Zen 4 VM, medians of 3)
        solver.parameters.cp_model_probing_level = 0
        if not running.enter(solver):
            return  # a part was proved infeasible: so is the whole model
        try:
            status = solver.Solve(parts[i].model)
        finally:
            running.leave(solver)
        if status == cp_model.MODEL_INVALID:
            raise PlannerError(Diagnostic("internal error: CP-SAT rejected a part of the "
                                          "planning model: "
                                          + parts[i].model.Validate()[:500]), kind="internal")
        if status == cp_model.INFEASIBLE:
            running.stop()
        found[i].take(status, solver)

    first = end - start
    floor = min(MIN_PART_S, first * threads / len(parts))  # only where every part fits
    shares = {i: max(floor, first * min(1.0, threads * len(parts[i].index) / all_vars))
              for i in largest_first}
    _run(threads, [(search, (i, shares[i])) for i in largest_first])
    if any(f.status == cp_model.INFEASIBLE for f in found):
        return SolveResult("infeasible", None, 0, 0, time.perf_counter() - start)
    # the same search again with all the time left (no hint from the first: it would
    # make the answer depend on where the clock stopped that one)
    left = end - time.perf_counter()
    _run(threads, [(search, (i, math.inf)) for i in largest_first
                   if found[i].status != cp_model.OPTIMAL and left > shares[i]])
    if any(f.status == cp_model.INFEASIBLE for f in found):
        return SolveResult("infeasible", None, 0, 0, time.perf_counter() - start)
    bound = sum(f.bound for f in found)
    low = offset + bound // weight * scale
    joint = _Joint(len(bm.model.Proto().variables))
    for part, f in zip(parts, found, strict=True):
        if f.solver is not None:
            joint.take(part, f.solver)
    if any(f.solver is None for f in found):
        until = time.perf_counter() + max(5.0, time_limit_s)
        fallback = fallback_assignment(bm.problem, bm.restrictions,
                                       deadline=until if deadline is None
                                       else min(until, deadline))
        if fallback is None:
            return SolveResult("unknown", None, 0, 0, time.perf_counter() - start)
        unsolved = {i for part, f in zip(parts, found, strict=True) if f.solver is None
                    for i in part.index}
        joint.fill(bm, fallback, unsolved)
        plan = fallback
        ev = evaluate(bm.problem, fallback, bm.restrictions)
        # every edge needs a chosen literal (a heuristic choice the model lacks has none)
        decodable = all(any(joint.BooleanValue(lit) for lit in lits)
                        for lits in _by_edge(bm).values())
        if decodable:
            mixed = decode(bm, joint)
            mixed_ev = evaluate(bm.problem, mixed, bm.restrictions)
            if mixed_ev.feasible and mixed_ev.objective < ev.objective:
                plan, ev = mixed, mixed_ev
        return SolveResult("feasible", plan, ev.objective, min(low, ev.objective),
                           time.perf_counter() - start)
    optimal = all(f.status == cp_model.OPTIMAL for f in found)
    best = offset + sum(f.value for f in found) // weight * scale
    if progress is not None:
        progress(best, low, time.perf_counter() - start)
    return SolveResult("optimal" if optimal else "feasible", decode(bm, joint), best, low,
                       time.perf_counter() - start, optimal)


#: The least time a part's first search gets, however small its share: a part's model
#: holds every variable of the whole model on the few-parts path, and presolve takes
#: ~0.07 s to drop 10,000 unused ones, whatever the part's own size.
MIN_PART_S = 0.5


class _PartSearch:
    """The best of a part's searches: its solution, objective, bound and status (optimal
    when one search proved it, infeasible when one did)."""

    def __init__(self) -> None:
        self.status = cp_model.UNKNOWN
        self.solver: cp_model.CpSolver | None = None
        self.value = 0
        self.bound = 0

    def take(self, status: int, solver: cp_model.CpSolver) -> None:
        b = solver.BestObjectiveBound()
        if math.isfinite(b):
            self.bound = max(self.bound, max(0, round(b)))
        if status == cp_model.INFEASIBLE:
            self.status = status
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return
        value = round(solver.ObjectiveValue())
        if self.solver is None or status == cp_model.OPTIMAL or value < self.value:
            self.solver, self.value = solver, value
        if status == cp_model.OPTIMAL:
            self.status = status
        elif self.status == cp_model.UNKNOWN:
            self.status = cp_model.FEASIBLE


def _by_edge(bm: BuiltModel) -> dict[int, list[cp_model.IntVar]]:
    """Each edge's choice literals."""
    out: dict[int, list[cp_model.IntVar]] = {}
    for (e, _), lit in bm.x.items():
        out.setdefault(e, []).append(lit)
    return out


class _Running:
    """The part searches in progress; :meth:`stop` ends them and refuses new ones (an
    infeasible part makes the whole model infeasible: the other parts' searches, up to
    the whole time limit, would only delay that answer)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._solvers: set[cp_model.CpSolver] = set()
        self.stopped = False

    def enter(self, solver: cp_model.CpSolver) -> bool:
        with self._lock:
            if not self.stopped:
                self._solvers.add(solver)
            return not self.stopped

    def leave(self, solver: cp_model.CpSolver) -> None:
        with self._lock:
            self._solvers.discard(solver)

    def stop(self) -> None:
        """Refuse new searches and stop the running ones; returns once they returned
        (a solver between :meth:`enter` and the start of its search ignores a stop, so
        it is told again until it leaves; the caller's own search is over)."""
        with self._lock:
            self.stopped = True
        while True:
            with self._lock:
                solvers = list(self._solvers)
            if not solvers:
                return
            for solver in solvers:
                solver.stop_search()
            time.sleep(0.005)


def _run(threads: int, calls: list[tuple[Callable[..., None], tuple[object, ...]]]) -> None:
    """Run ``calls`` in order on ``threads`` threads (inline on one, stopping at the
    first error); the first error raised is raised here, once the pool's calls have
    returned (on threads, the ones after it run too)."""
    if threads <= 1 or len(calls) <= 1:
        for f, args in calls:
            f(*args)
        return
    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(f, *args) for f, args in calls]
    for future in futures:
        future.result()


def _literal(part: Part, lit: int) -> cp_model.IntVar:
    """The part's literal of part-variable reference ``lit`` (negated when < 0)."""
    if lit >= 0:
        return part.model.GetBoolVarFromProtoIndex(lit)
    return part.model.GetBoolVarFromProtoIndex(-lit - 1).Not()  # type: ignore[return-value]


def _orders(parts: list[Part], order: list[cp_model.IntVar]
            ) -> dict[int, list[cp_model.IntVar]]:
    """The tie-break ``order`` of the whole model restricted to each part, as its own
    literals (by ``id`` of the part)."""
    where = {i: part for part in parts for i in part.index}
    out: dict[int, list[cp_model.IntVar]] = {id(part): [] for part in parts}
    for lit in order:
        i = lit.Index()
        part = where[i if i >= 0 else -i - 1]
        out[id(part)].append(part.literal(i))
    return out
