"""A plan says where its time went: build, proofs, model, solve, evaluate (or explain),
with the total beside the solve time in the header."""

from __future__ import annotations

from planning_support import bindings, kernel, target

from planner.plan import format_plan_table, plan_from_json, plan_to_json
from planner.solve import plan_kernel


def test_feasible_plan_reports_every_phase_and_the_total() -> None:
    plan = plan_kernel(kernel("softmax"), target("x86-avx2"), bindings("softmax"))
    names = [n for n, _ in plan.phases]
    assert names == ["build", "proofs", "model", "solve", "evaluate"]
    solve = dict(plan.phases)["solve"]
    assert solve >= plan.solve_time_s * 0.5  # the phase includes CP-SAT's own wall time
    total = sum(t for _, t in plan.phases)
    head = format_plan_table(plan).splitlines()[2]
    assert head.startswith(f"status optimal in {plan.solve_time_s:.2f} s (total {total:.2f} s")
    assert plan_from_json(plan_to_json(plan)).phases == plan.phases


def test_infeasible_plan_reports_the_explanation_phase() -> None:
    plan = plan_kernel(kernel("softmax"), target("x86-avx2"), bindings("softmax"),
                       baseline="all-virtual")
    assert plan.status.value == "infeasible"
    assert [n for n, _ in plan.phases][-1] == "explain"


def test_phases_are_reported_live_as_they_end() -> None:
    seen: list[tuple[str, float, float]] = []
    import time

    def on_phase(name: str, seconds: float) -> None:
        seen.append((name, seconds, time.perf_counter()))

    start = time.perf_counter()
    plan = plan_kernel(kernel("softmax"), target("x86-avx2"), bindings("softmax"),
                       on_phase=on_phase)
    assert [(n, s) for n, s, _ in seen] == list(plan.phases)
    # called when each phase ends, not all at once afterwards: the call times advance by
    # the phase durations (within scheduling noise)
    for (_, seconds, at), before in zip(seen, [start] + [t for _, _, t in seen], strict=False):
        assert at - before >= seconds * 0.9 - 0.01


def test_the_terminal_status_line_shows_the_running_phase() -> None:
    import io

    from planner.cli.plan_cmds import LiveStatus

    out = io.StringIO()
    live = LiveStatus(out)
    live.phase("build", 0.25)
    live.phase("proofs", 0.5)
    live.progress(1200, 1000, 1.5)
    frames = out.getvalue().split("\r")
    assert frames[1].strip() == "build…"
    assert frames[2].strip() == "build 0.25 s · proofs…"
    assert frames[-1].strip() == ("build 0.25 s · proofs 0.50 s · model… best 1,200 ns, "
                                  "bound 1,000 ns (1.5 s)")
    live.clear()
    assert out.getvalue().endswith("\r")
