"""Refusals of the Metal backend (S17), and the checks that run before lowering.

:func:`_fail` is how every module of the backend raises (kind ``lowering``, rule
``S17`` unless another is named).  :func:`_check_target` refuses a target whose backend
is not Metal; :func:`_check_memories` refuses explicit Memory with no home of its class
at its owner's scope, or more of it than group memory holds, before the plan is looked
at (the plan may be infeasible).
"""

from __future__ import annotations

from collections.abc import Mapping

from planner.catalog import Target
from planner.errors import PlannerError, error
from planner.ir import core
from planner.ir.core import Kernel
from planner.lower.metal import tables as tb
from planner.plan.decisions import MaterializationPlan
from planner.realize.binding import ExecutionBinding

_KIND = "lowering"
_RULE = "S17"


def _fail(message: str, rule: str = _RULE) -> PlannerError:
    return error(message, rule=rule, kind=_KIND)


def _check_target(target: Target) -> None:
    backend = target.backend.value if target.backend is not None else None
    if backend != "metal":
        raise _fail(f"target {target.name} has backend {backend or 'none'}: the Metal "
                    "emitter lowers only targets whose catalog says backend: metal",
                    rule="backend")


def _memory_bytes(op: core.AllocOp, env: Mapping[str, int]) -> int | None:
    try:
        return op.layout.storage_elements(env) * op.dtype.itemsize
    except KeyError:
        return None


def _memory_name(op: core.AllocOp) -> str:
    return f"%{op.memory.name_hint}" if op.memory.name_hint else "a Memory"


def _check_memories(kernel: Kernel, plan: MaterializationPlan | None, target: Target,
                    env: Mapping[str, int], binding: ExecutionBinding) -> None:
    """S17 on explicit Memory: a home of the requested class at the owner's scope, and
    group memory within capacity (checked before the plan, which may be infeasible)."""
    placed = {m.name: m.resource for m in plan.memories} if plan is not None else {}
    versions = {m.name: m.versions for m in plan.memories} if plan is not None else {}
    per_home: dict[str, list[tuple[str, int, int]]] = {}
    for op in kernel.body.walk():
        if not isinstance(op, core.AllocOp):
            continue
        name = _memory_name(op)
        mb = binding.memory(op)
        owner, cls = mb.owner_scope, mb.resource_class
        nbytes = _memory_bytes(op, env)
        size = f"{nbytes:,} B" if nbytes is not None else "a size the plan does not bind"
        res = mb.home_named(placed.get(name))
        if res is None:
            homes = ", ".join(f"{r.name} (per {r.instance_scope})"
                              for r in target.resources_for_class(cls)) or "none"
            raise _fail(f"Memory {name} ({cls}, {size}) is owned by {op.owner} at scope "
                        f"{owner}, but {cls} storage on {target.name} is {homes}: no {cls} "
                        f"resource serves a {owner}, and the Metal backend does not change "
                        "the owner or the resource")
        if res.resource_class not in tb.PLACEMENT:
            raise _fail(f"Memory {name} ({size}) resolves to {res.name} (class "
                        f"{res.resource_class}), which has no place in an emitted Metal "
                        f"kernel (placed: {', '.join(tb.PLACEMENT)})")
        if nbytes is not None and res.capacity is not None:
            aligned = -(-nbytes // res.alignment) * res.alignment
            per_home.setdefault(res.name, []).append((name, aligned, versions.get(name, 1)))
    for res_name, items in per_home.items():
        res = target.resource(res_name)
        total = sum(b * n for _, b, n in items)
        if res.capacity is not None and total > res.capacity:
            parts = " + ".join(f"{nm} {b:,} B" if n == 1 else f"{nm} {n} x {b:,} B"
                               for nm, b, n in items)
            raise _fail(f"explicit Memory does not fit {res_name}: {parts} = {total:,} B > "
                        f"{res_name} capacity {res.capacity:,} B per {res.instance_scope}")
