"""Structural equality of kernels, for round-trip tests and caches.

Two kernels are structurally equal when one can be laid over the other op by op:
same op classes in the same order, equal properties (floats compared bit for bit,
so ``nan`` equals ``nan`` and ``-0.0`` differs from ``0.0``), equal types, the same
regions, and a value graph that matches under a bijection of values: each operand
of one kernel refers to the value that corresponds to the other kernel's operand.
Values are paired where they are defined (parameters, block arguments, results),
so identity never leaks into the comparison.  Stages are compared by default;
name hints and locations on request.
"""

from __future__ import annotations

import math
import struct

from planner.ir.core import Block, Kernel, Op, Value
from planner.ir.printer import attr_fields


class _Differ(Exception):
    pass


def structurally_equal(a: Kernel, b: Kernel, *, stages: bool = True, names: bool = False,
                       locs: bool = False) -> bool:
    """True when ``a`` and ``b`` have the same structure (see the module docstring)."""
    return structural_diff(a, b, stages=stages, names=names, locs=locs) is None


def structural_diff(a: Kernel, b: Kernel, *, stages: bool = True, names: bool = False,
                    locs: bool = False) -> str | None:
    """The first difference between ``a`` and ``b`` as ``$.path: what``, or None."""
    try:
        _Comparer(stages, names, locs).kernel(a, b)
    except _Differ as d:
        return str(d)
    return None


def attr_equal(x: object, y: object) -> bool:
    """Equality of property values with floats compared by bits (nan == nan)."""
    if isinstance(x, float) or isinstance(y, float):
        if not (isinstance(x, float) and isinstance(y, float)):
            return False
        if math.isnan(x) and math.isnan(y):
            return True
        return struct.pack(">d", x) == struct.pack(">d", y)
    if isinstance(x, tuple) and isinstance(y, tuple):
        return len(x) == len(y) and all(attr_equal(p, q) for p, q in zip(x, y, strict=True))
    return type(x) is type(y) and x == y


class _Comparer:
    def __init__(self, stages: bool, names: bool, locs: bool) -> None:
        self.stages, self.names, self.locs = stages, names, locs
        self.fwd: dict[Value, Value] = {}
        self.rev: dict[Value, Value] = {}

    def fail(self, path: str, message: str) -> _Differ:
        return _Differ(f"{path}: {message}")

    def kernel(self, a: Kernel, b: Kernel) -> None:
        if a.name != b.name:
            raise self.fail("$.name", f"{a.name!r} != {b.name!r}")
        if self.locs and a.loc != b.loc:
            raise self.fail("$.loc", f"{a.loc} != {b.loc}")
        self.defs("$.params", a.params, b.params)
        self.block("$.body", a.body, b.body)

    def defs(self, path: str, xs: list[Value], ys: list[Value]) -> None:
        if len(xs) != len(ys):
            raise self.fail(path, f"{len(xs)} values != {len(ys)} values")
        for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
            self.bind(f"{path}[{i}]", x, y)

    def bind(self, path: str, x: Value, y: Value) -> None:
        if x.type != y.type:
            raise self.fail(path, f"type {x.type} != {y.type}")
        if self.names and x.name_hint != y.name_hint:
            raise self.fail(path, f"name hint {x.name_hint!r} != {y.name_hint!r}")
        if self.fwd.get(x, y) is not y or self.rev.get(y, x) is not x:
            raise self.fail(path, "defined twice")
        self.fwd[x] = y
        self.rev[y] = x

    def use(self, path: str, x: Value, y: Value) -> None:
        if x not in self.fwd and y not in self.rev:  # free values (malformed IR): pair them
            self.bind(path, x, y)
        elif self.fwd.get(x) is not y:
            raise self.fail(path, "refers to a different value")

    def block(self, path: str, a: Block, b: Block) -> None:
        self.defs(f"{path}.args", a.args, b.args)
        if len(a.ops) != len(b.ops):
            raise self.fail(f"{path}.ops", f"{len(a.ops)} ops != {len(b.ops)} ops")
        for i, (x, y) in enumerate(zip(a.ops, b.ops, strict=True)):
            self.op(f"{path}.ops[{i}]", x, y)

    def op(self, path: str, a: Op, b: Op) -> None:
        if type(a) is not type(b):
            raise self.fail(path, f"op {a.SPEC.name} != {b.SPEC.name}")
        xs, ys = a.operands(), b.operands()
        if len(xs) != len(ys):
            raise self.fail(f"{path}.operands", f"{len(xs)} operands != {len(ys)}")
        for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
            self.use(f"{path}.operands[{i}]", x, y)
        for f in attr_fields(type(a)):
            p, q = getattr(a, f.name), getattr(b, f.name)
            if not attr_equal(p, q):
                raise self.fail(f"{path}.attrs.{f.name}", f"{_show(p)} != {_show(q)}")
        if self.stages and a.stage != b.stage:
            raise self.fail(f"{path}.stage", f"{a.stage!r} != {b.stage!r}")
        if self.locs and a.loc != b.loc:
            raise self.fail(f"{path}.loc", f"{a.loc} != {b.loc}")
        for i, (x, y) in enumerate(zip(a.region_blocks(), b.region_blocks(), strict=True)):
            self.block(f"{path}.regions[{i}]", x, y)
        self.defs(f"{path}.results", a.results, b.results)


def _show(value: object) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(map(_show, value)) + "]"
    return repr(value) if isinstance(value, float | str) else str(value)
