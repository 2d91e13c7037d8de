"""Proofs of a kernel's target obligations (S5, S13, S14, S17, S20), apart from the planner.

:mod:`.proofs` proves or refutes can_access, instance factorization, capacity, layout
injectivity/bounds and signed-64-bit addressing with z3 (:mod:`.z3_exprs`,
:mod:`.z3_layout`), over the execution binding of ``planner.realize``.
"""

from planner.prove.proofs import PROOF_NAMES, ProofReport, ProofResult, prove_kernel

__all__ = ["PROOF_NAMES", "ProofReport", "ProofResult", "prove_kernel"]
