"""Side-by-side comparison of plans: what differs, and where the time goes.

Plans are matched edge by edge through their stable ``edge_id`` (printer-chosen value
names, so the same kernel gives the same ids on every target and under every
policy).  A :class:`Comparison` keeps the edges whose decision, resource, layout or
version count differ, every resource's peak in each plan, each plan's total, and for
every plan after the first its cost delta against the first with the edges that
contribute most to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from planner.errors import Diagnostic, PlannerError
from planner.plan.decisions import EdgePlan, MaterializationPlan, Status
from planner.plan.plan_io import decision_text, fmt_ns, fmt_size, plan_to_json, table


@dataclass(frozen=True, slots=True)
class EdgeRow:
    """One edge whose handling differs between the plans (None: not in that plan)."""

    edge_id: str
    bytes: int
    decisions: tuple[str | None, ...]
    costs: tuple[int | None, ...]


@dataclass(frozen=True, slots=True)
class PeakRow:
    resource: str
    peaks: tuple[int | None, ...]
    capacities: tuple[int | None, ...]


@dataclass(frozen=True, slots=True)
class Delta:
    """Plan ``index`` against the first: total change and its largest contributors."""

    index: int
    total: int
    terms: tuple[tuple[str, int], ...]  # per cost term, largest |change| first
    edges: tuple[tuple[str, int], ...]  # per edge, largest |change| first


@dataclass(frozen=True, slots=True)
class Comparison:
    labels: tuple[str, ...]
    plans: tuple[MaterializationPlan, ...]
    rows: tuple[EdgeRow, ...]
    peaks: tuple[PeakRow, ...]
    totals: tuple[int | None, ...]  # None for infeasible plans
    deltas: tuple[Delta, ...]
    same_edges: int  # edges handled identically everywhere

    def __repr__(self) -> str:
        """One line: each plan's label and estimated time (the table: ``format_comparison``)."""
        parts = [f"{label} {'infeasible' if t is None else f'{t:,} ns'}"
                 for label, t in zip(self.labels, self.totals, strict=True)]
        return (f"<Comparison of {len(self.plans)} plans: {'; '.join(parts)}; "
                f"{self.same_edges} edges alike>")

    def __str__(self) -> str:
        return format_comparison(self)


def _signature(e: EdgePlan) -> tuple[object, ...]:
    return (e.decision, e.resource, e.layout, e.versions)


def compare_plans(plans: Sequence[tuple[str, MaterializationPlan]], top: int = 3
                  ) -> Comparison:
    """Compare two or more labelled plans of (usually) the same kernel."""
    if len(plans) < 2:
        raise PlannerError(Diagnostic("compare needs at least two plans"), kind="usage")
    labels = tuple(label for label, _ in plans)
    ps = tuple(p for _, p in plans)
    by_id = [{e.edge_id: e for e in p.edges} for p in ps]
    ids = list(dict.fromkeys(i for p in ps for i in (e.edge_id for e in p.edges)))
    rows, same = [], 0
    for edge_id in ids:
        found = [m.get(edge_id) for m in by_id]
        sigs = {_signature(e) if e else None for e in found}
        if len(sigs) == 1:
            same += 1
            continue
        size = next(e.bytes for e in found if e is not None)
        rows.append(EdgeRow(edge_id, size, tuple(decision_text(e) if e else None
                                                 for e in found),
                            tuple(e.total_cost if e else None for e in found)))
    totals = tuple(None if p.status is Status.INFEASIBLE else p.objective for p in ps)
    deltas = tuple(_delta(i, ps[0], p, top) for i, p in enumerate(ps) if i)
    return Comparison(labels, ps, tuple(rows), _peaks(ps), totals, deltas, same)


def _peaks(ps: tuple[MaterializationPlan, ...]) -> tuple[PeakRow, ...]:
    names = list(dict.fromkeys(pk.resource for p in ps for pk in p.peaks))
    out = []
    for name in names:
        found = [next((pk for pk in p.peaks if pk.resource == name), None) for p in ps]
        out.append(PeakRow(name, tuple(pk.peak_bytes if pk else None for pk in found),
                           tuple(pk.capacity if pk else None for pk in found)))
    return tuple(out)


