"""Boundary checks on request bodies, before any hashing, parsing or planning.

A JSON body is read once here (:func:`check_json_body`) with hooks that keep what
Python's ``json`` module would otherwise turn into an exception or a value no later
stage can handle: ``NaN``/``Infinity`` and floats that overflow to infinity, integers
of any length (Python refuses to convert more than 4,300 digits, and integers beyond
64 bits mean nothing in a kernel or a catalog), lone UTF-16 surrogates (they cannot be
encoded as UTF-8, so the content hash would fail), nesting deeper than
:data:`MAX_DEPTH` and more than :data:`MAX_VALUES` values.  The walk is iterative (no
recursion) and the first problem is a :class:`BodyProblem` naming its JSON path
(``body.kernel.body.ops[3].attrs.value``) and a rule id; the app answers it as 422.

Text IR travels inside a JSON string; its integer literals are checked by
:func:`check_text_integers` before the parser converts them.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

#: Deepest accepted JSON nesting (the JSON IR of 64 nested regions is about 4 × 64).
MAX_DEPTH = 512
#: Most JSON values (objects, arrays, scalars) in one body.
MAX_VALUES = 500_000
#: Integers must lie in [-2**63, 2**64): a signed or unsigned 64-bit value.
MIN_INT, MAX_INT = -(2**63), 2**64 - 1
#: Digits of the longest integer literal accepted in text IR (2**64 has 20).
MAX_INT_DIGITS = 20


@dataclass(frozen=True, slots=True)
class BodyProblem:
    """The first thing in a body that no later stage may see."""

    path: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class _Marker:
    """A JSON number the hooks set aside (the walk reports it with its path)."""

    __slots__ = ("message", "rule")

    def __init__(self, rule: str, message: str) -> None:
        self.rule, self.message = rule, message


def _parse_int(text: str) -> int | _Marker:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        return _Marker("integer-too-large", f"an integer of {digits} digits; integers must "
                       f"fit in 64 bits ({MIN_INT} .. {MAX_INT})")
    value = int(text)
    if not MIN_INT <= value <= MAX_INT:
        return _Marker("integer-too-large", f"the integer {value} does not fit in 64 bits "
                       f"({MIN_INT} .. {MAX_INT})")
    return value


def _parse_float(text: str) -> float | _Marker:
    value = float(text)
    if not math.isfinite(value):
        shown = text if len(text) <= 40 else text[:37] + "..."
        return _Marker("non-finite-number", f"the number {shown} overflows to infinity "
                       "(only finite numbers are accepted)")
    return value


def _parse_constant(name: str) -> _Marker:
    return _Marker("non-finite-number", f"{name} is not a JSON number (only finite numbers "
                   "are accepted)")


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _surrogate(path: str, text: str) -> BodyProblem:
    index = next((i for i, ch in enumerate(text) if 0xD800 <= ord(ch) <= 0xDFFF), 0)
    return BodyProblem(path, "lone-surrogate", f"the string holds a lone UTF-16 surrogate "
                       f"U+{ord(text[index]):04X} at character {index}, which is not "
                       "Unicode text")


def _member(path: str, key: str) -> str:
    return f"{path}.{key}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) else \
        f"{path}[{json.dumps(key, ensure_ascii=True)}]"


def check_json_value(value: Any, root: str = "body") -> BodyProblem | None:
    """The first problem in a decoded JSON value (iterative walk), or None."""
    stack: list[tuple[Any, str, int]] = [(value, root, 0)]
    seen = 0
    while stack:
        item, path, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            return BodyProblem(root, "too-many-values", f"more than {MAX_VALUES} JSON values")
        if depth > MAX_DEPTH:
            return BodyProblem(path, "nesting-too-deep", f"nested deeper than {MAX_DEPTH} "
                               "levels")
        if isinstance(item, _Marker):
            return BodyProblem(path, item.rule, item.message)
        if isinstance(item, str):
            if _has_lone_surrogate(item):
                return _surrogate(path, item)
        elif isinstance(item, float):
            if not math.isfinite(item):
                return BodyProblem(path, "non-finite-number", f"{item} is not a finite number")
        elif isinstance(item, bool):
            continue
        elif isinstance(item, int):
            if not MIN_INT <= item <= MAX_INT:
                return BodyProblem(path, "integer-too-large", "the integer does not fit in "
                                   f"64 bits ({MIN_INT} .. {MAX_INT})")
        elif isinstance(item, dict):
            # Reversed so that the first member is reported first.
            for key, child in reversed(list(item.items())):
                if isinstance(key, str) and _has_lone_surrogate(key):
                    return _surrogate(f"{path} (a member name)", key)
                stack.append((child, _member(path, str(key)), depth + 1))
        elif isinstance(item, list):
            for i in range(len(item) - 1, -1, -1):
                stack.append((item[i], f"{path}[{i}]", depth + 1))
    return None


def check_json_body(data: bytes) -> BodyProblem | None:
    """The first problem in a JSON body, or None (also for a body that is not JSON at
    all: the route's own parser reports that as 400 ``bad-json``)."""
    try:
        value = json.loads(data, parse_int=_parse_int, parse_float=_parse_float,
                           parse_constant=_parse_constant)
    except (RecursionError, ValueError, UnicodeDecodeError):
        return None  # too deep for any JSON reader, or not JSON: the route's 400
    return check_json_value(value)


_LONG_INT = re.compile(rf"(?<![\w.])\d{{{MAX_INT_DIGITS + 1},}}(?![\w.])")


def check_text_integers(text: str) -> tuple[int, int, int] | None:
    """``(line, col, digits)`` of the first integer literal in text IR longer than
    :data:`MAX_INT_DIGITS` digits, or None."""
    match = _LONG_INT.search(text)
    if match is None:
        return None
    line = text.count("\n", 0, match.start()) + 1
    col = match.start() - (text.rfind("\n", 0, match.start()) + 1) + 1
    return line, col, len(match.group(0))
