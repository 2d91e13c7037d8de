"""The generic text form of the Tile IR: printing.

The text form is a subset of MLIR's generic operation syntax, so a later MLIR or
xDSL bridge is a printer tweak, not a new format::

    %r0, %r1 = "dialect.op"(%a, %b) <{prop = attr, ...}> ({
    ^bb0(%arg: type, ...):
      ...nested ops...
    }) {stage = "load"} : (operand types) -> (result types) loc("file.py":12:0)

* The kernel is the op ``"tile.kernel"`` with property ``sym_name``; the block
  arguments of its single region are the kernel parameters.
* Every field named in an op's ``SPEC.attrs`` is a property.  Its syntax follows the
  field's declared Python type, so printer, parser and JSON form share one table
  (:func:`attr_fields`):

  ===================  ===================================================
  ``tuple[Expr, ...]``  ``[M, %block_m * 32]`` (``str(Expr)`` round-trips)
  ``float``             ``0.0``, ``-1.5e-07`` (always with a ``.``); inf/nan as
                        IEEE-754 bits ``0x7FF0000000000000 : f64``, like MLIR
  ``float | Expr``      a float as above, otherwise an expression
  ``int``, ``str``      ``3``, ``"text"``; tuples of them as ``[1, 0]``, ``["a"]``
  ``DType``             ``f32``
  ``Layout``            ``#layout<[32, 16] stride [17, 1] xor(2, 0, 3) planned>``
  ``tuple[Axis, ...]``  ``[#axis<block_m = ceildiv(M, 32)>]``
  enums                 ``#unary<exp>``, ``#binary<add>``, ``#reduce<sum>``,
                        ``#loop<pipeline>``
  ``ResourceConstraint``  ``#resource<auto>``, ``#resource<shared>``, or a class only
                        a catalog defines: ``#resource<psum>`` (S6)
  ===================  ===================================================

* A property an op's ``SPEC.optional`` names is left out while it holds its default,
  and the parsers restore it: a whole-Memory ``memory.store`` prints no window, a
  windowed one ``<{offsets = [...], shape = [...]}>`` (S16).
* The pipeline stage of an op is a discardable attribute ``{stage = "..."}``.
* Value names come from name hints, made unique with ``_0``, ``_1``, ... suffixes;
  values without a hint are numbered.  Names are unique in the whole kernel.
* Locations print as ``loc("file":line:col)`` or ``loc(unknown)``; they can be
  left out (goldens) or printed relative to a base directory.
"""

from __future__ import annotations

import math
import re
import struct
import typing
from dataclasses import MISSING, dataclass, fields, replace
from enum import Enum
from functools import cache
from pathlib import Path, PurePath

from planner.errors import UNKNOWN_LOC, SourceLoc
from planner.ir import core
from planner.ir.core import Axis, Block, Kernel, Op, Value
from planner.ir.dtypes import DType
from planner.ir.expr import Expr
from planner.ir.layout import Layout
from planner.ir.types import IRType

KERNEL_OP = "tile.kernel"


# --------------------------------------------------------------------------- attribute kinds


class AttrKind(Enum):
    """The syntax family of an op property, derived from the field's type annotation."""

    EXPRS = "exprs"
    FLOAT = "float"
    FLOAT_OR_EXPR = "float_or_expr"
    INT = "int"
    INTS = "ints"
    STR = "str"
    STRS = "strs"
    DTYPE = "dtype"
    LAYOUT = "layout"
    AXES = "axes"
    ENUM = "enum"
    RESOURCE = "resource"
    CONFIG = "config"  # the kernel header's configuration mapping (sweep parameters)


@dataclass(frozen=True, slots=True)
class AttrField:
    """One property of an op class: name, syntax family, enum class and optionality."""

    name: str
    kind: AttrKind
    enum: type[Enum] | None = None
    required: bool = True


