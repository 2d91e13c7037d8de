"""Plans out of and back into the process: JSON (with its schema), tables, Graphviz.

The JSON form is the service's wire format and what ``planner compare --plans``
reads back.  ``plan_from_json(plan_to_json(p)) == p`` for every plan; the document
carries ``"schema": "planner.plan/1"`` and validates against :func:`plan_json_schema`
(JSON Schema 2020-12).  Costs are integer nanoseconds (``"units": "ns"``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from planner.errors import Diagnostic, PlannerError
from planner.plan.decisions import (
    Baseline,
    CopyPlan,
    Decision,
    EdgePlan,
    LayoutChoice,
    MaterializationPlan,
    MemoryPlan,
    PlannedBuffer,
    Policy,
    ProofSummary,
    ResourcePeak,
    Status,
)

SCHEMA_ID = "planner.plan/1"

# --------------------------------------------------------------------------- JSON


def _layout_to_json(layout: LayoutChoice | None) -> dict[str, Any] | None:
    if layout is None:
        return None
    return {"kind": layout.kind, "pad": layout.pad,
            "swizzle": list(layout.swizzle) if layout.swizzle else None}


def _edge_to_json(e: EdgePlan) -> dict[str, Any]:
    return {"edge_id": e.edge_id, "producer": e.producer, "consumer": e.consumer,
            "value": e.value, "bytes": e.bytes, "decision": e.decision.value,
            "resource": e.resource, "layout": _layout_to_json(e.layout),
            "versions": e.versions, "sync": e.sync, "lifetime": list(e.lifetime),
            "stage_distance": e.stage_distance, "cost": dict(sorted(e.cost.items())),
            "reason": e.reason, "producer_kind": e.producer_kind,
            "consumer_kind": e.consumer_kind, "lines": list(e.lines)}


_COPY_KEYS = ("memory", "line", "source", "source_resource", "destination", "scope", "engine",
              "mode", "bytes", "versions", "wanted_versions", "overlapped", "wait", "detail")
#: keys written since staged transfers; optional when reading (older plans lack them)
_COPY_EXTRA_KEYS = ("kind", "staging", "cycles")


def _copy_to_json(c: CopyPlan) -> dict[str, Any]:
    return {k: getattr(c, k) for k in (*_COPY_KEYS, *_COPY_EXTRA_KEYS)}


def _copy_from_json(obj: Mapping[str, Any], i: int) -> CopyPlan:
    w = f"copies[{i}]"
    return CopyPlan(
        _get(obj, "memory", str, w), _get(obj, "line", int, w), _get(obj, "source", str, w),
        _get(obj, "source_resource", str, w), _get(obj, "destination", str, w),
        _get(obj, "scope", str, w), obj.get("engine"), _get(obj, "mode", str, w),
        obj.get("bytes"), _get(obj, "versions", int, w), _get(obj, "wanted_versions", int, w),
        _get(obj, "overlapped", bool, w), _get(obj, "wait", str, w), str(obj.get("detail", "")),
        str(obj.get("kind", "copy_async")), obj.get("staging"),
        None if obj.get("cycles") is None else float(obj["cycles"]))


def plan_to_json(plan: MaterializationPlan) -> dict[str, Any]:
    """A JSON-ready dict (only str, int, float, bool, None, lists and dicts)."""
    return {
        "schema": SCHEMA_ID,
        "units": "ns",
        "kernel": plan.kernel,
        "target": plan.target,
        "policy": plan.policy.value,
        "baseline": plan.baseline.value if plan.baseline else None,
        "bindings": dict(plan.bindings),
        "status": plan.status.value,
        "objective": plan.objective,
        "bound": plan.bound,
        "gap": plan.gap,
        "solve_time_s": plan.solve_time_s,
        "phases_s": dict(plan.phases),
        "breakdown": dict(sorted(plan.breakdown.items())),
        "edges": [_edge_to_json(e) for e in plan.edges],
        "peaks": [{"resource": p.resource, "capacity": p.capacity, "peak_bytes": p.peak_bytes,
                   "at_point": p.at_point, "holders": [[w, b] for w, b in p.holders]}
                  for p in plan.peaks],
        "memories": [{"name": m.name, "resource": m.resource, "bytes": m.bytes,
                      "versions": m.versions, "max_versions": m.max_versions,
                      "lifetime": list(m.lifetime)} for m in plan.memories],
        "copies": [_copy_to_json(c) for c in plan.copies],
        "buffers": [{"name": b.name, "role": b.role, "resource": b.resource,
                     "bytes": b.bytes, "versions": b.versions,
                     "live": [list(r) for r in b.live], "sync": b.sync}
                    for b in plan.buffers],
        "proofs": [{"name": p.name, "status": p.status, "detail": p.detail}
                   for p in plan.proofs],
        "explanation": list(plan.explanation),
        "content_hash": plan.content_hash,
        "catalog": {"name": plan.target, "file": plan.catalog_file,
                    "content_hash": plan.catalog_hash},
    }


def _bad(message: str) -> PlannerError:
    return PlannerError(Diagnostic(f"invalid plan JSON: {message}"), kind="parse")


def _get(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise _bad(f"{where}: missing {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise _bad(f"{where}.{key}: expected {getattr(kind, '__name__', kind)}, got "
                   f"{type(value).__name__}")
    return value


def _layout_from_json(obj: Any) -> LayoutChoice | None:
    if obj is None:
        return None
    sw = obj.get("swizzle")
    return LayoutChoice(str(obj["kind"]), int(obj.get("pad", 0)),
                        tuple(int(x) for x in sw) if sw else None)  # type: ignore[arg-type]


def _edge_from_json(obj: Mapping[str, Any], i: int) -> EdgePlan:
    w = f"edges[{i}]"
    return EdgePlan(
        _get(obj, "edge_id", str, w), _get(obj, "producer", str, w),
        _get(obj, "consumer", str, w), _get(obj, "value", str, w), _get(obj, "bytes", int, w),
        Decision(_get(obj, "decision", str, w)), obj.get("resource"),
        _layout_from_json(obj.get("layout")), int(obj.get("versions", 1)), obj.get("sync"),
        tuple(obj.get("lifetime", (0, 0))),  # type: ignore[arg-type]
        int(obj.get("stage_distance", 0)),
        {str(k): int(v) for k, v in _get(obj, "cost", dict, w).items()},
        str(obj.get("reason", "")), str(obj.get("producer_kind", "")),
        str(obj.get("consumer_kind", "")),
        tuple(int(x) for x in obj.get("lines", (0, 0))))  # type: ignore[arg-type]


def plan_from_json(obj: Mapping[str, Any]) -> MaterializationPlan:
    """Rebuild a plan from :func:`plan_to_json` output; malformed input raises PlannerError."""
    if not isinstance(obj, Mapping):
        raise _bad("expected an object")
    if obj.get("schema", SCHEMA_ID) != SCHEMA_ID:
        raise _bad(f"schema {obj.get('schema')!r} is not {SCHEMA_ID!r}")
    try:
        base = obj.get("baseline")
        return MaterializationPlan(
            kernel=_get(obj, "kernel", str, "plan"), target=_get(obj, "target", str, "plan"),
            policy=Policy(_get(obj, "policy", str, "plan")),
            baseline=Baseline(base) if base else None,
            bindings=tuple(sorted((str(k), int(v)) for k, v in
                                  _get(obj, "bindings", dict, "plan").items())),
            edges=tuple(_edge_from_json(e, i) for i, e in enumerate(
                _get(obj, "edges", list, "plan"))),
            peaks=tuple(ResourcePeak(p["resource"], p["capacity"], int(p["peak_bytes"]),
                                     int(p["at_point"]),
                                     tuple((str(w), int(b)) for w, b in p["holders"]))
                        for p in _get(obj, "peaks", list, "plan")),
            objective=_get(obj, "objective", int, "plan"),
            breakdown={str(k): int(v) for k, v in _get(obj, "breakdown", dict, "plan").items()},
            status=Status(_get(obj, "status", str, "plan")),
            gap=float(obj.get("gap", 0.0)), solve_time_s=float(obj.get("solve_time_s", 0.0)),
            proofs=tuple(ProofSummary(p["name"], p["status"], p.get("detail", ""))
                         for p in obj.get("proofs", [])),
            explanation=tuple(str(x) for x in obj.get("explanation", [])),
            content_hash=str(obj.get("content_hash", "")),
            memories=tuple(MemoryPlan(m["name"], m["resource"], int(m["bytes"]),
                                      int(m["versions"]), int(m["max_versions"]),
                                      tuple(m["lifetime"]))  # type: ignore[arg-type]
                           for m in obj.get("memories", [])),
            copies=tuple(_copy_from_json(c, i) for i, c in enumerate(obj.get("copies", []))),
            bound=int(obj.get("bound", 0)),
            phases=tuple((str(k), float(v)) for k, v in (obj.get("phases_s") or {}).items()),
            catalog_file=str((obj.get("catalog") or {}).get("file", "")),
            catalog_hash=str((obj.get("catalog") or {}).get("content_hash", "")),
            buffers=tuple(PlannedBuffer(str(b["name"]), str(b["role"]), str(b["resource"]),
                                        int(b["bytes"]), int(b["versions"]),
                                        tuple((str(o), int(lo), int(hi))
                                              for o, lo, hi in b["live"]), b.get("sync"))
                          for b in obj.get("buffers", [])))
    except (KeyError, TypeError, ValueError) as exc:
        raise _bad(f"{type(exc).__name__}: {exc}") from None


def plan_json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of :func:`plan_to_json` documents."""
    nullable_str = {"type": ["string", "null"]}
    costs = {"type": "object", "additionalProperties": {"type": "integer"}}
    pair = {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}
    layout = {"type": ["object", "null"], "required": ["kind"], "properties": {
        "kind": {"enum": ["dense", "padded", "swizzled"]},
        "pad": {"type": "integer", "minimum": 0},
        "swizzle": {"type": ["array", "null"], "items": {"type": "integer"}}}}
    edge = {"type": "object", "additionalProperties": False,
            "required": ["edge_id", "producer", "consumer", "value", "bytes", "decision",
                         "resource", "layout", "versions", "sync", "lifetime",
                         "stage_distance", "cost", "reason"],
            "properties": {
                "edge_id": {"type": "string"}, "producer": {"type": "string"},
                "consumer": {"type": "string"}, "value": {"type": "string"},
                "bytes": {"type": "integer", "minimum": 0},
                "decision": {"enum": [d.value for d in Decision]},
                "resource": nullable_str, "layout": layout,
                "versions": {"type": "integer", "minimum": 1}, "sync": nullable_str,
                "lifetime": pair, "stage_distance": {"type": "integer", "minimum": 0},
                "cost": costs, "reason": {"type": "string"},
                "producer_kind": {"type": "string"}, "consumer_kind": {"type": "string"},
                "lines": {**pair, "description": "source lines of the producer and the "
                          "consumer (0: a block argument or unknown)"}}}
    peak = {"type": "object", "required": ["resource", "capacity", "peak_bytes", "at_point",
                                           "holders"],
            "properties": {
                "resource": {"type": "string"}, "capacity": {"type": ["integer", "null"]},
                "peak_bytes": {"type": "integer"}, "at_point": {"type": "integer"},
                "holders": {"type": "array", "items": {
                    "type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                    "minItems": 2, "maxItems": 2}}}}
    memory = {"type": "object", "required": ["name", "resource", "bytes", "versions",
                                             "max_versions", "lifetime"],
              "properties": {"name": {"type": "string"}, "resource": {"type": "string"},
                             "bytes": {"type": "integer"},
                             "versions": {"type": "integer", "minimum": 1},
                             "max_versions": {"type": "integer", "minimum": 1},
                             "lifetime": pair}}
    buffer = {"type": "object", "required": ["name", "role", "resource", "bytes", "versions",
                                             "live"],
              "properties": {"name": {"type": "string"},
                             "role": {"enum": ["value", "register copy", "carry", "memory",
                                               "staging", "exchange"]},
                             "resource": {"type": "string"},
                             "bytes": {"type": "integer", "minimum": 0},
                             "versions": {"type": "integer", "minimum": 1},
                             "live": {"type": "array", "items": {
                                 "type": "array", "minItems": 3, "maxItems": 3,
                                 "prefixItems": [{"type": "string"}, {"type": "integer"},
                                                 {"type": "integer"}]}},
                             "sync": nullable_str}}
    copy = {"type": "object", "required": list(_COPY_KEYS[:-1]),
            "properties": {"memory": {"type": "string"}, "line": {"type": "integer"},
                           "source": {"type": "string"}, "source_resource": {"type": "string"},
                           "destination": {"type": "string"}, "scope": {"type": "string"},
                           "engine": nullable_str,
                           "mode": {"enum": ["async", "prefetch", "synchronous"]},
                           "bytes": {"anyOf": [{"type": "integer", "minimum": 0},
                                               {"type": "null"}]},
                           "versions": {"type": "integer", "minimum": 1},
                           "wanted_versions": {"type": "integer", "minimum": 1},
                           "overlapped": {"type": "boolean"}, "wait": {"type": "string"},
                           "detail": {"type": "string"},
                           "kind": {"enum": ["copy_async", "staged load", "staged store"]},
                           "staging": nullable_str,
                           "cycles": {"anyOf": [{"type": "number", "minimum": 0},
                                                {"type": "null"}]}}}
    proof = {"type": "object", "required": ["name", "status"], "properties": {
        "name": {"type": "string"},
        "status": {"enum": ["proved", "refuted", "assumed", "unknown", "skipped"]},
        "detail": {"type": "string"}}}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://planner.invalid/schemas/plan-1.json",
        "title": "MaterializationPlan",
        "type": "object",
        "required": ["schema", "units", "kernel", "target", "policy", "baseline", "bindings",
                     "status", "objective", "gap", "solve_time_s", "breakdown", "edges",
                     "peaks", "explanation", "content_hash"],
        "properties": {
            "schema": {"const": SCHEMA_ID}, "units": {"const": "ns"},
            "kernel": {"type": "string"}, "target": {"type": "string"},
            "policy": {"enum": [p.value for p in Policy]},
            "baseline": {"enum": [None, *(b.value for b in Baseline)]},
            "bindings": {"type": "object", "additionalProperties": {"type": "integer"}},
            "status": {"enum": [s.value for s in Status]},
            "objective": {"type": "integer", "minimum": 0},
            "bound": {"type": "integer"},
            "gap": {"type": "number", "minimum": 0},
            "solve_time_s": {"type": "number", "minimum": 0},
            "phases_s": {"type": "object", "additionalProperties": {"type": "number"}},
            "breakdown": costs,
            "edges": {"type": "array", "items": edge},
            "peaks": {"type": "array", "items": peak},
            "memories": {"type": "array", "items": memory},
            "buffers": {"type": "array", "items": buffer},
            "copies": {"type": "array", "items": copy},
            "proofs": {"type": "array", "items": proof},
            "explanation": {"type": "array", "items": {"type": "string"}},
            "content_hash": {"type": "string"},
            "catalog": {"type": "object", "required": ["name", "file", "content_hash"],
                        "properties": {"name": {"type": "string"},
                                       "file": {"type": "string"},
                                       "content_hash": {"type": "string"}}},
        },
    }


# --------------------------------------------------------------------------- text


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()
          ) -> str:
    """Columns padded to their widest cell; ``right`` lists right-aligned columns."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        out = [c.rjust(w) if i in right else c.ljust(w)
               for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(out).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])


def fmt_size(n: int | None) -> str:
    """``1,152 B``, ``512 KiB`` (exact binary multiples), ``-`` for unbounded."""
    if n is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size:,} {unit}"
    return f"{n:,} B"


def fmt_ns(n: int) -> str:
    """``950 ns``, ``12.5 us``, ``3.08 ms``, ``1.25 s``."""
    if n >= 1_000_000_000:
        return f"{n / 1e9:,.2f} s"
    if n >= 1_000_000:
        return f"{n / 1e6:,.2f} ms"
    if n >= 10_000:
        return f"{n / 1e3:,.1f} us"
    return f"{n:,} ns"


def short_kind(kind: str) -> str:
    """``tile.unary.exp`` → ``exp``; ``tile.store`` → ``store``; ``memory.load`` kept."""
    if kind.startswith("memory."):
        return kind
    return kind.rsplit(".", 1)[-1] if kind.count(".") >= 2 else kind.removeprefix("tile.")


def edge_kinds(e: EdgePlan) -> str:
    if not e.producer_kind:
        return ""
    return f"{short_kind(e.producer_kind)} → {short_kind(e.consumer_kind)}"


def edge_lines(e: EdgePlan) -> str:
    """``43→44``: the producer's and the consumer's source lines (``-`` where unknown)."""
    if e.lines == (0, 0):
        return ""
    return "→".join(str(n) if n else "-" for n in e.lines)


def decision_text(e: EdgePlan) -> str:
    if e.decision is Decision.MATERIALIZED:
        return f"materialize {e.resource}" + (f", {e.layout}" if e.layout and
                                              e.layout.kind != "dense" else "")
    if e.decision is Decision.VIRTUAL:
        return f"virtual ({e.resource})" if e.resource else "virtual"
    return e.decision.value


def _header(plan: MaterializationPlan) -> list[str]:
    binds = " ".join(f"{k}={v}" for k, v in plan.bindings) or "(none)"
    base = f"  baseline {plan.baseline.value}" if plan.baseline else ""
    lines = [f"{plan.kernel} on {plan.target}  policy {plan.policy.value}{base}  "
             f"bindings {binds}"]
    if plan.catalog_file or plan.catalog_hash:
        lines.append(f"catalog {plan.catalog_file or '?'}  sha256 {plan.catalog_hash[:12]}")
    status = plan.status.value
    if plan.status is Status.FEASIBLE:
        status += f" (gap {plan.gap:.2%})"
    caveats = proof_caveats(plan)
    if caveats and plan.status is not Status.INFEASIBLE:
        status += f", with {caveats}"
    timing = f"{plan.solve_time_s:.2f} s"
    if plan.phases:
        total = sum(t for _, t in plan.phases)
        timing += (f" (total {total:.2f} s: "
                   + ", ".join(f"{name} {t:.2f}" for name, t in plan.phases) + ")")
    lines.append(f"status {status} in {timing}")
    return lines


def proof_caveats(plan: MaterializationPlan) -> str:
    """``2 assumptions / 1 unknown proof`` (what a feasible plan's proofs did not prove),
    or "" when every proof was proved."""
    n_assumed = sum(p.status == "assumed" for p in plan.proofs)
    n_unknown = sum(p.status == "unknown" for p in plan.proofs)
    parts = []
    if n_assumed:
        parts.append(f"{n_assumed} assumption{'s' if n_assumed != 1 else ''}")
    if n_unknown:
        parts.append(f"{n_unknown} unknown proof{'s' if n_unknown != 1 else ''}")
    return " / ".join(parts)


def format_plan_table(plan: MaterializationPlan) -> str:
    """Edges, decisions and costs; peaks; every buffer held; the objective's breakdown;
    status and time."""
    lines = _header(plan)
    if plan.status is Status.INFEASIBLE:
        lines += ["infeasible:", *(f"  {x}" for x in plan.explanation)]
        return "\n".join(lines)
    parts = ", ".join(f"{k} {v:,}" for k, v in sorted(plan.breakdown.items()) if v)
    lines.append(f"estimated time {fmt_ns(plan.objective)} ({parts})")
    lines.append("")
    rows = [(e.edge_id, edge_kinds(e), edge_lines(e), fmt_size(e.bytes), decision_text(e),
             str(e.versions), f"{sum(e.cost.values()):,}", e.reason) for e in plan.edges]
    lines.append(table(("edge", "ops", "lines", "bytes", "decision", "ver", "cost ns",
                        "reason"), rows, right=(3, 5, 6)))
    lines.append("")
    prow = [(p.resource, fmt_size(p.peak_bytes), fmt_size(p.capacity), str(p.at_point),
             " + ".join(f"{w} {b:,} B" for w, b in p.holders)) for p in plan.peaks]
    lines.append(table(("resource", "peak", "capacity", "point", "held at the peak"), prow,
                       right=(1, 2, 3)))
    if plan.buffers:
        lines.append("")
        brow = [(b.name, b.role, b.resource, fmt_size(b.bytes), str(b.versions),
                 ", ".join(f"{o} {lo}" + (f"-{hi}" if hi != lo else "") for o, lo, hi in b.live),
                 b.sync or "") for b in plan.buffers]
        lines.append(table(("buffer", "role", "resource", "bytes", "ver", "held at points",
                            "sync"), brow, right=(3, 4)))
    if plan.memories:
        lines.append("")
        mrow = [(m.name, m.resource, fmt_size(m.bytes), f"{m.versions}/{m.max_versions}")
                for m in plan.memories]
        lines.append(table(("memory", "resource", "bytes", "versions"), mrow, right=(2, 3)))
    if plan.copies:
        lines.append("")
        crow = [(c.memory, c.kind, str(c.line), f"{c.source} ({c.source_resource})",
                 c.destination, c.engine or "none", c.mode,
                 fmt_size(c.bytes) if c.bytes is not None else "?",
                 f"{c.versions}/{c.wanted_versions}", "yes" if c.overlapped else "no",
                 c.wait) for c in plan.copies]
        lines.append(table(("copy into", "kind", "line", "from", "to", "engine", "mode",
                            "bytes", "versions", "overlapped", "wait"), crow, right=(2, 7)))
    if plan.proofs:
        lines.append("")
        lines.append("proofs: " + proof_summary(plan))
    return "\n".join(lines)


def proof_summary(plan: MaterializationPlan) -> str:
    """``can_access 7 proved, capacity 1 refuted, ...`` in first-seen order."""
    counts: dict[tuple[str, str], int] = {}
    for p in plan.proofs:
        counts[(p.name, p.status)] = counts.get((p.name, p.status), 0) + 1
    return ", ".join(f"{name} {n} {status}" for (name, status), n in counts.items())


_COLOURS = {Decision.VIRTUAL: "forestgreen", Decision.FUSED: "royalblue",
            Decision.RECOMPUTED: "darkorange", Decision.MATERIALIZED: "firebrick"}

#: One letter per decision, as the legend (``--dot``, the HTML report) lists them.
DECISION_LETTERS = {Decision.VIRTUAL: "V", Decision.FUSED: "F", Decision.RECOMPUTED: "R",
                    Decision.MATERIALIZED: "M"}


def _dot_text(*lines: str) -> str:
    """A quoted DOT label of literal lines: backslashes and quotes escaped (so Graphviz
    expands no ``\\N``-style escape in a name), lines joined by Graphviz's ``\\n``."""
    return '"' + "\\n".join(x.replace("\\", "\\\\").replace('"', '\\"') for x in lines) + '"'


def _html_text(text: str) -> str:
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def plan_nodes(plan: MaterializationPlan) -> list[tuple[str, str, int, int]]:
    """The dataflow graph's nodes as ``(name, op kind, program point, source line)`` in
    program order: a producer at its value's definition point, a consumer at the edge's
    last use; line 0 when unknown (a block argument)."""
    kind: dict[str, str] = {}
    point: dict[str, int] = {}
    line: dict[str, int] = {}
    for e in plan.edges:
        for name, k, at, ln in ((e.producer, e.producer_kind, e.lifetime[0], e.lines[0]),
                                (e.consumer, e.consumer_kind, e.lifetime[1], e.lines[1])):
            if k and not kind.get(name):
                kind[name] = k
            kind.setdefault(name, "")
            point[name] = min(point.get(name, at), at)
            line[name] = line.get(name) or ln
    order = {n: i for i, n in enumerate(kind)}
    names = sorted(kind, key=lambda n: (point[n], order[n]))
    return [(n, kind[n], point[n], line[n]) for n in names]


def _dot_legend() -> list[str]:
    rows = "".join(f'<tr><td>{DECISION_LETTERS[d]}</td><td bgcolor="{c}"> </td>'
                   f"<td>{_html_text(d.value)}</td></tr>" for d, c in _COLOURS.items())
    return ["  subgraph cluster_legend {", '    label="decisions";',
            '    legend [shape=plaintext, label=<<table border="0" cellborder="1" '
            f'cellspacing="0">{rows}</table>>];', "  }"]


def plan_to_dot(plan: MaterializationPlan) -> str:
    """A Graphviz digraph of the dataflow in program order, edges coloured by decision
    (the legend cluster lists the colours).  Node ids are ``n0``, ``n1``, ... and each
    node's label is its value name and op kind: Graphviz keeps ids like ``%0`` for its
    own anonymous nodes and renames a node so named, quoted or not."""
    title = f"{plan.kernel} on {plan.target}: {plan.status.value}, {plan.objective:,} ns"
    lines = [f"digraph {_dot_text(plan.kernel)} {{", "  rankdir=TB;",
             '  node [shape=box, fontname="monospace", fontsize=10];',
             f"  label={_dot_text(title)};"]
    ids: dict[str, str] = {}
    for name, kind, _, line in plan_nodes(plan):
        ids[name] = f"n{len(ids)}"
        what = " ".join(x for x in (short_kind(kind) if kind else "",
                                    f"line {line}" if line else "") if x)
        label = _dot_text(name, what) if what else _dot_text(name)
        lines.append(f"  {ids[name]} [label={label}];")
    for e in plan.edges:
        parts = [f"{DECISION_LETTERS[e.decision]} {e.decision.value}"]
        if e.resource:
            parts.append(e.resource + (f" x{e.versions}" if e.versions > 1 else ""))
        style = ", style=dashed" if e.decision in (Decision.FUSED, Decision.RECOMPUTED) else ""
        lines.append(f"  {ids[e.producer]} -> {ids[e.consumer]} "
                     f"[label={_dot_text(*parts)}, color={_COLOURS[e.decision]}, "
                     f"fontcolor={_COLOURS[e.decision]}{style}];")
    lines += _dot_legend()
    lines.append("}")
    return "\n".join(lines) + "\n"
