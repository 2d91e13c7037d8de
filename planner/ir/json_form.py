"""The JSON form of the Tile IR: the exchange format of the HTTP service.

A kernel is a plain JSON object; nothing in it is ever executed::

    {"format": "planner.tile-ir", "version": 1, "name": "manual_gemm",
     "loc": {"file": "examples/manual_gemm.py", "line": 44, "col": 0},
     "params": [{"id": "A", "name": "A",
                 "type": {"kind": "view", "dtype": "f32", "shape": ["M", "K"],
                          "readonly": true}}, ...],
     "body": {"args": [], "ops": [
        {"op": "tile.load", "operands": ["A"],
         "results": [{"id": "0", "type": {"kind": "tile", ...}}],
         "attrs": {"offsets": ["32 * %block_m", "16 * %k_tiles"], "shape": [32, 16],
                   "fill": 0.0},
         "regions": [], "stage": "load", "loc": {...}}, ...]}}

* Values are referenced by ids unique in the document (the text form's names
  without ``%``); ``name`` is the optional name hint.  A value must be defined
  before it is used, in an enclosing block.
* Properties are typed by the op's field types, as in the text form
  (:func:`planner.ir.printer.attr_fields`): expressions are strings in the text
  syntax (or JSON integers); floats are numbers or ``"inf"``, ``"-inf"``, ``"nan"``;
  a ``float | Expr`` field is ``{"float": x}`` or ``{"expr": "M"}``; enums and dtypes
  are their spelling; a resource constraint is its class name (``"shared"``, ``"auto"``,
  or one only a catalog defines: ``"psum"``); layouts and axes are objects.
* Every malformed document raises ``PlannerError(kind="invalid-ir")`` whose message
  starts with a JSON path such as ``$.body.ops[3].attrs.offsets[1]``; documents over
  ``max_ops`` ops or ``max_depth`` nested regions raise ``kind="too-large"``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from planner.errors import UNKNOWN_LOC, Diagnostic, PlannerError, SourceLoc
from planner.ir.core import (
    CLASS_NAME_PATTERN,
    OP_CLASSES,
    OPS_BY_NAME,
    Axis,
    Block,
    Kernel,
    Op,
    ResourceClass,
    ResourceConstraint,
    Value,
)
from planner.ir.dtypes import DType
from planner.ir.expr import Expr, ExprSyntaxError, const, parse_expr
from planner.ir.layout import Layout, XorSwizzle
from planner.ir.printer import (
    AttrField,
    AttrKind,
    ValueNamer,
    attr_fields,
    display_path,
    shown_attrs,
)
from planner.ir.types import IRType, MemoryType, StateType, TileType, TokenType, ViewType

FORMAT = "planner.tile-ir"
VERSION = 1

_TYPE_KINDS: dict[str, type] = {"tile": TileType, "view": ViewType, "memory": MemoryType,
                                "state": StateType, "token": TokenType}
_KIND_OF_TYPE = {cls: kind for kind, cls in _TYPE_KINDS.items()}
_AXIS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_SPECIAL_FLOATS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}

Json = Any


# --------------------------------------------------------------------------- encoding


def kernel_to_json(kernel: Kernel, *, base_dir: str | None = None) -> dict[str, Json]:
    """The JSON form of ``kernel`` (strict JSON: no NaN or Infinity literals).

    ``base_dir`` writes location files inside it as relative paths.
    """
    return _Writer(base_dir).kernel(kernel)


def _float_json(x: float) -> Json:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float(x)


def _expr_json(e: Expr) -> Json:
    """Constants as JSON integers, other expressions in their text syntax."""
    value = e.const_value()
    return value if value is not None else str(e)


def _type_json(t: IRType) -> dict[str, Json]:
    out: dict[str, Json] = {"kind": _KIND_OF_TYPE[type(t)], "dtype": t.dtype.value,
                            "shape": [_expr_json(e) for e in t.shape]}
    if isinstance(t, ViewType):
        out["readonly"] = t.readonly
    return out


def _loc_json(loc: SourceLoc, base_dir: str | None) -> dict[str, Json]:
    return {"file": display_path(loc.file, base_dir), "line": loc.line, "col": loc.col}


def attr_to_json(value: object, f: AttrField) -> Json:
    """The JSON of one property value of syntax family ``f.kind``."""
    kind = f.kind
    if kind is AttrKind.EXPRS:
        return [_expr_json(e) for e in value]  # type: ignore[attr-defined]
    if kind is AttrKind.FLOAT:
        return _float_json(value)  # type: ignore[arg-type]
    if kind is AttrKind.FLOAT_OR_EXPR:
        if isinstance(value, float):
            return {"float": _float_json(value)}
        return {"expr": _expr_json(value)}  # type: ignore[arg-type]
    if kind in (AttrKind.INT, AttrKind.STR):
        return value
    if kind in (AttrKind.INTS, AttrKind.STRS):
        return list(value)  # type: ignore[call-overload]
    if kind is AttrKind.LAYOUT:
        assert isinstance(value, Layout)
        return {"shape": [_expr_json(e) for e in value.shape],
                "strides": [_expr_json(e) for e in value.strides],
                "swizzles": [{"bits": s.bits, "base": s.base, "shift": s.shift}
                             for s in value.swizzles],
                "planned": value.planned}
    if kind is AttrKind.AXES:
        return [{"name": a.name, "extent": _expr_json(a.extent)} for a in value]  # type: ignore[attr-defined]
    assert kind in (AttrKind.DTYPE, AttrKind.ENUM, AttrKind.RESOURCE)
    return value.value  # type: ignore[attr-defined]


class _Writer:
    def __init__(self, base_dir: str | None) -> None:
        self.namer = ValueNamer()
        self.base_dir = base_dir

    def kernel(self, kernel: Kernel) -> dict[str, Json]:
        return {"format": FORMAT, "version": VERSION, "name": kernel.name,
                "loc": _loc_json(kernel.loc, self.base_dir),
                "params": [self.value(p) for p in kernel.params],
                "body": self.block(kernel.body),
                **({"config": dict(kernel.config)} if kernel.config else {})}

    def value(self, v: Value) -> dict[str, Json]:
        out: dict[str, Json] = {"id": self.namer[v], "type": _type_json(v.type)}
        if v.name_hint is not None:
            out["name"] = v.name_hint
        return out

    def block(self, block: Block) -> dict[str, Json]:
        return {"args": [self.value(a) for a in block.args],
                "ops": [self.op(op) for op in block.ops]}

    def op(self, op: Op) -> dict[str, Json]:
        out: dict[str, Json] = {
            "op": op.SPEC.name,
            "operands": [self.namer[v] for v in op.operands()],
            "results": [self.value(r) for r in op.results],
            "attrs": {f.name: attr_to_json(value, f) for f, value in shown_attrs(op)},
            "regions": [self.block(b) for b in op.region_blocks()],
            "loc": _loc_json(op.loc, self.base_dir),
        }
        if op.stage is not None:
            out["stage"] = op.stage
        return out


# --------------------------------------------------------------------------- decoding


def kernel_from_json(obj: Json, *, file: str | None = None, max_ops: int | None = None,
                     max_depth: int = 64) -> Kernel:
    """Build a kernel from its JSON form, checking it completely (see the module docstring).

    Errors name the JSON path in their message; their location is ``file`` (line 0)
    when given, else unknown.
    """
    return _Reader(file, max_ops, max_depth).kernel(obj)


def kernel_from_json_text(text: str, *, file: str | None = None, max_ops: int | None = None,
                          max_depth: int = 64) -> Kernel:
    """:func:`kernel_from_json` of a JSON document; bad JSON is ``kind="parse"``."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise PlannerError(Diagnostic(f"invalid JSON: {e.msg}", SourceLoc(file or "<json>",
                                                                          e.lineno, e.colno)),
                           "parse") from None
    except RecursionError:
        raise PlannerError(Diagnostic("JSON nested too deeply", SourceLoc(file or "<json>", 1)),
                           "too-large") from None
    return kernel_from_json(obj, file=file, max_ops=max_ops, max_depth=max_depth)