_KIND_OF_TYPE: dict[object, AttrKind] = {
    tuple[Expr, ...]: AttrKind.EXPRS,
    float: AttrKind.FLOAT,
    float | Expr: AttrKind.FLOAT_OR_EXPR,
    int: AttrKind.INT,
    tuple[int, ...]: AttrKind.INTS,
    str: AttrKind.STR,
    tuple[str, ...]: AttrKind.STRS,
    DType: AttrKind.DTYPE,
    Layout: AttrKind.LAYOUT,
    tuple[Axis, ...]: AttrKind.AXES,
    core.ResourceConstraint: AttrKind.RESOURCE,
}

#: The tag of a resource constraint: ``#resource<shared>``, ``#resource<psum>`` (S5, S6).
RESOURCE_TAG = "resource"

#: The ``#tag<value>`` spelling of each enum used as an op property.
ENUM_TAGS: dict[type[Enum], str] = {
    core.UnaryFn: "unary",
    core.BinaryFn: "binary",
    core.ReduceFn: "reduce",
    core.LoopKind: "loop",
}


@cache
def attr_fields(cls: type[Op]) -> tuple[AttrField, ...]:
    """The properties of ``cls`` in ``SPEC.attrs`` order, with their syntax family."""
    hints = typing.get_type_hints(cls, vars(core))
    defaults = {f.name for f in fields(cls)
                if f.default is not MISSING or f.default_factory is not MISSING}
    out = []
    for name in cls.SPEC.attrs:
        hint = hints[name]
        if isinstance(hint, type) and issubclass(hint, Enum) and hint is not DType:
            if hint not in ENUM_TAGS:
                raise TypeError(f"{cls.__name__}.{name}: enum {hint.__name__} has no tag in "
                                "ENUM_TAGS")
            out.append(AttrField(name, AttrKind.ENUM, hint, name not in defaults))
            continue
        if hint not in _KIND_OF_TYPE:
            raise TypeError(f"{cls.__name__}.{name}: no text syntax for property type {hint}")
        out.append(AttrField(name, _KIND_OF_TYPE[hint], None, name not in defaults))
    return tuple(out)


def shown_attrs(op: Op) -> list[tuple[AttrField, object]]:
    """The properties of ``op`` the text and JSON forms write, with their values: all of
    them but an ``SPEC.optional`` one holding its default (a whole-Memory store's empty
    window), which the parsers restore."""
    defaults = _defaults(type(op))
    out = []
    for f in attr_fields(type(op)):
        value = getattr(op, f.name)
        if f.name in op.SPEC.optional and f.name in defaults and value == defaults[f.name]:
            continue
        out.append((f, value))
    return out


@cache
def _defaults(cls: type[Op]) -> dict[str, object]:
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING}


# --------------------------------------------------------------------------- scalar syntax


def quote(text: str) -> str:
    """An MLIR string literal: printable ASCII as is, other bytes as ``\\XX``."""
    out = []
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= byte < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\{byte:02X}")
    return '"' + "".join(out) + '"'


