"""Storage geometry of a materialized tile, independent of any kernel.

The layouts a buffer may take (dense, padded rows, an XOR swizzle where banks and column
reads meet), the bytes of each, the worst bank conflict of reading one column in each, and
the alignment and version stride the lowering allocates buffers with (re-exported from
:mod:`planner.realize.storage`, the one place that rule lives).
"""

from __future__ import annotations

import math

from planner.plan.decisions import LayoutChoice
from planner.realize.storage import VERSION_ALIGN, align, version_bytes

__all__ = ["VERSION_ALIGN", "align", "conflict_degree", "layout_bytes", "layout_candidates",
           "version_bytes"]


def conflict_degree(shape: tuple[int, ...], itemsize: int, layout: LayoutChoice,
                    banks: tuple[int, int]) -> int:
    """Worst bank conflict of reading one column of a row-major tile in this layout."""
    if len(shape) < 2:
        return 1
    rows, row_len = shape[-2], shape[-1]
    count, width = banks
    stride = row_len + (layout.pad if layout.kind == "padded" else 0)
    per_bank: dict[int, set[int]] = {}
    for i in range(min(count, rows)):
        offset = i * stride
        if layout.kind == "swizzled" and layout.swizzle:
            bits, base, shift = layout.swizzle
            mask = ((1 << bits) - 1) << (base + shift)
            offset ^= (offset & mask) >> shift
        word = offset * itemsize // width
        per_bank.setdefault(word % count, set()).add(word)
    return max((len(w) for w in per_bank.values()), default=1)


def layout_candidates(shape: tuple[int, ...], itemsize: int,
                      banks: tuple[int, int] | None, column_readers: bool
                      ) -> list[LayoutChoice]:
    """Dense always; padded rows and an XOR swizzle where banks and column reads meet."""
    out = [LayoutChoice("dense")]
    if banks is None or not column_readers or len(shape) < 2 or shape[-1] <= 1:
        return out
    count, width = banks
    unit = max(1, width // itemsize)
    for pad in sorted({1, unit}):
        out.append(LayoutChoice("padded", pad=pad))
    row_len = shape[-1]
    if row_len & (row_len - 1) == 0 and unit & (unit - 1) == 0 and row_len > unit:
        base = unit.bit_length() - 1
        words = row_len // unit
        bits = min(count, words, shape[-2]).bit_length() - 1
        shift = row_len.bit_length() - 1 - base
        if bits > 0 and shift >= bits:
            out.append(LayoutChoice("swizzled", swizzle=(bits, base, shift)))
    return out


def layout_bytes(shape: tuple[int, ...], itemsize: int, layout: LayoutChoice) -> int:
    elems = math.prod(shape)
    if layout.kind == "padded" and len(shape) >= 2 and elems:
        elems = elems // shape[-1] * (shape[-1] + layout.pad)
    elif layout.kind == "swizzled" and layout.swizzle and elems:
        bits, base, shift = layout.swizzle
        block = 1 << (bits + base + shift)
        elems = -(-elems // block) * block
    return elems * itemsize