def _kind_name(x: Json) -> str:
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "boolean"
    if isinstance(x, int | float):
        return "number"
    if isinstance(x, str):
        return "string"
    if isinstance(x, list):
        return "array"
    if isinstance(x, dict):
        return "object"
    return type(x).__name__


class _Reader:
    def __init__(self, file: str | None, max_ops: int | None, max_depth: int) -> None:
        self.loc_ = UNKNOWN_LOC if file is None else SourceLoc(file, 0)
        self.max_ops, self.max_depth = max_ops, max_depth
        self.n_ops = 0
        self.defined: dict[str, str] = {}  # id -> path of its definition
        self.scopes: list[dict[str, Value]] = [{}]

    def error(self, path: str, message: str, kind: str = "invalid-ir") -> PlannerError:
        return PlannerError(Diagnostic(f"{path}: {message}", self.loc_), kind)

    # ----------------------------------------------------------------- JSON shapes

    def obj(self, x: Json, path: str, required: tuple[str, ...],
            optional: tuple[str, ...] = ()) -> Mapping[str, Json]:
        if not isinstance(x, dict):
            raise self.error(path, f"expected an object, got {_kind_name(x)}")
        for key in required:
            if key not in x:
                raise self.error(path, f"missing field '{key}'")
        for key in x:
            if key not in required and key not in optional:
                known = ", ".join((*required, *optional))
                raise self.error(f"{path}.{key}", f"unknown field (expected: {known})")
        return x

    def list_(self, x: Json, path: str) -> list[Json]:
        if not isinstance(x, list):
            raise self.error(path, f"expected an array, got {_kind_name(x)}")
        return x

    def str_(self, x: Json, path: str) -> str:
        if not isinstance(x, str):
            raise self.error(path, f"expected a string, got {_kind_name(x)}")
        return x

    def int_(self, x: Json, path: str) -> int:
        if isinstance(x, bool) or not isinstance(x, int):
            raise self.error(path, f"expected an integer, got {_kind_name(x)}")
        return x

    def bool_(self, x: Json, path: str) -> bool:
        if not isinstance(x, bool):
            raise self.error(path, f"expected a boolean, got {_kind_name(x)}")
        return x

    def float_(self, x: Json, path: str) -> float:
        if isinstance(x, str) and x in _SPECIAL_FLOATS:
            return _SPECIAL_FLOATS[x]
        if isinstance(x, bool) or not isinstance(x, int | float):
            raise self.error(path, f"expected a number or \"inf\", \"-inf\", \"nan\", got "
                                   f"{_kind_name(x)}")
        return float(x)

    def expr(self, x: Json, path: str) -> Expr:
        if isinstance(x, int) and not isinstance(x, bool):
            return const(x)
        text = self.str_(x, path)
        try:
            return parse_expr(text)
        except ExprSyntaxError as e:
            raise self.error(path, f"bad expression {text!r}: {e} at character {e.pos}"
                             ) from None
        except (ZeroDivisionError, ValueError) as e:
            raise self.error(path, f"bad expression {text!r}: {e}") from None

    def exprs(self, x: Json, path: str) -> tuple[Expr, ...]:
        return tuple(self.expr(e, f"{path}[{i}]") for i, e in enumerate(self.list_(x, path)))

    def items(self, x: Json, path: str, item: Callable[[Json, str], Any]) -> tuple[Any, ...]:
        return tuple(item(e, f"{path}[{i}]") for i, e in enumerate(self.list_(x, path)))

    def dtype(self, x: Json, path: str) -> DType:
        try:
            return DType.parse(self.str_(x, path))
        except ValueError as e:
            raise self.error(path, str(e)) from None

    def loc(self, x: Json, path: str) -> SourceLoc:
        o = self.obj(x, path, ("file", "line"), ("col",))
        return SourceLoc(self.str_(o["file"], f"{path}.file"),
                         self.int_(o["line"], f"{path}.line"),
                         self.int_(o.get("col", 0), f"{path}.col"))

    def type_(self, x: Json, path: str) -> IRType:
        o = self.obj(x, path, ("kind", "dtype", "shape"), ("readonly",))
        kind = self.str_(o["kind"], f"{path}.kind")
        if kind not in _TYPE_KINDS:
            raise self.error(f"{path}.kind", f"unknown type kind {kind!r} (expected one of: "
                                             f"{', '.join(_TYPE_KINDS)})")
        dtype = self.dtype(o["dtype"], f"{path}.dtype")
        shape = self.exprs(o["shape"], f"{path}.shape")
        if kind == "view":
            return ViewType(dtype, shape, self.bool_(o.get("readonly", False),
                                                     f"{path}.readonly"))
        if "readonly" in o:
            raise self.error(f"{path}.readonly", "only views have 'readonly'")
        return _TYPE_KINDS[kind](dtype, shape)  # type: ignore[no-any-return]

    # ----------------------------------------------------------------- attributes

    def attr(self, x: Json, f: AttrField, path: str) -> object:
        kind = f.kind
        if kind is AttrKind.EXPRS:
            return self.exprs(x, path)
        if kind is AttrKind.FLOAT:
            return self.float_(x, path)
        if kind is AttrKind.FLOAT_OR_EXPR:
            o = x if isinstance(x, dict) and len(x) == 1 else None
            if o is not None and "float" in o:
                return self.float_(o["float"], f"{path}.float")
            if o is not None and "expr" in o:
                return self.expr(o["expr"], f"{path}.expr")
            raise self.error(path, 'expected {"float": number} or {"expr": string}')
        if kind is AttrKind.INT:
            return self.int_(x, path)
        if kind is AttrKind.INTS:
            return self.items(x, path, self.int_)
        if kind is AttrKind.STR:
            return self.str_(x, path)
        if kind is AttrKind.STRS:
            return self.items(x, path, self.str_)
        if kind is AttrKind.DTYPE:
            return self.dtype(x, path)
        if kind is AttrKind.LAYOUT:
            return self.layout(x, path)
        if kind is AttrKind.AXES:
            return self.items(x, path, self.axis)
        if kind is AttrKind.RESOURCE:
            try:
                return ResourceConstraint(self.str_(x, path))
            except ValueError as e:
                raise self.error(path, str(e)) from None
        assert kind is AttrKind.ENUM and f.enum is not None
        word = self.str_(x, path)
        for member in f.enum:
            if member.value == word:
                return member
        known = ", ".join(m.value for m in f.enum)
        raise self.error(path, f"unknown value {word!r} (expected one of: {known})")

    def layout(self, x: Json, path: str) -> Layout:
        o = self.obj(x, path, ("shape", "strides"), ("swizzles", "planned"))
        swizzles = self.items(o.get("swizzles", []), f"{path}.swizzles", self.swizzle)
        try:
            return Layout(self.exprs(o["shape"], f"{path}.shape"),
                          self.exprs(o["strides"], f"{path}.strides"), swizzles,
                          self.bool_(o.get("planned", False), f"{path}.planned"))
        except ValueError as e:
            raise self.error(path, str(e)) from None

    def swizzle(self, x: Json, path: str) -> XorSwizzle:
        o = self.obj(x, path, ("bits", "base", "shift"))
        try:
            return XorSwizzle(*(self.int_(o[k], f"{path}.{k}") for k in ("bits", "base", "shift")))
        except ValueError as e:
            raise self.error(path, str(e)) from None

    def axis(self, x: Json, path: str) -> Axis:
        o = self.obj(x, path, ("name", "extent"))
        name = self.str_(o["name"], f"{path}.name")
        if not _AXIS_NAME.fullmatch(name):
            raise self.error(f"{path}.name", f"invalid axis name {name!r}")
        return Axis(name, self.expr(o["extent"], f"{path}.extent"))

    # ----------------------------------------------------------------- values

    def define(self, x: Json, path: str) -> Value:
        o = self.obj(x, path, ("id", "type"), ("name",))
        vid = self.str_(o["id"], f"{path}.id")
        if vid in self.defined:
            raise self.error(f"{path}.id", f"duplicate value id {vid!r} (first defined at "
                                           f"{self.defined[vid]})")
        name = o.get("name")
        if name is not None:
            name = self.str_(name, f"{path}.name")
        value = Value(self.type_(o["type"], f"{path}.type"), name)
        self.defined[vid] = path
        self.scopes[-1][vid] = value
        return value

    def use(self, x: Json, path: str) -> Value:
        vid = self.str_(x, path)
        for scope in reversed(self.scopes):
            if vid in scope:
                return scope[vid]
        if vid in self.defined:
            raise self.error(path, f"value {vid!r} is not visible here (defined inside a "
                                   f"region at {self.defined[vid]})")
        raise self.error(path, f"undefined value id {vid!r}")

    # ----------------------------------------------------------------- structure

    def kernel(self, x: Json) -> Kernel:
        o = self.obj(x, "$", ("name", "params", "body"),
                     ("format", "version", "loc", "config"))
        if "format" in o and o["format"] != FORMAT:
            raise self.error("$.format", f"expected {FORMAT!r}, got {o['format']!r}")
        if "version" in o and self.int_(o["version"], "$.version") != VERSION:
            raise self.error("$.version", f"unsupported version {o['version']!r} (this "
                                          f"planner reads version {VERSION})")
        name = self.str_(o["name"], "$.name")
        params = [self.define(p, f"$.params[{i}]")
                  for i, p in enumerate(self.list_(o["params"], "$.params"))]
        for i, p in enumerate(params):
            if not isinstance(p.type, ViewType):
                raise self.error(f"$.params[{i}].type", f"kernel parameters must be views, got "
                                                        f"{p.type}")
        loc = self.loc(o["loc"], "$.loc") if "loc" in o else UNKNOWN_LOC
        body = self.block(o["body"], "$.body", scoped=False)
        if body.args:
            raise self.error("$.body.args", "the kernel body takes no block arguments; "
                                            "parameters go in $.params")
        return Kernel(name, params, body, loc, self.config(o.get("config", {})))

    def config(self, x: Json) -> dict[str, int | str]:
        """``$.config``: the sweep parameters the kernel was made with (ints, strings)."""
        if not isinstance(x, dict):
            raise self.error("$.config", f"expected an object, got {_kind_name(x)}")
        return {k: v if isinstance(v, str) else self.int_(v, f"$.config.{k}")
                for k, v in x.items()}

    def block(self, x: Json, path: str, scoped: bool = True) -> Block:
        o = self.obj(x, path, ("ops",), ("args",))
        if scoped:
            if len(self.scopes) > self.max_depth:
                raise self.error(path, f"regions nested deeper than {self.max_depth}",
                                 "too-large")
            self.scopes.append({})
        args = [self.define(a, f"{path}.args[{i}]")
                for i, a in enumerate(self.list_(o.get("args", []), f"{path}.args"))]
        block = Block(args)
        for i, op in enumerate(self.list_(o["ops"], f"{path}.ops")):
            block.append(self.op(op, f"{path}.ops[{i}]"))
        if scoped:
            self.scopes.pop()
        return block

    def op(self, x: Json, path: str) -> Op:
        self.n_ops += 1
        if self.max_ops is not None and self.n_ops > self.max_ops:
            raise self.error(path, f"more than {self.max_ops} ops", "too-large")
        o = self.obj(x, path, ("op", "operands", "results", "attrs", "regions"),
                     ("stage", "loc"))
        name = self.str_(o["op"], f"{path}.op")
        cls = OPS_BY_NAME.get(name)
        if cls is None:
            raise self.error(f"{path}.op", f"unknown op {name!r}")
        spec = cls.SPEC
        operands = [self.use(v, f"{path}.operands[{i}]")
                    for i, v in enumerate(self.list_(o["operands"], f"{path}.operands"))]
        n_fixed = len(spec.operands)
        if len(operands) != n_fixed and not (spec.variadic and len(operands) > n_fixed):
            expected = f"at least {n_fixed}" if spec.variadic else str(n_fixed)
            raise self.error(f"{path}.operands", f"{name} expects {expected} operand(s), got "
                                                 f"{len(operands)}")
        fields: dict[str, object] = self.attrs(o["attrs"], cls, f"{path}.attrs")
        fields.update(zip(spec.operands, operands, strict=False))
        if spec.variadic:
            fields[spec.variadic] = tuple(operands[n_fixed:])
        regions = self.list_(o["regions"], f"{path}.regions")
        if len(regions) != len(spec.regions):
            raise self.error(f"{path}.regions", f"{name} expects {len(spec.regions)} "
                                                f"region(s), got {len(regions)}")
        for i, (fname, r) in enumerate(zip(spec.regions, regions, strict=True)):
            fields[fname] = self.block(r, f"{path}.regions[{i}]")
        stage = self.str_(o["stage"], f"{path}.stage") if "stage" in o else None
        loc = self.loc(o["loc"], f"{path}.loc") if "loc" in o else UNKNOWN_LOC
        results = self.results(o["results"], f"{path}.results")
        try:
            op = cls(**fields, results=list(results), loc=loc, stage=stage)  # type: ignore[arg-type]
            inferred = op.result_types()
        except (AssertionError, IndexError, TypeError, ValueError):  # core asserts operand kinds
            types = ", ".join(str(v.type) for v in operands)
            raise self.error(path, f"{name} cannot infer its result types from operand types "
                                   f"({types}) and its properties") from None
        declared = [r.type for r in results]
        if len(inferred) != len(declared):
            raise self.error(f"{path}.results", f"{name} produces {len(inferred)} result(s), "
                                                f"{len(declared)} declared")
        for i, (want, got) in enumerate(zip(inferred, declared, strict=True)):
            if want != got:
                raise self.error(f"{path}.results[{i}].type", f"declared {got} but {name} "
                                                              f"produces {want}")
        return op

    def results(self, x: Json, path: str) -> list[Value]:
        """Result values; defined in the enclosing scope after the op's regions were read."""
        return [self.define(r, f"{path}[{i}]") for i, r in enumerate(self.list_(x, path))]

    def attrs(self, x: Json, cls: type[Op], path: str) -> dict[str, object]:
        declared = attr_fields(cls)
        o = self.obj(x, path, tuple(f.name for f in declared if f.required),
                     tuple(f.name for f in declared if not f.required))
        return {f.name: self.attr(o[f.name], f, f"{path}.{f.name}")
                for f in declared if f.name in o}


