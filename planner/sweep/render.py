"""A sweep's results as text: the ranked table, JSON, CSV, and a self-contained HTML plot.

The table has one row per point × target × policy, best predicted time first:
predicted time, the peak of each bounded resource against its capacity, the buffers
held in more than one version, and the binding constraint (the tightest resource of a
feasible plan; the violated constraint group of an infeasible one, whose reason, from
:func:`planner.solve.explain.explain_infeasible`, follows the table on one line).
The plot (:func:`sweep_plot_html`) loads nothing: inline SVG and CSS, like
:mod:`planner.plan.report`; every text from the results is HTML-escaped.
"""

from __future__ import annotations

import csv
import io
import math
from html import escape

from planner.plan.plan_io import fmt_ns, fmt_size, table
from planner.sweep.run import SweepResult
from planner.sweep.worker import ERROR, PointResult

__all__ = ["config_text", "sweep_csv", "sweep_plot_html", "sweep_table"]


def config_text(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def _resources(rows: list[PointResult]) -> list[str]:
    """Bounded resources that appear in any plan's peaks, in first-seen order."""
    return list(dict.fromkeys(r for row in rows for r, _, cap in row.peaks if cap))


def _peak_cell(row: PointResult, resource: str) -> str:
    for r, peak, cap in row.peaks:
        if r == resource:
            return f"{fmt_size(peak)} / {fmt_size(cap)}"
    return "-"


def sweep_table(result: SweepResult, top: int | None = None) -> str:
    """The ranked table, then one line per infeasible or failed point, then a summary."""
    ranked = result.ranked()
    rows = ranked if top is None else [r for r in ranked if r.feasible][:top] + [
        r for r in ranked if not r.feasible]
    resources = _resources(rows)
    multi = len({(r.target, r.policy) for r in rows}) > 1
    measured = result.measured
    meas_rank = {i: n + 1 for n, i in enumerate(sorted(measured, key=measured.__getitem__))}
    headers = ["#", "config", *(["target", "policy"] if multi else []), "status",
               "predicted", *resources, "versions", "binding"]
    if measured:
        headers += ["measured", "meas. #"]
    body = []
    for n, r in enumerate(rows, 1):
        cells = [str(n) if r.feasible else "-", config_text(r.config),
                 *([r.target, r.policy] if multi else []), r.status,
                 fmt_ns(r.predicted_ns) if r.predicted_ns is not None else "-",
                 *(_peak_cell(r, res) for res in resources), r.versions or "-",
                 r.binding if r.status != ERROR else "error"]
        if measured:
            m = measured.get(r.index)
            cells += [fmt_ns(round(m)) if m is not None else "-",
                      str(meas_rank[r.index]) if m is not None else "-"]
        body.append(cells)
    right = [0, 4 + 2 * multi, *range(5 + 2 * multi, 5 + 2 * multi + len(resources))]
    lines = [table(headers, body, right=right)]
    bad = [r for r in rows if not r.feasible]
    if bad:
        lines.append("")
    for r in bad:
        where = f" on {r.target} ({r.policy})" if multi else ""
        lines.append(f"{r.status}: {config_text(r.config)}{where}: {r.reason}")
    c = result.counts()
    summary = (f"{c['done']}/{c['total']} points: {c['feasible']} feasible, "
               f"{c['infeasible']} infeasible, {c['failed']} failed; {c['cached']} from the "
               f"plan cache; {result.elapsed_s:.1f} s on {result.executor}")
    if result.interrupted:
        summary += f"; interrupted, {c['total'] - c['done']} not planned"
    lines += ["", summary]
    if measured:
        rho = "n/a" if result.rho is None else f"{result.rho:.3f}"
        lines.append(f"predicted vs measured rank over {len(measured)} points: "
                     f"Spearman rho = {rho}")
    return "\n".join(lines)


def sweep_csv(result: SweepResult) -> str:
    """One CSV row per point (ranked): each parameter its own column."""
    ranked = result.ranked()
    params = list(dict.fromkeys(k for r in ranked for k in r.config))
    resources = _resources(ranked)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["rank", *params, "target", "policy", "status", "predicted_ns",
                *(f"{res}_peak_bytes" for res in resources),
                *(f"{res}_capacity_bytes" for res in resources),
                "versions", "binding", "reason", "measured_ns", "cached"])
    for n, r in enumerate(ranked, 1):
        peaks = {res: (peak, cap) for res, peak, cap in r.peaks}
        w.writerow([n if r.feasible else "", *(r.config.get(p, "") for p in params),
                    r.target, r.policy, r.status, r.predicted_ns or "",
                    *(peaks.get(res, ("", ""))[0] for res in resources),
                    *(peaks.get(res, ("", ""))[1] for res in resources),
                    r.versions, r.binding, r.reason, result.measured.get(r.index, ""),
                    int(r.cached)])
    return buf.getvalue()


