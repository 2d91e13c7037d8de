"""A cheap size estimate of a planning model, computed before it is built.

Building the priced problem and its CP-SAT model costs time and memory in proportion
to a few counts that the dataflow graph alone determines (:func:`estimate_model_size`):

* ``edges``: live def→use edges, each with up to four choice literals;
* ``sites``: (value, later point) pairs where inlining may evaluate a value (a value
  fused into a consumer that is itself fused further is evaluated where that one is):
  each is a guard of the problem and a literal of the model;
* ``holders``: (value, checked point) pairs where a value may be held, up to the last
  point where it may be evaluated or read: the terms of the capacity sums.

``figure = 4 × edges + 2 × sites + 2 × holders`` tracks the model's variable count and
its build time (about linear in it: measured on softmax with chained ``exp`` and on
random DAGs; the chain of ``N`` exps has ``N²/2`` sites unbounded, about ``N × 32``
under the default inline depth limit of :mod:`planner.solve.inline_depth`).  A
service refuses a kernel whose ``figure`` exceeds its ``limit`` before any model
building (HTTP 413 naming both).  The graph is
built once (linear) and reach sets are bitsets, so the estimate costs a small fraction
of :func:`~planner.solve.build.build_problem`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from planner.ir.core import Kernel
from planner.ir.graph import dataflow_graph, live_edges
from planner.solve.inline_depth import MAX_INLINE_DEPTH, hop_within_limit, longest_inline_paths
from planner.solve.legality import is_inlinable_kind

#: The default ``limit``: a softmax with about 14,000 chained ``exp`` (1,073: 75,380,
#: planned in about 2 s on 2 cores), or some 13,000 edges of the random DAGs of
#: ``bench/solve.py`` (10,000: 735,448).
DEFAULT_MODEL_LIMIT = 1_000_000


@dataclass(frozen=True, slots=True)
class ModelBudget:
    """The predicted size of a kernel's planning model against a limit."""

    edges: int
    values: int
    points: int
    sites: int
    holders: int
    limit: int = DEFAULT_MODEL_LIMIT

    @property
    def figure(self) -> int:
        return 4 * self.edges + 2 * self.sites + 2 * self.holders

    @property
    def exceeded(self) -> bool:
        return self.figure > self.limit

    def describe(self) -> str:
        """``model size 334,570 (limit 1,000,000): 410 edges, …`` (for a 413 body)."""
        return (f"model size {self.figure:,} (limit {self.limit:,}): {self.edges:,} edges, "
                f"{self.sites:,} inlining sites, {self.holders:,} holder-points over "
                f"{self.points:,} program points")


def estimate_model_size(kernel: Kernel, bindings: Mapping[str, int] | None = None,
                        limit: int = DEFAULT_MODEL_LIMIT,
                        max_inline_depth: int = MAX_INLINE_DEPTH) -> ModelBudget:
    """Count what the planning model of ``kernel`` will hold, without building it.

    The target does not enter (the counts are the graph's); ``bindings`` are the
    symbol values planning would use (unbound symbols are fine here);
    ``max_inline_depth`` is the planning's inline depth limit
    (:mod:`planner.solve.inline_depth`, applied to the inlinable kinds' edges).
    """
    g = dataflow_graph(kernel, {k: int(v) for k, v in (bindings or {}).items()})
    edges = live_edges(g)
    order = {n: int(d["order"]) for n, d in g.nodes(data=True)}
    kind = {n: str(d.get("kind", "")) for n, d in g.nodes(data=True)}
    consumers: dict[str, list[str]] = {}
    for u, v, _ in edges:
        consumers.setdefault(u, []).append(v)
    values = sorted(consumers, key=order.__getitem__)
    index = {n: i for i, n in enumerate(values)}
    longest = longest_inline_paths(len(values), lambda i: [
        index.get(c) for c in consumers[values[i]]] if is_inlinable_kind(kind[values[i]])
        else [])
    reach: dict[str, int] = {}  # node -> bitset of later points where it may be evaluated
    last: dict[str, int] = {}  # value -> last point where it may be read
    sites = holders = 0
    for n in reversed(values):
        bits = 0
        end = order[n]
        for c in consumers[n]:
            end = max(end, order[c], reach.get(c, 0).bit_length() - 1)
            if is_inlinable_kind(kind[n]) and hop_within_limit(
                    longest, index[n], index.get(c), max_inline_depth):
                bits |= (1 << order[c]) | reach.get(c, 0)
        reach[n] = bits
        last[n] = end
        sites += bits.bit_count()
        holders += end - order[n] + 1
    return ModelBudget(len(edges), len(consumers), g.number_of_nodes(), sites, holders,
                       limit)
