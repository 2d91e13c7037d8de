"""Large-neighbourhood improvement of a complete plan: windows of a CP-SAT model's
variables searched exactly, one at a time, with every other variable fixed.

A model too large to search whole in the time left (from 5,000 edges, see
:mod:`planner.solve.planner`) is first searched where the LP relaxation disagrees with
the plan (:func:`lp_guided`, RINS), then improved window by window from a complete
assignment (the heuristic's plan with its derived literals filled in,
:func:`planner.solve.lp.complete_hint`).  The variables are ordered to keep those that
share constraints close (reverse Cuthill-McKee, :func:`planner.solve.lp.rcm_positions`:
a kernel's program order, about) and cut into windows of about :data:`WINDOW_VARS`.  A
window's model holds its variables, every constraint that mentions one of them, and the
other variables those constraints mention fixed at their current values; its objective
is the search's (:func:`planner.solve.model.objective_terms`) over its own variables, and
the current assignment is its hint.  Its optimum (or the best CP-SAT finds in
:data:`WINDOW_DETERMINISTIC_S` of deterministic time) replaces the window's values when
it costs less.

Each constraint holds before and after every window's search (the search satisfies the
constraints it is given, the others do not mention its variables), so the assignment
stays a plan of the model.  Windows that share no constraint are independent: they are
searched side by side (one CP-SAT worker each, ``workers`` threads; CP-SAT releases the
GIL), in classes of a greedy colouring of the windows' adjacency, the classes holding
the largest expected gains first (the assignment's cost in a window less the LP
relaxation's, where there is one).  A second pass shifts the cuts by half a window, so
that variables near a cut move too; then the windows double (up to :data:`GROWTH`
times), and so does their deterministic time.  With deterministic time limits, what a
pass does depends only on its input, not on the machine's speed; only where the
deadline stops the passes does.

On the 10,000-edge synthetic graph of ``bench/solve.py`` (97,185 variables), one pass
of 65 windows of 1,500 variables lowered the LP heuristic's plan from 573,290 to 545,180
ns (each window's search took 0.07 s on average, 64 of 65 proved optimal), two passes
(5.1 s on two threads) to 538,136, windows of 3,000 then to 528,608 (12.7 s in all);
the LP bound is 517,019 in windows, 521,711 whole (AMD EPYC VM).  With the lighter
settings of each window's search (no symmetry detection, one presolve round, the LP's
rows up front: :func:`_search`) the same start reaches 543,792 after 2.5 s of windows
(553,130 before) and 531,017 after 8 s (533,024).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
from ortools.sat import cp_model_pb2
from ortools.sat.python import cp_model
from scipy import sparse
from scipy.sparse.csgraph import connected_components

from planner.errors import Diagnostic, PlannerError
from planner.solve.lp import rcm_positions
from planner.solve.model import BuiltModel, objective_terms
from planner.solve.proto import model_message

#: Variables per window: on the 10,000-edge synthetic graph, 1,500-variable windows
#: proved their optima in 0.07 s on average (545k ns after one pass), 3,000-variable
#: ones in 0.33 s (538k ns, but 2.4 times the search time), 12,000-variable ones found
#: almost nothing in 1 s each (AMD EPYC VM, one worker per window).
WINDOW_VARS = 1500
#: CP-SAT's deterministic time limit per window (about seconds on that VM).
WINDOW_DETERMINISTIC_S = 0.5
#: Windows grow up to this many times :data:`WINDOW_VARS` (doubling each time): on the
#: 10,000-edge graph the 1,500-variable passes stopped at 538,136 ns (4.2 s), the
#: 3,000-variable ones went on to 528,608 (8.5 s more), 6,000 to 528,223 (19 s more),
#: 12,000 found nothing more (the whole LP's bound is 521,711).
GROWTH = 4
#: Free variables per search of the LP-guided neighbourhood (:func:`lp_guided`): the
#: components of the variables whose LP value is not the plan's are packed into
#: searches of about this many (on the 10,000-edge graph: 31,356 free variables in 317
#: components, 12 searches of 2,000-3,000 taking 0.04-0.08 s each).
GUIDED_VARS = 3000
#: The widened LP-guided search (:func:`lp_guided`'s ``reach``) also frees every variable
#: that shares a constraint of at most this many variables with a disagreeing one: on the
#: 10,000-edge graph, after the plain one (19.13e9 of the search objective in 0.43 s),
#: with 16 it reached 18.79e9 in 0.94 s (8: 18.83e9 in 0.82 s, 32: 18.78e9 in 1.12 s),
#: where 1 s of windows reached 18.94e9 and 2 s 18.85e9 (capacity sums, which mention
#: hundreds of variables, would join everything into one search).
GUIDED_REACH = 16
_KINDS = ("bool_and", "bool_or", "exactly_one", "at_most_one")


@dataclass(frozen=True, slots=True)
class Improvement:
    """What :func:`improve` did: the improved assignment of the model's variables, the
    windows searched and improved, and the passes completed."""

    values: np.ndarray
    searched: int
    improved: int
    passes: int


@dataclass(frozen=True, slots=True)
class Structure:
    """What windows are cut from, computed once per model (:func:`prepare`): every
    constraint as text, the variables' domains, objective coefficients and order."""

    constraints: tuple[_Constraint, ...]
    domains: tuple[tuple[int, ...], ...]
    coef: np.ndarray  # the search objective's coefficient of each variable
    rows: np.ndarray  # constraint of each (constraint, variable) mention
    var: np.ndarray  # variable of each mention
    pos: np.ndarray  # each variable's position in the bandwidth-reducing order