# --------------------------------------------------------------------------- the plot

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.05em; margin-top: 1.4em; }
svg text { font-family: ui-monospace, monospace; font-size: 10px; }
.feasible { fill: #3a7bd5; } .infeasible { fill: none; stroke: #c0392b; stroke-width: 1.6; }
.error { fill: #999; } .cap { stroke: #c0392b; stroke-dasharray: 5 3; }
.axis { stroke: #444; } .grid { stroke: #eee; }
.legend span { margin-right: 1.2em; }
"""

_W, _H, _L, _B = 900, 260, 70, 90  # width, plot height, left and bottom margins


def _x(i: int, n: int) -> float:
    return _L + (i + 0.5) * (_W - _L - 10) / max(1, n)


def _labels(rows: list[PointResult], svg: list[str]) -> None:
    for i, r in enumerate(rows):
        x = _x(i, len(rows))
        svg.append(f'<text transform="translate({x:.1f},{_H + 8}) rotate(60)">'
                   f'{escape(config_text(r.config))}</text>')


def _time_svg(rows: list[PointResult]) -> str:
    """Predicted time per configuration (log scale); infeasible points as red rings on
    the top edge, failed ones grey."""
    times = [r.predicted_ns for r in rows if r.predicted_ns]
    lo, hi = (min(times), max(times)) if times else (1, 10)
    lo_l, hi_l = math.log10(lo) - 0.1, math.log10(hi) + 0.1

    def y(ns: float) -> float:
        return 10 + (_H - 20) * (1 - (math.log10(ns) - lo_l) / (hi_l - lo_l))

    svg = [f'<svg id="time" width="{_W}" height="{_H + _B}" data-points="{len(rows)}">',
           f'<line class="axis" x1="{_L}" y1="{_H}" x2="{_W}" y2="{_H}"/>',
           f'<line class="axis" x1="{_L}" y1="0" x2="{_L}" y2="{_H}"/>']
    for ns in sorted({lo, hi}):
        svg.append(f'<text x="2" y="{y(ns) + 3:.1f}">{escape(fmt_ns(ns))}</text>')
    for i, r in enumerate(rows):
        x = _x(i, len(rows))
        tip = f"<title>{escape(config_text(r.config))}: {escape(r.status)}</title>"
        if r.predicted_ns:
            svg.append(f'<circle class="feasible" cx="{x:.1f}" cy="{y(r.predicted_ns):.1f}" '
                       f'r="4">{tip}</circle>')
        else:
            cls = "error" if r.status == ERROR else "infeasible"
            svg.append(f'<circle class="{cls}" cx="{x:.1f}" cy="8" r="4">{tip}</circle>')
    _labels(rows, svg)
    svg.append("</svg>")
    return "".join(svg)


def _resource_svg(rows: list[PointResult], resource: str, cap: int) -> str:
    """Peak bytes of ``resource`` per configuration against its capacity line."""
    peaks = [next((p for r_, p, _ in r.peaks if r_ == resource), None) for r in rows]
    top = max([cap, *(p for p in peaks if p)]) * 1.1

    def y(b: float) -> float:
        return 10 + (_H - 20) * (1 - b / top)

    svg = [f'<svg class="resource" data-resource="{escape(resource)}" width="{_W}" '
           f'height="{_H + _B}">',
           f'<line class="axis" x1="{_L}" y1="{_H}" x2="{_W}" y2="{_H}"/>',
           f'<line class="axis" x1="{_L}" y1="0" x2="{_L}" y2="{_H}"/>',
           f'<line class="cap" x1="{_L}" y1="{y(cap):.1f}" x2="{_W}" y2="{y(cap):.1f}"/>',
           f'<text x="2" y="{y(cap) + 3:.1f}">{escape(fmt_size(cap))}</text>']
    for i, (r, p) in enumerate(zip(rows, peaks, strict=True)):
        x = _x(i, len(rows))
        if p is not None:
            svg.append(f'<circle class="feasible" cx="{x:.1f}" cy="{y(p):.1f}" r="4">'
                       f'<title>{escape(config_text(r.config))}: {p:,} B</title></circle>')
        elif not r.feasible:
            svg.append(f'<circle class="{"error" if r.status == ERROR else "infeasible"}" '
                       f'cx="{x:.1f}" cy="8" r="4"><title>{escape(r.reason)}</title></circle>')
    _labels(rows, svg)
    svg.append("</svg>")
    return "".join(svg)


def sweep_plot_html(result: SweepResult) -> str:
    """One self-contained page: predicted time per configuration, then each bounded
    resource's peak per configuration against its capacity."""
    rows = sorted(result.results, key=lambda r: r.index)
    c = result.counts()
    title = f"sweep of {result.kernel}"
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escape(title)}"
             f"</title><style>{_CSS}</style></head><body>",
             f"<h1>{escape(title)}</h1><p>{escape(result.space)}</p>",
             f"<p>{c['done']}/{c['total']} points: {c['feasible']} feasible, "
             f"{c['infeasible']} infeasible, {c['failed']} failed</p>",
             "<p class='legend'><span>● feasible (predicted)</span><span style='color:#c0392b'>"
             "○ infeasible</span><span style='color:#999'>● failed</span>"
             "<span style='color:#c0392b'>- - capacity</span></p>",
             "<h2>Predicted time per configuration</h2>", _time_svg(rows)]
    caps = {res: cap for r in rows for res, _, cap in r.peaks if cap}
    for resource, cap in caps.items():
        parts += [f"<h2>Peak {escape(resource)} per configuration (capacity "
                  f"{escape(fmt_size(cap))})</h2>", _resource_svg(rows, resource, cap)]
    parts.append("</body></html>")
    return "\n".join(parts)
