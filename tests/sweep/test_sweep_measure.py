"""Spearman's ρ against values worked out by hand, and the plot's marks."""

from __future__ import annotations

import math

import pytest

from planner.sweep.measure import spearman
from planner.sweep.render import sweep_plot_html
from planner.sweep.run import SweepResult
from planner.sweep.worker import PointResult


def test_spearman_without_ties_is_one_minus_six_sum_d2():
    # d = (-1, 1, -1, 1, 0): 1 - 6 * 4 / (5 * 24) = 0.8
    assert spearman([1, 2, 3, 4, 5], [20, 10, 40, 30, 50]) == pytest.approx(0.8)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_spearman_gives_ties_their_average_rank():
    # ranks x = (1, 2.5, 2.5, 4), y = (1, 3, 2, 4): 4.5 / sqrt(4.5 * 5)
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert spearman([1, 1], [1, 2]) is None and spearman([1], [1]) is None


def test_the_plot_marks_feasible_and_infeasible_points_and_capacity_lines():
    tg = ("threadgroup_memory", 30_000, 32_768)
    rows = [PointResult(0, {"b": 1}, "apple-m2", "default", "optimal", 1_000, (tg,)),
            PointResult(1, {"b": 2}, "apple-m2", "default", "infeasible",
                        reason="%As 40,000 B > threadgroup_memory capacity 32,768 B"),
            PointResult(2, {"b": "<x>"}, "apple-m2", "default", "error", reason="boom")]
    page = sweep_plot_html(SweepResult("k", "b in {1, 2}", 3, rows))
    assert page.count('class="feasible"') == 2  # time chart + resource chart
    assert page.count('class="infeasible"') == 2 and page.count('class="error"') == 2
    assert 'data-resource="threadgroup_memory"' in page and 'class="cap"' in page
    assert "32 KiB" in page and "&lt;x&gt;" in page and "<x>" not in page
    assert "://" not in page
