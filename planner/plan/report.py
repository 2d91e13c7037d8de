"""A MaterializationPlan as one self-contained HTML page (``planner report``).

:func:`plan_report_html` is a pure function of the plan (and, optionally, the
kernel's text): the plan table, the dataflow graph as inline SVG laid out here (nodes
in program order, edges coloured by decision, a legend), a memory-over-time chart per
resource (each planned buffer a band over its live points, the capacity a line) and
the proofs.  The page loads nothing: its CSS and its script are inline and it names no
external URL.  Every piece of text from the plan is HTML-escaped.  The script counts
what the page drew and writes ``data-edge-count`` and ``data-resource-count`` on
``<body>`` (a check that the page rendered and its script ran).
"""

from __future__ import annotations

from html import escape

from planner.plan.decisions import Decision, MaterializationPlan, PlannedBuffer, Status
from planner.plan.plan_io import (
    _COLOURS,
    DECISION_LETTERS,
    decision_text,
    edge_kinds,
    edge_lines,
    fmt_ns,
    fmt_size,
    plan_nodes,
    proof_summary,
    short_kind,
)

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
code, pre, .mono { font-family: ui-monospace, monospace; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; font-size: 0.8em; }
svg text { font-family: ui-monospace, monospace; font-size: 11px; }
.edge { fill: none; stroke-width: 1.6; }
.edge.dashed { stroke-dasharray: 5 3; }
.edge.hl, tr.hl td { stroke-width: 4; background: #fff3c4; }
.proof-proved { color: #1a7f37; } .proof-refuted, .proof-unknown { color: #b00020; }
.proof-assumed { color: #9a6700; }
"""

_JS = """
(function () {
  var edges = document.querySelectorAll('#dataflow .edge');
  var charts = document.querySelectorAll('.memory-chart');
  document.body.setAttribute('data-edge-count', String(edges.length));
  document.body.setAttribute('data-resource-count', String(charts.length));
  function toggle(id, on) {
    document.querySelectorAll('[data-edge="' + id + '"]').forEach(function (el) {
      el.classList.toggle('hl', on);
    });
  }
  document.querySelectorAll('[data-edge]').forEach(function (el) {
    var id = el.getAttribute('data-edge');
    el.addEventListener('mouseenter', function () { toggle(id, true); });
    el.addEventListener('mouseleave', function () { toggle(id, false); });
  });
  document.body.setAttribute('data-ready', 'yes');
})();
"""

_BAND_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
                 "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _header(plan: MaterializationPlan) -> str:
    binds = " ".join(f"{k}={v}" for k, v in plan.bindings) or "(none)"
    base = f", baseline {plan.baseline.value}" if plan.baseline else ""
    status = plan.status.value + (f" (gap {plan.gap:.2%})" if plan.status is Status.FEASIBLE
                                  else "")
    parts = ", ".join(f"{k} {v:,}" for k, v in sorted(plan.breakdown.items()) if v)
    out = [f"<h1>{_e(plan.kernel)} on {_e(plan.target)}</h1>",
           f"<p>policy {_e(plan.policy.value)}{_e(base)}; bindings <code>{_e(binds)}</code>; "
           f"status <b>{_e(status)}</b> in {plan.solve_time_s:.2f} s</p>"]
    if plan.status is Status.INFEASIBLE:
        out.append("<p>infeasible:</p><ul>" + "".join(f"<li>{_e(x)}</li>"
                                                      for x in plan.explanation) + "</ul>")
    else:
        out.append(f"<p>estimated time <b>{_e(fmt_ns(plan.objective))}</b> ({_e(parts)})</p>")
    return "\n".join(out)


def _edge_table(plan: MaterializationPlan) -> str:
    head = ("edge", "ops", "lines", "bytes", "decision", "versions", "lifetime", "cost ns",
            "cost terms", "reason")
    rows = []
    for i, e in enumerate(plan.edges):
        terms = ", ".join(f"{k} {v:,}" for k, v in sorted(e.cost.items()))
        colour = _COLOURS[e.decision]
        rows.append(
            f'<tr class="plan-edge" data-edge="e{i}" data-decision="{_e(e.decision.value)}">'
            f"<td class=mono>{_e(e.edge_id)}</td><td>{_e(edge_kinds(e))}</td>"
            f"<td class=num>{_e(edge_lines(e))}</td><td class=num>{_e(fmt_size(e.bytes))}</td>"
            f'<td style="color:{colour}">{_e(DECISION_LETTERS[e.decision])} '
            f"{_e(decision_text(e))}</td><td class=num>{e.versions}</td>"
            f"<td class=num>{e.lifetime[0]}–{e.lifetime[1]}</td>"
            f"<td class=num>{e.total_cost:,}</td><td>{_e(terms)}</td><td>{_e(e.reason)}</td>"
            "</tr>")
    return ("<table id=plan-table><thead><tr>" + "".join(f"<th>{h}</th>" for h in head)
            + "</tr></thead><tbody>" + "\n".join(rows) + "</tbody></table>")


def _legend(x: int, y: int) -> str:
    out = [f'<g class="legend" transform="translate({x},{y})">',
           '<text x="0" y="0" font-weight="bold">decisions</text>']
    for i, (d, colour) in enumerate(_COLOURS.items()):
        yy = 16 + 16 * i
        dash = ' stroke-dasharray="5 3"' if d in (Decision.FUSED, Decision.RECOMPUTED) else ""
        out.append(f'<line x1="0" y1="{yy - 4}" x2="24" y2="{yy - 4}" stroke="{colour}" '
                   f'stroke-width="2"{dash}/><text x="30" y="{yy}">'
                   f"{DECISION_LETTERS[d]} {_e(d.value)}</text>")
    out.append("</g>")
    return "".join(out)


def _dataflow_svg(plan: MaterializationPlan) -> str:
    """An arc diagram: one row per node in program order, each edge an arc on the right
    whose width grows with the distance it spans, coloured by decision."""
    nodes = plan_nodes(plan)
    row, top, box_w, box_x = 34, 30, 190, 10
    index = {name: i for i, (name, _, _, _) in enumerate(nodes)}
    y_of = [top + i * row for i in range(len(nodes))]
    arc_x0 = box_x + box_w
    max_span = max((abs(index[e.consumer] - index[e.producer]) for e in plan.edges),
                   default=1) or 1
    arc_room = 40 + 22 * min(max_span, 20)
    legend_x = arc_x0 + arc_room + 20
    width = legend_x + 170
    height = max(top + len(nodes) * row, top + 100) + 10
    out = [f'<svg id="dataflow" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}" role="img">',
           f"<title>{_e(plan.kernel)} dataflow</title>"]
    for i, e in enumerate(plan.edges):
        a, b = index[e.producer], index[e.consumer]
        y1, y2 = y_of[a] + row // 2 - 4, y_of[b] + row // 2 - 4
        bulge = 20 + arc_room * abs(b - a) / max_span
        cls = "edge dashed" if e.decision in (Decision.FUSED, Decision.RECOMPUTED) else "edge"
        out.append(f'<path class="{cls}" data-edge="e{i}" '
                   f'data-decision="{_e(e.decision.value)}" stroke="{_COLOURS[e.decision]}" '
                   f'd="M {arc_x0} {y1} C {arc_x0 + bulge:.1f} {y1}, {arc_x0 + bulge:.1f} {y2}, '
                   f'{arc_x0} {y2}" marker-end="url(#arrow-{e.decision.value})">'
                   f"<title>{_e(e.edge_id)}: {_e(decision_text(e))}</title></path>")
    for (name, kind, point, line), y in zip(nodes, y_of, strict=True):
        where = f"line {line} · @{point}" if line else f"@{point}"
        out.append(f'<g class="node" data-value="{_e(name)}" data-point="{point}" '
                   f'data-line="{line}">'
                   f'<rect x="{box_x}" y="{y}" width="{box_w}" height="{row - 8}" rx="4" '
                   'fill="#f4f4f4" stroke="#888"/>'
                   f'<text x="{box_x + 6}" y="{y + 17}"><tspan class="value-name" '
                   f'font-weight="bold">{_e(name)}</tspan> <tspan fill="#666">'
                   f"{_e(short_kind(kind))}</tspan></text>"
                   f'<text x="{box_x + box_w - 6}" y="{y + 17}" text-anchor="end" '
                   f'fill="#999">{_e(where)}</text></g>')
    defs = "".join(f'<marker id="arrow-{d.value}" viewBox="0 0 10 10" refX="9" refY="5" '
                   f'markerWidth="6" markerHeight="6" orient="auto-start-reverse">'
                   f'<path d="M 0 0 L 10 5 L 0 10 z" fill="{c}"/></marker>'
                   for d, c in _COLOURS.items())
    out.insert(2, f"<defs>{defs}</defs>")
    out.append(_legend(legend_x, top + 10))
    out.append("</svg>")
    return "\n".join(out)


def _points(b: PlannedBuffer) -> list[int]:
    return sorted({p for _, lo, hi in b.live for p in range(lo, hi + 1)})


def _memory_chart(plan: MaterializationPlan, resource: str, buffers: list[PlannedBuffer],
                  k: int) -> str:
    """Stacked bands: at each program point the buffers held there, in plan order."""
    peak = next((p for p in plan.peaks if p.resource == resource), None)
    capacity = peak.capacity if peak else None
    held = {b.name: _points(b) for b in buffers}
    all_points = [p for pts in held.values() for p in pts]
    lo, hi = (min(all_points), max(all_points)) if all_points else (0, 0)
    totals = {p: sum(b.bytes for b in buffers if p in held[b.name]) for p in range(lo, hi + 1)}
    top_bytes = max([*totals.values(), 1])
    # Scale to the capacity unless it dwarfs what is held (then the line is drawn at the
    # top, marked as off the scale).
    off_scale = capacity is not None and capacity > 4 * top_bytes
    y_max = top_bytes * 1.15 if capacity is None or off_scale else max(capacity, top_bytes) * 1.05
    left, right, top, plot_h = 70, 20, 20, 180
    n = hi - lo + 1
    step = max(14, min(40, 700 // max(n, 1)))
    plot_w = n * step
    width, height = left + plot_w + right, top + plot_h + 40

    def y(v: float) -> float:
        return top + plot_h - plot_h * v / y_max

    out = [f'<svg class="memory-chart" data-resource="{_e(resource)}" '
           f'width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img"><title>{_e(resource)} over time</title>',
           f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
           'stroke="#333"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#333"/>']
    for p in range(lo, hi + 1):
        if n <= 30 or (p - lo) % 5 == 0:
            out.append(f'<text x="{left + (p - lo) * step + step / 2:.1f}" '
                       f'y="{top + plot_h + 14}" text-anchor="middle">{p}</text>')
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{top + plot_h + 32}" '
               'text-anchor="middle">program point</text>')
    for v in (0, top_bytes):
        out.append(f'<text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end">'
                   f"{_e(fmt_size(v))}</text>")
    base = dict.fromkeys(range(lo, hi + 1), 0)
    for i, b in enumerate(buffers):
        colour = _BAND_COLOURS[i % len(_BAND_COLOURS)]
        rects = []
        for p in held[b.name]:
            y0, y1 = y(base[p] + b.bytes), y(base[p])
            rects.append(f'<rect x="{left + (p - lo) * step}" y="{y0:.1f}" width="{step}" '
                         f'height="{max(y1 - y0, 0.5):.1f}"/>')
            base[p] += b.bytes
        out.append(f'<g class="band" data-buffer="{_e(b.name)}" fill="{colour}" '
                   f'fill-opacity="0.75" stroke="#fff" stroke-width="0.5">'
                   f"<title>{_e(b.name)} ({_e(b.role)}): {_e(fmt_size(b.bytes))}"
                   f"{' x' + str(b.versions) if b.versions > 1 else ''}</title>"
                   + "".join(rects) + "</g>")
    if capacity is not None:
        cy = top if off_scale else y(capacity)
        note = " (off the scale)" if off_scale else ""
        out.append(f'<line class="capacity" data-capacity="{capacity}" x1="{left}" '
                   f'y1="{cy:.1f}" x2="{left + plot_w}" y2="{cy:.1f}" stroke="#b00020" '
                   f'stroke-dasharray="{"6 4" if off_scale else "none"}" stroke-width="1.5"/>'
                   f'<text x="{left + plot_w}" y="{cy - 4:.1f}" text-anchor="end" '
                   f'fill="#b00020">capacity {_e(fmt_size(capacity))}{note}</text>')
    out.append("</svg>")
    peak_text = (f"peak {fmt_size(peak.peak_bytes)} at point {peak.at_point}, capacity "
                 f"{fmt_size(capacity)}" if peak else "no peak recorded")
    keys = "".join(f'<li><span style="color:{_BAND_COLOURS[i % len(_BAND_COLOURS)]}">■</span> '
                   f"<code>{_e(b.name)}</code> {_e(b.role)}, {_e(fmt_size(b.bytes))}</li>"
                   for i, b in enumerate(buffers))
    return (f'<section class="resource" id="resource-{k}"><h3>{_e(resource)}</h3>'
            f"<p>{_e(peak_text)}</p>" + "\n".join(out)
            + f'<ul class="band-keys">{keys}</ul></section>')


def _memory(plan: MaterializationPlan) -> str:
    by_resource: dict[str, list[PlannedBuffer]] = {}
    for b in plan.buffers:
        by_resource.setdefault(b.resource, []).append(b)
    if not by_resource:
        return "<p>no buffers held</p>"
    return "\n".join(_memory_chart(plan, r, bs, k)
                     for k, (r, bs) in enumerate(by_resource.items()))


def _proofs(plan: MaterializationPlan) -> str:
    if not plan.proofs:
        return "<p>no proofs</p>"
    items = "".join(f'<li class="proof proof-{_e(p.status)}"><b>{_e(p.name)}</b> '
                    f"{_e(p.status)}" + (f": {_e(p.detail)}" if p.detail else "") + "</li>"
                    for p in plan.proofs)
    return f"<p>{_e(proof_summary(plan))}</p><ul id=proofs>{items}</ul>"


def plan_report_html(plan: MaterializationPlan, kernel_text: str | None) -> str:
    """The plan as one self-contained HTML page (inline CSS, script and SVG; nothing
    fetched); ``kernel_text``, when given, is shown at the end."""
    title = f"{plan.kernel} on {plan.target}: materialization plan"
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{_e(title)}</title><style>{_CSS}</style></head>",
             f'<body data-edges="{len(plan.edges)}">', _header(plan),
             "<h2>Plan</h2>", _edge_table(plan),
             "<h2>Dataflow</h2>", _dataflow_svg(plan),
             "<h2>Memory over time</h2>", _memory(plan),
             "<h2>Proofs</h2>", _proofs(plan)]
    if kernel_text is not None:
        parts += ["<h2>Kernel</h2>", f"<pre id=kernel>{_e(kernel_text)}</pre>"]
    parts += [f"<script>{_JS}</script>", "</body></html>"]
    return "\n".join(parts) + "\n"
