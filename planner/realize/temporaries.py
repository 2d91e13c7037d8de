"""Where compiler temporaries live: staging copies and register exchange areas (S17).

A temporary is written by one scope and read by the same scope (a staging copy of an
operand before an ``mma``) or by its sibling threads (an exchange area through which the
threads of a group read each other's registers).  Its home is, in this order:

- the scope's register home (the nearest private resource at or below the scope, sliced
  per thread like a virtual tile) when the size is static and fits one instance;
- else the nearest non-private, non-global resource whose instances serve the scope (its
  instance scope is the scope or an ancestor) that the access relation lets the scope
  both write and read, and that has room for it (catalog order breaks ties).

The cost model and the loop program both call :func:`temporary_home`, so the planner
prices exactly the buffer the lowering allocates.  None means there is no legal home:
the plan that needs it is infeasible, with a reason that names the temporary.
"""

from __future__ import annotations

from planner.catalog import Operation, Resource, Target

TEMPORARY_OPERATIONS = (Operation.WRITE, Operation.READ)


def temporary_home(target: Target, scope: str, nbytes: int, static: bool,
                   operations: tuple[Operation, ...] = TEMPORARY_OPERATIONS
                   ) -> Resource | None:
    """The home of a compiler temporary of ``nbytes`` used by ``scope`` (module doc)."""
    reg = register_home(target, scope)
    if reg is not None and static and (reg.capacity is None or nbytes <= reg.capacity):
        return reg
    for res in _serving(target, scope, operations):
        if res.resource_class in ("private", "global"):
            continue
        if res.capacity is None or nbytes <= res.capacity:
            return res
    return None


def register_home(target: Target, scope: str) -> Resource | None:
    """The private resource the virtual values of ``scope`` live in: the nearest one at
    or below ``scope`` (per thread below a group scope)."""
    below = [r for r in target.resources_for_class("private")
             if target.is_ancestor_or_self(scope, r.instance_scope)]
    return min(below, key=lambda r: target.scope_depth(r.instance_scope), default=None)


def exchange_home(target: Target, scope: str) -> Resource | None:
    """The shared home through which threads below ``scope`` read each other's registers,
    or None when registers live at ``scope`` itself (nothing to exchange)."""
    reg = register_home(target, scope)
    if reg is None or reg.instance_scope == scope:
        return None
    return next((r for r in _serving(target, scope, TEMPORARY_OPERATIONS)
                 if r.resource_class not in ("private", "global")), None)


def _serving(target: Target, scope: str, operations: tuple[Operation, ...]
             ) -> list[Resource]:
    """Resources with an instance per ``scope`` instance (or above it) that ``scope`` (or
    an execution unit running its ops, :meth:`Target.execution_members`) may apply every
    one of ``operations`` to, nearest first, then in catalog order."""
    path = target.scope_path(scope)
    out: list[tuple[int, int, Resource]] = []
    for index, res in enumerate(target.resources):
        if res.instance_scope not in path:
            continue
        units = target.execution_members(scope)  # the scope, and units running its ops
        if not all(any(target.can_access(u, res.name, op) for u in units)
                   for op in operations):
            continue
        out.append((len(path) - 1 - path.index(res.instance_scope), index, res))
    return [r for _, _, r in sorted(out, key=lambda t: t[:2])]
