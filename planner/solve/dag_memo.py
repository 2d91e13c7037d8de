"""Memoized recursion over a DAG without Python recursion.

The planner's questions about inlining ("where may this value be evaluated", "is every
path to that site aligned") recurse along consumer chains; a chain of a thousand ops
would exhaust Python's recursion limit.  :func:`memo_postorder` answers them with an
explicit stack: a node's answer is computed once all its children's are memoized.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, MutableMapping
from typing import TypeVar

from planner.errors import Diagnostic, PlannerError

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def memo_postorder(root: K, children: Callable[[K], Iterable[K]],
                   compute: Callable[[K], V], memo: MutableMapping[K, V]) -> V:
    """``memo[root]``, computing ``memo[n] = compute(n)`` for ``root`` and every node
    below it that is not memoized yet, each after its ``children`` (``compute`` may then
    read ``memo`` for them).  A cycle is an internal error, never an endless loop."""
    if root in memo:
        return memo[root]
    open_: set[K] = {root}
    stack: list[tuple[K, list[K]]] = [(root, [c for c in children(root) if c not in memo])]
    while stack:
        node, pending = stack[-1]
        while pending and pending[-1] in memo:
            pending.pop()
        if pending:
            child = pending.pop()
            if child in open_:
                raise PlannerError(Diagnostic(
                    f"internal error: the inlining graph has a cycle through {child!r} "
                    "(a planner bug; please report it with the kernel)"), kind="internal")
            open_.add(child)
            stack.append((child, [c for c in children(child) if c not in memo]))
            continue
        memo[node] = compute(node)
        open_.discard(node)
        stack.pop()
    return memo[root]
