"""Planning: the CP-SAT materialization planner, its baselines and plan comparison.

Public entry points: :func:`plan_kernel` (a kernel and a target catalog to a
:class:`MaterializationPlan`), :func:`compare_plans` / :func:`format_comparison`,
and the plan's JSON form (:func:`plan_to_json`, :func:`plan_from_json`,
:func:`plan_json_schema`), table (:func:`format_plan_table`) and Graphviz
(:func:`plan_to_dot`).  The cost model is documented in :mod:`planner.solve.costs`,
the CP-SAT encoding in :mod:`planner.solve.model`.
"""

from planner.plan.decisions import (
    Baseline,
    Decision,
    EdgePlan,
    LayoutChoice,
    MaterializationPlan,
    MemoryPlan,
    Policy,
    ProofSummary,
    ResourcePeak,
    Status,
)
from planner.plan.plan_io import (
    format_plan_table,
    plan_from_json,
    plan_json_schema,
    plan_to_dot,
    plan_to_json,
)
from planner.solve.baselines import baseline_restrictions, greedy_assignment
from planner.solve.budget import DEFAULT_MODEL_LIMIT, ModelBudget, estimate_model_size
from planner.solve.compare import (
    Comparison,
    Delta,
    EdgeRow,
    PeakRow,
    compare_plans,
    comparison_to_json,
    format_comparison,
)
from planner.solve.costs import Assignment, Evaluation, Problem, build_problem, evaluate
from planner.solve.planner import content_hash, plan_kernel

__all__ = [
    "DEFAULT_MODEL_LIMIT",
    "Assignment",
    "Baseline",
    "Comparison",
    "Decision",
    "Delta",
    "EdgePlan",
    "EdgeRow",
    "Evaluation",
    "LayoutChoice",
    "MaterializationPlan",
    "MemoryPlan",
    "ModelBudget",
    "PeakRow",
    "Policy",
    "Problem",
    "ProofSummary",
    "ResourcePeak",
    "Status",
    "baseline_restrictions",
    "build_problem",
    "compare_plans",
    "comparison_to_json",
    "content_hash",
    "estimate_model_size",
    "evaluate",
    "format_comparison",
    "format_plan_table",
    "greedy_assignment",
    "plan_from_json",
    "plan_json_schema",
    "plan_kernel",
    "plan_to_dot",
    "plan_to_json",
]
