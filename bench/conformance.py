"""Conformance measure: do the buffers the loop program allocates equal what the planner holds?

Matrix: every built-in example x target (x86-avx2, apple-m2) x plan (optimal, each
baseline) x capacity pressure (the target's shared-class resource as shipped, shrunk to
50 % and to 25 % of the unpressured plan's own peak in that resource).

Planner side (per feasible plan): the problem (planner.solve.costs.build_problem on the
same, possibly shrunk, target) and the plan's decisions mapped back to an Assignment
(checked: re-evaluating it reproduces plan.peaks exactly); the holders per resource per
point are then those of planner.solve.costs.occupancies, kept structured here (value,
copy, resource, bytes, versions).  Loop side: build_loop_program(...).buffers, and the
statement lifetimes of tests/solve/test_plan_matches_lowering.py's allocation_peaks
(re-implemented with its _records; checked equal to allocation_peaks).

Compared: (a) the multiset of non-register buffers by (resource, bytes, versions);
(b) peak bytes per resource (every resource either side holds anything in).
Run from the repository root: ``python bench/conformance.py [--no-cache] [-j N]
[--verbose]``.  Writes plans to ``$PLANNER_CONFORMANCE_DIR/cache/`` (default: a
``planner-conformance`` folder in the system temp directory) and the full per-case
results to ``results.json`` there.  A measurement, not a test: today the two sides agree
exactly in about half the cases (see the closing note of issue 10).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pickle
import sys
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

REPO = os.environ.get("CONF_REPO", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
sys.path.insert(0, f"{REPO}/tests/solve")

OUT = os.environ.get("PLANNER_CONFORMANCE_DIR",
                     os.path.join(tempfile.gettempdir(), "planner-conformance"))


def _source_hash() -> str:
    """sha256 over the planner's sources, catalogs, examples and the test helpers used."""
    import hashlib
    h = hashlib.sha256()
    for sub in ("planner", "catalogs", "examples", "tests/solve"):
        for root, dirs, files in sorted(os.walk(os.path.join(REPO, sub))):
            dirs.sort()
            for f in sorted(files):
                if f.endswith((".py", ".yaml", ".yml", ".h")):
                    p = os.path.join(root, f)
                    h.update(os.path.relpath(p, REPO).encode())
                    with open(p, "rb") as fh:
                        h.update(fh.read())
    return h.hexdigest()


SOURCE_HASH = _source_hash()
CACHE = f"{OUT}/cache/{SOURCE_HASH[:12]}"  # plans are cached per source version

EXAMPLES = ("attention", "gelu", "gemm", "layernorm", "manual_gemm", "softmax")
TARGETS = ("x86-avx2", "apple-m2")
PLANS = ("optimal", "all-materialize", "greedy-fusion", "all-virtual")
PRESSURES = (None, 50, 25)  # percent of the unpressured plan's own shared-class peak


# =========================================================================== planning


def _target(tn: str, capacity: int | None):
    from planning_support import target, with_capacity
    t = target(tn)
    if capacity is None:
        return t
    return with_capacity(t, t.resources_for_class("shared")[0].name, capacity)


def _plan_job(args):
    name, tn, plan_kind, capacity = args
    path = f"{CACHE}/{name}__{tn}__{plan_kind}__{capacity}.pkl"
    if os.path.exists(path) and not os.environ.get("CONF_NO_CACHE"):
        with open(path, "rb") as f:
            return args, pickle.load(f), 0.0, True
    from planning_support import bindings, kernel

    from planner.solve import plan_kernel
    t0 = time.perf_counter()
    try:
        plan = plan_kernel(kernel(name), _target(tn, capacity), bindings(name),
                           baseline=None if plan_kind == "optimal" else plan_kind)
        res = ("ok", plan)
    except Exception as exc:
        res = ("error", f"{type(exc).__name__}: {exc}")
    dt = time.perf_counter() - t0
    with open(path + ".tmp", "wb") as f:
        pickle.dump(res, f)
    os.replace(path + ".tmp", path)
    return args, res, dt, False


