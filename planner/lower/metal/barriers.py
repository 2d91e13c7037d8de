"""Barrier placement: which accesses of the threads conflict, and the barriers between them.

A statement's accesses (:class:`_Access`: a byte range of the arena, a written view or
a device buffer, with the version of the buffer it touches) conflict with an access
since the last barrier when another thread may have written what it reads, or may still
read what it writes; accesses by the element's owner never do, nor do the windowed
stores of two different instances of a nested parallel (disjoint by S16; a window is not
written by the element's owner, so what follows the join does conflict with it).
:class:`_BarrierPlacement` is the emitter's step that puts a uniform barrier between
statements before the first conflict, analysing loops and pipeline stages to a fixed
point (the emitter's module doc states the design).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from planner.ir.expr import Apply, Const, Expr, ExprOp, Sym
from planner.lower.loops import program as lp
from planner.lower.metal.checks import _fail
from planner.lower.metal.spread import (
    _WHOLE,
    _Home,
    _Loop,
    _Node,
    _Pipe,
    _reads,
    _Stage,
    _Sync,
    _Work,
)
from planner.lower.metal.tables import Space


@dataclass(frozen=True, slots=True)
class _Access:
    """One buffer access of a statement, for barrier placement."""

    key: str  # array or view
    buffer: str  # the buffer (or view) it belongs to
    lo: int
    hi: int
    cls: str  # resource class whose memory flag orders it
    write: bool
    aligned: bool  # by the element's owner thread
    version: Expr
    loop: str | None  # the loop whose iteration the version counts
    shift: int  # iterations (time steps) before the current one
    #: a windowed store (S16): the nested parallels whose instances it runs in, and those
    #: of them in which it ran in an earlier instance than the current one
    instances: tuple[str, ...] = ()
    earlier: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class _LoopCtx:
    label: str
    vars: frozenset[str]
    lag: int
    instances: bool = False  # the instances of a nested parallel, one after another


def _modulus(v: Expr) -> int | None:
    if isinstance(v, Apply) and v.op is ExprOp.MOD and isinstance(v.args[1], Const):
        return v.args[1].value
    return None


def _may_alias(p: _Access, a: _Access) -> bool:
    """Whether two accesses may touch the same version of their buffer."""
    if p.buffer != a.buffer:
        return True  # two buffers sharing arena bytes
    if isinstance(p.version, Const) and isinstance(a.version, Const):
        return p.version == a.version
    if p.version == a.version and p.loop is not None and p.loop == a.loop:
        m = _modulus(p.version)
        if m:
            return (p.shift - a.shift) % m == 0
    return True


def _other_instances(p: _Access, a: _Access) -> bool:
    """Whether ``p`` and ``a`` are windowed stores of one buffer by two different instances
    of a nested parallel: the verifier proved their windows disjoint (S16), so the
    threads that write them never write one element."""
    return p.buffer == a.buffer and any((label in p.earlier) != (label in a.earlier)
                                        for label in set(p.instances) & set(a.instances))


def _conflict(p: _Access, a: _Access) -> bool:
    owner = p.aligned and a.aligned and p.buffer == a.buffer  # both by the element's owner
    return (p.key == a.key and p.lo < a.hi and a.lo < p.hi and (p.write or a.write)
            and not owner and _may_alias(p, a) and not _other_instances(p, a))


def _normalize(a: _Access) -> _Access:
    m = _modulus(a.version)
    return dataclasses.replace(a, shift=a.shift % m if m else 0)


def _dedupe(accs: Iterable[_Access]) -> list[_Access]:
    return list(dict.fromkeys(accs))


class _BarrierPlacement:
    """The emitter's barrier step (a base of ``_Emitter``, whose state below it reads;
    the exchanges ask :meth:`aligned` too)."""

    views: dict[str, lp.ViewParam]
    homes: dict[str, _Home]
    arena: str

    def aligned(self, w: _Work, r: lp.BufRead) -> bool:
        """Whether ``r`` reads, in every iteration, the element its thread owns."""
        buf = self.homes[r.buffer].buffer
        return (r.index == tuple(Sym(v) for v, _ in w.dist)
                and buf.shape == tuple(e for _, e in w.dist))

    def accesses(self, w: _Work, loops: tuple[_LoopCtx, ...]) -> list[_Access]:
        out: list[_Access] = []

        windowed = isinstance(w.dest, lp.BufWrite) and bool(w.dest.offsets)
        instances = tuple(c.label for c in loops if c.instances) if windowed else ()

        def note(name: str, version: Expr, write: bool, aligned: bool,
                 inst: tuple[str, ...] = ()) -> None:
            if name in self.views:
                if self.views[name].readonly:
                    return
                key, lo, hi, cls = f"view {name}", 0, _WHOLE, "global"
            else:
                h = self.homes[name]
                if h.space is Space.THREAD:
                    return
                if h.space is Space.DEVICE:
                    key, lo, hi, cls = f"%{name}", 0, _WHOLE, "global"
                else:  # byte ranges of the one arena: buffers may share bytes
                    key, lo, hi, cls = self.arena, h.offset, h.offset + h.nbytes, "shared"
                aligned = aligned and not h.exchange
                name = f"%{name}"
            loop, shift = None, 0
            for ctx in reversed(loops):
                if ctx.vars & version.symbols():
                    loop, shift = ctx.label, ctx.lag
                    break
            out.append(_normalize(_Access(key, name, lo, hi, cls, write, aligned, version,
                                          loop, shift, inst)))

        if isinstance(w.dest, lp.BufWrite):
            # a window is split over the threads by its own elements, not the buffer's:
            # not by the element's owner (a later whole read needs a barrier)
            note(w.dest.buffer, w.dest.version, True, not windowed, instances)
        else:
            note(w.dest.view, Const(0), True, False)
        for r in _reads(w):
            if isinstance(r, lp.BufRead):
                note(r.buffer, r.version, False, self.aligned(w, r))
            else:
                note(r.view, Const(0), False, False)
        writes = [a for a in out if a.write]
        for a in out:
            if not a.write and any(_conflict(x, a) for x in writes):
                raise _fail(f"lowering to Metal: a statement ({w.comment}) reads {a.buffer} "
                            "away from the owner while writing it: no barrier can order that",
                            rule="msl-lowering")
        return out

    def place_barriers(self, nodes: Iterable[_Node], pending: list[_Access],
                       loops: tuple[_LoopCtx, ...]) -> tuple[list[_Node], list[_Access]]:
        out: list[_Node] = []
        for n in nodes:
            if isinstance(n, _Work):
                accs = self.accesses(n, loops)
                hits = [p for p in pending if any(_conflict(p, a) for a in accs)]
                if hits:
                    keys = ", ".join(dict.fromkeys(p.buffer for p in hits))
                    out.append(_Sync(frozenset(p.cls for p in hits),
                                     f"other threads' accesses to {keys}"))
                    pending = []
                pending = _dedupe([*pending, *accs])
                out.append(n)
            elif isinstance(n, _Sync):
                if out and isinstance(out[-1], _Sync):
                    prev = out.pop()
                    assert isinstance(prev, _Sync)
                    n = _Sync(prev.classes | n.classes, f"{prev.note}; {n.note}")
                out.append(n)
                pending = []
            elif isinstance(n, _Loop):
                ctx = _LoopCtx(n.label, frozenset(n.vars), 0, n.instances)
                body, pending = self._fixpoint(
                    n.label, pending, lambda p, c=ctx, b=n.body: self.place_barriers(
                        b, p, (*loops, c)))
                out.append(dataclasses.replace(n, body=tuple(body)))
            elif isinstance(n, _Pipe):
                stages, pending = self._fixpoint(
                    n.label, pending, lambda p, pipe=n: self._place_stages(pipe, p, loops))
                out.append(dataclasses.replace(n, stages=tuple(stages)))
            else:
                out.append(n)
        return out, pending

    def _place_stages(self, n: _Pipe, pending: list[_Access], loops: tuple[_LoopCtx, ...]
                      ) -> tuple[list[_Stage], list[_Access]]:
        """Stages run under a (uniform) guard and may be skipped in the prologue and
        epilogue: a barrier at a stage's start is hoisted before the guard, so every time
        step runs it; what a stage leaves pending joins what was pending before it."""
        stages = []
        for st in n.stages:
            ctx = _LoopCtx(n.label, frozenset(n.vars), st.lag)
            body, exit_ = self.place_barriers(st.body, pending, (*loops, ctx))
            lead = None
            if body and isinstance(body[0], _Sync):
                lead, body, pending = body[0], body[1:], []
            stages.append(dataclasses.replace(st, body=tuple(body), lead=lead))
            pending = _dedupe([*exit_, *pending])
        return stages, pending

    def _fixpoint(self, label: str, pending: list[_Access],
                  run: Callable[[list[_Access]], tuple[list, list[_Access]]]
                  ) -> tuple[list, list[_Access]]:
        """Place barriers in a loop body, the next iteration's conflicts included."""
        carried: list[_Access] = []
        for _ in range(16):
            body, exit_ = run(_dedupe([*pending, *carried]))
            wrapped = [_earlier(_normalize(dataclasses.replace(a, shift=a.shift + 1))
                                if a.loop == label else a, label) for a in exit_]
            grown = _dedupe([*carried, *wrapped])
            if len(grown) == len(carried):
                break
            carried = grown
        after = [dataclasses.replace(a, loop=None, shift=0) if a.loop == label else a
                 for a in [*exit_, *pending]]
        return body, _dedupe(_joined(a, label) for a in after)


def _earlier(a: _Access, label: str) -> _Access:
    """``a`` as seen from the next iteration of ``label``: an earlier instance's."""
    if label not in a.instances:
        return a
    return dataclasses.replace(a, earlier=a.earlier | {label})


def _joined(a: _Access, label: str) -> _Access:
    """``a`` after the loop ``label``: the instances have joined, so what they wrote is
    what some other thread wrote (a later read needs the barrier at the join)."""
    if label not in a.instances:
        return a
    return dataclasses.replace(a, instances=tuple(x for x in a.instances if x != label),
                               earlier=a.earlier - {label})
