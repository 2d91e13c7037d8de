"""The inline depth limit: how far a value may be carried by inlining.

A value fused or recomputed into a consumer is evaluated where that consumer is, and a
consumer inlined further carries it along: its *inline depth* is the longest chain of
inlining edges (fused or recomputed) from it to a point where it is evaluated.  Every
plan keeps it at most ``max_inline_depth`` (:data:`MAX_INLINE_DEPTH` by default), as
TVM's operator fusion caps a fused group's depth: a value may then be evaluated only
within that many hops, so the planning problem grows with edges × the
limit instead of quadratically along a long elementwise chain (a softmax with 1,073
chained ``exp`` has 575,000 (value, site) pairs unbounded, some 34,000 at 32).

The limit is a legality rule of the edges, fixed by the graph alone (no search over
where chains are cut, so no equal-cost plans that differ only there): with ``L(v)`` the
longest chain of inlinable edges from ``v`` (strictly decreasing along every such edge),
values fall in blocks of ``limit`` consecutive ``L`` (``ceil(L / limit)``), and an edge
may be inlined only within its block, into a consumer that cannot be inlined itself
(``L = 0``), or into a sink.  A chain within a block has at most ``limit - 1`` hops, plus
the last one out: at most ``limit``.  Kernels whose chains all fit (``L <= limit``
everywhere) are not restricted at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from planner.solve.dag_memo import memo_postorder
from planner.solve.problem import Edge

#: The default limit: no value is fused or recomputed through more than this many
#: consumers inlined further.
MAX_INLINE_DEPTH = 32
#: An inlining hop: the consumer's value, or None for a sink (a store) evaluated there.
Hop = int | None


def longest_inline_paths(count: int, hops: Callable[[int], Iterable[Hop]]) -> list[int]:
    """The longest chain of inlining hops from each of ``count`` values (``hops(v)``:
    the consumers ``v`` may be inlined into; values are numbered in program order)."""
    memo: dict[int, int] = {}
    hop_lists: dict[int, list[Hop]] = {}  # hops(v), asked once per value

    def hops_of(v: int) -> list[Hop]:
        found = hop_lists.get(v)
        if found is None:
            found = hop_lists[v] = list(hops(v))
        return found

    def children(v: int) -> list[int]:
        return [c for c in hops_of(v) if c is not None]

    def compute(v: int) -> int:
        return max((1 + (0 if c is None else memo[c]) for c in hops_of(v)), default=0)

    for v in reversed(range(count)):  # consumers come later: mostly memoized already
        memo_postorder(v, children, compute, memo)
    return [memo[v] for v in range(count)]


def hop_within_limit(longest: Sequence[int], value: int, consumer: Hop, limit: int) -> bool:
    """Whether the limit lets ``value`` be inlined into ``consumer`` (see the module)."""
    if consumer is None or longest[consumer] == 0:
        return True
    return -(-longest[value] // limit) == -(-longest[consumer] // limit)


#: How every reason of the limit starts.
RULE = "the inline depth limit"


def depth_cut(e: Edge) -> str | None:
    """Why the limit refuses inlining ``e`` (None: it does not)."""
    return next((why for _, why in e.illegal if why.startswith(RULE)), None)


def depth_limit_reason(longest: Sequence[int], value: int, consumer: int, limit: int) -> str:
    """Why the limit refuses inlining ``value`` into ``consumer`` (shown by the edge)."""
    return (f"{RULE} of {limit}: chains of fused or recomputed edges are cut every "
            f"{limit} edges, and this edge is a cut (chains of up to {longest[value]} "
            f"edges start at its producer, of up to {longest[consumer]} at its consumer)")
