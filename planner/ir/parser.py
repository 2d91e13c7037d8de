"""The generic text form of the Tile IR: parsing (the inverse of :mod:`planner.ir.printer`).

A hand-written recursive-descent parser over the characters of the text, so every
error points at the offending token: it raises ``PlannerError(kind="parse")`` whose
diagnostic carries ``SourceLoc(file, line, col)`` (1-based) and whose message ends
with the source line and a caret under the column.

Checks made while parsing, each a located error:

1. syntax (expected tokens, string escapes, expressions, types, property values);
2. names: an op name must be registered; a ``%value`` must be defined earlier in an
   enclosing scope (no forward references) and defined only once (a region's
   definitions go out of scope when it closes);
3. signatures: operand and region counts follow the op's ``SPEC``, properties are
   exactly the declared ones (those with a default may be omitted), each operand's
   type in the signature is the type of the value used, and each declared result
   type is what the op's ``result_types()`` infers.

Ops without ``loc(...)`` get the location of their text (file:line:col), so later
verifier messages point into the text IR.  The verifier proper runs afterwards.
"""

from __future__ import annotations

import bisect
import difflib
import re
import struct
from collections.abc import Callable
from typing import TypeVar

from planner.errors import UNKNOWN_LOC, Diagnostic, PlannerError, SourceLoc
from planner.ir.core import OPS_BY_NAME, Axis, Block, Kernel, Op, ResourceConstraint, Value
from planner.ir.dtypes import DType
from planner.ir.expr import Expr, ExprSyntaxError, parse_expr
from planner.ir.layout import Layout, XorSwizzle
from planner.ir.printer import (
    ENUM_TAGS,
    KERNEL_OP,
    RESOURCE_TAG,
    AttrField,
    AttrKind,
    attr_fields,
)
from planner.ir.types import IRType, MemoryType, StateType, TileType, TokenType, ViewType

T = TypeVar("T")

_SKIP = re.compile(r"(?:\s+|//[^\n]*)*")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_VALUE_ID = re.compile(r"%(\d+|[A-Za-z_$.\-][A-Za-z0-9_$.\-]*)")
_INT = re.compile(r"[-+]?\d+(?![.\w])")
_DEC_FLOAT = re.compile(r"[-+]?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+)")
_HEX_FLOAT = re.compile(r"0x([0-9A-Fa-f]{1,16})\s*:\s*f64\b")
_TOKEN = re.compile(r'"[^"\n]{0,40}"?|-?[A-Za-z0-9_%#^.$]+|\S')
_BLOCK_LABEL = re.compile(r"\^[A-Za-z0-9_$.\-]+")
_EXPR_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                        "_%.+-* \t")
_TYPE_CLASSES: dict[str, type] = {"tile": TileType, "view": ViewType, "memory": MemoryType,
                                  "state": StateType, "token": TokenType}


def source_excerpt(text: str, line: int, col: int) -> str:
    """The 1-based ``line`` of ``text`` and a caret under 1-based ``col``."""
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        return ""
    src = lines[line - 1]
    lead = "".join(c if c == "\t" else " " for c in src[: max(col - 1, 0)])
    return f"{src}\n{lead}^"


def parse_kernel(text: str, file: str = "<text>", *, max_ops: int | None = None,
                 max_depth: int = 64) -> Kernel:
    """Parse the generic text form of one kernel.

    ``max_ops`` and ``max_depth`` (region nesting) bound the work on untrusted input;
    exceeding them raises ``PlannerError(kind="too-large")``.
    """
    return _Parser(text, file, max_ops, max_depth).kernel()