# One constraint: its literal references (negative: negated) in text order, and its text
# with ``{}`` where each goes (a plain tuple: 139,000 dataclasses took 0.3 s to make).
_Constraint: TypeAlias = "tuple[tuple[int, ...], str]"


def hinted_values(bm: BuiltModel) -> np.ndarray | None:
    """The model's hint as a value per variable; None unless it names every variable
    (a complete assignment, :func:`planner.solve.lp.complete_hint`)."""
    hint = bm.model.Proto().solution_hint
    n = len(bm.model.Proto().variables)
    if len(hint.vars) != n:
        return None
    values = np.zeros(n, dtype=np.int64)
    values[np.asarray(list(hint.vars), dtype=np.int64)] = list(hint.values)
    return values


def prepare(bm: BuiltModel, message: cp_model_pb2.CpModelProto | None = None
            ) -> Structure | None:
    """The structure :func:`improve` cuts ``bm``'s windows from (~0.4-0.9 s for the 97,185
    variables and 139,240 constraints of 10,000 edges), read from ``message`` (the
    model's proto, read here when not given); None where the model has a constraint
    kind this module does not copy."""
    message = model_message(bm.model) if message is None else message
    if message is None:
        return None
    constraints = _constraints(message)
    if constraints is None:
        return None
    n = len(message.variables)
    terms, _, _ = objective_terms(bm)
    coef = np.zeros(n, dtype=np.int64)
    for lit, c in terms:
        i = lit.Index()
        coef[i if i >= 0 else -i - 1] += c if i >= 0 else -c  # c·(1 - x): -c·x, plus c
    rows = np.repeat(np.arange(len(constraints)),
                     [len(refs) for refs, _ in constraints]).astype(np.int64)
    refs = np.fromiter((r for c, _ in constraints for r in c), np.int64, len(rows))
    var = np.where(refs >= 0, refs, -refs - 1)
    return Structure(tuple(constraints), tuple(tuple(v.domain) for v in message.variables),
                     coef, rows, var, rcm_positions(rows, var, len(constraints), n))


def improve(structure: Structure, values: np.ndarray, deadline: float, workers: int = 2,
            lp_values: np.ndarray | None = None, window_vars: int = WINDOW_VARS
            ) -> Improvement:
    """Improve the complete assignment ``values`` of the model's variables, first where
    the LP relaxation's ``lp_values`` disagree with it (:func:`lp_guided`, when given:
    plain, then widened by :data:`GUIDED_REACH`), then window by window (see the module
    docstring) until ``deadline`` (a ``time.perf_counter()`` instant) passes or the
    largest windows (:data:`GROWTH` times ``window_vars``) are done: two passes per
    window size (cuts shifted by half a window in the second), the size doubled after
    them (its deterministic time too)."""
    out = values.copy()
    searched = improved = passes = 0
    if lp_values is not None:
        for reach in (0, GUIDED_REACH):
            s, i = lp_guided(structure, out, lp_values, deadline, workers, reach=reach)
            searched += s
            improved += i
    size, det = window_vars, WINDOW_DETERMINISTIC_S
    while size <= GROWTH * window_vars and time.perf_counter() < deadline:
        for shift in (0.0, 0.5):
            if time.perf_counter() >= deadline:
                break
            window = _cut(structure.pos, len(values), size, shift)
            s, i, done = _pass(out, window, structure, lp_values, deadline, workers, det)
            searched += s
            improved += i
            passes += done
            if not i:
                break  # nothing moved: the shifted windows start from the same values
        size, det = 2 * size, 2 * det
    return Improvement(out, searched, improved, passes)


