"""Where and how long every value is held, as the lowering allocates it.

:class:`Holding` turns the priced values and edges into their live segments: a value's
lifetime to each reader's evaluation, the decision-dependent extensions where a reader is
inlined into a later consumer (:class:`~planner.solve.problem.Guard` ``site``), loop
carries' buffers (in place, ping-pong, or split from the yielded value's), and the
compiler temporaries a statement needs (mma operand staging and register exchange areas,
:class:`~planner.solve.problem.Temp`).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planner.catalog import Resource
from planner.ir import core
from planner.ir.expr import product
from planner.plan.decisions import exchange_name, staging_name
from planner.realize.temporaries import exchange_home, temporary_home
from planner.solve.context import Context, eval_int, owner_of, span, tile_shape
from planner.solve.dag_memo import memo_postorder
from planner.solve.layouts import align
from planner.solve.legality import is_elementwise_kind, is_inlinable_kind, recompute_chain
from planner.solve.problem import (
    FUSED,
    MATERIALIZED,
    RECOMPUTED,
    VIRTUAL,
    Edge,
    Guard,
    GuardChain,
    Lit,
    Segment,
    Temp,
    Value,
    check_deadline,
    replaced,
)


@dataclass(frozen=True, slots=True)
class _Carry:
    """A loop carry and the value yielded to it (one buffer in the lowering when aliased)."""

    value: int
    yielded: int
    yield_node: str
    yield_def: int
    loop_end: int  # one past the loop's last point
    aliased: bool  # the yielded value may be computed straight into the carry's buffer
    late: tuple[int, ...]  # guards of the carry's reads after that write (-1: always)


class Holding:
    """Where and how long every value is held, as the lowering allocates it.

    * A value is held from its definition through the evaluation of its last reader
      (the reader's result and its operands coexist), and a reader fused or recomputed
      into a later consumer is evaluated there: the value's lifetime then extends to
      that consumer (a decision-dependent :class:`Guard` ``site``).
    * A loop carry's buffer exists for the whole loop: until its yielded value is
      written into it (in place, when the old value is not read afterwards), beside the
      yielded value when their storage differs (a :class:`Guard` ``split``: the
      lowering then copies at the yield), or as two versions for the whole loop, the
      old value and the yielded one, when the old value is read after the new one is
      written (a :class:`Guard` ``pingpong``: the yielded value is held loop-long).
    * Temporaries: mma operand staging and, where registers are split among the
      owner's threads, exchange areas (:class:`Temp`).
    """

    def __init__(self, ctx: Context, values: list[Value], edges: list[Edge],
                 value_of: Mapping[str, int], deadline: float | None = None) -> None:
        self.ctx = ctx
        self.deadline = deadline  # past it, :class:`OutOfTime` (checked every 256 items)
        g = ctx.g
        self.point_node = {int(d["order"]): n for n, d in g.nodes(data=True)}
        cnode = [ctx.node_by_name[e.consumer] for e in edges]
        self.edges = [replaced(
            e, consumer_value=value_of.get(cn), consumer_point=int(ctx.nodes[cn]["order"]),
            aligned=self._aligned_hop(e, cn, values)) for e, cn in zip(edges, cnode,
                                                                         strict=True)]
        self.values = values
        self._inlinable = [is_inlinable_kind(v.kind) for v in values]
        self._inline: dict[int, list[Edge]] = {}  # value -> its edges that may inline
        self._homes: dict[int, bool] = {}  # value -> can_home
        self._reach: dict[int, frozenset[int]] = {}
        self._misaligned_at: dict[int, frozenset[int]] = {}
        self._sites: dict[int, list[tuple[int, int | None, bool]]] = {}  # edge -> _sites_of
        self._site_guards: dict[int, list[tuple[int, int]]] = {}  # value -> (site, guard)
        self._later: dict[tuple[int, bool], list[tuple[int, int, bool]]] = {}
        self._recompute_at: dict[tuple[int, bool], list[tuple[int, int, bool]]] = {}
        # each value's inlinable and sites are set with its segments (one replace)
        self._sites_at = [tuple(sorted(self.reach(v.index))) for v in values]
        self.guards: list[Guard] = []
        self._guard_index: dict[tuple[str, int, int, tuple[int, ...]], int] = {}
        self._value_at = {v.node: v.index for v in self.values}  # graph node -> value
        self._chain_roots = self._stop_readers()
        self._chain_aligned: dict[tuple[int, str], bool] = {}
        self.carries = {c.value: c for c in self._carries()}
        self._yielded = {c.yielded: c for c in self.carries.values() if c.aliased and c.late}
        self._carry_of_yield = {c.yielded: c for c in self.carries.values()}
        check_deadline(deadline)
        self._held()
        check_deadline(deadline)
        self.values = [self._segments(v) for v in self.values]
        check_deadline(deadline)

    # ------------------------------------------------------------------ structure

    def _aligned_hop(self, e: Edge, cn: str, values: list[Value]) -> bool:
        kind = e.consumer_kind
        if kind in ("tile.store", "memory.store", "loop.carry"):
            return True
        if kind == "tile.mma":
            return e.operand == 2
        if is_elementwise_kind(kind):
            result = self.ctx.nodes[cn].get("value")
            return result is not None and tile_shape(self.ctx, result) == values[e.value].shape
        return False

    def can_home(self, vi: int) -> bool:
        found = self._homes.get(vi)  # legality is fixed: what _held replaces is not read
        if found is None:
            v = self.values[vi]
            found = self._homes[vi] = not self._inlinable[vi] or any(
                self.edges[i].legal(VIRTUAL) or self.edges[i].legal(MATERIALIZED)
                for i in v.edges)
        return found

    def _inline_edges(self, vi: int) -> list[Edge]:
        out = self._inline.get(vi)
        if out is None:
            out = self._inline[vi] = [e for i in self.values[vi].edges
                                      if (e := self.edges[i]).legal(FUSED)
                                      or e.legal(RECOMPUTED)]
        return out

    def _inline_consumers(self, vi: int) -> list[int]:
        return [e.consumer_value for e in self._inline_edges(vi)
                if e.consumer_value is not None]

    def reach(self, vi: int) -> frozenset[int]:
        """Later points where value ``vi`` may be evaluated (inlined into consumers)."""
        got = self._reach.get(vi)
        if got is not None:
            return got

        def compute(vj: int) -> frozenset[int]:
            out: set[int] = set()
            for e in self._inline_edges(vj):
                if e.consumer_value is None:
                    out.add(e.consumer_point)
                    continue
                if self.can_home(e.consumer_value):
                    out.add(self.values[e.consumer_value].def_point)
                out |= self._reach[e.consumer_value]
            return frozenset(out)

        return memo_postorder(vi, self._inline_consumers, compute, self._reach)

    def aligned_to(self, vi: int, site: int) -> bool:
        """Whether every inlining path from ``vi`` to ``site`` reads element for element."""
        return site not in self._misaligned(vi)

    def _misaligned(self, vi: int) -> frozenset[int]:
        """The sites some inlining path from ``vi`` reaches through a hop that does not
        read element for element (a consumer's own point, or a later one it may be
        evaluated at)."""
        got = self._misaligned_at.get(vi)
        if got is not None:
            return got

        def compute(vj: int) -> frozenset[int]:
            bad: set[int] = set()
            for e in self._inline_edges(vj):
                if e.consumer_value is None:
                    if not e.aligned:
                        bad.add(e.consumer_point)
                    continue
                c = self.values[e.consumer_value]
                reach = self.reach(c.index)
                if not e.aligned:
                    bad.add(c.def_point)
                    bad |= reach
                else:
                    bad |= self._misaligned_at[c.index] & reach
            return frozenset(bad)

        self.reach(vi)  # memoized below vi first, so compute() never recurses deeply
        return memo_postorder(vi, self._inline_consumers, compute, self._misaligned_at)

    def _pingpong(self, c: _Carry) -> int:
        return self.guard("pingpong", c.value, c.yielded, c.late)

    def guard(self, kind: str, a: int, b: int, any_of: tuple[int, ...] = ()) -> int:
        # a plain tuple hashes and compares as the Guard: built only for a new guard
        index = self._guard_index.get((kind, a, b, any_of))
        if index is None:
            key = Guard(kind, a, b, any_of)
            index = self._guard_index[key] = len(self.guards)
            self.guards.append(key)
        return index

    def _sites_of(self, e: Edge) -> list[tuple[int, int | None, bool]]:
        """(point, site guard, read element for element) of every evaluation of ``e``'s
        consumer that may read ``e``'s value; guard None: the consumer is a sink.

        A value that stops a recompute chain (a reduction, mma result or loop carry) is
        also read wherever a recomputation re-derives its consumer: where an edge of the
        chain's root is recomputed into a consumer evaluated there (guard ``recompute``);
        a root fused there reads its operands as their own edges decided."""
        if e.consumer_value is None:
            return [(e.consumer_point, None, e.aligned)]
        out = self._sites.get(e.index)
        if out is not None:
            return out
        c = self.values[e.consumer_value]
        ci = c.index
        later = self._later_sites(c, e.aligned)  # its guards first: they number guards
        out = [(c.def_point, self.guard("site", ci, c.def_point), e.aligned), *later]
        for t in self._chain_roots.get(e.index, ()):
            if e.aligned and self._aligned_in_chain(t, c.node):
                out += self._recompute_sites(t, True)
            else:
                out += self._recompute_sites(t, False)
        self._sites[e.index] = out
        return out

    def _later_sites(self, c: Value, aligned: bool) -> list[tuple[int, int, bool]]:
        """(point, site guard, read element for element) of every later point where value
        ``c`` may be evaluated, for a reader of it that reads element for element
        (``aligned``) or not, cached (shared by the readers)."""
        key = (c.index, aligned)
        found = self._later.get(key)
        if found is None:
            sites = self._site_guards.get(c.index)
            if sites is None:
                sites = self._site_guards[c.index] = self._site_guard_list(c)
            if aligned:
                bad = self._misaligned(c.index)
                found = [(n, gd, n not in bad) for n, gd in sites]
            else:
                found = [(n, gd, False) for n, gd in sites]
            self._later[key] = found
        return found

    def _site_guard_list(self, c: Value) -> list[tuple[int, int]]:
        """(point, site guard) of every later point where ``c`` may be evaluated
        (:meth:`guard`, inlined: a hot loop)."""
        index, guards, vi = self._guard_index, self.guards, c.index
        sites = self._sites_at[vi]
        new = tuple.__new__  # Guard(...) without its Python __new__
        keys = [new(Guard, ("site", vi, n, ())) for n in sites]
        if not any(map(index.__contains__, keys)):  # as a rule all new: numbered at once
            first = len(guards)
            numbers = range(first, first + len(keys))
            guards += keys
            index.update(zip(keys, numbers, strict=True))
            return list(zip(sites, numbers, strict=True))
        return [(n, self.guard("site", vi, n)) for n in sites]

    def _recompute_sites(self, t: int, along: bool) -> list[tuple[int, int, bool]]:
        """(point, recompute guard, read element for element) where value ``t``'s chain
        is re-derived, for a reader ``along`` an aligned path to ``t``, cached (each chain
        root stops many readers)."""
        key = (t, along)
        found = self._recompute_at.get(key)
        if found is None:
            found = self._recompute_at[key] = [
                (n, self.guard("recompute", t, n), along and self._recompute_aligned(t, n))
                for n in sorted(self._recompute_reach(t))]
        return found

    def _recompute_edges(self, vi: int) -> list[Edge]:
        return [e for i in self.values[vi].edges if (e := self.edges[i]).legal(RECOMPUTED)]

    def _recompute_reach(self, vi: int) -> frozenset[int]:
        """Points where value ``vi``'s chain may be re-derived (a recomputed edge)."""
        out: set[int] = set()
        for e in self._recompute_edges(vi):
            if e.consumer_value is None:
                out.add(e.consumer_point)
                continue
            c = self.values[e.consumer_value]
            if self.can_home(c.index):
                out.add(c.def_point)
            out |= self.reach(c.index)
        return frozenset(out)

    def _recompute_aligned(self, vi: int, site: int) -> bool:
        """Whether every recomputed path from ``vi`` to ``site`` reads element for element."""
        ok = True
        for e in self._recompute_edges(vi):
            if e.consumer_value is None:
                ok = ok and (e.consumer_point != site or e.aligned)
                continue
            c = self.values[e.consumer_value]
            if c.def_point == site:
                ok = ok and e.aligned
            elif site in self.reach(c.index):
                ok = ok and e.aligned and self.aligned_to(c.index, site)
        return ok

    def _stop_readers(self) -> dict[int, list[int]]:
        """Edge -> the values whose recompute chain contains the edge's consumer (not as
        its root) but not its producer: the chain stops there and reads the value."""
        ctx = self.ctx
        value_at = self._value_at
        edge_at = {(self.values[e.value].node, ctx.node_by_name[e.consumer], e.operand): e.index
                   for e in self.edges}
        out: dict[int, list[int]] = {}
        for t in self.values:
            if not any(self.edges[i].legal(RECOMPUTED) for i in t.edges):
                continue
            members = recompute_chain(ctx, t.node).members
            for m in members - {t.node}:
                for w, keys in ctx.g._pred[m].items():  # g.in_edges(m): plain dicts, no views
                    if w in members or w not in value_at:
                        continue
                    for d in keys.values():
                        i = edge_at.get((w, m, d["operand"]))
                        if i is not None:
                            out.setdefault(i, []).append(t.index)
        return out

    def _aligned_in_chain(self, t: int, node: str) -> bool:
        """Whether every path from chain member ``node`` to the chain's root ``t`` reads
        element for element."""
        key = (t, node)
        if key not in self._chain_aligned:
            root = self.values[t]
            members = recompute_chain(self.ctx, root.node).members
            ok = True
            if node != root.node:
                v = self.values[self._value_at[node]]
                for i in v.edges:
                    e = self.edges[i]
                    if e.consumer_value is None:
                        continue
                    cn = self.values[e.consumer_value].node
                    if cn in members:
                        ok = ok and e.aligned and self._aligned_in_chain(t, cn)
            self._chain_aligned[key] = ok
        return self._chain_aligned[key]

    # ------------------------------------------------------------------ carries

    def _carries(self) -> list[_Carry]:
        g = self.ctx.g
        out = []
        feeds: dict[int | None, list[Edge]] = {}  # carry -> the loop-carried edges into it
        for e in self.edges:
            if e.loop_carried:
                feeds.setdefault(e.consumer_value, []).append(e)
        for v in self.values:
            if v.kind != "loop.carry":
                continue
            fed = feeds.get(v.index, [])
            if len(fed) != 1:
                continue
            y = self.values[fed[0].value]
            label = g.nodes[v.node]["loop"]
            end = self.ctx.loop_span[label][1] + 1
            yields = sum(1 for i in y.edges if self.edges[i].loop_carried)
            aliased = (tuple(g.nodes[y.node]["region"][-1:]) == (label,) and yields == 1
                       and y.max_versions == 1 and y.kind != "loop.carry")
            late: set[int] = set()
            if aliased:
                for i in v.edges:
                    e = self.edges[i]
                    if label not in g.nodes[self.ctx.node_by_name[e.consumer]]["loops"]:
                        continue  # a use of the loop result
                    for n, gd, aligned in self._sites_of(e):
                        if n > y.def_point or (n == y.def_point and not aligned):
                            late.add(-1 if gd is None else gd)
            late_t = (-1,) if -1 in late else tuple(sorted(late))
            out.append(_Carry(v.index, y.index, y.node, y.def_point, end, aliased, late_t))
        return out

    def _in_place(self, e: Edge, site: int, aligned: bool) -> bool:
        """A carry's read at the statement that writes its next value into its own buffer,
        element for element: the old and the new value share the buffer (when the old
        value is read later too, the ``pingpong`` guard holds the second version)."""
        c = self.carries.get(e.value)
        return c is not None and c.aliased and site == c.yield_def and aligned

    # ------------------------------------------------------------------ intervals

    def _held(self) -> None:
        ctx = self.ctx
        out = []
        ends: dict[tuple[str, int, bool], int] = {}  # (value node, site, in place) -> end
        loop_free = {n for n, node in self.point_node.items()
                     if not ctx.nodes[node]["loops"]
                     and ctx.nodes[node]["kind"] != "loop.carry"}
        all_free = len(loop_free) == len(self.point_node)  # no loops: every site is plain
        for e in self.edges:
            if not e.index & 255:
                check_deadline(self.deadline)
            v = self.values[e.value]
            cn = ctx.node_by_name[e.consumer]
            sites = self._sites_of(e) if not e.loop_carried else []
            cp = e.consumer_point
            direct = sites[0] if sites and sites[0][0] == cp else next(
                (s for s in sites if s[0] == cp), None)  # the first, unless a carry's
            in_place = direct is not None and self._in_place(e, direct[0], direct[2])
            into = self._accumulator_into_carry(e)
            held = span(ctx, v.node, cn, e.loop_carried, inclusive=True,
                        in_place=in_place or into is not None)
            pipe = ctx.nodes[v.node].get("pipeline")
            extra: list[tuple[int, int, int]] = []
            if v.max_versions > 1 and pipe in ctx.nodes[cn]["loops"]:
                # a value kept in versions is one array, live over the whole pipeline loop
                lo, hi = ctx.loop_span[pipe]
                gd = self.guard("versioned", v.index, 0)
                extra += [(lo, held[0], gd), (held[1], hi + 1, gd)]
            remote = []
            carry = self.carries.get(e.value)  # :meth:`_in_place`, inlined: a hot loop
            yield_def = carry.yield_def if carry is not None and carry.aliased else None
            # span() of a read at a loop-free site of a value defined outside any carry
            # is plain arithmetic: [def, site + 1) (site, in place); a hot loop
            plain = v.kind != "loop.carry"
            floor = v.def_point + 1
            last = held[1]
            if plain and yield_def is None and all_free:  # the loop below, as one listcomp
                remote = [(n, end, gd) for n, gd, _ in sites if n != cp and gd is not None
                          and (end := n + 1 if n >= floor else floor) > last]
            else:
                for n, gd, aligned in sites:
                    if n == cp or gd is None:
                        continue
                    in_place = n == yield_def and aligned
                    if plain and n in loop_free:
                        end = n if in_place else n + 1
                        if end < floor:
                            end = floor
                    else:
                        key = (v.node, n, in_place)
                        end = ends.get(key)
                        if end is None:
                            end = ends[key] = span(ctx, v.node, self.point_node[n], False,
                                                   inclusive=True, in_place=in_place)[1]
                    if end > last:
                        remote.append((n, end, gd))
            if into is not None and held[1] == e.consumer_point:  # split: copied at the mma
                remote.append((e.consumer_point, e.consumer_point + 1,
                               self.guard("split", into.value, into.yielded)))
            out.append(replaced(e, held=held, remote=tuple(remote),
                                extra=tuple(x for x in extra if x[0] < x[1])))
        self.edges = out

    def _accumulator_into_carry(self, e: Edge) -> _Carry | None:
        """The carry whose buffer an mma's accumulator operand is copied into before the
        mma runs (the mma's result is the value yielded to it, computed in the carry's
        buffer unless split): the operand is then dead at the mma itself."""
        if e.consumer_kind != "tile.mma" or e.operand != 2 or not e.aligned:
            return None
        c = self._carry_of_yield.get(e.consumer_value)  # type: ignore[arg-type]
        return c if c is not None and c.aliased and c.value != e.value else None

    def _segments(self, v: Value) -> Value:
        if not v.index & 255:
            check_deadline(self.deadline)
        items: list[tuple[int, int, int, int | None]] = []  # start, end, edge, guard
        remote: dict[tuple[int, int], dict[int, int]] = {}  # _swept's groups, prefilled
        for i in v.edges:
            e = self.edges[i]
            items.append((e.held[0], e.held[1], i, None))
            if e.remote:  # all start where the direct read ends, and end after it
                ends = {gd: end for _, end, gd in e.remote}
                if len(ends) < len(e.remote):  # a guard twice: keep its latest end
                    for _, end, gd in e.remote:
                        ends[gd] = max(ends[gd], end)
                remote[(i, e.held[1])] = ends
            for start, end, gd in e.extra:
                items.append((start, end, i, gd))
        c = self.carries.get(v.index)
        if c is not None:  # one buffer serves every use: held wherever any use holds it
            after = max([self.edges[i].held[1] for i in v.edges], default=c.loop_end)
            for i in v.edges:
                items.append((v.def_point, c.yield_def if c.aliased else c.loop_end, i, None))
                if c.aliased:  # the yield copies (split), or two versions (pingpong)
                    items.append((c.yield_def, c.loop_end, i,
                                  self.guard("split", v.index, c.yielded)))
                    if c.late:
                        items.append((c.yield_def, c.loop_end, i, self._pingpong(c)))
                if after > c.loop_end:  # the loop result, read after the loop
                    items.append((c.loop_end, after, i, None))
        c = self._yielded.get(v.index)
        if c is not None:  # the carry's second version, for the whole loop
            start = self.values[c.value].def_point
            for i in v.edges:
                items.append((start, c.loop_end, i, self._pingpong(c)))
        return _swept(v, items, self.guards, remote, inlinable=self._inlinable[v.index],
                      sites=self._sites_at[v.index])

    # ------------------------------------------------------------------ temporaries

    def _temp_resource(self, nbytes: int, static: bool, scope: str) -> Resource | None:
        """Where the lowering puts a compiler temporary (the one rule of
        :func:`planner.realize.temporaries.temporary_home`)."""
        return temporary_home(self.ctx.target, scope, nbytes, static)

    def _exchange_resource(self, scope: str) -> Resource | None:
        """The shared resource through which threads of ``scope`` read each other's
        registers, when registers are per thread below the owner."""
        return exchange_home(self.ctx.target, scope)

    def _owner(self, point: int) -> str:
        return owner_of(self.ctx, self.ctx.nodes[self.point_node[point]]["region"])

    def _row_major_memory(self, v: Value) -> bool:
        op = self.ctx.nodes[v.node]["op"]
        for alloc in self.ctx.g.graph["allocs"]:
            a: core.AllocOp = alloc["op"]
            if a.memory is op.memory:
                lay = a.layout
                if lay.is_empty(self.ctx.env):  # no address events: strides unevaluated (S14)
                    return True
                return not lay.swizzles and (not lay.strides or eval_int(lay.strides[-1],
                                                                         self.ctx.env) == 1)
        return True

    def temps(self) -> list[Temp]:
        out: list[Temp] = []

        def add(name: str, res: Resource, nbytes: int, point: int,
                when: list[tuple[Lit, ...]]) -> None:
            if when:
                owner = self._owner(point)
                sync = self.ctx.fig.sync_rule(res, self.ctx.owner_scope[owner])[0]
                out.append(Temp(len(out), name, res.name, align(nbytes, res.alignment), point,
                                owner, tuple(when), sync))

        for e in self.edges:
            if e.consumer_kind == "tile.mma" and e.operand in (0, 1):
                self._staging(e, add)
        # where no owner's threads exchange registers, no value needs an exchange area
        if not any(self._exchange_resource(s) is not None
                   for s in set(self.ctx.owner_scope.values())):
            return out
        for v in self.values:
            if not v.index & 255:
                check_deadline(self.deadline)
            self._exchanges(v, add)
        return out

    def _staging(self, e: Edge, add: object) -> None:
        v = self.values[e.value]
        nbytes = math.prod(v.shape) * 4  # staging is f32, dense
        shape = self.ctx.nodes[v.node]["shape"]
        scope = self.ctx.owner_scope[self._owner(e.consumer_point)]
        res = self._temp_resource(nbytes, product(tuple(shape)).const_value() is not None,
                                  scope)
        if res is None:
            self.ctx.static_infeasible.append(
                f"staging of {v.name} for {e.consumer} ({nbytes:,} B, used by {scope}) has "
                f"no home on {self.ctx.target.name}: no resource serving {scope} that it may "
                "write and read has room for it")
            return
        view: list[tuple[Lit, ...]] = []  # a view window: read in place where it can be
        nest: list[tuple[Lit, ...]] = []  # a copy statement before the mma
        if e.legal(FUSED):
            if v.kind == "tile.load":
                view.append((("x", e.index, FUSED),))
            elif v.kind == "memory.load" and not self._row_major_memory(v):
                nest.append((("x", e.index, FUSED),))
        if e.legal(RECOMPUTED):
            (view if v.kind == "tile.load" else nest).append((("x", e.index, RECOMPUTED),))
        if v.kind not in ("tile.mma", "loop.carry"):  # those buffers are kept row-major
            for q, p in enumerate(v.placements):
                if p.layout.kind == "swizzled":
                    nest += [(("x", e.index, c), ("y", v.index, q))
                             for c in (VIRTUAL, MATERIALIZED) if e.legal(c)]
        where = f"{v.name} for {e.consumer}"
        add(staging_name(v.name, e.consumer), res, nbytes, e.consumer_point, view + nest)  # type: ignore[operator]
        xres = self._exchange_resource(scope)
        if xres is not None and res.resource_class == "private":
            add(f"exchange of the staging of {where}", xres, nbytes,  # type: ignore[operator]
                e.consumer_point, nest)

    def _exchanges(self, v: Value, add: object) -> None:
        if v.register is None:
            return
        by_site: dict[int, list[tuple[Lit, ...]]] = {}
        for i in v.edges:
            e = self.edges[i]
            if not e.legal(VIRTUAL) or e.loop_carried:
                continue
            for n, gd, aligned in self._sites_of(e):
                if not aligned:
                    by_site.setdefault(n, []).append(
                        (("x", i, VIRTUAL),) + ((("g", gd, None),) if gd is not None else ()))
        for n, when in sorted(by_site.items()):
            res = self._exchange_resource(self.ctx.owner_scope[self._owner(n)])
            if res is not None:
                add(exchange_name(v.name, self.ctx.node_name[self.point_node[n]]),  # type: ignore[operator]
                    res, v.bytes, n, when)


def _site_points(guards: list[Guard], gs: tuple[int, ...]) -> tuple[int, tuple[int, ...]] | None:
    """(value, points) when every guard of ``gs`` is a ``site`` guard of one value at
    increasing points (:class:`GuardChain`'s ``site_of`` and ``points``), else None."""
    first = guards[gs[0]]
    if first.kind != "site":
        return None
    points = []
    last = -1
    for g in gs:
        kind, a, b, _ = guards[g]
        if kind != "site" or a != first.a or (points and b <= last):
            return None
        points.append(b)
        last = b
    return first.a, tuple(points)


def _swept(v: Value, items: list[tuple[int, int, int, int | None]],
           guards: list[Guard], groups: dict[tuple[int, int], dict[int, int]],
           **changes: Any) -> Value:
    """``v`` with its segments (and ``changes``): the held items ``(start, end, edge,
    guard)``, and the guarded holds already grouped by ``(edge, start)`` (``groups``:
    guard -> end), swept over the cuts.  An unguarded item covers ``[lo, hi)``
    (consecutive cuts) iff ``start <= lo < end``; the guarded items of one edge that
    start at one point form a :class:`GuardChain`, of which a segment names the suffix
    still covering it.  Linear in the items and segments (plus the chains active in each
    segment)."""
    plain: dict[int, list[int]] = {}  # cut -> +edge / ~edge (start / end of an item)
    # ``groups``: (edge, start) -> guard -> end, given some already (filled in here)
    for a, b, i, gd in items:
        if a >= b:
            continue
        if gd is None:
            plain.setdefault(a, []).append(i)
            plain.setdefault(b, []).append(~i)
        else:
            ends = groups.get((i, a))
            if ends is None:
                groups[(i, a)] = {gd: b}
            elif ends.get(gd, b) <= b:
                ends[gd] = b
    covers: list[tuple[int, int, int]] = []
    for i, a, b in sorted((i, a, b) for a, b, i, gd in items if gd is None and a < b):
        if covers and covers[-1][0] == i and a <= covers[-1][2]:
            covers[-1] = (i, covers[-1][1], max(b, covers[-1][2]))
        else:
            covers.append((i, a, b))
    chains = []
    for (i, a), ends in sorted(groups.items()):  # each group holds at least one guard
        by_end = sorted(zip(ends.values(), ends, strict=True))  # (end, guard)
        stops, gs = zip(*by_end, strict=True)
        site = _site_points(guards, gs)
        chains.append(GuardChain(i, a, gs, stops) if site is None
                      else GuardChain(i, a, gs, stops, *site))
    opening: dict[int, list[int]] = {}
    closing: dict[int, list[int]] = {}  # where each chain's last guard stops holding
    for ci, c in enumerate(chains):
        opening.setdefault(c.start, []).append(ci)
        closing.setdefault(c.ends[-1], []).append(ci)
    cuts = sorted(set(plain) | set(opening) | {e for c in chains for e in c.ends})
    segs: list[Segment] = []
    covered: dict[int, int] = {}  # unguarded edge -> active items
    edges: tuple[int, ...] = ()  # sorted(covered), rebuilt when it changes
    active: set[int] = set()  # chains
    chain_ends = [c.ends for c in chains]
    alive: list[int] = []  # sorted(active) with covered edges left out, rebuilt on change
    events = plain.keys() | opening.keys() | closing.keys()
    new, after = tuple.__new__, bisect.bisect_right  # Segment(...) without its Python __new__
    for lo, hi in itertools.pairwise(cuts):
        if lo not in events:  # only the alive chains' suffixes move on: a hot loop
            if alive:
                segs.append(new(Segment, (lo, hi, edges, tuple(
                    [(ci, after(chain_ends[ci], lo)) for ci in alive]))))
            elif covered:
                segs.append(new(Segment, (lo, hi, edges, ())))
            continue
        xs = plain.get(lo)
        changed = False
        if xs:
            for x in xs:
                if x < 0:
                    if covered[~x] == 1:
                        del covered[~x]
                    else:
                        covered[~x] -= 1
                else:
                    covered[x] = covered.get(x, 0) + 1
            edges = tuple(sorted(covered))
            changed = True
        cs = opening.get(lo)
        if cs:
            active.update(cs)
            changed = True
        cs = closing.get(lo)
        if cs:
            active.difference_update(cs)
            changed = True
        if not covered and not active:
            continue
        if changed:
            alive = [ci for ci in sorted(active) if chains[ci].edge not in covered]
        chained = tuple([(ci, after(chain_ends[ci], lo)) for ci in alive])
        segs.append(new(Segment, (lo, hi, edges, chained)))
    return replaced(v, segments=tuple(segs), chains=tuple(chains), covers=tuple(covers),
                    **changes)
