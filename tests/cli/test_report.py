"""``planner report`` and :func:`planner.plan.report.plan_report_html` (issue 14): one
self-contained, escaped HTML page with the plan table, the dataflow SVG, a memory chart
per resource and the proofs."""

from __future__ import annotations

import dataclasses
import html
import re
from functools import cache
from pathlib import Path

import pytest

from planner.catalog import CatalogRegistry
from planner.cli import COMMAND_MODULES, main
from planner.ir.examples import builtin_examples_dir, load_example
from planner.plan import MaterializationPlan
from planner.plan.report import plan_report_html
from planner.solve import plan_kernel

ROOT = Path(__file__).resolve().parents[2]


@cache
def plan_of(kernel: str, target: str) -> MaterializationPlan:
    example = load_example(builtin_examples_dir() / f"{kernel}.py")
    return plan_kernel(example.kernel, CatalogRegistry().get(target), dict(example.bindings))


@pytest.mark.parametrize(("kernel", "target"), [("softmax", "x86-avx2"),
                                                 ("attention", "apple-m2")])
def test_page_has_table_graph_memory_and_proofs(kernel: str, target: str) -> None:
    plan = plan_of(kernel, target)
    page = plan_report_html(plan, "kernel text")
    assert page.count('<tr class="plan-edge"') == len(plan.edges)
    assert len(re.findall(r'<path class="edge[^"]*" data-edge=', page)) == len(plan.edges)
    for e in plan.edges:
        assert f'data-value="{e.producer}"' in page and f'data-value="{e.consumer}"' in page
        assert html.escape(e.reason) in page
    resources = list(dict.fromkeys(b.resource for b in plan.buffers))
    assert page.count('<svg class="memory-chart"') == len(resources)
    assert page.count('<g class="band"') == len(plan.buffers)
    capacities = {p.resource: p.capacity for p in plan.peaks}
    assert page.count('<line class="capacity"') == sum(capacities[r] is not None
                                                        for r in resources)
    assert page.count('<li class="proof') == len(plan.proofs)
    for letter in ("V virtual", "F fused", "R recomputed", "M materialized"):
        assert letter in page  # the legend
    assert '<pre id=kernel>kernel text</pre>' in page


def test_page_is_self_contained() -> None:
    page = plan_report_html(plan_of("attention", "apple-m2"), None)
    assert page.startswith("<!DOCTYPE html>") and "<script>" in page and "<style>" in page
    assert not re.search(r"https?:|//[a-z]|\bsrc=|\bhref=|@import", page)
    assert "<pre id=kernel>" not in page


def test_all_text_is_escaped() -> None:
    plan = plan_of("softmax", "x86-avx2")
    evil = "<script>alert(1)</script>&\""
    edges = tuple(dataclasses.replace(e, reason=evil, value=evil) for e in plan.edges)
    proofs = tuple(dataclasses.replace(p, detail=evil) for p in plan.proofs)
    buffers = tuple(dataclasses.replace(b, name=b.name + evil) for b in plan.buffers)
    bad = dataclasses.replace(plan, edges=edges, proofs=proofs, buffers=buffers,
                              kernel="k<i>x</i>")
    page = plan_report_html(bad, evil)
    assert "<script>alert(1)" not in page and "<i>" not in page
    assert "k&lt;i&gt;x&lt;/i&gt;" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&amp;&quot;" in page
    assert page.count("<script>") == 1  # the page's own


def test_report_command_writes_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    assert "planner.cli.report_cmds" in COMMAND_MODULES
    out_file = tmp_path / "plan.html"
    code = main(["report", "softmax", "-o", str(out_file), "--bind", "M=5", "--bind", "N=3"])
    out, _ = capsys.readouterr()
    assert code == 0 and out.startswith(f"wrote {out_file}")
    page = out_file.read_text()
    assert "softmax on x86-avx2" in page and "M=5" in page


def test_report_command_refuses_a_missing_directory(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["report", "softmax", "-o", str(tmp_path / "no" / "plan.html")])
    _, err = capsys.readouterr()
    assert code == 1 and "does not exist" in err


def test_readme_lists_report_once() -> None:
    readme = (ROOT / "README.md").read_text()
    assert readme.count("| `planner report KERNEL") == 1