def lp_guided(structure: Structure, values: np.ndarray, lp_values: np.ndarray,
              deadline: float, workers: int = 2, batch_vars: int = GUIDED_VARS,
              reach: int = 0) -> tuple[int, int]:
    """Search, in place of ``values``, every variable the LP relaxation does not agree
    with (RINS: its LP value is fractional or another 0-1 value than the plan's; a NaN,
    a window a partial relaxation did not solve, is left to the windows), every other
    variable fixed; (searched, improved).  ``reach``: also free every variable that
    shares a constraint of at most ``reach`` variables with one of those.

    Fixed variables cut the model apart: free variables that share a constraint form a
    component, and components share no constraint, so each is an independent search.
    They are packed, largest first, into searches of about ``batch_vars`` (one model
    each), run side by side on ``workers`` threads, and each search's values replace
    its own variables only: no two searches read or write a free variable of the other,
    so the result does not depend on the thread timing.  On the 10,000-edge graph of
    ``bench/solve.py`` this lowered the LP heuristic's plan by 8.2 % of its search
    objective in 0.5-0.8 s, what the windows below took 3 s on two threads to reach."""
    n = len(values)
    known = ~np.isnan(lp_values)
    lp = np.nan_to_num(lp_values)
    near = np.round(lp)
    free = known & ~((np.abs(lp - near) < 1e-6) & (near == values))
    if not free.any():
        return 0, 0
    rows, var = structure.rows, structure.var
    count = len(structure.constraints)
    if reach:
        small = np.bincount(rows, minlength=count)[rows] <= reach  # per mention
        touched = np.zeros(count, dtype=bool)
        touched[rows[free[var] & small]] = True
        free[var[touched[rows] & small]] = True
        free &= known
    batches = _packed(_components(free, rows, var, count), batch_vars)

    def search(batch: np.ndarray) -> np.ndarray | bool | None:
        mask = np.zeros(n, dtype=bool)
        mask[batch] = True
        return _search(values, batch, np.unique(rows[mask[var]]), structure.constraints,
                       structure.domains, structure.coef, deadline,
                       2 * WINDOW_DETERMINISTIC_S)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        found = list(pool.map(search, batches))
    return _take(values, batches, found)


def _components(free: np.ndarray, rows: np.ndarray, var: np.ndarray, count: int
                ) -> list[np.ndarray]:
    """The ``free`` variables in groups linked through the constraints (``rows``,
    ``var``: each mention) that mention them, largest first (ties in label order)."""
    n = len(free)
    mention = free[var]
    link = sparse.csr_matrix(
        (np.ones(int(mention.sum())), (var[mention], rows[mention] + n)),
        shape=(n + count, n + count))
    _, label = connected_components(link, directed=False)
    index = np.flatnonzero(free)
    index = index[np.argsort(label[index], kind="stable")]
    components = np.split(index, np.flatnonzero(np.diff(label[index])) + 1)
    components.sort(key=len, reverse=True)  # stable
    return components


def _packed(components: list[np.ndarray], batch_vars: int) -> list[np.ndarray]:
    """``components`` packed in order into sorted batches of about ``batch_vars``."""
    batches: list[np.ndarray] = []
    current: list[np.ndarray] = []
    size = 0
    for component in components:
        if current and size + len(component) > batch_vars:
            batches.append(np.sort(np.concatenate(current)))
            current, size = [], 0
        current.append(component)
        size += len(component)
    if current:
        batches.append(np.sort(np.concatenate(current)))
    return batches


def _cut(pos: np.ndarray, n: int, window_vars: int, shift: float) -> np.ndarray:
    """Each variable's window: consecutive runs of ``window_vars`` in position order,
    the first ``shift`` of a window shorter."""
    offset = round(shift * window_vars)
    return (pos + (window_vars - offset) % window_vars) // window_vars


