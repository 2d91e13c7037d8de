"""Layouts: padding, transposes and XOR swizzles are permutations/injections (S11, S13)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from planner.ir.expr import Const
from planner.ir.layout import XorSwizzle, dense, strided


@given(st.integers(1, 12), st.integers(1, 12), st.integers(0, 5))
def test_padded_row_layout_is_injective_and_counts_padding(rows, cols, pad):
    lay = strided([rows, cols], [cols + pad, 1])
    assert lay.injectivity_counterexample({}) is None
    assert lay.storage_elements({}) == (rows - 1) * (cols + pad) + cols
    assert lay.offsets({}).max() < lay.storage_elements({})


@given(st.integers(1, 12), st.integers(1, 12))
def test_transposed_layout_is_a_permutation(rows, cols):
    lay = strided([rows, cols], [1, rows])
    offs = lay.offsets({})
    assert sorted(offs.reshape(-1).tolist()) == list(range(rows * cols))


@given(st.integers(0, 3), st.integers(0, 2), st.integers(3, 4))
def test_xor_swizzle_permutes_offsets_within_its_block(bits, base, shift):
    sw = XorSwizzle(bits, base, shift)
    block = np.arange(sw.block * 2, dtype=np.int64)
    out = sw.apply(block)
    assert sorted(out.tolist()) == block.tolist()
    assert np.all(out // sw.block == block // sw.block)


def test_swizzled_storage_rounds_up_to_the_block():
    lay = strided([3, 8], [8, 1], [XorSwizzle(3, 0, 3)])
    assert lay.storage_elements({}) == 64
    assert lay.injectivity_counterexample({}) is None


def test_broadcast_and_overlapping_maps_have_counterexamples():
    assert strided([4, 3], [0, 1]).injectivity_counterexample({}) == ((0, 0), (1, 0), 0)
    a, b, off = strided([4, 4], [2, 1]).injectivity_counterexample({})
    assert a != b and off == 2


def test_empty_layout_has_no_storage_and_no_address_events():
    lay = dense([0, 1 << 40])
    assert lay.span() == lay.num_elements() == Const(0)
    assert lay.storage_elements({}) == 0


def test_layout_prints_strides_and_swizzles():
    lay = strided([32, 16], [17, 1], [XorSwizzle(2, 0, 3)])
    assert str(lay) == "layout<[32, 16] stride [17, 1] xor(2, 0, 3)>"
