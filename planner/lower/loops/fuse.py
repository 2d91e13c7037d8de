"""Sibling-nest fusion, a pass over a statement tree (:class:`~planner.lower.loops.ir.FusedNest`).

Consecutive nests over the same iteration space become one loop when a nest reads what
the earlier parts wrote only at the point just written (it may also move before
independent nests to join one); the builder runs the pass on every segment, pinning the
nests that write registers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from planner.ir.expr import Sym
from planner.lower.loops.ir import (
    BufRead,
    BufWrite,
    FusedNest,
    Loop,
    Nest,
    Parallel,
    Pipeline,
    ReduceNest,
    Stmt,
    elem_reads,
)

__all__ = ["dest_key", "fuse_siblings"]


def fuse_siblings(body: tuple[Stmt, ...],
                  pinned: Callable[[Nest | ReduceNest], bool] | None = None
                  ) -> tuple[Stmt, ...]:
    """Merge consecutive nests over the same iteration space (see :class:`FusedNest`).

    A nest joins the previous one when it reads what the previous parts wrote only at
    the point being computed (forwarded) and never a reduction they produce, and when
    neither side writes what the other reads.  It may also move before independent
    nests to join an earlier one, unless ``pinned(nest)`` (the builder pins nests that
    write registers: moving one earlier would hold its registers over the nests it
    passes, which the plan's capacity does not count)."""
    out: list[Stmt] = []
    for s in body:
        s = _fuse_inside(s, pinned)
        target = None
        if isinstance(s, Nest | ReduceNest):
            # Look back over nests independent of ``s`` (it may move before them).
            hops = 0 if pinned is not None and pinned(s) else len(out)
            for j in range(len(out) - 1, max(-1, len(out) - 2 - hops), -1):
                if _fusable(out[j], s):
                    target = j
                    break
                if not _independent(out[j], s):
                    break
        if target is None:
            out.append(s)
            continue
        prev = out[target]
        parts = prev.parts if isinstance(prev, FusedNest) else (prev,)
        out[target] = FusedNest(s.vars, s.extents, (*parts, s))  # type: ignore[union-attr]
    return tuple(out)


def _independent(t: Stmt, s: Nest | ReduceNest) -> bool:
    """Whether ``s`` may be moved before the nest ``t`` (no dependence either way)."""
    if not isinstance(t, Nest | ReduceNest | FusedNest):
        return False
    parts = t.parts if isinstance(t, FusedNest) else (t,)
    t_writes = {dest_key(p) for p in parts}
    t_reads = set().union(*(_read_keys(p) for p in parts))
    mine = dest_key(s)
    return not (t_writes & _read_keys(s)) and mine not in t_writes and mine not in t_reads


def _fuse_inside(s: Stmt, pinned: Callable[[Nest | ReduceNest], bool] | None) -> Stmt:
    if isinstance(s, Loop | Parallel):
        return dataclasses.replace(s, body=fuse_siblings(s.body, pinned))
    if isinstance(s, Pipeline):
        return dataclasses.replace(s, stages=tuple(
            dataclasses.replace(st, body=fuse_siblings(st.body, pinned)) for st in s.stages))
    return s


def dest_key(p: Nest | ReduceNest) -> tuple[str, str]:
    d = p.dest
    return ("buf", d.buffer) if isinstance(d, BufWrite) else ("view", d.view)


def _read_keys(p: Nest | ReduceNest) -> set[tuple[str, str]]:
    return {("buf", r.buffer) if isinstance(r, BufRead) else ("view", r.view)
            for r in elem_reads(p.value)}


def _fusable(prev: Stmt, s: Nest | ReduceNest) -> bool:
    if not isinstance(prev, Nest | ReduceNest | FusedNest) or not s.vars:
        return False
    if prev.vars != s.vars or prev.extents != s.extents:
        return False
    parts = prev.parts if isinstance(prev, FusedNest) else (prev,)
    identity = tuple(Sym(v) for v in s.vars)
    written = {dest_key(p): p for p in parts}
    for r in elem_reads(s.value):
        key = ("buf", r.buffer) if isinstance(r, BufRead) else ("view", r.view)
        w = written.get(key)
        if w is None:
            continue
        if not (isinstance(w, Nest) and isinstance(r, BufRead) and isinstance(w.dest, BufWrite)
                and r.index == identity == w.dest.index and r.version == w.dest.version):
            return False
    mine = dest_key(s)
    return mine not in written and all(mine not in _read_keys(p) for p in parts)