def _pass(values: np.ndarray, window: np.ndarray, structure: Structure,
          lp_values: np.ndarray | None, deadline: float, workers: int, det: float
          ) -> tuple[int, int, bool]:
    """One pass over the windows; (searched, improved, completed)."""
    rows, var, coef = structure.rows, structure.var, structure.coef
    constraints, domains = structure.constraints, structure.domains
    k = int(window.max(initial=-1)) + 1
    # the (constraint, window) pairs: which windows each constraint mentions
    pairs = np.unique(rows * k + window[var])
    p_row, p_win = pairs // k, pairs % k
    order = np.argsort(p_win, kind="stable")
    starts = np.searchsorted(p_win[order], np.arange(k + 1))
    members = [p_row[order[starts[w]:starts[w + 1]]] for w in range(k)]
    neighbours: list[set[int]] = [set() for _ in range(k)]
    multi = np.flatnonzero(np.diff(p_row) == 0)  # a constraint's consecutive pairs
    for a, b in zip(p_win[multi].tolist(), p_win[multi + 1].tolist(), strict=True):
        neighbours[a].add(b)
        neighbours[b].add(a)
    # a constraint mentioning three or more windows links them all pairwise (``pairs``
    # is sorted, so each constraint's windows are one run of it)
    counts = np.bincount(p_row, minlength=len(constraints))
    wide = np.flatnonzero(counts > 2)
    first = np.searchsorted(p_row, wide)
    for r, start in zip(wide.tolist(), first.tolist(), strict=True):
        ws = p_win[start:start + counts[r]].tolist()
        for a in ws:
            neighbours[a].update(w for w in ws if w != a)
    cost = window_gains(values, window, coef, lp_values, k)
    by_gain = sorted(range(k), key=lambda w: (-cost[w], w))
    colour = [-1] * k
    for w in by_gain:
        taken = {colour[u] for u in neighbours[w]}
        colour[w] = next(c for c in range(k) if c not in taken)
    classes: dict[int, list[int]] = {}
    for w in by_gain:  # each class in gain order; classes by their best window
        classes.setdefault(colour[w], []).append(w)
    free = [np.flatnonzero(window == w) for w in range(k)]
    searched = improved = 0
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for members_of_class in classes.values():
            if time.perf_counter() >= deadline:
                return searched, improved, False
            results = list(pool.map(
                lambda w: _search(values, free[w], members[w], constraints, domains, coef,
                                  deadline, det), members_of_class))
            s, i = _take(values, [free[w] for w in members_of_class], results)
            searched += s
            improved += i
    return searched, improved, True


def _take(values: np.ndarray, frees: Sequence[np.ndarray],
          solutions: Sequence[np.ndarray | bool | None]) -> tuple[int, int]:
    """Write each search's better values (:func:`_search`) over its free variables;
    (searched: not stopped by the deadline, improved)."""
    searched = improved = 0
    for free, solution in zip(frees, solutions, strict=True):
        searched += solution is not False
        if solution is not None and solution is not False:
            values[free] = solution
            improved += 1
    return searched, improved


def window_gains(values: np.ndarray, window: np.ndarray, coef: np.ndarray,
                 lp_values: np.ndarray | None, k: int) -> np.ndarray:
    """Each of the ``k`` windows' objective share under ``values`` (``coef``: each
    variable's objective coefficient, ``window``: its window), less its share under the
    LP's ``lp_values`` where given: what the window may gain.  An LP value that is NaN (a
    window a partial relaxation did not solve) counts 0."""
    cost = np.bincount(window, weights=coef * values, minlength=k)
    if lp_values is None:
        return cost
    return cost - np.bincount(window, weights=coef * np.nan_to_num(lp_values), minlength=k)