def format_float(x: float) -> str:
    """Exact text of a float: ``repr`` with a ``.``; inf and nan as IEEE-754 bits."""
    if not math.isfinite(x):
        (bits,) = struct.unpack(">Q", struct.pack(">d", x))
        return f"0x{bits:016X} : f64"
    text = repr(float(x))
    if "." not in text:  # 1e-05 -> 1.0e-05: MLIR float literals need the dot
        mantissa, _, exponent = text.partition("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def format_exprs(exprs: tuple[Expr, ...]) -> str:
    return "[" + ", ".join(map(str, exprs)) + "]"


def format_layout(layout: Layout) -> str:
    return "#" + str(layout)


def format_attr(value: object, f: AttrField) -> str:
    """The text of one property value of syntax family ``f.kind``."""
    kind = f.kind
    if kind is AttrKind.EXPRS:
        return format_exprs(value)  # type: ignore[arg-type]
    if kind is AttrKind.FLOAT or (kind is AttrKind.FLOAT_OR_EXPR and isinstance(value, float)):
        return format_float(value)  # type: ignore[arg-type]
    if kind in (AttrKind.FLOAT_OR_EXPR, AttrKind.INT):
        return str(value)
    if kind is AttrKind.INTS:
        return "[" + ", ".join(str(int(v)) for v in value) + "]"  # type: ignore[attr-defined]
    if kind is AttrKind.STR:
        return quote(value)  # type: ignore[arg-type]
    if kind is AttrKind.STRS:
        return "[" + ", ".join(quote(s) for s in value) + "]"  # type: ignore[attr-defined]
    if kind is AttrKind.DTYPE:
        return str(value)
    if kind is AttrKind.LAYOUT:
        return format_layout(value)  # type: ignore[arg-type]
    if kind is AttrKind.AXES:
        return "[" + ", ".join(f"#axis<{a}>" for a in value) + "]"  # type: ignore[attr-defined]
    if kind is AttrKind.RESOURCE:
        return f"#{RESOURCE_TAG}<{value}>"
    assert kind is AttrKind.ENUM and f.enum is not None
    return f"#{ENUM_TAGS[f.enum]}<{value.value}>"  # type: ignore[attr-defined]


def format_type(t: IRType) -> str:
    return str(t)


def display_path(file: str, base_dir: str | PurePath | None) -> str:
    """``file`` relative to ``base_dir`` when it lies inside it, else unchanged."""
    if base_dir is None:
        return file
    path = Path(file)
    if not path.is_absolute():
        return file
    for base in (Path(base_dir), Path(base_dir).resolve()):
        if path.is_relative_to(base):
            return path.relative_to(base).as_posix()
    return file


def format_loc(loc: SourceLoc, base_dir: str | PurePath | None = None) -> str:
    if loc == UNKNOWN_LOC:
        return "loc(unknown)"
    return f"loc({quote(display_path(loc.file, base_dir))}:{loc.line}:{loc.col})"


# --------------------------------------------------------------------------- value names

_NAME_OK = re.compile(r"[A-Za-z_$.][A-Za-z0-9_$.]*")


def _sanitize(hint: str | None) -> str | None:
    if not hint:
        return None
    if _NAME_OK.fullmatch(hint):
        return hint
    text = re.sub(r"[^A-Za-z0-9_$.]", "_", hint)
    return text if _NAME_OK.fullmatch(text) else "_" + text


class ValueNamer:
    """Names values in definition order: unique name hints, numbers for the rest."""

    def __init__(self) -> None:
        self.names: dict[Value, str] = {}
        self._used: set[str] = set()
        self._next = 0
        self._suffix: dict[str, int] = {}  # hint -> the first suffix that may be free

    def __getitem__(self, value: Value) -> str:
        """The name of ``value`` (without ``%``), choosing one on first sight."""
        name = self.names.get(value)
        if name is not None:
            return name
        hint = _sanitize(value.name_hint)
        if hint is None:
            while str(self._next) in self._used:
                self._next += 1
            name = str(self._next)
            self._next += 1
        elif hint not in self._used:
            name = hint
        else:  # names are never freed: the suffixes tried before stay taken
            i = self._suffix.get(hint, 0)
            while f"{hint}_{i}" in self._used:
                i += 1
            name = f"{hint}_{i}"
            self._suffix[hint] = i + 1
        self._used.add(name)
        self.names[value] = name
        return name


# --------------------------------------------------------------------------- printer


@dataclass(frozen=True, slots=True)
class PrintOptions:
    """``locations=False`` leaves out ``loc(...)``; ``base_dir`` relativizes file paths."""

    locations: bool = True
    base_dir: str | None = None
    indent: str = "  "


class Printer:
    """Prints kernels and ops; after printing, ``op_lines`` maps each op to its 1-based line."""

    def __init__(self, options: PrintOptions | None = None,
                 namer: ValueNamer | None = None) -> None:
        self.options = options or PrintOptions()
        self.namer = namer or ValueNamer()
        self.lines: list[str] = []
        self.op_lines: dict[Op, int] = {}
        self._types: dict[int, tuple[IRType, str]] = {}  # id(type) -> (type, text)

    def print_kernel(self, kernel: Kernel) -> str:
        config = "".join(f", {k} = {v}" if isinstance(v, int) else f", {k} = {quote(v)}"
                         for k, v in kernel.config.items())
        config = f", config = {{{config[2:]}}}" if config else ""
        self._emit(f'"{KERNEL_OP}"() <{{sym_name = {quote(kernel.name)}{config}}}> ({{')
        if kernel.params:
            self._emit(self._block_header(kernel.params))
        for op in kernel.body.ops:
            self._op(op, 1)
        self._emit("}) : () -> ()" + self._loc(kernel.loc))
        return self.text()

    def print_op(self, op: Op, depth: int = 0) -> str:
        self._op(op, depth)
        return self.text()

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    def _emit(self, line: str) -> None:
        self.lines.append(line)

    def _type(self, t: IRType) -> str:
        """:func:`format_type`, cached: values share their types (kept here, so their
        ids stay theirs)."""
        found = self._types.get(id(t))
        if found is None:
            found = self._types[id(t)] = (t, format_type(t))
        return found[1]

    def _ref(self, v: Value) -> str:
        return "%" + self.namer[v]

    def _loc(self, loc: SourceLoc) -> str:
        return " " + format_loc(loc, self.options.base_dir) if self.options.locations else ""

    def _block_header(self, args: list[Value]) -> str:
        decls = ", ".join(f"{self._ref(a)}: {format_type(a.type)}" for a in args)
        return f"^bb0({decls}):"

    def _op(self, op: Op, depth: int) -> None:
        pad = self.options.indent * depth
        results = ", ".join(self._ref(r) for r in op.results)
        head = pad + (f"{results} = " if results else "")
        head += f'"{op.SPEC.name}"(' + ", ".join(self._ref(v) for v in op.operands()) + ")"
        props = ", ".join(f"{f.name} = {format_attr(value, f)}" for f, value in shown_attrs(op))
        if props:
            head += f" <{{{props}}}>"
        self.op_lines[op] = len(self.lines) + 1
        blocks = op.region_blocks()
        if blocks:
            self._emit(head + " ({")
            for i, block in enumerate(blocks):
                if i:
                    self._emit(pad + "}, {")
                self._block(block, depth)
            tail = pad + "})"
        else:
            tail = head
        if op.stage is not None:
            tail += f" {{stage = {quote(op.stage)}}}"
        operand_types = ", ".join([self._type(v.type) for v in op.operands()])
        result_types = ", ".join([self._type(r.type) for r in op.results])
        tail += f" : ({operand_types}) -> ({result_types})" + self._loc(op.loc)
        self._emit(tail)

    def _block(self, block: Block, depth: int) -> None:
        if block.args:
            self._emit(self.options.indent * depth + self._block_header(block.args))
        for op in block.ops:
            self._op(op, depth + 1)


def print_kernel(kernel: Kernel, options: PrintOptions | None = None, *,
                 locations: bool | None = None, base_dir: str | None = None) -> str:
    """The generic text form of ``kernel``; :func:`planner.ir.parser.parse_kernel` reads it.

    ``locations`` and ``base_dir`` override the fields of ``options``.
    """
    opts = options or PrintOptions()
    if locations is not None or base_dir is not None:
        opts = replace(opts, locations=opts.locations if locations is None else locations,
                       base_dir=opts.base_dir if base_dir is None else base_dir)
    return Printer(opts).print_kernel(kernel)


def value_names(kernel: Kernel) -> dict[Value, str]:
    """The name (without ``%``) the text form gives each value of ``kernel``: the values
    met in :class:`Printer`'s order (an op's results, its operands, then its regions'
    block arguments and ops), without printing."""
    namer = ValueNamer()
    for p in kernel.params:
        namer[p]
    stack = [iter(kernel.body.ops)]
    while stack:  # depth first, without recursion
        op = next(stack[-1], None)
        if op is None:
            stack.pop()
            continue
        for v in op.results:
            namer[v]
        for v in op.operands():
            namer[v]
        blocks = op.region_blocks()
        for block in reversed(blocks):
            stack.append(_block_ops(block, namer))
    return dict(namer.names)


def _block_ops(block: Block, namer: ValueNamer) -> typing.Iterator[Op]:
    """``block``'s ops, its arguments named first (when the walk reaches it)."""
    for a in block.args:
        namer[a]
    yield from block.ops


def print_op(op: Op, options: PrintOptions | None = None) -> str:
    """One op (and its regions) with locally chosen value names, for messages."""
    return Printer(options).print_op(op)
