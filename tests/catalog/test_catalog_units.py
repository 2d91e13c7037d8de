"""Byte sizes: the spellings catalogs use, and format → parse round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.catalog import ByteSizeError, format_byte_size, parse_byte_size
from planner.catalog.units import UNITS


@pytest.mark.parametrize(("text", "size"), [
    (49152, 49152), ("49152", 49152), ("48 KiB", 49152), ("48KiB", 49152),
    ("1.5 MiB", 3 << 19), ("0.25 KiB", 256), ("8 GiB", 8 << 30), ("12 B", 12),
    ("unbounded", None), (None, None), (0, 0),
])
def test_parse(text, size):
    assert parse_byte_size(text) == size


@pytest.mark.parametrize(("text", "message"), [
    ("48KB", '\'48KB\' is not a byte size (write 49152 or "48 KiB")'),
    ("1.5 MB", '\'1.5 MB\' is not a byte size (write 1572864 or "1.5 MiB")'),
    ("48 kb", '\'48 kb\' is not a byte size (write 49152 or "48 KiB")'),
    ("1.3 KiB", "'1.3 KiB' is not a whole number of bytes (1331.2)"),
    ("lots", "'lots' is not a byte size (write a whole number of bytes, or a number with B, "
             'KiB, MiB, GiB or TiB, e.g. "48 KiB")'),
    (-1, "-1 is not a byte size (it is negative)"),
    (True, "True is not a byte size (write a whole number of bytes, or a number with B, "
           'KiB, MiB, GiB or TiB, e.g. "48 KiB")'),
])
def test_parse_rejects(text, message):
    with pytest.raises(ByteSizeError) as info:
        parse_byte_size(text)
    assert str(info.value) == message


@pytest.mark.parametrize(("size", "text"), [
    (None, "unbounded"), (0, "0 B"), (512, "512 B"), (1000, "1000 B"), (49152, "48 KiB"),
    (1536, "1.5 KiB"), (232448, "227 KiB"), (3 << 19, "1.5 MiB"), (1 << 40, "1 TiB"),
    (1152, "1.125 KiB"), (1184, "1184 B"),
])
def test_format(size, text):
    assert format_byte_size(size) == text


@given(st.integers(min_value=0, max_value=1 << 62))
def test_format_parse_round_trip(size):
    assert parse_byte_size(format_byte_size(size)) == size


@given(st.integers(min_value=0, max_value=1 << 20), st.sampled_from(sorted(UNITS)),
       st.sampled_from(["", " ", "  "]))
def test_whole_units_parse(number, unit, space):
    assert parse_byte_size(f"{number}{space}{unit}") == number * UNITS[unit]
