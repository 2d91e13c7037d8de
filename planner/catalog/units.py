"""Byte sizes as catalog authors write them: ``49152``, ``"48 KiB"``, ``"1.5 MiB"``.

Only binary units exist here (``KiB`` = 1024 B).  Vendor documents write "48 KB"
for 49,152 bytes and "80 GB" for 80·10⁹, so a decimal-looking unit is rejected with
the binary reading spelled out, and the author decides.  ``"unbounded"`` (or YAML
``null``) means no capacity limit and parses to ``None``.

:func:`format_byte_size` is the inverse: ``parse_byte_size(format_byte_size(n)) == n``
for every ``n >= 0``.
"""

from __future__ import annotations

import re
from fractions import Fraction

UNITS: dict[str, int] = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
UNBOUNDED = "unbounded"

# Spellings people copy from datasheets, mapped to the binary unit we suggest instead.
_AMBIGUOUS = {"k": "KiB", "kb": "KiB", "m": "MiB", "mb": "MiB", "g": "GiB", "gb": "GiB",
              "t": "TiB", "tb": "TiB"}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")

#: The string forms :func:`parse_byte_size` accepts (used by the JSON Schema too).
BYTE_SIZE_PATTERN = r"^\s*\d+(\.\d+)?\s*(B|KiB|MiB|GiB|TiB)?\s*$|^unbounded$"

_HINT = 'write a whole number of bytes, or a number with B, KiB, MiB, GiB or TiB, e.g. "48 KiB"'


class ByteSizeError(ValueError):
    """A value that is not a byte size; ``str(exc)`` says what to write instead."""


def parse_byte_size(value: object) -> int | None:
    """Bytes denoted by ``value`` (an int or a string); ``None`` for ``"unbounded"``/``None``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ByteSizeError(f"{value!r} is not a byte size ({_HINT})")
    if isinstance(value, int):
        if value < 0:
            raise ByteSizeError(f"{value} is not a byte size (it is negative)")
        return value
    text = value.strip()
    if text == UNBOUNDED:
        return None
    match = _SIZE.match(text)
    if match is None:
        raise ByteSizeError(f"{value!r} is not a byte size ({_HINT})")
    number, unit = match.group(1), match.group(2) or "B"
    if unit not in UNITS:
        raise ByteSizeError(f"{value!r} is not a byte size ({_suggest(number, unit)})")
    size = Fraction(number) * UNITS[unit]
    if size.denominator != 1:
        raise ByteSizeError(f"{value!r} is not a whole number of bytes ({float(size):g})")
    return int(size)


def _suggest(number: str, unit: str) -> str:
    binary = _AMBIGUOUS.get(unit.lower())
    if binary is None:
        return _HINT
    size = Fraction(number) * UNITS[binary]
    spelled = f'"{number} {binary}"'
    return f"write {int(size)} or {spelled}" if size.denominator == 1 else f"write {spelled}"


def format_byte_size(size: int | None) -> str:
    """The shortest exact spelling of ``size``: ``"48 KiB"``, ``"1.5 MiB"``, ``"1000 B"``."""
    if size is None:
        return UNBOUNDED
    for unit, scale in reversed(UNITS.items()):
        quotient = Fraction(size, scale)
        # Powers of two divide 1000 only up to 8: at most three decimals, all exact.
        if quotient >= 1 and (quotient * 1000).denominator == 1:
            return f"{_decimal(quotient)} {unit}"
    return f"{size} B"


def _decimal(value: Fraction) -> str:
    whole, rest = divmod(value.numerator, value.denominator)
    if rest == 0:
        return str(whole)
    digits = str(rest * 1000 // value.denominator).rjust(3, "0")
    return f"{whole}.{digits.rstrip('0')}"
