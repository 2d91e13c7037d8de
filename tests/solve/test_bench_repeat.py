"""``bench/solve.py --repeat N``: repeated runs summarized as the median run, the wall
time's median and range, every status seen and the largest gap."""

from __future__ import annotations

from bench_modules import load_bench


def test_repeated_runs_report_median_range_statuses_and_worst_gap() -> None:
    median_run = load_bench("solve")._median_run
    runs = [("a", "optimal", 0.0, 9.5), ("b", "feasible", 0.002, 10.1),
            ("c", "optimal", 0.0, 9.2)]
    run, status, gap, wall = median_run(runs, 1, 2, 3)
    assert run[0] == "a"  # the run whose wall time is the median
    assert status == "optimal×2 feasible×1"
    assert gap == 0.002
    assert wall == "9.50 [9.20-10.10]"


def test_a_single_run_is_reported_as_before() -> None:
    run, status, gap, wall = load_bench("solve")._median_run([("a", "optimal", 0.0, 1.234)],
                                                             1, 2, 3)
    assert (run[0], status, gap, wall) == ("a", "optimal", 0.0, "1.23")
