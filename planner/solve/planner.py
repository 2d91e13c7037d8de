"""``plan_kernel``: from a kernel and a target catalog to a MaterializationPlan (S3).

The steps are fixed and each is a library call of its own:

1. :func:`planner.solve.costs.build_problem` prices every choice of every live edge
   (unbound symbols are an error naming them);
2. the z3 proofs of ``planner.prove.proofs`` run when that module is present;
3. a baseline, if asked for, becomes per-edge restrictions
   (:mod:`planner.solve.baselines`);
4. :func:`planner.solve.model.build_model` / :func:`~planner.solve.model.solve`
   minimize estimated time with CP-SAT (a fixed preference inside the objective, then
   a proved lexicographic tie-break among equal optima, so equal inputs give the same
   plan whatever the worker count or thread timing); when the time limit
   passes without any solution, the greedy heuristic of
   :mod:`planner.solve.baselines` is returned as a feasible plan (gap against the
   solver's bound, or the capacity-free relaxation of :mod:`planner.solve.bounds`
   where that is higher).  Problems of :data:`_EARLY_FALLBACK_EDGES` edges or more,
   where the time left allows, first solve the model's LP relaxation
   (:mod:`planner.solve.lp`): its optimum is the bound and the heuristic starts from
   its rounded choices; the heuristic's plan is then improved window by window
   (:mod:`planner.solve.neighbourhoods`: CP-SAT on ~1,500 variables at a time, the rest
   fixed), and only where time is still left is the whole model searched from it;
5. the decisions are re-evaluated by the pure-Python reference
   (:func:`planner.solve.costs.evaluate`), which attributes every cost term to an
   edge; an infeasible model gets an explanation (:mod:`planner.solve.explain`).

The plan's ``content_hash`` covers the kernel's printed structure, the catalog's
content hash, the bindings, the policy and the baseline: equal hashes mean the same
question, and therefore (when solved to optimality) the same plan.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from enum import Enum
from typing import TypeVar

from planner.catalog import Target
from planner.errors import Diagnostic, PlannerError
from planner.ir.core import Kernel
from planner.ir.printer import PrintOptions, print_kernel
from planner.plan.decisions import (
    Baseline,
    EdgePlan,
    MaterializationPlan,
    MemoryPlan,
    PlannedBuffer,
    Policy,
    ProofSummary,
    ResourcePeak,
    Status,
)
from planner.prove import prove_kernel
from planner.solve.baselines import baseline_restrictions, greedy_assignment
from planner.solve.bounds import relaxed_bound
from planner.solve.copies import plan_copies
from planner.solve.costs import (
    MATERIALIZED,
    PRESERVING,
    VIRTUAL,
    Assignment,
    Evaluation,
    Problem,
    build_problem,
    evaluate,
    total,
)
from planner.solve.decompose import solve_parts
from planner.solve.evaluator import Held, held_at_points, reusing_evaluations
from planner.solve.explain import edge_reason, explain_infeasible
from planner.solve.inline_depth import MAX_INLINE_DEPTH
from planner.solve.lp import (
    WINDOW_COLUMNS,
    Relaxation,
    complete_hint,
    relax,
    rounded_choices,
)
from planner.solve.lp_helper import LpHelper
from planner.solve.model import (
    BuiltModel,
    OutOfTime,
    add_hint,
    build_model,
    decode_values,
    fallback_assignment,
    paused_gc,
    set_hint_values,
    solve,
)
from planner.solve.neighbourhoods import Structure, hinted_values, improve, prepare
from planner.solve.proto import model_message

# The share of ``time_limit_s`` kept back from the search for decoding and the reference
# evaluation, and the least any search is given.
_EVALUATE_SHARE = 0.1
_MIN_SEARCH_S = 0.05
_GRACE_S = 5.0  # the repair heuristic's own budget once the deadline has passed
# From this many edges the heuristic plan is computed before the search, inside the time
# limit: on the 10,000-edge synthetic graph of bench/solve.py CP-SAT finds no plan of its
# own in the seconds left, and the heuristic (~1 s there) then ran past the limit.  As a
# hint it gains ~1 % in 8 s there and nothing measurable on 1,000 edges (1.07 % gap at
# 8 s against 0.79-1.07 % without), so smaller problems skip it.
_EARLY_FALLBACK_EDGES = 5000
# Such a problem is not searched with less time than this left: CP-SAT's presolve of its
# model alone (~130,000 variables for 10,000 edges) overran a 0.9 s search limit by 1.2 s
# and found nothing; the heuristic's plan is then the answer, against the relaxation.
_MIN_LARGE_SEARCH_S = 2.0
# Such a problem's LP relaxation is solved only when the time left covers it and the
# heuristic after it, both estimated from how long this call took to build the CP-SAT
# model: the machine's speed (its CPU model and how busy it is) changes between runs,
# and building the model is the same kind of work, of the same size.  On the
# 10,000-edge graph (97,000 columns, 139,000 rows) the LP, solved in 9 windows, took
# 1.0-1.2 times the model's building on a Zen 4 VM (2.5-2.9 s; whole, 1.6-1.8 times
# and 3.9-4.5 s; HiGHS's interior point and PDLP took 15-30 s), the heuristic 0.3-0.6
# times, the reference evaluation and the copies after the search 0.35 times.  An LP
# started without the time to finish cost the search 2-3 s of a 10 s limit for nothing;
# one that misses its limit only costs that time (the heuristic's share is kept apart).
_MIN_LP_S = 1.0
_LP_PER_MODEL_S = 1.2
_HEURISTIC_PER_MODEL_S = 0.6
_WHOLE_LP_PER_MODEL_S = 2.0
_WHOLE_LP_SHARE = 0.5
_WHOLE = 2**62  # window_columns of an LP solved whole
# Building a large problem's model with the LP cuts takes about this many times building
# the problem (10,000 edges: 1.98-2.06 s after 1.27 s; AMD EPYC VM).
_MODEL_PER_PROBLEM_S = 1.6
_EVALUATE_PER_MODEL_S = 0.4
# A search of such a model finds nothing in less than this many times its building:
# on the 10,000-edge graph (Zen 4 VM) a 4.3 s search after a 2.45 s build found no
# plan better than its hint and ended past the limit.
_SEARCH_PER_MODEL_S = 2.0
# The windows stop _WINDOWS_TAIL_S plus this many times the model's building before the
# deadline: the last windows' searches end up to ~0.17 s past their limit, then come
# their plan's decoding and comparison with the heuristic's, the reference evaluation,
# the plan's listing and copies (0.2 s after a 0.86 s build on 5,000 edges, 0.42 s after
# 1.7 s on 10,000; AMD EPYC VM) and the collection the paused collector held back
# (0.13-0.18 s on 10,000 edges).  With 0.5 s here 10 s calls ended at 9.41 s on 10,000
# edges (0.65 s after the windows); with 0.3 s at 9.69-9.71 s there and 9.78-9.84 s on
# 5,000 edges (2026-12-07; 0.2 s: 9.88-9.92 s, too close to the limit).  The share of the
# limit the other paths keep for their evaluation (_EVALUATE_SHARE, 1 s of 10) left half
# of it unused.
_WINDOWS_TAIL_S = 0.3
_WINDOWS_TAIL_PER_MODEL_S = 0.4
_COMPLETE_HINT_S = 3.0  # filling in the hint's other literals (~0.9 s on 10,000 edges)

Progress = Callable[[int, int, float], None]
E = TypeVar("E", bound=Enum)


def content_hash(kernel: Kernel, target: Target, bindings: Mapping[str, int] | None,
                 policy: Policy, baseline: Baseline | None,
                 bounds: Mapping[str, tuple[int, int]] | None = None,
                 max_inline_depth: int = MAX_INLINE_DEPTH) -> str:
    """sha256 of what determines a plan: structure, catalog, bindings, policy, baseline,
    the declared symbol bounds (they decide proofs) and a non-default inline depth
    limit."""
    content = {
        "kernel": print_kernel(kernel, PrintOptions(locations=False)),
        "catalog": target.content_hash or target.name,
        "bindings": sorted((bindings or {}).items()),
        "policy": policy.value,
        "baseline": baseline.value if baseline else None,
    }
    if max_inline_depth != MAX_INLINE_DEPTH:
        content["max_inline_depth"] = max_inline_depth
    if bounds:
        content["bounds"] = sorted((k, list(v)) for k, v in bounds.items())
    payload = json.dumps(content, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def plan_kernel(kernel: Kernel, target: Target, bindings: Mapping[str, int] | None = None,
                policy: Policy | str = Policy.DEFAULT, baseline: Baseline | str | None = None,
                time_limit_s: float = 10.0, workers: int = 2,
                progress: Progress | None = None,
                bounds: Mapping[str, tuple[int, int]] | None = None,
                on_phase: Callable[[str, float], None] | None = None,
                max_inline_depth: int = MAX_INLINE_DEPTH) -> MaterializationPlan:
    """Plan every live edge of ``kernel`` on ``target``; see the module docstring.

    ``time_limit_s`` bounds the whole call: the proofs, model building and the CP-SAT
    search share one deadline (the search gets what is left, less a tenth of the limit
    kept for the evaluation).  When it passes before optimality is proved the plan says
    ``feasible`` with its gap (the greedy heuristic's plan when the search found none or
    never started; its bound is then the capacity-free relaxation).  Building the
    priced problem is checked only once it is done: refuse oversized kernels before
    calling (:func:`planner.solve.budget.estimate_model_size`).  ``workers`` is CP-SAT's
    number of search workers; ``progress(best, bound, seconds)`` is called on every
    improving solution; ``bounds`` declares inclusive ranges of symbols the proofs range
    over where no binding fixes them; ``on_phase(name, seconds)`` is called as each phase
    ends (``build``, ``proofs``, ``model``, ``solve``, ``evaluate``/``explain``: what
    :attr:`MaterializationPlan.phases` records), so a caller can show progress live.
    ``max_inline_depth``: how many consumers inlined further a value may be fused or
    recomputed through (:mod:`planner.solve.inline_depth`).
    """
    phases: list[tuple[str, float]] = []
    clock = [time.perf_counter()]
    deadline = clock[0] + time_limit_s

    def phase(name: str) -> None:
        now = time.perf_counter()
        phases.append((name, round(now - clock[0], 4)))
        clock[0] = now
        if on_phase is not None:
            on_phase(*phases[-1])

    # The evaluator's answers are reused inside this call only (the heuristic's plan is
    # evaluated by the repair, compared with the search's and listed in the plan).  The
    # cyclic collector waits for the whole call, not only for each phase that allocates
    # (the problem, the model, the heuristic): a collection when one phase ends rescans
    # everything the call still holds (on the 10,000-edge graph of bench/solve.py 0.5-1 s
    # of a 7-8 s call, peak memory within 2 %).  The answers (and the problem they hold)
    # go before it resumes: its first collection then scans the plan and the call's
    # cyclic garbage (the CP-SAT models, the dataflow graph), 0.13-0.18 s on 10,000
    # edges, not the whole problem too (0.32 s more).
    with paused_gc(), reusing_evaluations():
        plan = _plan_phases(kernel, target, bindings, policy, baseline, time_limit_s,
                            workers, progress, bounds, phase, deadline, max_inline_depth)
        phase("evaluate" if plan.status is not Status.INFEASIBLE else "explain")
        return dataclasses.replace(plan, phases=tuple(phases),
                                   copies=plan_copies(kernel, target, bindings, plan))


def _plan_phases(kernel: Kernel, target: Target, bindings: Mapping[str, int] | None,
                 policy: Policy | str, baseline: Baseline | str | None, time_limit_s: float,
                 workers: int, progress: Progress | None,
                 bounds: Mapping[str, tuple[int, int]] | None,
                 phase: Callable[[str], None], deadline: float, max_inline_depth: int
                 ) -> MaterializationPlan:
    policy = _enum(Policy, policy, "policy")
    base = _enum(Baseline, baseline, "baseline") if baseline is not None else None
    started = time.perf_counter()
    problem = build_problem(kernel, target, bindings, policy,
                            max_inline_depth=max_inline_depth)
    problem_s = time.perf_counter() - started
    phase("build")
    digest = content_hash(kernel, target, bindings, policy, base, bounds, max_inline_depth)
    # started now, it imports HiGHS on the core the model's building leaves idle
    with _lp_helper(problem) as helper:
        return _planned(kernel, target, bindings, problem, problem_s, policy, base, digest,
                        time_limit_s, workers, progress, bounds, phase, deadline, helper)


@contextlib.contextmanager
def _lp_helper(problem: Problem) -> Iterator[LpHelper | None]:
    """A second process for the LP relaxation's windows (:class:`LpHelper`) where the
    LP is solved before the search (:data:`_EARLY_FALLBACK_EDGES` edges and more), unless
    ``PLANNER_LP_HELPER=0``; ended when the plan is made.  On the 10,000-edge synthetic
    graph of ``bench/solve.py`` its two windows took 1.8 s side by side against 3.0 s in
    turn (AMD EPYC VM), time the LP-guided search and the windows then have."""
    wanted = len(problem.edges) >= _EARLY_FALLBACK_EDGES \
        and os.environ.get("PLANNER_LP_HELPER", "1") != "0"
    helper = LpHelper.start() if wanted else None
    try:
        yield helper
    finally:
        if helper is not None:
            helper.close()


def _planned(kernel: Kernel, target: Target, bindings: Mapping[str, int] | None,
             problem: Problem, problem_s: float, policy: Policy, base: Baseline | None,
             digest: str, time_limit_s: float, workers: int, progress: Progress | None,
             bounds: Mapping[str, tuple[int, int]] | None, phase: Callable[[str], None],
             deadline: float, helper: LpHelper | None) -> MaterializationPlan:
    proofs = run_proofs(kernel, target, bindings, _left(deadline), bounds)
    phase("proofs")
    restrictions = baseline_restrictions(problem, base) if base is not None else {}
    header = _Header(problem, policy, base, proofs, digest, target)
    # Capacity is the CP-SAT model's own business (it trades versions and placement and
    # explains the binding group); any other refuted proof makes every plan illegal.
    refuted = tuple(f"proof {p.name} refuted: {p.detail}" for p in proofs
                    if p.status == "refuted" and p.name != "capacity")
    if refuted or problem.static_infeasible:
        return header.infeasible((*refuted, *problem.static_infeasible), 0.0)
    try:
        if _left(deadline) <= 0:
            raise OutOfTime
        cuts = _cuts_pay(problem, deadline, time_limit_s, problem_s)
        started = time.perf_counter()
        bm = build_model(problem, restrictions, deadline=deadline, cuts=cuts)
    except OutOfTime:
        phase("model")
        return _out_of_time(header, problem, restrictions, kernel, target, time_limit_s)
    model_s = time.perf_counter() - started
    phase("model")
    # kept back for the evaluation: a share of the limit, or what one takes at this size
    reserve = _reserve(time_limit_s, model_s)
    start = _early_fallback(bm, problem, restrictions, deadline, reserve, model_s, helper)
    early, lp_bound, lns_s = start.plan, start.bound, 0.0
    if early is not None:
        # the heuristic's plan improved window by window, then (time left) the whole
        # model's search from it; the windows' plan is decoded and evaluated after them
        started = time.perf_counter()
        early = _neighbourhood_search(
            bm, problem, restrictions, start,
            deadline - _WINDOWS_TAIL_S - _WINDOWS_TAIL_PER_MODEL_S * model_s,
            workers)
        lns_s = time.perf_counter() - started
    search = max(_MIN_SEARCH_S, _left(deadline) - reserve)
    if early is not None and search < max(_MIN_LARGE_SEARCH_S, _SEARCH_PER_MODEL_S * model_s):
        phase("solve")  # too little time left to search a model this large
        return header.solved(early, restrictions, False, lp_bound, lns_s)
    result = solve_parts(bm, time_limit_s=search, workers=workers, progress=progress,
                         deadline=deadline) if early is None else None
    if result is None:
        result = solve(bm, time_limit_s=search, workers=workers, progress=progress,
                       deadline=deadline, fallback=early)
    if lns_s:  # the plan's search time counts the windows' searches too
        result = dataclasses.replace(result, wall_s=result.wall_s + lns_s)
    phase("solve")
    if result.assignment is not None:
        if result.status == "optimal":
            return header.solved(result.assignment, restrictions, True, result.bound,
                                 result.wall_s)
        return header.solved(_no_worse(problem, restrictions, result.assignment, early),
                             restrictions, False, max(result.bound, lp_bound), result.wall_s)
    # No solution in time: the heuristic's plan is the fallback (computed here unless the
    # problem was large enough to compute it before the search, see _EARLY_FALLBACK_EDGES).
    fallback = (early or greedy_assignment(problem, restrictions)) \
        if result.status == "unknown" else None
    if fallback is not None:
        return header.solved(fallback, restrictions, False, max(result.bound, lp_bound),
                             result.wall_s)
    if result.status == "unknown":
        raise PlannerError(Diagnostic(
            f"no plan for {kernel.name} on {target.name} within {time_limit_s:g} s (neither a "
            "solution nor a proof of infeasibility); raise --time-limit"), kind="timeout")
    start = time.perf_counter()
    lines = explain_infeasible(problem, restrictions, base,
                               max(0.1, min(time_limit_s / 2, _left(deadline))))
    return header.infeasible(lines, result.wall_s + time.perf_counter() - start)


@dataclasses.dataclass(frozen=True, slots=True)
class _Early:
    """What a large problem starts its search from (:func:`_early_fallback`)."""

    plan: Assignment | None = None  # the heuristic's, also the model's hint
    bound: int = 0  # the LP's bound (0: none)
    relaxation: Relaxation | None = None
    # the windows' structure, cut while the LP solved (None: not cut, or no windows)
    structure: Structure | None = None
    prepared: bool = False  # whether ``structure`` is prepare's answer


def _early_fallback(bm: BuiltModel, problem: Problem,
                    restrictions: Mapping[int, frozenset], deadline: float, reserve: float,
                    model_s: float, helper: LpHelper | None = None) -> _Early:
    """For problems of at least :data:`_EARLY_FALLBACK_EDGES` edges, the heuristic plan
    before the search (within the time limit, not after it), also CP-SAT's hint, a lower
    bound (0: none), the LP relaxation (None: none) and the windows' structure.  Where
    the time left (less ``reserve``, kept for the evaluation, and the heuristic's own)
    covers the LP's expected time (both estimated from ``model_s``, the seconds building
    ``bm`` took), the LP relaxation (:func:`planner.solve.lp.relax`) is solved on a
    second thread while this one cuts the windows' structure
    (:func:`planner.solve.neighbourhoods.prepare`; HiGHS releases the GIL): the LP's
    optimum is the bound and the heuristic runs from its rounded choices
    (:func:`planner.solve.lp.rounded_choices`: on the 10,000-edge synthetic graph of
    ``bench/solve.py``, 573k-582k ns against the plain heuristic's 618k, with an LP
    bound of 517k-528k against the relaxation's 439k).  The plain heuristic's plan is
    computed only where the LP gives none (not solved, past its limit before its first
    window, or its rounding not repaired; past it later, the windows solved so far are
    kept, :func:`planner.solve.lp.relax`'s ``partial``, and the heuristic chooses the
    other windows' edges itself): beside the LP its Python slowed the LP's by 0.3-0.7 s
    of the windows' time, for a plan the windows would start above the LP's."""
    if len(problem.edges) < _EARLY_FALLBACK_EDGES:
        return _Early()
    with paused_gc():  # the repair allocates hundreds of thousands of small objects
        return _early_plan(bm, problem, restrictions, deadline, reserve, model_s, helper)


def _early_plan(bm: BuiltModel, problem: Problem, restrictions: Mapping[int, frozenset],
                deadline: float, reserve: float, model_s: float,
                helper: LpHelper | None) -> _Early:
    found = relaxation = structure = None
    left = _lp_time(_left(deadline), reserve, model_s)
    lp = _lp_fits(left, model_s)
    whole = _solved_whole(left, model_s)
    if lp:
        # the model's proto is read once for both (before any hint is written into it)
        message = model_message(bm.model)
        # HiGHS releases the GIL while it solves: the windows' structure is cut beside it,
        # from when the LP's rows are read (both are Python: side by side they share
        # one core; the rows first start HiGHS ~0.5 s sooner on 10,000 edges)
        highs = threading.Event()
        with ThreadPoolExecutor(max_workers=1) as pool:
            solving = pool.submit(relax, bm, left, message=message, solving=highs.set,
                                  window_columns=_WHOLE if whole else WINDOW_COLUMNS,
                                  partial=True, helper=helper)
            solving.add_done_callback(lambda _: highs.set())
            highs.wait()
            structure = None if message is None else prepare(bm, message)
            relaxation = solving.result()
    if relaxation is not None:
        found = greedy_assignment(problem, restrictions, rounded_choices(bm, relaxation))
    if found is None:
        found = fallback_assignment(problem, restrictions, deadline=deadline)
    if found is not None:
        add_hint(bm, found)
    return _Early(found, relaxation.bound if relaxation is not None else 0, relaxation,
                  structure, lp)


def _neighbourhood_search(bm: BuiltModel, problem: Problem,
                          restrictions: Mapping[int, frozenset], start: _Early, until: float,
                          workers: int) -> Assignment:
    """``start``'s plan (the model's hint) improved by
    :func:`planner.solve.neighbourhoods.improve` until ``until``, windows ranked by the
    LP relaxation's values where there is one; the model's hint becomes the improved
    plan (every variable).  The plan itself where its derived literals cannot be filled
    in within the time, or where no window improved it."""
    plan = start.plan
    assert plan is not None
    left = until - time.perf_counter()
    if left <= 0:
        return plan
    # the proto is read before the completed hint is written into it (on another thread)
    message = None if start.prepared else model_message(bm.model)
    # CP-SAT fills the hint in (with all the windows' time if need be: without it there
    # are no windows, and a limit of half that time failed one 10,000-edge run in three);
    # the windows' structure was cut while the LP solved, or is cut beside it here.  One
    # CP-SAT worker: the fixed hint leaves nothing to share (0.65 s on one or two).
    with ThreadPoolExecutor(max_workers=1) as pool:
        completing = pool.submit(complete_hint, bm, min(_COMPLETE_HINT_S, left), 1)
        structure = start.structure if start.prepared else (
            None if message is None else prepare(bm, message))
        completed = completing.result()
    values = hinted_values(bm) if completed and structure is not None else None
    found = None if values is None else improve(
        structure, values, until, workers,
        None if start.relaxation is None else start.relaxation.values)
    if found is None or not found.improved:
        return plan
    set_hint_values(bm, found.values)
    return _no_worse(problem, restrictions, decode_values(bm, found.values), plan) or plan


def _reserve(time_limit_s: float, model_s: float) -> float:
    """The seconds kept back for the evaluation: a share of the limit, or what one takes
    after a model built in ``model_s``."""
    return max(_EVALUATE_SHARE * time_limit_s, _EVALUATE_PER_MODEL_S * model_s)


def _lp_time(left: float, reserve: float, model_s: float) -> float:
    """The LP's time from ``left`` seconds once the model is built: less the evaluation's
    ``reserve`` and the heuristic's share."""
    return left - reserve - _HEURISTIC_PER_MODEL_S * model_s


def _solved_whole(lp_time: float, model_s: float) -> bool:
    """Whether the LP is solved whole (one window).  Its bound is tighter (521,711
    against 517,019 ns on 10,000 edges; 525,546 with the LP cuts) but it takes ~1.6-1.8x
    the model's building against ~1.0-1.2x in windows, time the windows' search then
    lacks (see _neighbourhood_search): only where it is at most half the LP's time.
    10,000 edges (AMD EPYC VM): in 15 s whole 1.51-1.56 % against 2.2-2.5 % in windows,
    in 20 s 0.68 % against 2.18 %; in 10 s windows 4.2 % against 4.95 % whole (before
    the LP-guided search and the cuts in windows; with them, in 10 s two windows of
    :data:`~planner.solve.lp.WINDOW_COLUMNS` 0.96 % against 1.25 % whole)."""
    return _WHOLE_LP_PER_MODEL_S * model_s <= _WHOLE_LP_SHARE * lp_time


def _cuts_pay(problem: Problem, deadline: float, time_limit_s: float, problem_s: float
              ) -> bool:
    """Whether the model gets the LP cuts (:func:`planner.solve.model.build_model`'s
    ``cuts``): where CP-SAT proves bounds (under :data:`_EARLY_FALLBACK_EDGES` edges),
    and on larger problems where the LP is expected to be solved (the model's building
    estimated from the problem's, ``problem_s``).  They tighten the LP for ~25 % more
    model building and a ~10-20 % longer LP: 10,000 edges whole 525,546 against 521,711
    ns (a 30 s plan's gap 0.54 % against 1.24 %), in windows of ~48,000 columns 524,361
    / 533,964 / 542,020 against 520,819 / 531,257 / 538,440 (seeds 0, 1, 2), 10 s plans
    1.52 / 1.52 / 1.10 % from their bound against 2.32 / 1.87 / 1.98 % (the LP-guided
    search, :func:`planner.solve.neighbourhoods.lp_guided`, needs little of the time the
    cuts take; before it, with windows of ~12,000 columns, they cost the windows more
    than they gained: 4.95 % against 4.2 %)."""
    if len(problem.edges) < _EARLY_FALLBACK_EDGES:
        return True
    model_s = _MODEL_PER_PROBLEM_S * problem_s
    left = _lp_time(_left(deadline) - model_s, _reserve(time_limit_s, model_s), model_s)
    return _lp_fits(left, model_s)


def _lp_fits(lp_time: float, model_s: float) -> bool:
    """Whether the LP is solved in ``lp_time`` seconds (:func:`_lp_time`) after a model
    built in ``model_s``: only with the time to finish it (see :data:`_MIN_LP_S`)."""
    return lp_time >= max(_MIN_LP_S, _LP_PER_MODEL_S * model_s)


def _no_worse(problem: Problem, restrictions: Mapping[int, frozenset],
              found: Assignment | None, early: Assignment | None) -> Assignment | None:
    """An unproved search's plan, or the heuristic's where that costs no more, by the
    evaluator's objective: a search can end on a plan worse than its hint, and the
    model's cost of a plan (rounded up, a completed hint's other literals) can exceed
    the evaluator's."""
    if found is None or early is None or found is early:
        return found or early
    if evaluate(problem, found, restrictions).objective >= evaluate(
            problem, early, restrictions).objective:
        return early
    return found


def _left(deadline: float) -> float:
    return deadline - time.perf_counter()


def _out_of_time(header: _Header, problem: Problem, restrictions: Mapping[int, frozenset],
                 kernel: Kernel, target: Target, time_limit_s: float) -> MaterializationPlan:
    """The deadline passed before the search could start: the heuristic's plan (given
    :data:`_GRACE_S` more), ``feasible`` against the capacity-free relaxation
    (:func:`planner.solve.bounds.relaxed_bound`, applied by :meth:`_Header.solved`)."""
    fallback = fallback_assignment(problem, restrictions,
                                   deadline=time.perf_counter() + _GRACE_S)
    if fallback is None:
        raise PlannerError(Diagnostic(
            f"no plan for {kernel.name} on {target.name} within {time_limit_s:g} s (the "
            "model was not built in time and the heuristic found no feasible plan); raise "
            "--time-limit"), kind="timeout")
    return header.solved(fallback, restrictions, False, total(problem.constant), 0.0)


def _enum(cls: type[E], value: object, what: str) -> E:
    try:
        return cls(value)
    except ValueError:
        known = ", ".join(m.value for m in cls)
        raise PlannerError(Diagnostic(f"unknown {what} {value!r} (known: {known})"),
                           kind="usage") from None


def run_proofs(kernel: Kernel, target: Target, bindings: Mapping[str, int] | None,
               time_limit_s: float, symbol_bounds: Mapping[str, tuple[int, int]] | None = None
               ) -> tuple[ProofSummary, ...]:
    """The z3 proofs of :mod:`planner.prove`, summarized for the plan."""
    budget = int(max(200, min(5000, time_limit_s * 250)))
    report = prove_kernel(kernel, target, bindings=dict(bindings or {}),
                          symbol_bounds=symbol_bounds, time_limit_ms=budget)
    return tuple(ProofSummary(r.name, str(r.status), f"{r.subject}: {r.detail}")
                 for r in report.results)


class _Header:
    """The parts of a plan shared by the feasible and infeasible cases."""

    def __init__(self, problem: Problem, policy: Policy, baseline: Baseline | None,
                 proofs: tuple[ProofSummary, ...], digest: str, target: Target) -> None:
        self.problem = problem
        self.policy = policy
        self.baseline = baseline
        self.proofs = proofs
        self.digest = digest
        self.catalog = (target.source, target.content_hash)

    def _plan(self, **kw: object) -> MaterializationPlan:
        p = self.problem
        return MaterializationPlan(kernel=p.kernel, target=p.target, policy=self.policy,
                                   baseline=self.baseline, bindings=p.bindings,
                                   proofs=self.proofs, content_hash=self.digest,
                                   catalog_file=self.catalog[0], catalog_hash=self.catalog[1],
                                   **kw)

    def infeasible(self, lines: tuple[str, ...], seconds: float) -> MaterializationPlan:
        return self._plan(edges=(), peaks=(), objective=0, breakdown={},
                          status=Status.INFEASIBLE, solve_time_s=seconds, explanation=lines)

    def solved(self, a: Assignment, restrictions: Mapping[int, frozenset], optimal: bool,
               bound: int, seconds: float) -> MaterializationPlan:
        with paused_gc():
            return self._solved(a, restrictions, optimal, bound, seconds)

    def _solved(self, a: Assignment, restrictions: Mapping[int, frozenset], optimal: bool,
                bound: int, seconds: float) -> MaterializationPlan:
        p = self.problem
        ev = evaluate(p, a, restrictions)
        if not ev.feasible:
            raise PlannerError(Diagnostic("internal error: the solver's plan violates "
                                          + "; ".join(ev.violations[:3])), kind="internal")
        objective = ev.objective
        # an unproved plan's bound: the solver's, or the capacity-free relaxation where
        # that is higher (always, when the search never ran)
        bound = objective if optimal else min(max(bound, relaxed_bound(p, restrictions)),
                                              objective)
        gap = 0.0 if optimal or objective == 0 else (objective - bound) / objective
        edges = tuple(self._edge(a, ev, e.index, restrictions) for e in p.edges)
        return self._plan(edges=edges, peaks=peaks(p, ev), objective=objective,
                          breakdown=ev.breakdown(),
                          status=Status.OPTIMAL if optimal else Status.FEASIBLE,
                          gap=round(gap, 6), solve_time_s=seconds,
                          memories=self._memories(a), bound=bound,
                          buffers=planned_buffers(p, a, ev.held))

    def _edge(self, a: Assignment, ev: Evaluation, i: int,
              restrictions: Mapping[int, frozenset]) -> EdgePlan:
        p = self.problem
        e = p.edges[i]
        v = p.values[e.value]
        c = a.choices[i]
        q = a.placement[v.index]
        resource = layout = sync = None
        if c is VIRTUAL:
            resource = v.register
        elif c is MATERIALIZED and q is not None:
            resource, layout, sync = (v.placements[q].resource, v.placements[q].layout,
                                      v.placements[q].sync)
        versions = a.versions[v.index] if c in PRESERVING else 1
        return EdgePlan(e.edge_id, e.producer, e.consumer, v.name, e.bytes, c, resource,
                        layout, versions, sync, e.span, e.stage_distance,
                        dict(ev.edge_terms[i]),
                        edge_reason(p, a, ev, e, restrictions, self.baseline),
                        v.kind, e.consumer_kind, e.lines)

    def _memories(self, a: Assignment) -> tuple[MemoryPlan, ...]:
        return tuple(MemoryPlan(m.name, m.homes[h], m.home_bytes[h],
                                a.memory_versions[m.index], m.max_versions, m.span)
                     for m in self.problem.memories for h in (m.home_of(a),))


def planned_buffers(problem: Problem, a: Assignment,
                    held: Sequence[tuple[tuple[str, int], Sequence[object]]] = ()
                    ) -> tuple[PlannedBuffer, ...]:
    """Every buffer the assignment holds (:func:`held_at_points`, or ``held``: its answer
    for ``a``, e.g. :attr:`Evaluation.held`), with the program point ranges where it is
    held, in first-use order."""
    first: dict[tuple[object, ...], Held] = {}
    points: dict[tuple[object, ...], list[tuple[str, int]]] = {}
    checked = held or held_at_points(problem, a)
    after: dict[tuple[str, int], int] = {}  # checked point -> the owner's previous one
    prev: dict[str, int] = {}
    for (owner, point), here in sorted(checked, key=lambda x: x[0]):
        if owner in prev:
            after[(owner, point)] = prev[owner]
        prev[owner] = point
        for h in here:
            first.setdefault(h.key, h)
            points.setdefault(h.key, []).append((owner, point))
    out = []
    for key, h in first.items():
        ranges: list[list[object]] = []
        for owner, point in sorted(points[key]):
            last = ranges[-1] if ranges else None
            if last is not None and last[0] == owner and last[2] == after.get((owner, point)):
                last[2] = point
            else:
                ranges.append([owner, point, point])
        out.append(PlannedBuffer(h.name, h.role, h.resource, h.bytes, h.versions,
                                 tuple((str(o), int(lo), int(hi))  # type: ignore[call-overload]
                                       for o, lo, hi in ranges), h.sync))
    return tuple(out)


def peaks(problem: Problem, ev: Evaluation) -> tuple[ResourcePeak, ...]:
    """The fullest checked point of every resource that holds anything."""
    best: dict[str, ResourcePeak] = {}
    for occ in ev.occupancy:
        cur = best.get(occ.resource)
        if cur is None or occ.bytes > cur.peak_bytes:
            best[occ.resource] = ResourcePeak(occ.resource, occ.capacity, occ.bytes,
                                              occ.point, occ.holders)
    order = {r: i for i, r in enumerate(problem.resources)}
    return tuple(sorted(best.values(), key=lambda r: (order.get(r.resource, 99),
                                                      r.resource)))