def _search(values: np.ndarray, free: np.ndarray, members: np.ndarray,
            constraints: Sequence[_Constraint], domains: Sequence[tuple[int, ...]],
            coef: np.ndarray, deadline: float, det: float) -> np.ndarray | bool | None:
    """The window's better values (None: none better; False: no time left)."""
    left = deadline - time.perf_counter()
    if left <= 0.01:
        return False
    local = {int(v): i for i, v in enumerate(free.tolist())}
    lines = [f"variables {{ domain: [{', '.join(map(str, domains[v]))}] }}"
             for v in free.tolist()]
    fixed: list[int] = []

    def ref(r: int) -> str:
        v = r if r >= 0 else -r - 1
        i = local.get(v)
        if i is None:
            i = local[v] = len(local)
            fixed.append(v)
        return str(i if r >= 0 else -i - 1)

    body = [template.format(*map(ref, refs))
            for refs, template in map(constraints.__getitem__, members.tolist())]
    lines += [f"variables {{ domain: [{values[v]}, {values[v]}] }}" for v in fixed]
    lines += body
    own = [(local[v], int(coef[v])) for v in free.tolist() if coef[v]]
    if own:
        lines.append(f"objective {{ vars: [{', '.join(str(i) for i, _ in own)}] "
                     f"coeffs: [{', '.join(str(c) for _, c in own)}] }}")
    lines.append(f"solution_hint {{ vars: [{', '.join(map(str, range(len(free))))}] "
                 f"values: [{', '.join(map(str, values[free].tolist()))}] }}")
    model = cp_model.CpModel()
    if not model.Proto().parse_text_format("\n".join(lines)):  # a partial model: a bug
        raise PlannerError(Diagnostic("internal error: a window of the planning model did "
                                      "not parse as a CP-SAT model (a planner bug; please "
                                      "report it with the kernel)"), kind="internal")
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.num_workers = 1
    params.random_seed = 0
    params.max_deterministic_time = det
    params.max_time_in_seconds = max(0.01, left)
    params.linearization_level = 2
    params.cp_model_probing_level = 0
    # a window is small and searched from a complete hint: symmetry detection, presolve
    # rounds past the first and lazily added LP rows cost it more than they save (the
    # 10,000-edge graph from the LP heuristic's 573,290 ns: 543,792 after 2.5 s of
    # windows against 553,130, 531,017 after 8 s against 533,024; AMD EPYC VM)
    params.symmetry_level = 0
    params.max_presolve_iterations = 1
    params.add_lp_constraints_lazily = False
    status = solver.Solve(model)
    if status == cp_model.MODEL_INVALID:
        raise PlannerError(Diagnostic("internal error: CP-SAT rejected a window of the "
                                      "planning model: " + model.Validate()[:500]),
                           kind="internal")
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    current = sum(c * int(values[free[i]]) for i, c in own)
    if round(solver.ObjectiveValue()) >= current:
        return None
    solution = solver.ResponseProto().solution
    return np.asarray([solution[i] for i in range(len(free))], dtype=np.int64)


def _constraints(message: cp_model_pb2.CpModelProto) -> list[_Constraint] | None:
    """Every constraint as a template; None where one is of a kind not handled."""
    out = []
    shapes: dict[tuple[str, int, int], str] = {}  # most constraints share a few shapes
    for c in message.constraints:
        enforce = list(c.enforcement_literal)
        kind = c.WhichOneof("constraint")
        if kind in _KINDS:
            lits = list(getattr(c, kind).literals)
            shape = (kind, len(enforce), len(lits))
            template = shapes.get(shape)
            if template is None:
                template = shapes[shape] = ("constraints {{ " + _head(len(enforce)) + kind
                                            + " {{ literals: [" + ", ".join(["{}"] * len(lits))
                                            + "] }} }}")
            out.append((tuple(enforce + lits), template))
            continue
        head = _head(len(enforce))
        if kind == "linear":
            lin = c.linear
            out.append((
                tuple(enforce + list(lin.vars)),
                "constraints {{ " + head + "linear {{ vars: [" + ", ".join(["{}"] * len(lin.vars))
                + "] coeffs: [" + ", ".join(map(str, lin.coeffs)) + "] domain: ["
                + ", ".join(map(str, lin.domain)) + "] }} }}"))
        elif kind == "lin_max":
            lm = c.lin_max
            exprs = [lm.target, *lm.exprs]
            refs = tuple(enforce + [v for e in exprs for v in e.vars])
            parts = [_expression(e) for e in exprs]
            out.append((refs, "constraints {{ " + head + "lin_max {{ target "
                                   + parts[0] + "".join(" exprs " + p for p in parts[1:])
                                   + " }} }}"))
        else:
            return None
    return out


def _head(enforced: int) -> str:
    return f"enforcement_literal: [{', '.join(['{}'] * enforced)}] " if enforced else ""


def _expression(e: cp_model_pb2.LinearExpressionProto) -> str:
    return ("{{ vars: [" + ", ".join(["{}"] * len(e.vars)) + "] coeffs: ["
            + ", ".join(map(str, e.coeffs)) + f"] offset: {e.offset} }}}}")
