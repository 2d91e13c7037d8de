"""Edge copies of fill-0 view windows copy what the view holds, not the whole tile.

A tile ``%t[v0, v1] = X[o0 + v0, o1 + v1]`` (fill 0) is 0 past ``R = min(E, max(0,
X.extent - o))`` in each dimension (:func:`~.rows.zero_extents`), and an mma that reads it
stops there. When every reader of the tile is such an mma, or a transpose ``%u[w0, w1] =
%t[w1, w0]`` whose every reader is one, nothing reads past ``R``: the copy runs ``R``
rows and columns (attention's last key tile: 13 of 64 keys of K and V) and the transpose
``R`` rows by ``R`` columns rounded up to :data:`~planner.realize.edges.GRANULE` (whole
vectors and in-register W×W blocks; the extra columns hold what the tile holds there,
which no mma reads). Each dimension is clamped where the tile is written, so the mma's
bounds, evaluated where it reads the tile, are the clamped copy's.
"""

from __future__ import annotations

import dataclasses

from planner.ir.expr import Expr, Sym, add, emin
from planner.lower.cpu.mma_sources import _names
from planner.lower.cpu.rows import _leaves, _map_leaves, _parts, zero_extents
from planner.lower.loops import ir as lp
from planner.realize.edges import granule_expr, valid_expr

_Zeros = dict[tuple[int, str, Expr], tuple[Expr, Expr]]


def clamp_zero_tiles(body: tuple[lp.Stmt, ...], seg: lp.Segment, prog: lp.LoopProgram
                     ) -> tuple[lp.Stmt, ...]:
    """``body`` with the copies of fill-0 view windows that only mmas read (directly or
    through a transpose) clamped to what the view holds (see the module docstring)."""
    leaves = _leaves(body)
    if leaves is None:
        return body
    zeros = zero_extents(body, seg, prog)
    clamps: dict[int, tuple[Expr, ...]] = {}
    for s in leaves:
        got = _copy_extents(s, leaves, zeros, seg, prog)
        if got is not None:
            clamps[id(s)] = got[0]
            clamps.update(got[1])
    if not clamps:
        return body

    def clamp(s: lp.Stmt) -> lp.Stmt:
        ext = clamps.get(id(s))
        if ext is None:
            return s
        if isinstance(s, lp.FusedNest):
            return dataclasses.replace(s, extents=ext, parts=tuple(
                dataclasses.replace(p, extents=ext) for p in s.parts))
        return dataclasses.replace(s, extents=ext)  # type: ignore[arg-type]

    return _map_leaves(body, clamp)


def _valid(p: lp.Nest, prog: lp.LoopProgram) -> tuple[Expr, Expr] | None:
    """The rows and columns of the view that copy ``p`` (``%t[v0, v1] = X[o0 + v0,
    o1 + v1]``, fill 0) reads inside the view, else None."""
    val, d = p.value, p.dest
    if not (isinstance(val, lp.ViewRead) and val.fill == 0.0 and isinstance(d, lp.BufWrite)
            and len(p.vars) == 2 and len(val.index) == 2):
        return None
    v0, v1 = Sym(p.vars[0]), Sym(p.vars[1])
    win = val.window
    if d.index != (v0, v1) or val.index != (add(win.offsets[0], v0), add(win.offsets[1], v1)):
        return None
    shape = prog.param(val.view).shape
    r, c = (valid_expr(e, x, o)
            for e, x, o in zip(p.extents, shape, win.offsets, strict=True))
    return r, c


def _copy_extents(s: lp.Stmt, leaves: list[lp.Stmt], zeros: _Zeros, seg: lp.Segment,
                  prog: lp.LoopProgram) -> tuple[tuple[Expr, ...],
                                                 dict[int, tuple[Expr, ...]]] | None:
    """(the clamped extents of copy nest ``s``, the clamped extents of the transposes
    reading its tiles by statement id) when every part of ``s`` is a fill-0 view copy
    into a tile only mmas read (directly or through a transpose), all of one extent."""
    parts = _parts(s)
    if not parts or any(type(p) is not lp.Nest for p in parts):
        return None
    valid: set[tuple[Expr, Expr]] = set()
    transposes: dict[int, tuple[Expr, ...]] = {}
    for p in parts:
        got = _valid(p, prog)  # type: ignore[arg-type]
        d = p.dest
        if got is None or not isinstance(d, lp.BufWrite) or d.buffer not in seg.buffers \
                or prog.buffer(d.buffer).role == "memory":
            return None
        valid.add(got)
        readers = _readers(d.buffer, s, leaves)
        if readers is None:
            return None
        for r in readers:
            if isinstance(r, lp.Mma):
                if not _zero_read(r, d, zeros):
                    return None
                continue
            u = _transpose_of(r, d)
            if u is None or u.buffer not in seg.buffers:
                return None
            ureaders = _readers(u.buffer, r, leaves)
            if ureaders is None or not all(isinstance(m, lp.Mma) and _zero_read(m, u, zeros)
                                           for m in ureaders):
                return None
            rows, cols = got
            wide = granule_expr(rows, r.extents[1])  # type: ignore[union-attr]
            transposes[id(r)] = (emin(r.extents[0], cols), wide)  # type: ignore[union-attr]
    if len(valid) != 1:
        return None
    (rows, cols), = valid
    return (rows, cols), transposes


def _readers(name: str, writer: lp.Stmt, leaves: list[lp.Stmt]) -> list[lp.Stmt] | None:
    """The statements other than ``writer`` that refer to buffer ``name``; None when
    ``writer`` refers to it other than by its writes (or another statement writes it)."""
    out = []
    for s in leaves:
        if s is writer:
            if any(name in _names(p.value) for p in _parts(s)):
                return None
            continue
        if name not in _names(s):
            continue
        if isinstance(s, lp.Mma) and s.c.buffer == name:
            return None
        if any(isinstance(p.dest, lp.BufWrite) and p.dest.buffer == name for p in _parts(s)):
            return None
        out.append(s)
    return out


def _zero_read(m: lp.Mma, d: lp.BufWrite | lp.MmaBuf, zeros: _Zeros) -> bool:
    """Whether every operand of ``m`` reading ``d``'s tile stops where it is known 0."""
    ops = [o for o in (m.a, m.b) if isinstance(o, lp.MmaBuf) and o.buffer == d.buffer]
    return bool(ops) and all(o.version == d.version and (id(m), o.buffer, o.version) in zeros
                             for o in ops)


def _transpose_of(s: lp.Stmt, d: lp.BufWrite) -> lp.MmaBuf | None:
    """The tile ``s`` writes when it is ``%u[w0, w1] = %t[w1, w0]`` of ``d``'s tile (the
    version written), else None."""
    if type(s) is not lp.Nest or len(s.vars) != 2 or not isinstance(s.dest, lp.BufWrite):
        return None
    w0, w1 = Sym(s.vars[0]), Sym(s.vars[1])
    val = s.value
    if not (isinstance(val, lp.BufRead) and val.buffer == d.buffer and val.version == d.version
            and val.index == (w1, w0) and s.dest.index == (w0, w1)):
        return None
    return lp.MmaBuf(s.dest.buffer, s.dest.version)