def plan_all(jobs: int):
    os.makedirs(CACHE, exist_ok=True)
    plans: dict[tuple, tuple] = {}
    solve_s = 0.0
    base = [(n, t, p, None) for n in EXAMPLES for t in TARGETS for p in PLANS]

    def run(batch):
        nonlocal solve_s
        if jobs > 1:
            with ProcessPoolExecutor(jobs) as ex:
                results = list(ex.map(_plan_job, batch))
        else:
            results = [_plan_job(b) for b in batch]
        for args, res, dt, _ in results:
            plans[args] = res
            solve_s += dt

    run(base)
    pressure_jobs = []
    for (n, t, p, _), res in list(plans.items()):
        if res[0] != "ok" or res[1].status.value == "infeasible":
            continue
        shared = _target(t, None).resources_for_class("shared")[0].name
        peak = next((x.peak_bytes for x in res[1].peaks if x.resource == shared), 0)
        for pct in PRESSURES[1:]:
            if peak > 0:
                pressure_jobs.append((n, t, p, peak * pct // 100))
    run(pressure_jobs)
    return plans, solve_s


# =========================================================================== planner side


@dataclass
class Holder:
    key: tuple  # matching key shared with the loop side
    label: str  # the planner's own holder label
    resource: str
    rclass: str
    nbytes: int
    versions: int
    kind: str  # value | memory | temp
    detail: str = ""  # value op kind, carry copies, temp name
    points: set = field(default_factory=set)  # (owner, point) where held
    vi: int | None = None  # value index (value holders)
    merged: str = ""  # label of a yielded value merged into this carry holder


def assignment_from_plan(problem, plan):
    from planner.plan.decisions import Decision
    from planner.solve.costs import MATERIALIZED, PRESERVING, Assignment
    by_id = {e.edge_id: e for e in plan.edges}
    choices = []
    for e in problem.edges:
        choices.append(Decision(by_id[e.edge_id].decision))
    placement, versions = [], []
    for v in problem.values:
        eps = [by_id[problem.edges[i].edge_id] for i in v.edges]
        mat = [x for x in eps if x.decision is MATERIALIZED]
        q = None
        if mat:
            qs = [i for i, p in enumerate(v.placements)
                  if p.resource == mat[0].resource and p.layout == mat[0].layout]
            assert len(qs) == 1, (v.name, qs)
            q = qs[0]
        placement.append(q)
        ks = {x.versions for x in eps if x.decision in PRESERVING}
        assert len(ks) <= 1, (v.name, ks)
        versions.append(ks.pop() if ks else 1)
    mems = {m.name: m for m in plan.memories}
    mv = tuple(mems[m.name].versions for m in problem.memories)
    mh = tuple(m.homes.index(mems[m.name].resource) for m in problem.memories)
    return Assignment(tuple(choices), tuple(placement), tuple(versions), mv, mh)


def planner_side(name, tn, capacity, plan):
    """Problem, assignment, structured holders; checks the reproduction of plan.peaks."""
    from planning_support import bindings, kernel

    from planner.solve.baselines import baseline_restrictions
    from planner.solve.costs import Truth, build_problem, evaluate, occupancies, segment_live
    from planner.solve.planner import peaks as plan_peaks
    t = _target(tn, capacity)
    problem = build_problem(kernel(name), t, bindings(name), plan.policy)
    a = assignment_from_plan(problem, plan)
    restr = baseline_restrictions(problem, plan.baseline) if plan.baseline else None
    ev = evaluate(problem, a, restr)
    assert ev.feasible, ev.violations[:3]
    assert plan_peaks(problem, ev) == plan.peaks, "assignment does not reproduce plan.peaks"
    assert ev.objective == plan.objective
    rclass = {r.name: r.resource_class for r in t.resources}
    truth = Truth(problem, a)
    holders: dict[tuple, Holder] = {}
    per_point: dict[tuple, dict[str, list[tuple]]] = {}  # (owner, point) -> res -> keys
    stage_count: collections.Counter = collections.Counter()
    temp_keys: dict[int, tuple] = {}
    for ti, tt in enumerate(problem.temps):  # stable keys for temporaries
        if tt.name.startswith("staging of "):
            vname = tt.name[len("staging of "):].split(" for ")[0]
            base = ("stage", vname)
        elif tt.name.startswith("exchange of the staging of "):
            vname = tt.name[len("exchange of the staging of "):].split(" for ")[0]
            base = ("xstage", vname)
        else:
            base = ("exchange", tt.name)
        stage_count[base] += 1
        temp_keys[ti] = (*base, stage_count[base] - 1)
    live_cache: dict = {}

    def hold(key, label, res, nbytes, k, kind, detail, at, vi=None):
        h = holders.get(key)
        if h is None:
            h = holders[key] = Holder(key, label, res, rclass.get(res, "?"), nbytes, k, kind,
                                      detail, vi=vi)
        assert (h.resource, h.nbytes, h.versions) == (res, nbytes, k), (key, h, res, nbytes)
        h.points.add(at)
        per_point.setdefault(at, {}).setdefault(res, []).append(key)

    for lp in problem.live_points:  # the loop of planner.solve.evaluator.occupancies
        at = (lp.owner, lp.point)
        for vi, si in lp.segments:
            v = problem.values[vi]
            if (vi, si) not in live_cache:
                live_cache[(vi, si)] = segment_live(problem, a, v, v.segments[si], truth)
            reg, mat = live_cache[(vi, si)]
            k = a.versions[vi]
            q = a.placement[vi]
            label = v.name if k == 1 else f"{v.name} ×{k}"
            if reg and v.register is not None:
                copy = "reg" if q is not None else "main"
                hold(("value", v.name, copy), label, v.register, v.reg_bytes * k, k, "value",
                     v.kind, at, vi)
            if mat and q is not None:
                p = v.placements[q]
                hold(("value", v.name, "main"), label, p.resource, p.bytes * k, k, "value",
                     v.kind, at, vi)
        for mi in lp.memories:
            m = problem.memories[mi]
            k = a.memory_versions[mi] if a.memory_versions else 1
            h = m.home_of(a)
            hold(("memory", m.name), m.name if k == 1 else f"{m.name} ×{k}", m.homes[h],
                 m.home_bytes[h] * k, k, "memory", "", at)
        for ti in lp.temps:
            tt = problem.temps[ti]
            if truth.temp(tt):
                hold(temp_keys[ti], tt.name, tt.resource, tt.bytes, 1, "temp", tt.name, at)
    # cross-check against occupancies()
    occ = {(o.owner, o.point, o.resource): o.bytes for o in occupancies(problem, a)}
    mine = {(at[0], at[1], r): sum(holders[k].nbytes for k in ks)
            for at, rs in per_point.items() for r, ks in rs.items()}
    assert occ == mine, "structured holders differ from occupancies()"
    return problem, a, holders, per_point


# =========================================================================== loop side


@dataclass
class LBuf:
    key: tuple
    name: str
    role: str
    resource: str
    rclass: str
    nbytes: int
    versions: int
    note: str
    edges: tuple = ()
    lives: list = field(default_factory=list)  # (segment, lo, hi)
    first_write: dict = field(default_factory=dict)  # segment -> first statement writing it


def loop_side(name, tn, capacity, plan):
    from planning_support import bindings, kernel
    from test_plan_matches_lowering import _records, allocation_peaks

    from planner.lower.loops import program as lp
    t = _target(tn, capacity)
    env = bindings(name)
    program = lp.build_loop_program(kernel(name), plan, t)
    bufs: dict[tuple, LBuf] = {}
    stage_count: collections.Counter = collections.Counter()
    by_name: dict[str, LBuf] = {}
    for b in program.buffers:
        nbytes = int(b.total_elements().evaluate(dict(env))) * b.dtype.itemsize
        if b.role == "stage":
            base = ("stage", "%" + b.name.split(".stage.")[0])
            stage_count[base] += 1
            key = (*base, stage_count[base] - 1)
        elif b.role == "memory":
            key = ("memory", "%" + b.name)
        elif b.name.endswith(".r") and b.role == "virtual":
            key = ("value", "%" + b.name[:-2], "reg")
        else:
            key = ("value", "%" + b.name, "main")
        assert key not in bufs, key
        lb = LBuf(key, b.name, b.role, b.resource, b.resource_class, nbytes, b.versions, b.note,
                  b.edges)
        bufs[key] = lb
        by_name[b.name] = lb
    # lifetimes exactly as tests/solve/test_plan_matches_lowering.py allocation_peaks
    peaks: dict[str, tuple[int, tuple]] = {}
    for si, seg in enumerate(program.segments):
        records, spans, last = _records(seg)
        life = {}
        for bname, recs in records.items():
            buf = program.buffer(bname)
            lo, hi = min(r[0] for r in recs), max(r[0] for r in recs)
            first = min(recs)
            for sid in {s for r in recs for s in r[2] if s in spans}:
                inside = all(sid in r[2] for r in recs)
                depth = first[2].index(sid) if sid in first[2] else -1
                below = first[2][depth + 1:]
                same = inside and all(r[2][depth + 1:] == below for r in recs)
                if not (first[1] and same and len(below) <= 1) or buf.versions > 1:
                    lo, hi = min(lo, spans[sid][0]), max(hi, spans[sid][1])
            life[bname] = (1, max(last, 1)) if buf.role == "memory" else (lo, hi)
            by_name[bname].lives.append((si, *life[bname]))
            writes = [r[0] for r in recs if r[1]]
            if writes:
                by_name[bname].first_write[si] = min(writes)
        for p in range(1, last + 1):
            held: dict[str, list] = {}
            for bname, (lo, hi) in life.items():
                if lo <= p <= hi:
                    lb = by_name[bname]
                    held.setdefault(lb.resource, []).append(lb.key)
            for res, ks in held.items():
                total = sum(bufs[k].nbytes for k in ks)
                if total > peaks.get(res, (-1, ()))[0]:
                    peaks[res] = (total, tuple(ks), (si, p))
    ref = allocation_peaks(program, env)
    assert {r: v[0] for r, v in ref.items()} == {r: v[0] for r, v in peaks.items()}
    return program, bufs, peaks


# =========================================================================== comparison


def _align(n, a):
    return -(-n // max(1, a)) * a


def byte_reason(h: Holder, lb: LBuf, alignment: int) -> str:
    """Why the plan's bytes and the loop program's bytes of one buffer differ."""
    if lb.nbytes < h.nbytes and _align(lb.nbytes, alignment) == h.nbytes:
        return f"loop bytes not rounded up to the resource alignment ({alignment} B)"
    if (h.detail == "loop.carry" and lb.versions == 1 and h.versions == 1
            and h.nbytes == 2 * _align(_align(lb.nbytes, 64), alignment)):
        return ("carry: the plan counts two copies (ping-pong), the loop program updates it "
                "in place (one copy)")
    if (lb.nbytes < h.nbytes and h.versions == 1
            and _align(_align(lb.nbytes, 64), alignment) == h.nbytes):
        return "plan rounds one version to the 64-B version stride (and alignment), loop does not"
    return "other"


def describe_buf(lb: LBuf) -> str:
    return f"%{lb.name} [{lb.role}] {lb.resource} {lb.nbytes} B x{lb.versions}"


def describe_holder(h: Holder) -> str:
    kind = h.kind + (" " + h.detail if h.detail and h.kind == "value" else "")
    return f"{h.label} [{kind}] {h.resource} {h.nbytes} B x{h.versions}"


def only_loop_category(lb: LBuf, holders: dict) -> str:
    k = lb.key
    if lb.role == "stage":
        return "loop program allocates an mma staging copy the plan does not hold"
    if k[0] == "value" and k[2] == "reg":
        main = holders.get(("value", k[1], "main"))
        of = "of a carry " if main is not None and main.detail == "loop.carry" else ""
        return f"loop program allocates a register copy {of}the plan does not hold"
    if lb.role == "carry":
        return "loop program allocates a carry buffer the plan does not hold"
    if lb.role == "memory":
        return "loop program allocates explicit Memory the plan does not hold"
    return f"loop program allocates a {lb.role} buffer the plan does not hold"


def only_plan_category(h: Holder, aliased: dict) -> str:
    if h.key in aliased:
        return ("yielded value: the loop program computes it into its carry's buffer; the plan "
                "holds it as a separate buffer at points where it also holds the carry")
    if h.key[0] == "exchange":
        return "plan holds a register exchange area; the loop program allocates no buffer for it"
    if h.key[0] == "xstage":
        return "plan holds an exchange area of a staging copy; the loop program allocates none"
    if h.key[0] == "stage":
        return "plan holds an mma staging copy the loop program does not allocate"
    if h.kind == "memory":
        return "plan holds explicit Memory the loop program does not allocate"
    return f"plan holds a value ({h.detail}, {h.key[2]} copy) the loop program does not allocate"


def why_held(problem, a, truth, h: Holder, point: int) -> str:
    """Why the plan holds value holder ``h`` at ``point``: the edge span covering it, or the
    guard (a later evaluation site) that extends it there."""
    from planner.solve.costs import MATERIALIZED, VIRTUAL
    if h.vi is None:
        return "fixed occupant" if h.kind == "memory" else "temporary at its statement"
    v = problem.values[h.vi]
    want = VIRTUAL if h.resource == v.register else MATERIALIZED
    for seg in v.segments:
        if not seg.start <= point < seg.end:
            continue
        if any(a.choices[i] is want for i in seg.edges):
            return "its own reader span"
        for i, gi in seg.guarded:
            if a.choices[i] is not want or not truth.guard(gi):
                continue
            g = problem.guards[gi]
            e = problem.edges[i]
            if g.kind == "split":
                return "split guard (carry storage differs from its yielded value's)"
            root = problem.values[g.a]
            home = g.b == root.def_point
            if g.a == e.consumer_value:
                return (f"site guard: its reader {root.name} is evaluated at point {g.b}"
                        + (" (at home)" if home else " (inlined there)"))
            chosen = {a.choices[j].value for j in root.edges}
            return (f"site guard of a recompute chain: chain root {root.name} (containing its "
                    f"reader {e.consumer}) is evaluated at point {g.b}"
                    + (" at its own home" if home else " (inlined)")
                    + f"; edges of {root.name} are {'/'.join(sorted(chosen))}")
    return "no segment found"


def _hold_kind(w: str) -> str:
    if w == "its own reader span":
        return "its own reader span"
    if w.startswith("site guard of a recompute chain"):
        recomputed = "recomputed" in w.split("edges of")[-1]
        return ("recompute-chain stop guard, chain root " + ("recomputed" if recomputed else
                "not recomputed by any edge (documented over-approximation)"))
    if w.startswith("site guard: its reader"):
        return "reader inlined into a later consumer (site guard)"
    return w


def compare(name, tn, capacity, plan):
    t = _target(tn, capacity)
    align_of = {r.name: r.alignment for r in t.resources}
    problem, a, holders, per_point = planner_side(name, tn, capacity, plan)
    from planner.solve.costs import Truth
    truth = Truth(problem, a)
    program, bufs, lpeaks = loop_side(name, tn, capacity, plan)
    cats_a: list[tuple[str, str]] = []  # (category, example) for non-register buffers
    cats_reg: list[tuple[str, str]] = []  # the same for register buffers (not in (a))
    info: list[tuple[str, str]] = []  # equivalences applied (not disagreements)

    # Yielded values the loop program computes straight into their carry's buffer.
    aliased: dict[tuple, tuple] = {}  # plan key of the yielded value -> the carry's key
    for e in problem.edges:
        if not e.loop_carried or e.consumer_value is None:
            continue
        y, c = problem.values[e.value].name, problem.values[e.consumer_value].name
        yk, ck = ("value", y, "main"), ("value", c, "main")
        cb = bufs.get(ck)
        if yk in holders and yk not in bufs and cb is not None and e.edge_id in cb.edges:
            aliased[yk] = ck
    for yk, ck in list(aliased.items()):
        hy, hc = holders[yk], holders.get(ck)
        if (hc is not None and (hy.resource, hy.nbytes, hy.versions)
                == (hc.resource, hc.nbytes, hc.versions) and not hy.points & hc.points):
            hc.points |= hy.points
            hc.merged = hy.label
            for at in hy.points:
                per_point[at][hy.resource] = [ck if k == yk else k
                                              for k in per_point[at][hy.resource]]
            del holders[yk]
            del aliased[yk]
            info.append(("yielded value held by the plan at points disjoint from its carry, same "
                         "resource/bytes/versions; the loop program computes it into the carry's "
                         "buffer: merged as one buffer", f"{hy.label} into {hc.label}"))
        elif (hc is not None and (hy.resource, hy.nbytes, hy.versions, hc.versions)
              == (hc.resource, hc.nbytes, 1, 1) and hy.points == hc.points):
            hc.merged, hc.versions, hc.nbytes = hy.label, 2, hc.nbytes + hy.nbytes
            for at in hy.points:
                per_point[at][hy.resource] = [k for k in per_point[at][hy.resource] if k != yk]
            del holders[yk]
            del aliased[yk]
            info.append(("yielded value held by the plan beside its carry for the whole loop "
                         "(pingpong): the carry's second version", f"{hy.label} into {hc.label}"))
    keys = set(holders) | set(bufs)
    for k in sorted(keys, key=str):
        h, lb = holders.get(k), bufs.get(k)
        cls = {x.rclass for x in (h, lb) if x is not None}
        sink = cats_reg if cls == {"private"} else cats_a
        if h is None:
            sink.append((only_loop_category(lb, holders), describe_buf(lb)))
            continue
        if lb is None:
            ex = describe_holder(h)
            if k in aliased:
                hc = holders[aliased[k]]
                both = sorted(p for _, p in h.points & hc.points)
                ex += (f"; carry {describe_holder(hc)} also held at points {both}; loop "
                       f"{describe_buf(bufs[aliased[k]])}")
            sink.append((only_plan_category(h, aliased), ex))
            continue
        ex = f"plan {describe_holder(h)} / loop {describe_buf(lb)}"
        if h.resource != lb.resource:
            cats_a.append((f"resource differs (plan {h.rclass}, loop {lb.rclass})", ex))
            continue
        if h.versions != lb.versions:
            carry = h.detail == "loop.carry"
            same = h.nbytes == lb.nbytes
            note = ""
            if carry and h.versions == 1 and lb.versions == 2 and same:
                note = " (the plan counts the carry's two ping-pong copies in its bytes)"
            sink.append((f"versions differ (plan {h.versions}, loop {lb.versions})"
                         + (", carry" if carry else "")
                         + ("; bytes equal" if same else "; bytes differ too") + note, ex))
            continue
        if h.nbytes != lb.nbytes:
            sink.append(("bytes differ: " + byte_reason(h, lb, align_of[h.resource]), ex))
    # (a): multiset of non-register (resource, bytes, versions)
    ms_plan = collections.Counter((h.resource, h.nbytes, h.versions) for h in holders.values()
                                  if h.rclass != "private")
    ms_loop = collections.Counter((b.resource, b.nbytes, b.versions) for b in bufs.values()
                                  if b.rclass != "private")
    unused = [describe_buf(b) for b in bufs.values() if not b.lives]
    assert loop_peaks_with(bufs, lambda b: b.nbytes) == {r: v[0] for r, v in lpeaks.items()}
    aligned = lambda b: _align(b.nbytes, align_of[b.resource])  # noqa: E731
    ms_loop_al = collections.Counter((b.resource, aligned(b), b.versions) for b in bufs.values()
                                     if b.rclass != "private")
    lpk_al = loop_peaks_with(bufs, aligned)
    ppk_all = {p.resource: p.peak_bytes for p in plan.peaks}
    b_al = all(ppk_all.get(r, 0) == lpk_al.get(r, 0) for r in set(ppk_all) | set(lpk_al))
    b_al_nonreg = all(ppk_all.get(r, 0) == lpk_al.get(r, 0) for r in set(ppk_all) | set(lpk_al)
                      if t.resource(r).resource_class != "private")
    # (b): peaks
    ppeak = {p.resource: p for p in plan.peaks}
    peak_rows = []
    for r in sorted(set(ppeak) | set(lpeaks)):
        pp = ppeak[r].peak_bytes if r in ppeak else 0
        ll = lpeaks[r][0] if r in lpeaks else 0
        row = {"resource": r, "class": t.resource(r).resource_class, "plan": pp, "loop": ll}
        if pp != ll:
            row["reasons"] = peak_reasons(r, pp, ll, ppeak.get(r), lpeaks.get(r), holders,
                                          per_point, bufs, align_of, aliased, problem, a, truth)
        peak_rows.append(row)
    msl = None
    if tn == "apple-m2":
        from planning_support import kernel

        from planner.lower.metal.emitter import emit_msl
        tg = ppeak.get("threadgroup_memory")
        try:
            got = emit_msl(kernel(name), plan, t).threadgroup_bytes
            msl = {"emitter": got, "plan": tg.peak_bytes if tg else 0}
        except Exception as exc:
            msl = {"error": f"{type(exc).__name__}: {str(exc)[:160]}",
                   "plan": tg.peak_bytes if tg else 0}
    return {
        "msl": msl,
        "a_aligned_ok": ms_plan == ms_loop_al, "b_aligned_ok": b_al,
        "b_aligned_nonreg_ok": b_al_nonreg,
        "a_ok": ms_plan == ms_loop, "cats_a": cats_a, "cats_reg": cats_reg, "info": info,
        "peaks": peak_rows, "unused": unused,
        "plan_nonreg": sorted(map(list, ms_plan.elements())),
        "loop_nonreg": sorted(map(list, ms_loop.elements())),
        "notes": list(program.notes),
    }


def loop_peaks_with(bufs, nbytes_of):
    """The loop program's peak per resource from the buffers' statement lives, with the
    bytes of each buffer given by ``nbytes_of`` (as allocation_peaks, same lives)."""
    out: dict[str, int] = {}
    segs = {s for b in bufs.values() for s, _, _ in b.lives}
    for seg in segs:
        ivs = [(b, lo, hi) for b in bufs.values() for s, lo, hi in b.lives if s == seg]
        for p in range(1, max(hi for _, _, hi in ivs) + 1):
            held: dict[str, int] = {}
            for b, lo, hi in ivs:
                if lo <= p <= hi:
                    held[b.resource] = held.get(b.resource, 0) + nbytes_of(b)
            for r, n in held.items():
                out[r] = max(out.get(r, 0), n)
    return out


def _co_live_plan(keys, holders):
    pts = None
    for k in keys:
        s = holders[k].points
        pts = set(s) if pts is None else pts & s
    return pts or set()


def _co_live_loop(keys, bufs):
    for seg in {s for k in keys for s, _, _ in bufs[k].lives}:
        ivs = [next(((lo, hi) for s, lo, hi in bufs[k].lives if s == seg), None) for k in keys]
        if all(iv is not None for iv in ivs) and max(i[0] for i in ivs) <= min(i[1] for i in ivs):
            return True
    return False


def _def_point(problem, h: Holder):
    return problem.values[h.vi].def_point if h.vi is not None else None


def peak_reasons(r, pp, ll, ppk, lpk, holders, per_point, bufs, align_of, aliased, problem, a,
                 truth):
    """Why the plan's peak and the loop program's peak of resource ``r`` differ."""
    out = []
    if ppk is not None:  # the plan's peak holders (keys), at the point plan.peaks reports
        at = next(at for at, rs in per_point.items() if at[1] == ppk.at_point and r in rs
                  and sum(holders[k].nbytes for k in rs[r]) == pp)
        pkeys = per_point[at][r]
    else:
        pkeys = []
    lkeys = list(lpk[1]) if lpk is not None else []
    if pp > ll:  # why does the loop program hold less?
        for k in [k for k in pkeys if k not in bufs]:
            out.append((f"plan > loop: plan's peak holders include one the loop program does not "
                        f"allocate: {only_plan_category(holders[k], aliased)}",
                        describe_holder(holders[k])))
        present = [k for k in pkeys if k in bufs]
        if len(present) > 1 and not _co_live_loop(present, bufs):
            pairs = [(x, y) for i, x in enumerate(present) for y in present[i + 1:]
                     if not _co_live_loop([x, y], bufs)]
            x, y = pairs[0] if pairs else (present[0], present[1])
            wx = why_held(problem, a, truth, holders[x], ppk.at_point)
            wy = why_held(problem, a, truth, holders[y], ppk.at_point)
            kinds = sorted({_hold_kind(w) for w in (wx, wy)})
            regcopy = [f"%{bufs[k].name}" for k in (x, y) if k[0] == "value" and k[2] == "reg"]
            what = "plan holds them there through: " + " + ".join(kinds)
            if regcopy:
                what += "; loop side is a register copy (filled by its own statement)"
            out.append(("plan > loop: two holders the plan keeps together at its peak point are "
                        "never live together in the loop program; " + what,
                        f"plan point {ppk.at_point} ({problem.points[ppk.at_point].label}): "
                        f"{holders[x].label} ({wx}) with {holders[y].label} ({wy}); loop "
                        f"statement lives %{bufs[x].name} {bufs[x].lives[0][1:]}, "
                        f"%{bufs[y].name} {bufs[y].lives[0][1:]}"))
        small = [(k, holders[k].nbytes, bufs[k].nbytes) for k in present
                 if bufs[k].nbytes < holders[k].nbytes]
        if small:
            why = sorted({byte_reason(holders[k], bufs[k], align_of[r]) for k, _, _ in small})
            out.append(("plan > loop: a peak holder has fewer bytes in the loop program: "
                        + "; ".join(why),
                        ", ".join(f"{holders[k].label} plan {p} B / loop {q} B"
                                  for k, p, q in small)))
    else:  # why does the plan hold less?
        for k in [k for k in lkeys if k not in holders]:
            out.append((f"loop > plan: the loop program's peak includes a buffer the plan does "
                        f"not hold ({only_loop_category(bufs[k], holders)})",
                        describe_buf(bufs[k])))
        present = [k for k in lkeys if k in holders]
        if len(present) > 1 and not _co_live_plan(present, holders):
            pairs = [(x, y) for i, x in enumerate(present) for y in present[i + 1:]
                     if not _co_live_plan([x, y], holders)]
            x, y = pairs[0] if pairs else (present[0], present[1])
            if max(p for _, p in holders[x].points) > max(p for _, p in holders[y].points):
                x, y = y, x  # x: the one the plan releases first
            # did the loop program define y before a value the plan defines earlier?
            seg = bufs[y].lives[0][0]
            yw = bufs[y].first_write.get(seg)
            dy = _def_point(problem, holders[y])
            moved = sorted(
                (holders[k].label for k in holders
                 if k[0] == "value" and holders[k].vi is not None and k in bufs
                 and dy is not None and _def_point(problem, holders[k]) < dy
                 and bufs[k].first_write.get(seg, -1) > (yw or 0)),
                key=lambda s: s)
            cause = (f"; the loop program writes {holders[y].label} (plan point {dy}) before "
                     f"{', '.join(moved)} (earlier in the plan's op order): a nest moved by "
                     "sibling-nest fusion") if moved else ""
            out.append(("loop > plan: buffers live together at the loop program's peak are never "
                        "held together at one plan point"
                        + ("; the loop program runs a nest earlier than the plan's op order "
                           "(sibling-nest fusion)" if moved else ""),
                        f"loop {describe_buf(bufs[x])} lives {bufs[x].lives[0][1:]} with "
                        f"{describe_buf(bufs[y])} lives {bufs[y].lives[0][1:]}; plan points "
                        f"{sorted(p for _, p in holders[x].points)} vs "
                        f"{sorted(p for _, p in holders[y].points)}{cause}"))
        big = [(k, holders[k].nbytes, bufs[k].nbytes) for k in present
               if bufs[k].nbytes > holders[k].nbytes]
        if big:
            out.append(("loop > plan: a peak buffer has more bytes in the loop program than the "
                        "plan holds", ", ".join(f"%{bufs[k].name} plan {p} B / loop {q} B"
                                                for k, p, q in big)))
    if not out:
        out.append(("unexplained by holders/lifetimes/bytes", f"plan {pkeys} loop {lkeys}"))
    return out


# =========================================================================== main


def _compare_job(args):
    key, plan = args
    name, tn, _kind, cap = key
    try:
        return key, compare(name, tn, cap, plan)
    except Exception as exc:
        return key, {"error": f"{type(exc).__name__}: {exc}",
                     "trace": traceback.format_exc(limit=4)}


def _head() -> str:
    try:
        import subprocess
        return subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    if args.no_cache:
        os.environ["CONF_NO_CACHE"] = "1"
    t0 = time.perf_counter()
    plans, solve_s = plan_all(args.j)
    t1 = time.perf_counter()
    cells = {}  # key -> outcome
    todo = []
    for key, res in plans.items():
        if res[0] == "error":
            cells[key] = {"outcome": "plan_kernel raised", "error": res[1]}
        elif res[1].status.value == "infeasible":
            cells[key] = {"outcome": "infeasible", "explanation": list(res[1].explanation[:2])}
        else:
            todo.append((key, res[1]))
    if args.j > 1:
        with ProcessPoolExecutor(args.j) as ex:
            results = list(ex.map(_compare_job, todo))
    else:
        results = [_compare_job(x) for x in todo]
    for key, r in results:
        r["outcome"] = "lowering raised" if "error" in r else "compared"
        r["status"] = plans[key][1].status.value
        cells[key] = r
    t2 = time.perf_counter()

    # ------------------------------------------------------------------ report
    base_cells = [(n, t, p) for n in EXAMPLES for t in TARGETS for p in PLANS]
    import planner
    print(f"source: {REPO} (planner imported from {os.path.dirname(planner.__file__)}), "
          f"commit {os.environ.get('CONF_COMMIT') or _head()}, source hash {SOURCE_HASH[:12]}")
    nominal = len(base_cells) * len(PRESSURES)
    print(f"matrix: {len(EXAMPLES)} examples x {len(TARGETS)} targets x {len(PLANS)} plans x "
          f"{len(PRESSURES)} capacities (as shipped, 50 %, 25 % of the plan's own shared peak) "
          f"= {nominal} nominal cells")
    na = 0
    for n, t, p in base_cells:
        for _pct in PRESSURES[1:]:
            base = plans[(n, t, p, None)]
            if base[0] != "ok" or base[1].status.value == "infeasible":
                na += 1
                continue
            shared = _target(t, None).resources_for_class("shared")[0].name
            if not any(x.resource == shared and x.peak_bytes > 0 for x in base[1].peaks):
                na += 1
    print(f"  not applicable (pressure cell whose unpressured plan is infeasible or holds 0 B "
          f"in the shared resource): {na}")
    zero = [(n, t, p) for n, t, p in base_cells if plans[(n, t, p, None)][0] == "ok"
            and plans[(n, t, p, None)][1].status.value != "infeasible"
            and not any(x.resource == _target(t, None).resources_for_class("shared")[0].name
                        and x.peak_bytes > 0 for x in plans[(n, t, p, None)][1].peaks)]
    print(f"    feasible unpressured plans holding 0 B in the shared resource: {zero}")
    print(f"  planned cells: {len(cells)}")
    outcome = collections.Counter(c["outcome"] for c in cells.values())
    for o, c in sorted(outcome.items()):
        print(f"    {o}: {c}")
    by_pressure = collections.defaultdict(collections.Counter)
    for (_n, _t, _p, cap), c in cells.items():
        pr = "as shipped" if cap is None else "pressure"
        by_pressure[pr][c["outcome"]] += 1
    for pr, cnt in by_pressure.items():
        print(f"    [{pr}] " + ", ".join(f"{o}: {k}" for o, k in sorted(cnt.items())))
    for key, c in sorted(cells.items(), key=str):
        if c["outcome"] in ("infeasible", "plan_kernel raised", "lowering raised"):
            why = c.get('error') or c.get('explanation', [''])[:1]
            print(f"      {c['outcome']}: {key}  {why}")
    comp = {k: c for k, c in cells.items() if c["outcome"] == "compared"}
    nc = len(comp)
    a_ok = sum(c["a_ok"] for c in comp.values())
    b_ok_all = sum(all(r["plan"] == r["loop"] for r in c["peaks"]) for c in comp.values())
    b_ok_nonreg = sum(all(r["plan"] == r["loop"] for r in c["peaks"] if r["class"] != "private")
                      for c in comp.values())
    b_ok_reg = sum(all(r["plan"] == r["loop"] for r in c["peaks"] if r["class"] == "private")
                   for c in comp.values())
    both = sum(c["a_ok"] and all(r["plan"] == r["loop"] for r in c["peaks"])
               for c in comp.values())
    print()
    print(f"compared cells: {nc}")
    print(f"  (a) non-register buffers equal as a multiset of (resource, bytes, versions): "
          f"{a_ok}/{nc}")
    print(f"  (b) peak bytes equal for every resource:                {b_ok_all}/{nc}")
    print(f"      ... for every non-register resource:                {b_ok_nonreg}/{nc}")
    print(f"      ... for every register resource:                    {b_ok_reg}/{nc}")
    print(f"  (a) and (b) both:                                       {both}/{nc}")
    print("  the same with each loop buffer's bytes rounded up to its resource's alignment:")
    print(f"    (a) {sum(c['a_aligned_ok'] for c in comp.values())}/{nc}, (b) every resource "
          f"{sum(c['b_aligned_ok'] for c in comp.values())}/{nc}, (b) non-register "
          f"{sum(c['b_aligned_nonreg_ok'] for c in comp.values())}/{nc}, both "
          f"{sum(c['a_aligned_ok'] and c['b_aligned_ok'] for c in comp.values())}/{nc}")
    over = sum(any(r["loop"] > r["plan"] for r in c["peaks"]) for c in comp.values())
    print(f"  cells where the loop program's peak exceeds the plan's for some resource: {over}")
    for tn in TARGETS:
        sub = [c for k, c in comp.items() if k[1] == tn]
        print(f"    {tn}: (a) {sum(c['a_ok'] for c in sub)}/{len(sub)}, (b all) "
              f"{sum(all(r['plan'] == r['loop'] for r in c['peaks']) for c in sub)}/{len(sub)}")
    for pk in PLANS:
        sub = [c for k, c in comp.items() if k[2] == pk]
        print(f"    {pk}: (a) {sum(c['a_ok'] for c in sub)}/{len(sub)}, (b all) "
              f"{sum(all(r['plan'] == r['loop'] for r in c['peaks']) for c in sub)}/{len(sub)}")
    for pr in ("as shipped", "pressure"):
        sub = [c for k, c in comp.items() if (k[3] is None) == (pr == "as shipped")]
        print(f"    {pr}: (a) {sum(c['a_ok'] for c in sub)}/{len(sub)}, (b all) "
              f"{sum(all(r['plan'] == r['loop'] for r in c['peaks']) for c in sub)}/{len(sub)}")

    def tally(title, getter):
        cnt: dict[str, list] = collections.defaultdict(list)
        for key, c in sorted(comp.items(), key=str):
            for cat, ex in getter(c):
                cnt[cat].append((key, ex))
        print()
        print(title)
        if not cnt:
            print("  (none)")
        for cat, items in sorted(cnt.items(), key=lambda kv: -len(kv[1])):
            cells_with = len({k for k, _ in items})
            (n, t, p, cap), ex = items[0]
            print(f"  [{len(items)} occurrences in {cells_with} cells] {cat}")
            print(f"      e.g. {n} on {t}, {p}, shared capacity {cap or 'as shipped'}: {ex}")

    tally("equivalences applied before comparing (not counted as disagreements):",
          lambda c: c["info"])
    tally("(a) disagreements, non-register buffers (per buffer):", lambda c: c["cats_a"])
    tally("register-resource buffer disagreements (not part of (a); they feed (b)):",
          lambda c: c["cats_reg"])
    tally("(b) peak disagreements, non-register resources (a cell may give several reasons):",
          lambda c: [(f"{cat}", f"{r['resource']} plan {r['plan']} B / loop {r['loop']} B; {ex}")
                     for r in c["peaks"] if r["class"] != "private"
                     for cat, ex in r.get("reasons", [])])
    tally("(b) peak disagreements, register resources:",
          lambda c: [(f"{cat}", f"{r['resource']} plan {r['plan']} B / loop {r['loop']} B; {ex}")
                     for r in c["peaks"] if r["class"] == "private"
                     for cat, ex in r.get("reasons", [])])
    tally("(b) direction of each peak disagreement (per resource):",
          lambda c: [(f"{r['class']} resource: plan peak {'>' if r['plan'] > r['loop'] else '<'} "
                      f"loop peak", f"{r['resource']} plan {r['plan']} B / loop {r['loop']} B")
                     for r in c["peaks"] if r["plan"] != r["loop"]])
    print()
    print("cells still disagreeing once loop bytes are rounded up to the resource alignment, "
          "grouped by their remaining categories:")
    grp: collections.Counter = collections.Counter()
    for c in comp.values():
        if not c["a_aligned_ok"]:
            grp[("(a)", *tuple(sorted({x.split(";")[0] for x, _ in c["cats_a"]
                                         if "alignment" not in x})))] += 1
        if not c["b_aligned_ok"]:
            grp[("(b)", *tuple(sorted({f"{r['class']}: {x.split(';')[0].split(' (')[0]}"
                                         for r in c["peaks"] for x, _ in r.get("reasons", [])
                                         if "alignment" not in x})))] += 1
    for g, n in sorted(grp.items(), key=lambda kv: (kv[0][0], -kv[1])):
        print(f"  {g[0]} {n} cells: " + " | ".join(g[1:]))
    ms = [(k, c["msl"]) for k, c in sorted(comp.items(), key=str) if c.get("msl")]
    eq = [k for k, m in ms if m.get("emitter") == m["plan"]]
    lt = [(k, m) for k, m in ms if "emitter" in m and m["emitter"] < m["plan"]]
    gt = [(k, m) for k, m in ms if "emitter" in m and m["emitter"] > m["plan"]]
    err = [(k, m) for k, m in ms if "error" in m]
    print()
    print(f"supplementary (apple-m2 only, not part of (a)/(b)): Metal emitter threadgroup arena "
          f"bytes vs the plan's threadgroup_memory peak, {len(ms)} cells: equal {len(eq)}, "
          f"emitter smaller {len(lt)}, emitter larger {len(gt)}, emitter raised {len(err)}")
    for title, xs in (("smaller", lt), ("larger", gt), ("raised", err)):
        if xs:
            print(f"  e.g. {title}: {xs[0][0]} {xs[0][1]}")
    unused = [(k, u) for k, c in comp.items() for u in c["unused"]]
    print()
    print(f"loop buffers allocated but touched by no statement: {len(unused)}"
          + (f" (e.g. {unused[0]})" if unused else ""))
    if args.verbose:
        for key, c in sorted(comp.items(), key=str):
            print(key, "a_ok" if c["a_ok"] else "a_DIFF", c["peaks"])
    with open(f"{OUT}/results.json", "w") as f:
        json.dump({str(k): c for k, c in cells.items()}, f, indent=1, default=str)
    print()
    print(f"time: planning {t1 - t0:.1f} s wall ({solve_s:.1f} s solving, cache misses only), "
          f"comparison {t2 - t1:.1f} s, total {t2 - t0:.1f} s")


if __name__ == "__main__":
    main()