# --------------------------------------------------------------------------- schema


def kernel_json_schema() -> dict[str, Json]:
    """A JSON Schema (draft 2020-12) of the JSON form, generated from the op specs.

    The schema checks shapes, field types, op names, arities and property types;
    expression syntax, value scoping and type inference are checked by
    :func:`kernel_from_json` only.
    """
    defs: dict[str, Json] = {
        "expr": {"oneOf": [{"type": "string", "minLength": 1}, {"type": "integer"}]},
        "exprs": {"type": "array", "items": {"$ref": "#/$defs/expr"}},
        "float": {"oneOf": [{"type": "number"}, {"enum": sorted(_SPECIAL_FLOATS)}]},
        "dtype": {"enum": [d.value for d in DType]},
        "loc": {"type": "object", "required": ["file", "line"], "additionalProperties": False,
                "properties": {"file": {"type": "string"}, "line": {"type": "integer"},
                               "col": {"type": "integer"}}},
        "type": {"type": "object", "required": ["kind", "dtype", "shape"],
                 "additionalProperties": False,
                 "properties": {"kind": {"enum": list(_TYPE_KINDS)},
                                "dtype": {"$ref": "#/$defs/dtype"},
                                "shape": {"$ref": "#/$defs/exprs"},
                                "readonly": {"type": "boolean"}}},
        "value": {"type": "object", "required": ["id", "type"], "additionalProperties": False,
                  "properties": {"id": {"type": "string"}, "name": {"type": "string"},
                                 "type": {"$ref": "#/$defs/type"}}},
        "block": {"type": "object", "required": ["ops"], "additionalProperties": False,
                  "properties": {"args": {"type": "array", "items": {"$ref": "#/$defs/value"}},
                                 "ops": {"type": "array", "items": {"$ref": "#/$defs/op"}}}},
        "op": {"type": "object", "required": ["op", "operands", "results", "attrs", "regions"],
               "additionalProperties": False,
               "properties": {"op": {"enum": [c.SPEC.name for c in OP_CLASSES]},
                              "operands": {"type": "array", "items": {"type": "string"}},
                              "results": {"type": "array", "items": {"$ref": "#/$defs/value"}},
                              "attrs": {"type": "object"},
                              "regions": {"type": "array", "items": {"$ref": "#/$defs/block"}},
                              "stage": {"type": "string"},
                              "loc": {"$ref": "#/$defs/loc"}},
               "allOf": [_op_schema(c) for c in OP_CLASSES]},
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://planner.invalid/schemas/tile-ir-v1.json",
        "title": "Tile IR kernel (planner JSON form, version 1)",
        "type": "object",
        "required": ["name", "params", "body"],
        "additionalProperties": False,
        "properties": {"format": {"const": FORMAT}, "version": {"const": VERSION},
                       "name": {"type": "string"}, "loc": {"$ref": "#/$defs/loc"},
                       "config": {"type": "object", "additionalProperties": {
                           "type": ["integer", "string"]}},
                       "params": {"type": "array", "items": {"$ref": "#/$defs/value"}},
                       "body": {"$ref": "#/$defs/block"}},
        "$defs": defs,
    }


