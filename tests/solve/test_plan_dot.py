"""``planner plan --dot`` (issue 14): safe node ids, labels with the user's value names
and op kinds, edges coloured by decision, a legend; rendered by Graphviz when present."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from planning_support import bindings, kernel, target

from planner.plan.plan_io import short_kind
from planner.solve import MaterializationPlan, plan_kernel, plan_to_dot

NODE = re.compile(r'^  (\S+) \[label="((?:[^"\\]|\\.)*)"\];$')
EDGE = re.compile(r"^  (\S+) -> (\S+) \[label=\"(?:[^\"\\]|\\.)*\", color=(\w+)")
SAFE_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
COLOURS = {"virtual": "forestgreen", "fused": "royalblue", "recomputed": "darkorange",
           "materialized": "firebrick"}


def _plans() -> list[MaterializationPlan]:
    return [plan_kernel(kernel("softmax"), target("x86-avx2"), bindings("softmax")),
            plan_kernel(kernel("attention"), target("apple-m2"), bindings("attention"))]


def parse(dot: str) -> tuple[dict[str, list[str]], list[tuple[str, str, str]]]:
    nodes: dict[str, list[str]] = {}
    edges = []
    for line in dot.splitlines():
        if m := NODE.match(line):
            nodes[m.group(1)] = m.group(2).split("\\n")
        elif m := EDGE.match(line):
            edges.append((m.group(1), m.group(2), m.group(3)))
    return nodes, edges


@pytest.mark.parametrize("plan", _plans(), ids=lambda p: f"{p.kernel}-{p.target}")
def test_dot_ids_are_safe_and_labels_name_the_values(plan: MaterializationPlan) -> None:
    nodes, edges = parse(plan_to_dot(plan))
    assert nodes and all(SAFE_ID.match(i) for i in nodes)
    assert len(edges) == len(plan.edges)
    for e, (src, dst, colour) in zip(plan.edges, edges, strict=True):
        assert src in nodes and dst in nodes
        for node, name, kind, line in ((src, e.producer, e.producer_kind, e.lines[0]),
                                       (dst, e.consumer, e.consumer_kind, e.lines[1])):
            where = f" line {line}" if line else ""
            assert nodes[node] == [name, short_kind(kind) + where]
        assert colour == COLOURS[e.decision.value]
    assert len({tuple(v) for v in nodes.values()}) == len(nodes)  # one node per value


def test_dot_has_a_legend_of_every_decision() -> None:
    dot = plan_to_dot(_plans()[0])
    legend = dot[dot.index("subgraph cluster_legend"):]
    for letter, (decision, colour) in zip("VFRM", COLOURS.items(), strict=True):
        assert f"<td>{letter}</td><td bgcolor=\"{colour}\"> </td><td>{decision}</td>" in legend


@pytest.mark.parametrize("plan", _plans(), ids=lambda p: f"{p.kernel}-{p.target}")
def test_graphviz_renders_the_value_names(plan: MaterializationPlan) -> None:
    if shutil.which("dot") is None:
        pytest.skip("Graphviz 'dot' is not installed")
    svg = subprocess.run(["dot", "-Tsvg"], input=plan_to_dot(plan), capture_output=True,
                         text=True, check=True, timeout=60).stdout
    nodes, _ = parse(plan_to_dot(plan))
    titles = set(re.findall(r'<g id="node\d+" class="node">\s*<title>([^<]*)</title>', svg))
    assert set(nodes) <= titles  # Graphviz kept every id (it renames "%0"-like ones)
    texts = {t.replace("&#45;", "-") for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)}
    for e in plan.edges:
        assert e.producer in texts and e.consumer in texts


def test_dot_labels_carry_the_users_source_lines() -> None:
    """The lines come from the example's own text: where ``e = exp(sh)`` and
    ``s = reduce_sum(e, axis=1)`` are written in softmax.py."""
    from planner.ir.examples import list_examples

    path = next(p for p in list_examples() if p.stem == "softmax")
    text = path.read_text().splitlines()
    line_of = {k: 1 + next(i for i, t in enumerate(text) if t.strip().startswith(k))
               for k in ("e = exp(", "s = reduce_sum(")}
    plan = next(p for p in _plans() if p.kernel == "softmax")
    edge = next(e for e in plan.edges if e.edge_id == "%e -> %s#0")
    assert edge.lines == (line_of["e = exp("], line_of["s = reduce_sum("])
    nodes, _ = parse(plan_to_dot(plan))
    assert ["%e", f"exp line {line_of['e = exp(']}"] in nodes.values()
