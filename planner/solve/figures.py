"""The target catalog's figures as the cost model reads them.

:class:`Figures` wraps a :class:`~planner.catalog.Target`: the clock and the throughput of
each cost class, traffic at a resource's bandwidth shared among the concurrent instances,
scope arithmetic (instances of a scope below an ancestor, the members that execute a
scope's ops), the register home and per-owner capacity of a resource, the sync rule that
orders a write before a read, and whether a scope may access a resource.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from planner.catalog import Operation, Resource, Target
from planner.realize.temporaries import register_home


@dataclass(frozen=True, slots=True)
class Figures:
    """Catalog figures the cost model reads, and scope arithmetic."""

    target: Target
    #: answers of the scope arithmetic below, which the builder asks per edge and value
    memo: dict[Hashable, Any] = field(default_factory=dict, compare=False, repr=False)

    def _memo(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]

    @property
    def clock(self) -> float:
        return self.target.costs.clock_ghz

    def ns(self, cycles: float, executions: int) -> float:
        return cycles * executions / self.clock

    def throughput(self, cost_class: str) -> float:
        c = self.target.costs
        return {"cheap": c.cheap, "transcendental": c.transcendental, "mma": c.mma}.get(
            cost_class, c.cheap)

    @property
    def global_resource(self) -> Resource | None:
        return self._memo("global", self._global_resource)

    def _global_resource(self) -> Resource | None:
        found = self.target.resources_for_class("global")
        if found:
            return found[0]
        return min(self.target.resources, key=lambda r: r.bandwidth, default=None)

    def share(self, resource: Resource, scope: str) -> int:
        """Concurrent owner instances sharing one instance of ``resource``."""
        if (resource.instance_scope != scope
                and self.target.is_ancestor_or_self(resource.instance_scope, scope)):
            return max(1, self.target.costs.concurrent_instances)
        return 1

    def traffic_cycles(self, nbytes: int, resource: Resource, scope: str) -> float:
        if resource.bandwidth <= 0:
            return 0.0
        return nbytes * self.share(resource, scope) / resource.bandwidth

    def instances_below(self, ancestor: str, scope: str, dynamic: str = "max") -> int:
        """Instances of ``scope`` per instance of ``ancestor``.

        A dynamic extent (chosen at launch) counts as its ``max_extent`` when
        ``dynamic="max"`` (dividing a resource among instances: the worst case) and as
        one when ``dynamic="one"`` (aggregating per-instance storage: only the instance
        the catalog guarantees).
        """
        count, current = 1, scope
        while current != ancestor:
            s = self.target.scope(current)
            if s.extent is not None:
                count *= s.extent
            elif dynamic == "max":
                count *= s.max_extent or 1
            if s.parent is None:
                break
            current = s.parent
        return count

    def exactly_one_below(self, ancestor: str, scope: str) -> bool:
        current = scope
        while current != ancestor:
            s = self.target.scope(current)
            if s.extent != 1 or s.parent is None:
                return False
            current = s.parent
        return True

    def subtree(self, scope: str) -> list[str]:
        """``scope`` and its descendants, breadth first: the members that execute its ops."""
        out, frontier = [scope], [scope]
        while frontier:
            kids = [c.name for s in frontier for c in self.target.children(s)]
            out += kids
            frontier = kids
        return out

    def several_members(self, scope: str) -> bool:
        kids = self.target.children(scope)
        return len(kids) > 1 or any(k.extent != 1 for k in kids)

    def register_home(self, scope: str) -> tuple[Resource, int | None] | None:
        """The private resource virtual values of ``scope`` live in, and its capacity there."""
        return self._memo(("register", scope), lambda: self._register_home(scope))

    def _register_home(self, scope: str) -> tuple[Resource, int | None] | None:
        r = register_home(self.target, scope)
        if r is None:
            return None
        cap = None if r.capacity is None else r.capacity * self.instances_below(
            scope, r.instance_scope, dynamic="one")
        return r, cap

    def capacity_for(self, r: Resource, scope: str) -> tuple[int | None, str]:
        """Per-owner capacity of ``r`` for an owner at ``scope``; reason when unusable."""
        return self._memo(("capacity", r.name, scope), lambda: self._capacity_for(r, scope))

    def _capacity_for(self, r: Resource, scope: str) -> tuple[int | None, str]:
        t = self.target
        if r.instance_scope == scope:
            return r.capacity, ""
        if t.is_ancestor_or_self(r.instance_scope, scope):
            if not r.slicing:
                return None, (f"{r.name} lives per {r.instance_scope} and cannot be sliced "
                              f"per {scope} (S17)")
            if r.capacity is None:
                return None, ""
            return r.capacity // self.instances_below(r.instance_scope, scope), ""
        if t.is_ancestor_or_self(scope, r.instance_scope):
            if self.exactly_one_below(scope, r.instance_scope):
                return r.capacity, ""
            return None, (f"{r.name} is private to each {r.instance_scope}; a whole tile of "
                          f"the {scope} cannot live there")
        return None, f"{r.name} (per {r.instance_scope}) cannot serve an owner at {scope}"

    def sync_rule(self, r: Resource, scope: str) -> tuple[str | None, float]:
        """The sync rule ordering write → read of ``r`` among the members of ``scope``."""
        return self._memo(("sync", r.name, scope), lambda: self._sync_rule(r, scope))

    def _sync_rule(self, r: Resource, scope: str) -> tuple[str | None, float]:
        if r.coherence.value in ("coherent", "none") or not self.several_members(scope):
            return None, 0.0
        rules = list(r.sync)
        for rule in rules:
            if rule.scope == scope:
                return rule.name, rule.cost
        ancestors = [rule for rule in rules if self.target.is_ancestor_or_self(rule.scope, scope)]
        if ancestors:
            rule = max(ancestors, key=lambda x: self.target.scope_depth(x.scope))
            return rule.name, rule.cost
        if rules:
            return rules[0].name, rules[0].cost
        return "barrier", self.target.costs.barrier

    def accessible(self, r: Resource, scope: str, ops: Iterable[Operation]) -> bool:
        members = self.subtree(scope)
        return any(r.supports(op) and self.target.can_access(m, r.name, op)
                   for op in ops for m in members)
