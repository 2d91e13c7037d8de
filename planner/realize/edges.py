"""The extent of an edge tile that the llvm-cpu backend computes, one rule for both sides.

A tile of ``t`` at offset ``o`` of a view dimension of extent ``E`` holds
``min(t, max(0, E - o))`` elements of it (:func:`valid`); work over masked columns runs
that rounded up to :data:`GRANULE` lanes (:func:`granule`). The lowering
(:mod:`planner.lower.cpu.rows`, :mod:`planner.lower.cpu.zero_tiles`) builds these as
expressions (:func:`valid_expr`, :func:`granule_expr`); the cost model
(:mod:`planner.solve.context`) averages them over the tiles ``o = i * t`` of the view
(:func:`mean_valid`, :func:`mean_granule`).
"""

from __future__ import annotations

from planner.ir.expr import Const, Expr, add, ceil_div, emax, emin, mul

#: A column clamp is rounded up to a multiple of this many columns (the widest catalog
#: vector, a multiple of every width; within the tile): whole vectors, no masked tail.
GRANULE = 16


def valid(tile: int, extent: int, offset: int) -> int:
    """The elements of a ``tile`` at ``offset`` that a view dimension of ``extent`` holds."""
    return min(tile, max(0, extent - offset))


def granule(n: int, tile: int) -> int:
    """``n`` rounded up to whole :data:`GRANULE` lanes, at most ``tile``."""
    return min(tile, -(-n // GRANULE) * GRANULE)


def _tiles(tile: int, extent: int) -> range:
    return range(0, extent, tile) if tile > 0 and extent > 0 else range(0)


def mean_valid(tile: int, extent: int) -> float:
    """:func:`valid` averaged over the tiles ``o = i * tile`` that cover ``extent``."""
    offsets = _tiles(tile, extent)
    if not offsets:
        return float(min(tile, max(extent, 0)))
    return sum(valid(tile, extent, o) for o in offsets) / len(offsets)


def mean_granule(tile: int, extent: int) -> float:
    """:func:`granule` of :func:`valid` averaged over the tiles that cover ``extent``."""
    offsets = _tiles(tile, extent)
    if not offsets:
        return float(min(tile, max(extent, 0)))
    return sum(granule(valid(tile, extent, o), tile) for o in offsets) / len(offsets)


def valid_expr(tile: Expr, extent: Expr, offset: Expr) -> Expr:
    """:func:`valid` as an expression of the loop program."""
    return emin(tile, emax(Const(0), add(extent, mul(-1, offset))))


def granule_expr(n: Expr, tile: Expr) -> Expr:
    """:func:`granule` as an expression of the loop program."""
    return emin(tile, mul(ceil_div(n, GRANULE), GRANULE))
