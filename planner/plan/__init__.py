"""The MaterializationPlan: the contract between planning and lowering (S3).

:mod:`.decisions` holds the frozen plan values (per edge: virtual, fused, recomputed
or materialized, with resource, layout, versions, lifetime and sync; every buffer it
holds, where and how long); :mod:`.plan_io`
their JSON form, schema, table and Graphviz renderings.  ``planner.lower`` depends on
this package and on ``planner.realize``, never on the solver.
"""

from planner.plan.decisions import (
    Baseline,
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
from planner.plan.plan_io import (
    format_plan_table,
    plan_from_json,
    plan_json_schema,
    plan_to_dot,
    plan_to_json,
)

__all__ = [
    "Baseline",
    "Decision",
    "EdgePlan",
    "LayoutChoice",
    "MaterializationPlan",
    "MemoryPlan",
    "PlannedBuffer",
    "Policy",
    "ProofSummary",
    "ResourcePeak",
    "Status",
    "format_plan_table",
    "plan_from_json",
    "plan_json_schema",
    "plan_to_dot",
    "plan_to_json",
]