def _delta(index: int, first: MaterializationPlan, other: MaterializationPlan, top: int
           ) -> Delta:
    keys = sorted(set(first.breakdown) | set(other.breakdown))
    terms = [(k, other.breakdown.get(k, 0) - first.breakdown.get(k, 0)) for k in keys]
    a = {e.edge_id: e.total_cost for e in first.edges}
    b = {e.edge_id: e.total_cost for e in other.edges}
    edges = [(i, b.get(i, 0) - a.get(i, 0)) for i in dict.fromkeys([*a, *b])]
    pick = sorted((x for x in edges if x[1]), key=lambda x: (-abs(x[1]), x[0]))[:top]
    return Delta(index, other.objective - first.objective,
                 tuple(sorted((t for t in terms if t[1]), key=lambda t: (-abs(t[1]), t[0]))),
                 tuple(pick))


def format_comparison(c: Comparison) -> str:
    """The side-by-side table: differing edges, peaks, totals, deltas, status."""
    first = c.plans[0]
    binds = " ".join(f"{k}={v}" for k, v in first.bindings)
    head = [f"{first.kernel}  bindings {binds}" if binds else first.kernel, *c.labels]
    rows = [[f"{r.edge_id} ({fmt_size(r.bytes)})", *(d or "–" for d in r.decisions)]
            for r in c.rows]
    if not rows:
        rows.append(["(every edge decided the same way)", *("" for _ in c.labels)])
    rows.append([f"edges decided alike: {c.same_edges}", *("" for _ in c.labels)])
    for pk in c.peaks:
        cells = ["–" if p is None else fmt_size(p) if cap is None
                 else f"{fmt_size(p)} of {fmt_size(cap)}"
                 for p, cap in zip(pk.peaks, pk.capacities, strict=True)]
        rows.append([f"peak {pk.resource}", *cells])
    for name, cells in memory_rows(c.plans):
        rows.append([f"memory {name}", *cells])
    rows.append(["estimated time", *(fmt_ns(t) if t is not None else "infeasible"
                                     for t in c.totals)])
    rows.append(["status", *(f"{p.status.value} ({p.solve_time_s * 1000:.0f} ms)"
                             for p in c.plans)])
    lines = [table(head, rows)]
    for d in c.deltas:
        if c.totals[0] is None or c.totals[d.index] is None:
            continue
        terms = ", ".join(f"{k} {v:+,}" for k, v in d.terms[:4])
        edges = ", ".join(f"{i} {v:+,} ns" for i, v in d.edges)
        lines.append(f"{c.labels[d.index]} vs {c.labels[0]}: {d.total:+,} ns"
                     + (f" ({terms})" if terms else "")
                     + (f"; largest differences: {edges}" if edges else ""))
    for label, p in zip(c.labels, c.plans, strict=True):
        for line in p.explanation:
            lines.append(f"{label} infeasible: {line}")
    return "\n".join(lines)


def memory_rows(plans: Sequence[MaterializationPlan]) -> list[tuple[str, tuple[str, ...]]]:
    """Per explicit Memory: its home and versions in each plan, and how it is filled
    (its copies' engines and modes, or plain stores)."""
    names = list(dict.fromkeys(m.name for p in plans for m in p.memories))
    out = []
    for name in names:
        cells = []
        for p in plans:
            m = next((m for m in p.memories if m.name == name), None)
            if m is None:
                cells.append("–")
                continue
            copies = [c for c in p.copies if c.memory == name]
            how = "stores" if not copies else ", ".join(dict.fromkeys(
                f"{c.engine or 'no engine'} ({c.mode}"
                + (", overlapped)" if c.overlapped else ")") for c in copies))
            cells.append(f"{m.resource} ×{m.versions}, {how}")
        out.append((name, tuple(cells)))
    return out


def comparison_to_json(c: Comparison) -> dict[str, Any]:
    return {
        "labels": list(c.labels),
        "plans": [plan_to_json(p) for p in c.plans],
        "differences": [{"edge_id": r.edge_id, "bytes": r.bytes, "decisions": list(r.decisions),
                         "costs": list(r.costs)} for r in c.rows],
        "edges_alike": c.same_edges,
        "peaks": [{"resource": p.resource, "peaks": list(p.peaks),
                   "capacities": list(p.capacities)} for p in c.peaks],
        "memories": [{"memory": name, "cells": list(cells)}
                     for name, cells in memory_rows(c.plans)],
        "totals": list(c.totals),
        "deltas": [{"label": c.labels[d.index], "against": c.labels[0], "total": d.total,
                    "terms": dict(d.terms), "edges": [list(x) for x in d.edges]}
                   for d in c.deltas],
    }