class _Parser:
    def __init__(self, text: str, file: str, max_ops: int | None, max_depth: int) -> None:
        self.text, self.file = text, file
        self.pos = 0
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.scopes: list[dict[str, tuple[Value, int]]] = [{}]
        self.max_ops, self.max_depth = max_ops, max_depth
        self.n_ops = 0
        self.depth = 0

    # ----------------------------------------------------------------- errors

    def loc(self, pos: int) -> SourceLoc:
        line = bisect.bisect_right(self.line_starts, pos)
        return SourceLoc(self.file, line, pos - self.line_starts[line - 1] + 1)

    def error(self, message: str, pos: int, kind: str = "parse",
              notes: tuple[tuple[SourceLoc, str], ...] = ()) -> PlannerError:
        loc = self.loc(pos)
        excerpt = source_excerpt(self.text, loc.line, loc.col)
        text = f"{message}\n{excerpt}" if excerpt else message
        return PlannerError(Diagnostic(text, loc, notes=notes), kind)

    def found(self) -> str:
        self.skip()
        if self.pos >= len(self.text):
            return "end of input"
        m = _TOKEN.match(self.text, self.pos)
        assert m is not None
        return repr(m.group()[:40])

    # ----------------------------------------------------------------- lexing

    def skip(self) -> None:
        m = _SKIP.match(self.text, self.pos)
        assert m is not None
        self.pos = m.end()

    def at(self, token: str) -> bool:
        self.skip()
        return self.text.startswith(token, self.pos)

    def accept(self, token: str) -> bool:
        if self.at(token):
            self.pos += len(token)
            return True
        return False

    def expect(self, token: str, what: str | None = None) -> int:
        if not self.at(token):
            raise self.error(f"expected {what or repr(token)}, found {self.found()}", self.pos)
        start = self.pos
        self.pos += len(token)
        return start

    def match(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        self.skip()
        m = pattern.match(self.text, self.pos)
        if m is not None:
            self.pos = m.end()
        return m

    def require(self, pattern: re.Pattern[str], what: str) -> re.Match[str]:
        m = self.match(pattern)
        if m is None:
            raise self.error(f"expected {what}, found {self.found()}", self.pos)
        return m

    def accept_keyword(self, word: str) -> bool:
        self.skip()
        m = _IDENT.match(self.text, self.pos)
        if m is not None and m.group() == word:
            self.pos = m.end()
            return True
        return False

    def expect_keyword(self, word: str) -> None:
        if not self.accept_keyword(word):
            raise self.error(f"expected '{word}', found {self.found()}", self.pos)

    def seq(self, open_: str, item: Callable[[], T], close: str) -> list[T]:
        self.expect(open_)
        out: list[T] = []
        if self.accept(close):
            return out
        out.append(item())
        while self.accept(","):
            out.append(item())
        self.expect(close, f"',' or '{close}'")
        return out

    # ----------------------------------------------------------------- scalars

    def string(self) -> str:
        self.skip()
        start = self.expect('"', "a string")
        out = bytearray()
        text = self.text
        while True:
            if self.pos >= len(text) or text[self.pos] == "\n":
                raise self.error("unterminated string", start)
            ch = text[self.pos]
            if ch == '"':
                self.pos += 1
                break
            if ch != "\\":
                out += ch.encode("utf-8")
                self.pos += 1
                continue
            esc = text[self.pos + 1: self.pos + 3]
            if esc[:1] in ('"', "\\"):
                out += esc[0].encode()
                self.pos += 2
            elif esc[:1] in ("n", "t"):
                out += b"\n" if esc[0] == "n" else b"\t"
                self.pos += 2
            elif re.fullmatch(r"[0-9A-Fa-f]{2}", esc):
                out.append(int(esc, 16))
                self.pos += 3
            else:
                raise self.error("invalid escape in string (use \\\\, \\\", \\n, \\t or \\XX)",
                                 self.pos)
        try:
            return out.decode("utf-8")
        except UnicodeDecodeError:
            raise self.error("string is not valid UTF-8", start) from None

    def integer(self) -> int:
        return int(self.require(_INT, "an integer").group())

    def float_(self) -> float:
        value = self.float_literal()
        if value is None:
            m = self.require(_INT, "a float (inf and nan are written as IEEE-754 bits, "
                                   "e.g. 0xFFF0000000000000 : f64 for -inf)")
            value = float(m.group())
        return value

    def float_literal(self) -> float | None:
        """A float with a ``.`` or exponent, or IEEE bits ``0x... : f64``; None if absent."""
        m = self.match(_HEX_FLOAT)
        if m is not None:
            return struct.unpack(">d", int(m.group(1), 16).to_bytes(8, "big"))[0]
        m = self.match(_DEC_FLOAT)
        if m is None:
            return None
        save = self.pos
        if not (self.accept(":") and self.accept_keyword("f64")):
            self.pos = save
        return float(m.group())

    def expr(self) -> Expr:
        self.skip()
        start = end = self.pos
        depth = 0
        text = self.text
        while end < len(text):
            ch = text[end]
            if ch == "(":
                depth += 1
            elif ch == ")":
                if depth == 0:
                    break
                depth -= 1
            elif (ch == "," and depth == 0) or (ch not in _EXPR_CHARS and ch != ","):
                break
            end += 1
        source = text[start:end].rstrip()
        if not source:
            raise self.error(f"expected an expression, found {self.found()}", start)
        try:
            value = parse_expr(source)
        except ExprSyntaxError as e:
            raise self.error(f"invalid expression {source!r}: {e}", start + e.pos) from None
        except (ZeroDivisionError, ValueError) as e:
            raise self.error(f"invalid expression {source!r}: {e}", start) from None
        self.pos = start + len(source)
        return value

    def exprs(self) -> tuple[Expr, ...]:
        return tuple(self.seq("[", self.expr, "]"))

    def dtype(self) -> DType:
        self.skip()
        start = self.pos
        m = self.require(_IDENT, "an element type")
        try:
            return DType.parse(m.group())
        except ValueError as e:
            raise self.error(str(e), start) from None

    def type_(self) -> IRType:
        self.skip()
        start = self.pos
        m = self.match(_IDENT)
        if m is None or m.group() not in _TYPE_CLASSES:
            self.pos = start
            raise self.error(f"expected a type (tile, view, memory, state or token), found "
                             f"{self.found()}", start)
        self.expect("<")
        shape = self.exprs()
        self.expect(",")
        dtype = self.dtype()
        if m.group() == "view":
            readonly = False
            if self.accept(","):
                self.expect_keyword("const")
                readonly = True
            self.expect(">")
            return ViewType(dtype, shape, readonly)
        self.expect(">")
        return _TYPE_CLASSES[m.group()](dtype, shape)  # type: ignore[no-any-return]

    # ----------------------------------------------------------------- properties

    def attr(self, f: AttrField) -> object:
        kind = f.kind
        if kind is AttrKind.EXPRS:
            return self.exprs()
        if kind is AttrKind.FLOAT:
            return self.float_()
        if kind is AttrKind.FLOAT_OR_EXPR:
            value = self.float_literal()
            return value if value is not None else self.expr()
        if kind is AttrKind.INT:
            return self.integer()
        if kind is AttrKind.INTS:
            return tuple(self.seq("[", self.integer, "]"))
        if kind is AttrKind.STR:
            return self.string()
        if kind is AttrKind.STRS:
            return tuple(self.seq("[", self.string, "]"))
        if kind is AttrKind.DTYPE:
            return self.dtype()
        if kind is AttrKind.LAYOUT:
            return self.layout()
        if kind is AttrKind.AXES:
            return tuple(self.seq("[", self.axis, "]"))
        if kind is AttrKind.RESOURCE:
            return self.resource()
        if kind is AttrKind.CONFIG:
            return self.config()
        assert kind is AttrKind.ENUM and f.enum is not None
        return self.enum(f.enum)

    def layout(self) -> Layout:
        self.skip()
        start = self.expect("#layout<", "'#layout<'")
        shape = self.exprs()
        self.expect_keyword("stride")
        strides = self.exprs()
        swizzles = []
        while True:
            self.skip()
            at = self.pos
            if not self.accept_keyword("xor"):
                break
            self.expect("(")
            bits = self.integer()
            self.expect(",")
            base = self.integer()
            self.expect(",")
            shift = self.integer()
            self.expect(")")
            try:
                swizzles.append(XorSwizzle(bits, base, shift))
            except ValueError as e:
                raise self.error(str(e), at) from None
        planned = self.accept_keyword("planned")
        self.expect(">", "'xor(...)', 'planned' or '>'")
        try:
            return Layout(shape, strides, tuple(swizzles), planned)
        except ValueError as e:
            raise self.error(str(e), start) from None

    def config(self) -> dict[str, int | str]:
        """The kernel's configuration: ``{block_m = 64, resource = "shared"}``."""
        self.expect("{")
        values: dict[str, int | str] = {}
        while not self.accept("}"):
            if values:
                self.expect(",", "',' or '}'")
            self.skip()
            start = self.pos
            name = self.require(_IDENT, "a configuration parameter").group()
            if name in values:
                raise self.error(f"duplicate configuration parameter '{name}'", start)
            self.expect("=")
            self.skip()
            values[name] = self.string() if self.at('"') else self.integer()
        return values

    def axis(self) -> Axis:
        self.expect("#axis<", "'#axis<'")
        name = self.require(_IDENT, "an axis name").group()
        self.expect("=")
        extent = self.expr()
        self.expect(">")
        return Axis(name, extent)

    def resource(self) -> ResourceConstraint:
        """``#resource<shared>`` or a catalog-defined class ``#resource<psum>`` (S6)."""
        self.expect(f"#{RESOURCE_TAG}<", f"'#{RESOURCE_TAG}<...>'")
        self.skip()
        start = self.pos
        word = self.require(_IDENT, "a resource class").group()
        try:
            value = ResourceConstraint(word)
        except ValueError as e:
            raise self.error(str(e), start) from None
        self.expect(">")
        return value

    def enum(self, cls: type) -> object:
        tag = ENUM_TAGS[cls]
        self.expect(f"#{tag}<", f"'#{tag}<...>'")
        self.skip()
        start = self.pos
        word = self.require(_IDENT, f"a {tag} value").group()
        for member in cls:  # type: ignore[attr-defined]
            if member.value == word:
                self.expect(">")
                return member
        known = ", ".join(m.value for m in cls)  # type: ignore[attr-defined]
        raise self.error(f"unknown {tag} value '{word}' (expected one of: {known})", start)

    def properties(self, op_name: str, declared: tuple[AttrField, ...]) -> dict[str, object]:
        by_name = {f.name: f for f in declared}
        values: dict[str, object] = {}
        if self.accept("<{"):
            first = True
            while not self.at("}>"):
                if not first:
                    self.expect(",", "',' or '}>'")
                first = False
                self.skip()
                start = self.pos
                name = self.require(_IDENT, "a property name").group()
                if name not in by_name:
                    known = ", ".join(by_name) or "none"
                    raise self.error(f"unknown property '{name}' of '{op_name}' "
                                     f"(expected: {known})", start)
                if name in values:
                    raise self.error(f"duplicate property '{name}'", start)
                self.expect("=")
                values[name] = self.attr(by_name[name])
            self.expect("}>")
        missing = [f.name for f in declared if f.required and f.name not in values]
        if missing:
            raise self.error(f"'{op_name}' is missing propert"
                             f"{'y' if len(missing) == 1 else 'ies'} "
                             f"{', '.join(repr(m) for m in missing)}", self.pos)
        return values

    # ----------------------------------------------------------------- values

    def define(self, name: str, value: Value, pos: int) -> None:
        for scope in self.scopes:
            if name in scope:
                raise self.error(f"redefinition of value '%{name}'", pos,
                                 notes=((self.loc(scope[name][1]), "previously defined here"),))
        self.scopes[-1][name] = (value, pos)

    def use(self) -> tuple[Value, int]:
        self.skip()
        pos = self.pos
        name = self.require(_VALUE_ID, "a value (%name)").group(1)
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name][0], pos
        raise self.error(f"use of undefined value '%{name}'", pos)

    def value_def(self) -> tuple[str, int]:
        self.skip()
        pos = self.pos
        return self.require(_VALUE_ID, "a value name (%name)").group(1), pos

    def loc_suffix(self, default: SourceLoc) -> SourceLoc:
        if not self.accept_keyword("loc"):
            return default
        self.expect("(")
        if self.accept_keyword("unknown"):
            self.expect(")")
            return UNKNOWN_LOC
        file = self.string()
        self.expect(":")
        line = self.integer()
        self.expect(":")
        col = self.integer()
        self.expect(")")
        return SourceLoc(file, line, col)

    # ----------------------------------------------------------------- ops and blocks

    def kernel(self) -> Kernel:
        self.skip()
        start = self.pos
        if not self.at(f'"{KERNEL_OP}"'):
            raise self.error(f'expected "{KERNEL_OP}", found {self.found()}', self.pos)
        self.pos += len(KERNEL_OP) + 2
        self.expect("(")
        self.expect(")")
        props = self.properties(KERNEL_OP, (AttrField("sym_name", AttrKind.STR),
                                            AttrField("config", AttrKind.CONFIG, required=False)))
        self.expect("(")
        self.expect("{")
        params = self.block_args()
        for value, pos in params:
            if not isinstance(value.type, ViewType):
                raise self.error(f"kernel parameter '%{value.name_hint}' must be a view, got "
                                 f"{value.type}", pos)
        body = Block()
        self.ops_until_close(body)
        self.expect(")")
        self.expect(":")
        self.expect("(")
        self.expect(")")
        self.expect("->")
        self.expect("(")
        self.expect(")")
        loc = self.loc_suffix(self.loc(start))
        self.skip()
        if self.pos != len(self.text):
            raise self.error(f"expected end of input after the kernel, found {self.found()}",
                             self.pos)
        name = props["sym_name"]
        assert isinstance(name, str)
        config = props.get("config", {})
        assert isinstance(config, dict)
        return Kernel(name, [v for v, _ in params], body, loc, config)

    def block_args(self) -> list[tuple[Value, int]]:
        """An optional ``^bb0(%a: type, ...):`` header; defines the args in the current scope."""
        if self.match(_BLOCK_LABEL) is None:
            return []
        args: list[tuple[Value, int]] = []

        def arg() -> None:
            name, pos = self.value_def()
            self.expect(":")
            value = Value(self.type_(), _hint(name))
            self.define(name, value, pos)
            args.append((value, pos))

        if self.at("("):
            self.seq("(", arg, ")")
        self.expect(":")
        return args

    def ops_until_close(self, block: Block) -> None:
        while not self.accept("}"):
            self.skip()
            if self.pos >= len(self.text):
                raise self.error("expected '}' to close the region, found end of input",
                                 self.pos)
            if self.at("^"):
                raise self.error("a region holds a single block: unexpected block label",
                                 self.pos)
            block.append(self.op())

    def region(self) -> Block:
        self.skip()
        start = self.expect("{")
        self.depth += 1
        if self.depth > self.max_depth:
            raise self.error(f"regions nested deeper than {self.max_depth}", start,
                             kind="too-large")
        self.scopes.append({})
        block = Block([v for v, _ in self.block_args()])
        self.ops_until_close(block)
        self.scopes.pop()
        self.depth -= 1
        return block

    def op(self) -> Op:
        self.skip()
        start = self.pos
        self.n_ops += 1
        if self.max_ops is not None and self.n_ops > self.max_ops:
            raise self.error(f"more than {self.max_ops} ops", start, kind="too-large")
        names: list[tuple[str, int]] = []
        if self.at("%"):
            names.append(self.value_def())
            while self.accept(","):
                names.append(self.value_def())
            self.expect("=")
        self.skip()
        name_pos = self.pos
        op_name = self.string()
        cls = OPS_BY_NAME.get(op_name)
        if cls is None:
            close = difflib.get_close_matches(op_name, [*OPS_BY_NAME], n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise self.error(f"unknown op '{op_name}'{hint}", name_pos)
        spec = cls.SPEC
        operands = self.seq("(", self.use, ")")
        n_fixed = len(spec.operands)
        if len(operands) != n_fixed and not (spec.variadic and len(operands) > n_fixed):
            expected = f"at least {n_fixed}" if spec.variadic else str(n_fixed)
            raise self.error(f"'{op_name}' expects {expected} operand"
                             f"{'' if expected == '1' else 's'}, got {len(operands)}", name_pos)
        props = self.properties(op_name, attr_fields(cls))
        regions: list[Block] = []
        if self.at("("):
            self.skip()
            at = self.pos
            regions = self.seq("(", self.region, ")")
            if len(regions) != len(spec.regions):
                raise self.error(f"'{op_name}' expects {len(spec.regions)} region(s), got "
                                 f"{len(regions)}", at)
        elif spec.regions:
            raise self.error(f"'{op_name}' expects a region: expected '(', found "
                             f"{self.found()}", self.pos)
        stage = self.stage_attr()
        self.expect(":", "':' and the op's signature")
        self.skip()
        sig_pos = self.pos
        operand_types = self.seq("(", self.typed_pos, ")")
        self.expect("->")
        result_types = self.seq("(", self.typed_pos, ")") if self.at("(") else [self.typed_pos()]
        loc = self.loc_suffix(self.loc(start))
        self.check_operand_types(op_name, operands, operand_types, sig_pos)
        if len(result_types) != len(names):
            raise self.error(f"'{op_name}' declares {len(result_types)} result type(s) but "
                             f"binds {len(names)} name(s)", start)
        results = [Value(t, _hint(n)) for (n, _), (t, _) in zip(names, result_types, strict=True)]
        fields: dict[str, object] = dict(props)
        for fname, (value, _) in zip(spec.operands, operands, strict=False):
            fields[fname] = value
        if spec.variadic:
            fields[spec.variadic] = tuple(v for v, _ in operands[n_fixed:])
        for fname, block in zip(spec.regions, regions, strict=True):
            fields[fname] = block
        op = self.build(cls, fields, results, loc, stage, name_pos)
        self.check_result_types(op, result_types, sig_pos)
        for (n, pos), value in zip(names, op.results, strict=True):
            self.define(n, value, pos)
        return op

    def typed_pos(self) -> tuple[IRType, int]:
        self.skip()
        pos = self.pos
        return self.type_(), pos

    def stage_attr(self) -> str | None:
        if not self.at("{"):
            return None
        stage = None
        self.expect("{")
        while not self.accept("}"):
            if stage is not None:
                self.expect(",", "',' or '}'")
            self.skip()
            start = self.pos
            name = self.require(_IDENT, "an attribute name").group()
            if name != "stage" or stage is not None:
                raise self.error(f"unexpected attribute '{name}' (ops carry only 'stage')",
                                 start)
            self.expect("=")
            stage = self.string()
        return stage

    def check_operand_types(self, op_name: str, operands: list[tuple[Value, int]],
                            types: list[tuple[IRType, int]], sig_pos: int) -> None:
        if len(types) != len(operands):
            raise self.error(f"'{op_name}' has {len(operands)} operand(s) but its signature "
                             f"lists {len(types)} type(s)", sig_pos)
        for i, ((value, pos), (t, _)) in enumerate(zip(operands, types, strict=True)):
            if value.type != t:
                raise self.error(f"operand #{i} of '{op_name}' has type {value.type} but the "
                                 f"signature says {t}", pos)

    def build(self, cls: type[Op], fields: dict[str, object], results: list[Value],
              loc: SourceLoc, stage: str | None, pos: int) -> Op:
        try:
            return cls(**fields, results=results, loc=loc, stage=stage)  # type: ignore[arg-type]
        except _INFER_ERRORS:
            raise self.error(_cannot_infer(cls.SPEC.name, list(fields.values())), pos) from None

    def check_result_types(self, op: Op, declared: list[tuple[IRType, int]],
                           sig_pos: int) -> None:
        name = op.SPEC.name
        try:
            inferred = op.result_types()
        except _INFER_ERRORS:
            raise self.error(_cannot_infer(name, op.operands()), sig_pos) from None
        if len(inferred) != len(declared):
            raise self.error(f"'{name}' produces {len(inferred)} result(s) but the signature "
                             f"declares {len(declared)}", sig_pos)
        for i, (want, (got, pos)) in enumerate(zip(inferred, declared, strict=True)):
            if want != got:
                raise self.error(f"result #{i} of '{name}' is declared {got} but the op "
                                 f"produces {want}", pos)


def _hint(name: str) -> str | None:
    return None if name.isdigit() else name


# result_types() of the core ops asserts operand kinds and indexes shapes by properties
_INFER_ERRORS = (AssertionError, IndexError, TypeError, ValueError)


def _cannot_infer(op_name: str, operands: list[object]) -> str:
    types = ", ".join(str(v.type) for v in operands if isinstance(v, Value))
    return (f"'{op_name}' cannot infer its result types from operand types ({types}) "
            "and its properties")
