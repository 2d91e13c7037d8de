"""planner: a constraint-solver-driven materialization planner for tile kernels.

Layers, in data-flow order: ``planner.ir`` (Tile IR, frontend, verifier, forms,
reference interpreter) → ``planner.catalog`` (YAML targets) → ``planner.plan`` (the
MaterializationPlan contract) → ``planner.realize`` (execution binding and homes: what a
decision means physically) → ``planner.prove`` (z3 proofs) → ``planner.solve`` (cost
model, CP-SAT planning) → ``planner.lower`` (loop program, llvmlite CPU backend, Metal
emission).  The CLI and the HTTP service are thin shells over them.
"""

from planner.errors import Diagnostic, PlannerError, SourceLoc

__version__ = "0.1.0"

__all__ = ["Diagnostic", "PlannerError", "SourceLoc", "__version__"]
