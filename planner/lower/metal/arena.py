"""The threadgroup byte arena (S17): every threadgroup buffer at a byte offset in one arena.

:class:`_ArenaLayout` is the emitter's step that lays the arena out: buffers side by side
when that fits the plan's peak for threadgroup memory, else sharing bytes between buffers
whose lifetimes (:func:`_lifetimes`) do not overlap, packed by :func:`_pack` within that
peak where it can; then it checks the arena and the per-thread slices against the
target's capacities.  The emitter's module doc states the design.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping

from planner.catalog import Resource, Target
from planner.lower.metal import tables as tb
from planner.lower.metal.checks import _fail
from planner.lower.metal.spread import _WHOLE, _Home, _Loop, _Node, _Pipe, _Work, _work_buffers
from planner.lower.metal.tables import Space


class _ArenaLayout:
    """The emitter's arena and capacity steps (a base of ``_Emitter``, whose state below
    they read and set)."""

    target: Target
    homes: dict[str, _Home]
    notes: list[str]
    planned_peak: int | None
    arena: str
    arena_bytes: int
    arena_shared: bool
    arena_peak: tuple[int, int] | None
    arena_items: dict[str, tuple[int, tuple[int, int]]]

    def assign_arena(self, nodes: list[_Node]) -> None:
        """Give every threadgroup buffer its bytes in the arena (see the module doc).

        Side by side when that fits the plan's peak (no reuse, so no write-after-read
        barriers); otherwise buffers whose lifetimes do not overlap share bytes.  Explicit
        Memory is live for the whole instance, a temporary from the first to the last
        statement that touches it (over whole loops where its value crosses a back edge,
        :func:`_lifetimes`)."""
        homes = {n: h for n, h in self.homes.items() if h.space is Space.THREADGROUP}
        self.arena, self.arena_bytes, self.arena_shared = "", 0, False
        self.arena_peak, self.arena_items = None, {}
        if not homes:
            return
        align = self._threadgroup_alignment()
        live = _lifetimes(nodes, self.homes)
        items = {n: (_round_up(h.nbytes, align),
                     live.get(n, (0, _WHOLE)) if h.pooled else (0, _WHOLE))
                 for n, h in homes.items()}
        bound = self.arena_bound()
        apart = sum(size for size, _ in items.values())
        self.arena_shared = bound is not None and apart > bound
        offsets, total = _pack(items, bound) if self.arena_shared else _side_by_side(items)
        self.arena = "tg_arena_"
        self.arena_bytes = _round_up(total, tb.ARENA_GRANULE)
        self.arena_peak = _live_peak(items)
        self.arena_items = items
        for n, off in offsets.items():
            self.homes[n] = dataclasses.replace(self.homes[n], offset=off)

    def arena_bound(self) -> int | None:
        """Bytes the arena may take: the plan's peak (and never the resource's capacity
        more; a plan made for a bigger target), else the capacity."""
        res = self._threadgroup_resource()
        bounds = [b for b in (self.planned_peak, res.capacity if res is not None else None)
                  if b is not None]
        return min(bounds) if bounds else None

    def _arena_story(self) -> str:
        """What is live together where the arena is fullest, for messages."""
        if self.arena_peak is None:
            return "nothing"
        point, live_bytes = self.arena_peak
        parts = []
        for h in sorted((self.homes[n] for n in self.arena_items),
                        key=lambda h: (h.offset, h.buffer.name)):
            size, (lo, hi) = self.arena_items[h.buffer.name]
            if lo <= point <= hi:
                parts.append(f"{_what(h)} {size:,} B")
        text = (f"{parts[0]} live" if len(parts) == 1
                else " + ".join(parts) + f" = {live_bytes:,} B live together")
        if self.arena_shared and self.arena_bytes > live_bytes:
            text += f", packed into {self.arena_bytes:,} B"
        return text

    def check_capacity(self) -> tuple[int, int]:
        """S17: manual Memory and compiler temporaries together within threadgroup memory
        (and, a note otherwise, within the plan's peak)."""
        res = self._threadgroup_resource()
        total = self.arena_bytes
        if total and res is not None and res.capacity is not None and total > res.capacity:
            raise _fail(f"threadgroup memory does not fit {res.name}: the arena needs "
                        f"{total:,} B > capacity {res.capacity:,} B per {res.instance_scope} "
                        f"({self._arena_story()}; each rounded to "
                        f"{self._threadgroup_alignment()} B; manual Memory and compiler "
                        "temporaries count together)")
        if total and self.planned_peak is not None and total > self.planned_peak:
            where = res.name if res is not None else "threadgroup memory"
            self.notes.append(f"the threadgroup arena takes {total:,} B, more than the plan's "
                              f"peak of {self.planned_peak:,} B for {where} "
                              f"({self._arena_story()})")
        per_thread = sum(h.capacity * h.buffer.dtype.itemsize for h in self.homes.values()
                         if h.space is Space.THREAD)
        regs = self.target.resources_for_class("private")
        cap = regs[0].capacity if regs else None
        if cap is not None and per_thread > cap:
            self.notes.append(f"per-thread slices hold {per_thread:,} B per thread, more than "
                              f"{regs[0].name} ({cap:,} B): the Metal compiler will spill")
        return total, per_thread

    def _threadgroup_alignment(self) -> int:
        res = self._threadgroup_resource()
        return res.alignment if res is not None else 16

    def _threadgroup_resource(self) -> Resource | None:
        found = self.target.resources_for_class("shared")
        return found[0] if found else None


def _lifetimes(nodes: list[_Node], homes: Mapping[str, _Home]) -> dict[str, tuple[int, int]]:
    """[first, last] statement positions of each pooled buffer, over whole loops when its
    value may cross a loop's back edge (read before written in the body, several
    versions, used inside and outside, or first written in a nested loop or a stage)."""
    records: dict[str, list[tuple[int, bool, tuple[int, ...]]]] = {}
    spans: dict[int, tuple[int, int]] = {}
    loops: set[int] = set()
    pos = 0
    next_id = 0

    def walk(body: Iterable[_Node], stack: tuple[int, ...]) -> None:
        nonlocal pos, next_id
        for n in body:
            if isinstance(n, _Work):
                pos += 1
                for name, write in _work_buffers(n):
                    if homes[name].pooled:
                        records.setdefault(name, []).append((pos, write, stack))
            elif isinstance(n, _Loop | _Pipe):
                sid, next_id = next_id, next_id + 1
                loops.add(sid)
                start = pos + 1
                if isinstance(n, _Loop):
                    walk(n.body, (*stack, sid))
                for st in n.stages if isinstance(n, _Pipe) else ():
                    stage_id, next_id = next_id, next_id + 1
                    walk(st.body, (*stack, sid, stage_id))
                spans[sid] = (start, pos)

    walk(nodes, ())
    out: dict[str, tuple[int, int]] = {}
    for name, recs in records.items():
        lo, hi = min(r[0] for r in recs), max(r[0] for r in recs)
        first = min(recs)
        for sid in {s for r in recs for s in r[2] if s in loops}:
            inside = all(sid in r[2] for r in recs)
            depth = first[2].index(sid) if sid in first[2] else -1
            direct = first[2][depth + 1:]  # a pipeline's stage, or nothing for a loop
            same = all(r[2][depth + 1:] == direct for r in recs) if inside else False
            definite = first[1] and inside and len(direct) <= 1 and same
            if not definite or homes[name].buffer.versions > 1:
                lo, hi = min(lo, spans[sid][0]), max(hi, spans[sid][1])
        out[name] = (lo, hi)
    return out


_Items = Mapping[str, tuple[int, tuple[int, int]]]  # buffer -> (bytes, [first, last])
_PACK_TIME_S = 2.0  # CP-SAT packing search (only when first fit misses the peak)
_PACK_HORIZON = 1 << 20  # statement positions beyond it: the whole instance


def _round_up(n: int, step: int) -> int:
    return -(-n // max(1, step)) * max(1, step)


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def _live_peak(items: _Items) -> tuple[int, int]:
    """(statement, bytes) where the buffers live at once take the most bytes: the least
    any packing of ``items`` needs."""
    best = (0, 0)
    for lo in sorted({life[0] for _, life in items.values()}):
        held = sum(size for size, life in items.values() if life[0] <= lo <= life[1])
        if held > best[1]:
            best = (lo, held)
    return best


def _side_by_side(items: _Items) -> tuple[dict[str, int], int]:
    """Every buffer its own bytes: explicit Memory (live throughout) first."""
    offsets: dict[str, int] = {}
    off = 0
    for name in sorted(items, key=lambda n: (items[n][1] != (0, _WHOLE), -items[n][0], n)):
        offsets[name] = off
        off += items[name][0]
    return offsets, off


def _first_fit(items: _Items, order: Iterable[str]) -> tuple[dict[str, int], int]:
    placed: dict[str, int] = {}
    end = 0
    for name in order:
        size, life = items[name]
        busy = sorted((placed[m], placed[m] + items[m][0]) for m in placed
                      if _overlap(life, items[m][1]))
        off = 0
        for o, e in busy:
            if off + size <= o:
                break
            off = max(off, e)
        placed[name] = off
        end = max(end, off + size)
    return placed, end


def _spread_fit(items: _Items, order: Iterable[str], bound: int
                ) -> tuple[dict[str, int], int] | None:
    """Within ``bound`` bytes, each buffer on bytes no other buffer uses where there is
    room (sharing bytes costs write-after-read barriers), else first fit by lifetime."""
    placed: dict[str, int] = {}
    end = 0
    for name in order:
        size, life = items[name]
        if end + size <= bound:
            off = end
        else:  # reuse the bytes of the buffers that died longest ago
            busy = [(placed[m], placed[m] + items[m][0]) for m in placed
                    if _overlap(life, items[m][1])]
            best: tuple[int, int] | None = None
            for cand in sorted({0, *(placed[m] + items[m][0] for m in placed)}):
                if cand + size > bound:
                    break
                if any(cand < e and o < cand + size for o, e in busy):
                    continue
                recent = max((items[m][1][1] for m in placed if placed[m] < cand + size
                              and cand < placed[m] + items[m][0]), default=-1)
                if best is None or recent < best[0]:
                    best = (recent, cand)
            if best is None:
                return None
            off = best[1]
        placed[name] = off
        end = max(end, off + size)
    return placed, end


def _pack(items: _Items, bound: int | None = None) -> tuple[dict[str, int], int]:
    """Byte offsets such that buffers live at the same statement never overlap, and the
    arena they need (sizes are multiples of the alignment, so offsets are too).

    The largest sum of bytes live at one statement bounds every packing from below (the
    plan's peak counts exactly that); first fit in a few orders usually reaches it,
    else CP-SAT searches for the least arena.  Packing intervals optimally is
    NP-hard: the bound is not always reachable, and a search that runs out of time keeps
    the best packing found.
    With room below ``bound``, buffers are first spread over bytes of their own."""
    if bound is not None:
        for key in (lambda n: (items[n][1][0], -items[n][0], n),
                    lambda n: (-items[n][0], items[n][1], n)):
            spread = _spread_fit(items, sorted(items, key=key), bound)
            if spread is not None:
                return spread
    lower = _live_peak(items)[1]
    orders = (lambda n: (-items[n][0], items[n][1], n),
              lambda n: (items[n][1][0], -items[n][0], n),
              lambda n: (items[n][1][0] - items[n][1][1], -items[n][0], n),
              lambda n: (-items[n][0] * (min(items[n][1][1], 1 << 20) - items[n][1][0] + 1),
                         n))
    best = min((_first_fit(items, sorted(items, key=key)) for key in orders),
               key=lambda r: r[1])
    if best[1] <= lower:
        return best
    exact = _pack_exactly(items, lower, best[1])
    return exact if exact is not None else best


def _pack_exactly(items: _Items, lower: int, upper: int) -> tuple[dict[str, int], int] | None:
    """The least arena (CP-SAT: one interval per buffer in statements x bytes, no two
    overlapping), searched between the live peak ``lower`` and a known packing ``upper``;
    None when the search finds nothing better within its time limit."""
    from ortools.sat.python import cp_model

    g = math.gcd(*(size for size, _ in items.values())) or 1  # offsets stay aligned
    m = cp_model.CpModel()
    names = sorted(items)
    top = m.NewIntVar(-(-lower // g), (upper - 1) // g, "top")
    xs, ys, offs = [], [], {}
    for i, n in enumerate(names):
        size, (lo, hi) = items[n]
        hi = min(hi, _PACK_HORIZON)
        off = m.NewIntVar(0, max(0, (upper - size) // g), f"o{i}")
        offs[n] = off
        xs.append(m.NewIntervalVar(lo, hi - lo + 1, hi + 1, f"t{i}"))
        ys.append(m.NewIntervalVar(off, size // g, off + size // g, f"b{i}"))
        m.Add(off + size // g <= top)
    m.AddNoOverlap2D(xs, ys)
    m.Minimize(top)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = _PACK_TIME_S
    solver.parameters.num_workers = 1  # deterministic
    solver.parameters.random_seed = 0
    if solver.Solve(m) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return {n: g * int(solver.Value(o)) for n, o in offs.items()}, g * int(solver.Value(top))


def _what(h: _Home) -> str:
    """A buffer of the arena, for messages and the declarations' map."""
    b = h.buffer
    if h.exchange:
        return f"exchange area for the per-thread slices of %{b.name.rsplit('.x', 1)[0]}"
    ver = f" ({b.versions} versions)" if b.versions > 1 else ""
    return f"%{b.name}{ver}"