def _op_schema(cls: type[Op]) -> Json:
    spec = cls.SPEC
    declared = attr_fields(cls)
    operands: dict[str, Json] = {"minItems": len(spec.operands)}
    if not spec.variadic:
        operands["maxItems"] = len(spec.operands)
    n = len(spec.regions)
    return {"if": {"properties": {"op": {"const": spec.name}}},
            "then": {"description": spec.summary,
                     "properties": {
                         "operands": operands,
                         "regions": {"minItems": n, "maxItems": n},
                         "attrs": {"type": "object", "additionalProperties": False,
                                   "required": [f.name for f in declared if f.required],
                                   "properties": {f.name: _attr_schema(f) for f in declared}}}}}


def _attr_schema(f: AttrField) -> Json:
    kind = f.kind
    if kind is AttrKind.EXPRS:
        return {"$ref": "#/$defs/exprs"}
    if kind is AttrKind.FLOAT:
        return {"$ref": "#/$defs/float"}
    if kind is AttrKind.FLOAT_OR_EXPR:
        return {"oneOf": [
            {"type": "object", "required": ["float"], "additionalProperties": False,
             "properties": {"float": {"$ref": "#/$defs/float"}}},
            {"type": "object", "required": ["expr"], "additionalProperties": False,
             "properties": {"expr": {"$ref": "#/$defs/expr"}}}]}
    if kind is AttrKind.INT:
        return {"type": "integer"}
    if kind is AttrKind.INTS:
        return {"type": "array", "items": {"type": "integer"}}
    if kind is AttrKind.STR:
        return {"type": "string"}
    if kind is AttrKind.STRS:
        return {"type": "array", "items": {"type": "string"}}
    if kind is AttrKind.DTYPE:
        return {"$ref": "#/$defs/dtype"}
    if kind is AttrKind.LAYOUT:
        swizzle = {"type": "object", "required": ["bits", "base", "shift"],
                   "additionalProperties": False,
                   "properties": {k: {"type": "integer", "minimum": 0}
                                  for k in ("bits", "base", "shift")}}
        return {"type": "object", "required": ["shape", "strides"], "additionalProperties": False,
                "properties": {"shape": {"$ref": "#/$defs/exprs"},
                               "strides": {"$ref": "#/$defs/exprs"},
                               "swizzles": {"type": "array", "items": swizzle},
                               "planned": {"type": "boolean"}}}
    if kind is AttrKind.AXES:
        return {"type": "array", "items": {
            "type": "object", "required": ["name", "extent"], "additionalProperties": False,
            "properties": {"name": {"type": "string"}, "extent": {"$ref": "#/$defs/expr"}}}}
    if kind is AttrKind.RESOURCE:
        builtin = [c.value for c in ResourceClass]
        return {"description": f"a built-in resource class ({', '.join(builtin)}) or a class "
                               "a target catalog defines under 'classes' (S6)",
                "anyOf": [{"enum": builtin},
                          {"type": "string", "pattern": f"^{CLASS_NAME_PATTERN}$"}]}
    assert kind is AttrKind.ENUM and f.enum is not None
    return {"enum": [m.value for m in f.enum]}
