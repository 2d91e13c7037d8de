"""The catalog file format, declared once: which keys each object has and their types.

Each value type knows two things: how to read a YAML node (reporting a located,
path-prefixed diagnostic instead of raising, so one pass collects every mistake) and
its JSON Schema fragment.  The loader reads with these tables, the schema exporter
prints them, so the two cannot drift apart.

Reading yields :class:`Parsed` records (values plus the location of each value) or
:data:`INVALID` where a value was rejected; only the loader sees them.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from enum import Enum

import yaml

from planner.catalog.model import Backend, Coherence, CopyMode, MmaOperand, OpClass, Operation
from planner.catalog.units import BYTE_SIZE_PATTERN, ByteSizeError, parse_byte_size
from planner.errors import Diagnostic, SourceLoc


class _Invalid:
    def __repr__(self) -> str:
        return "INVALID"


#: Stands for a value that was rejected (its diagnostic is already recorded).
INVALID = _Invalid()


def did_you_mean(name: str, known: list[str] | tuple[str, ...]) -> str:
    """`` (did you mean 'x'?)`` or `` (known: a, b)``, for messages about unknown names."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (known: {', '.join(known)})" if known else ""


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


class Context:
    """Where diagnostics of one file go while it is read."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.diagnostics: list[Diagnostic] = []
        self._constructor = yaml.constructor.SafeConstructor()

    def loc(self, node: yaml.Node) -> SourceLoc:
        mark = node.start_mark
        return SourceLoc(self.filename, mark.line + 1, mark.column + 1)

    def error(self, where: yaml.Node | SourceLoc, path: str, message: str,
              notes: tuple[tuple[SourceLoc, str], ...] = (), rule: str = "") -> None:
        loc = where if isinstance(where, SourceLoc) else self.loc(where)
        text = f"{path}: {message}" if path else message
        self.diagnostics.append(Diagnostic(text, loc, rule=rule, notes=notes))

    def scalar(self, node: yaml.Node, path: str, expected: str) -> object:
        """The Python value of a scalar node, or INVALID (reported)."""
        if not isinstance(node, yaml.ScalarNode):
            self.error(node, path, f"expected {expected}, got {describe(node)}")
            return INVALID
        try:
            return self._constructor.construct_object(node)
        except yaml.constructor.ConstructorError as exc:
            self.error(node, path, f"cannot read {node.value!r}: {exc.problem}")
            return INVALID


def describe(node: yaml.Node) -> str:
    """How a node is named in messages: its source text, or its kind."""
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return "null" if node.tag == "tag:yaml.org,2002:null" else repr(node.value)


# -- value types ---------------------------------------------------------------------

class ValueType:
    """How one kind of value is read and described."""

    expected = "a value"

    def read(self, node: yaml.Node, ctx: Context, path: str) -> object:
        raise NotImplementedError

    def json_schema(self) -> dict[str, object]:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Text(ValueType):
    """A string, optionally matching ``pattern`` (explained by ``what``)."""

    pattern: str | None = None
    what: str = "string"
    hint: str = ""

    @property
    def expected(self) -> str:
        return f"a {self.what}"

    def read(self, node: yaml.Node, ctx: Context, path: str) -> object:
        value = ctx.scalar(node, path, self.expected)
        if value is INVALID:
            return INVALID
        if not isinstance(value, str):
            ctx.error(node, path, f"expected {self.expected}, got {describe(node)}")
            return INVALID
        if self.pattern is not None and re.fullmatch(self.pattern, value) is None:
            ctx.error(node, path, f"{value!r} is not a valid {self.what} ({self.hint})")
            return INVALID
        return value

    def json_schema(self) -> dict[str, object]:
        schema: dict[str, object] = {"type": "string"}
        if self.pattern is not None:
            schema["pattern"] = self.pattern
        return schema


NAME = Text(r"^[A-Za-z_][A-Za-z0-9_]*$", "name",
            "letters, digits and '_', not starting with a digit")
TARGET_NAME = Text(r"^[a-z0-9][a-z0-9_.-]*$", "target name",
                   "lower-case letters, digits, '-', '_' and '.'")
FREE_TEXT = Text()


@dataclass(frozen=True, slots=True)
class Boolean(ValueType):
    expected = "true or false"

    def read(self, node: yaml.Node, ctx: Context, path: str) -> object:
        value = ctx.scalar(node, path, self.expected)
        if value is not INVALID and not isinstance(value, bool):
            ctx.error(node, path, f"expected {self.expected}, got {describe(node)}")
            return INVALID
        return value

    def json_schema(self) -> dict[str, object]:
        return {"type": "boolean"}


@dataclass(frozen=True, slots=True)
class Number(ValueType):
    """An int, or a float too unless ``integer``; at least (or above) ``minimum``."""

    minimum: float = 0
    exclusive: bool = False
    integer: bool = False

    @property
    def expected(self) -> str:
        kind = "an integer" if self.integer else "a number"
        bound = ">" if self.exclusive else "≥"
        return f"{kind} {bound} {self.minimum:g}"

    def read(self, node: yaml.Node, ctx: Context, path: str) -> object:
        value = ctx.scalar(node, path, self.expected)
        if value is INVALID:
            return INVALID
        kinds = (int,) if self.integer else (int, float)
        ok = isinstance(value, kinds) and not isinstance(value, bool)
        if ok and (not math.isfinite(value) or value < self.minimum
                   or (self.exclusive and value == self.minimum)):
            ok = False
        if not ok:
            ctx.error(node, path, f"expected {self.expected}, got {describe(node)}")
            return INVALID
        return value

    def json_schema(self) -> dict[str, object]:
        bound = "exclusiveMinimum" if self.exclusive else "minimum"
        return {"type": "integer" if self.integer else "number", bound: self.minimum}


@dataclass(frozen=True, slots=True)
class IntChoice(ValueType):
    """One of a few integers (``what`` names it in messages)."""

    values: tuple[int, ...]
    what: str

    @property
    def expected(self) -> str:
        return f"a {self.what} ({', '.join(map(str, self.values))})"

    def read(self, node: yaml.Node, ctx: Context, path: str) -> object:
        value = ctx.scalar(node, path, self.expected)
        if value is INVALID:
            return INVALID
        if isinstance(value, bool) or value not in self.values:
            ctx.error(node, path, f"expected {self.expected}, got {describe(node)}")
            return INVALID
        return value

    def json_schema(self) -> dict[str, object]:
        return {"enum": list(self.values)}


POSITIVE_INT = Number(1, integer=True)
NON_NEGATIVE = Number(0)
POSITIVE = Number(0, exclusive=True)


@dataclass(frozen=True, slots=True)
class ByteSize(ValueType):
    """Bytes: an int or ``"48 KiB"``; ``unbounded``/null only when ``unbounded_ok``."""

    unbounded_ok: bool = False
    expected = "a byte size"

    def read(self, node: yaml.Node, ctx: Context, path: str) -> object:
        value = ctx.scalar(node, path, self.expected)
        if value is INVALID:
            return INVALID
        try:
            size = parse_byte_size(value)
        except ByteSizeError as exc:
            ctx.error(node, path, str(exc))
            return INVALID
        if size is None and not self.unbounded_ok:
            ctx.error(node, path, f"expected a finite byte size, got {describe(node)}")
            return INVALID
        return size

    def json_schema(self) -> dict[str, object]:
        forms: list[dict[str, object]] = [
            {"type": "integer", "minimum": 0},
            {"type": "string", "pattern": BYTE_SIZE_PATTERN if self.unbounded_ok
             else BYTE_SIZE_PATTERN.removesuffix("|^unbounded$")},
        ]
        if self.unbounded_ok:
            forms.append({"type": "null"})
        return {"anyOf": forms}


@dataclass(frozen=True, slots=True)
class Choice(ValueType):
    """One value of an enum; ``what`` names it in messages."""

    enum: type[Enum]
    what: str

    @property
    def expected(self) -> str:
        return f"a {self.what}"

    def read(self, node: yaml.Node, ctx: Context, path: str) -> object:
        value = ctx.scalar(node, path, self.expected)
        if value is INVALID:
            return INVALID
        known = [m.value for m in self.enum]
        if value not in known:
            shown = repr(value) if isinstance(value, str) else describe(node)
            ctx.error(node, path, f"unknown {self.what} {shown}"
                                  f"{did_you_mean(str(value), known)}")
            return INVALID
        return self.enum(value)

    def json_schema(self) -> dict[str, object]:
        return {"enum": [m.value for m in self.enum]}


@dataclass(frozen=True, slots=True)
class NameOf(ValueType):
    """A string read as is; the loader checks it is a value of ``enum`` (so its message can
    name the object it belongs to), the schema lists the values."""

    enum: type[Enum]
    what: str

    @property
    def expected(self) -> str:
        return f"{'an' if self.what[:1] in 'aeiou' else 'a'} {self.what}"

    def read(self, node: yaml.Node, ctx: Context, path: str) -> object:
        value = ctx.scalar(node, path, self.expected)
        if value is not INVALID and not isinstance(value, str):
            ctx.error(node, path, f"expected {self.expected}, got {describe(node)}")
            return INVALID
        return value

    def json_schema(self) -> dict[str, object]:
        return {"enum": [m.value for m in self.enum]}


@dataclass(frozen=True, slots=True)
class Nullable(ValueType):
    inner: ValueType

    def read(self, node: yaml.Node, ctx: Context, path: str) -> object:
        if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
            return None
        return self.inner.read(node, ctx, path)

    def json_schema(self) -> dict[str, object]:
        return {"anyOf": [self.inner.json_schema(), {"type": "null"}]}


@dataclass(slots=True)
class ParsedList:
    """A list read from YAML: items (INVALID where rejected) and their locations."""

    path: str
    items: list[object]
    locs: list[SourceLoc]


@dataclass(frozen=True, slots=True)
class ListOf(ValueType):
    item: ValueType
    min_items: int = 0
    expected = "a list"

    def read(self, node: yaml.Node, ctx: Context, path: str) -> object:
        if not isinstance(node, yaml.SequenceNode):
            ctx.error(node, path, f"expected a list, got {describe(node)}")
            return INVALID
        if len(node.value) < self.min_items:
            ctx.error(node, path, f"needs at least {self.min_items} "
                                  f"entr{'y' if self.min_items == 1 else 'ies'}")
        return ParsedList(path, [self.item.read(n, ctx, join(path, i))
                                 for i, n in enumerate(node.value)],
                          [ctx.loc(n) for n in node.value])

    def json_schema(self) -> dict[str, object]:
        schema: dict[str, object] = {"type": "array", "items": self.item.json_schema()}
        if self.min_items:
            schema["minItems"] = self.min_items
        return schema


# -- objects ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Key:
    """One key of an object: its type, whether it must be written, and its meaning."""

    name: str
    type: ValueType
    doc: str
    required: bool = True
    default: object = None


@dataclass(frozen=True, slots=True)
class ObjectSpec:
    name: str
    doc: str
    keys: tuple[Key, ...]

    def key(self, name: str) -> Key | None:
        return next((k for k in self.keys if k.name == name), None)


@dataclass(slots=True)
class Parsed:
    """An object read from YAML: values by key (INVALID where rejected) and locations."""

    path: str
    loc: SourceLoc
    values: dict[str, object]
    locs: dict[str, SourceLoc] = field(default_factory=dict)

    def __getitem__(self, key: str) -> object:
        return self.values[key]

    def at(self, key: str) -> SourceLoc:
        """Where the value of ``key`` was written (the object itself if it was not)."""
        return self.locs.get(key, self.loc)

    def path_of(self, key: str) -> str:
        return join(self.path, key)


@dataclass(frozen=True, slots=True)
class Object(ValueType):
    spec: ObjectSpec
    expected = "a mapping"

    def read(self, node: yaml.Node, ctx: Context, path: str) -> object:
        if not isinstance(node, yaml.MappingNode):
            ctx.error(node, path, f"expected a mapping ({self.spec.doc}), got {describe(node)}")
            return INVALID
        parsed = Parsed(path, ctx.loc(node), {})
        seen: dict[str, SourceLoc] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            if key in seen:
                ctx.error(key_node, path, f"duplicate key {key!r}",
                          ((seen[key], "first written here"),))
                continue
            seen[key] = ctx.loc(key_node)
            spec_key = self.spec.key(key)
            if spec_key is None:
                known = [k.name for k in self.spec.keys]
                ctx.error(key_node, path, f"unknown key {key!r}{did_you_mean(key, known)}")
                continue
            parsed.values[key] = spec_key.type.read(value_node, ctx, join(path, key))
            parsed.locs[key] = ctx.loc(value_node)
        for key in self.spec.keys:
            if key.name in seen:
                continue
            if key.required:
                ctx.error(node, path, f"missing required key {key.name!r}")
            parsed.values[key.name] = INVALID if key.required else key.default
        return parsed

    def json_schema(self) -> dict[str, object]:
        return {"$ref": f"#/$defs/{self.spec.name}"}


def object_schema(spec: ObjectSpec) -> dict[str, object]:
    """The JSON Schema of one object kind (its ``$defs`` entry)."""
    return {
        "type": "object",
        "description": spec.doc,
        "additionalProperties": False,
        "required": [k.name for k in spec.keys if k.required],
        "properties": {k.name: {**k.type.json_schema(), "description": k.doc}
                       for k in spec.keys},
    }


# -- the format ------------------------------------------------------------------------

OPERATIONS = ListOf(Choice(Operation, "operation"), min_items=1)

CLASS = ObjectSpec("ResourceClass", "a resource class this catalog defines", (
    Key("name", NAME, "the class name resource constraints use"),
    Key("description", FREE_TEXT, "what the class is for", required=False, default=""),
))

SCOPE = ObjectSpec("Scope", "an execution scope", (
    Key("name", NAME, "the scope name"),
    Key("parent", Nullable(NAME), "the enclosing scope; null for the root"),
    Key("extent", Nullable(POSITIVE_INT),
        "instances per parent instance; null when dynamic or unbounded"),
    Key("max_extent", Nullable(POSITIVE_INT), "the most instances per parent instance",
        required=False),
    Key("description", FREE_TEXT, "what the scope is", required=False, default=""),
    Key("executes", ListOf(NameOf(OpClass, "op class")),
        "op classes (elementwise, transcendental, reduction, mma, memory) whose ops, inside "
        "a parallel bound to this scope or an ancestor, run on this scope (an execution "
        "unit); a class is listed by at most one scope", required=False, default=()),
))

BANKS = ObjectSpec("Banks", "bank geometry", (
    Key("count", POSITIVE_INT, "number of banks"),
    Key("width", POSITIVE_INT, "bytes per bank word"),
))

SYNC = ObjectSpec("SyncRule", "a barrier or wait that orders accesses", (
    Key("name", FREE_TEXT, "its spelling, e.g. threadgroup_barrier"),
    Key("scope", NAME, "the scope whose members it synchronizes"),
    Key("cost", NON_NEGATIVE, "cycles"),
))

RESOURCE = ObjectSpec("Resource", "a physical resource", (
    Key("name", NAME, "the resource name"),
    Key("class", NAME, "private, shared, cluster, global, tensor, or a class under 'classes'"),
    Key("instance_scope", NAME, "the scope that owns one instance"),
    Key("capacity", ByteSize(unbounded_ok=True),
        'bytes per instance: 49152, "48 KiB", or "unbounded"/null'),
    Key("alignment", ByteSize(), "alignment of allocations in bytes (a power of two)",
        required=False, default=1),
    Key("coherence", Choice(Coherence, "coherence"),
        "coherent | barrier | fence | async | none"),
    Key("operations", OPERATIONS, "operations the resource supports"),
    Key("slicing", Boolean(),
        "whether one instance may be carved into per-descendant-instance slices"),
    Key("bandwidth", NON_NEGATIVE, "bytes per cycle per instance"),
    Key("latency", NON_NEGATIVE, "cycles"),
    Key("banks", Object(BANKS), "bank geometry", required=False),
    Key("sync", ListOf(Object(SYNC)), "barriers and waits", required=False, default=()),
    Key("description", FREE_TEXT, "what the resource is", required=False, default=""),
))

ACCESS = ObjectSpec("Access", "members of a scope may apply operations to a resource", (
    Key("scope", NAME, "the executing scope"),
    Key("resource", NAME, "the resource"),
    Key("operations", OPERATIONS, "the operations allowed"),
    Key("mma_operands", ListOf(NameOf(MmaOperand, "mma operand"), min_items=1),
        "with mma_read: the tile.mma operands (a, b, c: the accumulator) the mma may read "
        "in place from the resource; absent: every operand", required=False),
))

COPY_ENGINE = ObjectSpec("CopyEngine", "an engine that performs memory.copy_async", (
    Key("name", NAME, "the engine name plans report (e.g. tma, cp_async, dma)"),
    Key("mode", Choice(CopyMode, "copy mode"),
        "async: a hardware engine copies while the issuer computes, done at the wait; "
        "prefetch: the issuer copies itself, the source prefetched ahead of use"),
    Key("scope", NAME, "the scope whose members issue and wait for the copies"),
    Key("from", ListOf(NAME, min_items=1), "resources it reads"),
    Key("to", ListOf(NAME, min_items=1), "resources it writes"),
    Key("bandwidth", POSITIVE, "bytes per cycle per issuing instance"),
    Key("issue", NON_NEGATIVE, "cycles of the issuer per copy"),
    Key("in_flight", POSITIVE_INT, "copies outstanding per issuing instance"),
    Key("wait", FREE_TEXT, "the spelling of the wait that completes a copy"),
    Key("description", FREE_TEXT, "what the engine is", required=False, default=""),
))

COSTS = ObjectSpec("Costs", "cost figures per instance of the default parallel scope", (
    Key("clock_ghz", POSITIVE, "clock frequency in GHz"),
    Key("concurrent_instances", POSITIVE_INT,
        "instances of the default parallel scope running at once"),
    Key("cheap", POSITIVE, "add/mul/max/... elements per cycle"),
    Key("transcendental", POSITIVE, "exp/log/tanh/sqrt elements per cycle"),
    Key("mma", POSITIVE, "matrix-multiply flops per cycle"),
    Key("barrier", NON_NEGATIVE, "cycles per barrier"),
))

#: LLVM feature and CPU names: ``avx2``, ``sse4.1``, ``x86-64-v3`` (no ``+``/``-``).
LLVM_NAME = Text(r"^[a-z0-9][a-z0-9_.-]*$", "LLVM name",
                 "lower-case letters, digits, '-', '_' and '.', without a leading '+' or '-'")

CPU = ObjectSpec("Cpu", "what the llvm-cpu backend compiles a plan for", (
    Key("vector_width", IntChoice((4, 8, 16), "vector width in fp32 lanes"),
        "fp32 lanes of one vector register the generated code uses (8: 256-bit ymm, "
        "16: 512-bit zmm)"),
    Key("llvm_cpu", LLVM_NAME,
        "the LLVM CPU name code is generated for, e.g. x86-64-v3; never the host's"),
    Key("llvm_features", ListOf(LLVM_NAME),
        "every LLVM feature the code may use beyond the base architecture (e.g. avx2, "
        "fma); a host that lacks one of them refuses to run the code"),
))

TARGET = ObjectSpec("Target", "a planner target catalog", (
    Key("name", TARGET_NAME, "the target name (the file is <name>.yaml)"),
    Key("description", FREE_TEXT, "what the target is", required=False, default=""),
    Key("backend", Nullable(Choice(Backend, "backend")),
        "llvm-cpu, metal, or null for a planning-only target"),
    Key("classes", ListOf(Object(CLASS)), "resource classes beyond the built-in ones",
        required=False, default=()),
    Key("scopes", ListOf(Object(SCOPE), min_items=1), "execution scopes (a tree)"),
    Key("default_parallel_scope", NAME, "the scope parallel(..., AUTOMATIC) binds to"),
    Key("resources", ListOf(Object(RESOURCE), min_items=1), "physical resources"),
    Key("access", ListOf(Object(ACCESS)), "the can_access relation, entry by entry"),
    Key("costs", Object(COSTS), "cost figures"),
    Key("copy_engines", ListOf(Object(COPY_ENGINE)),
        "engines for memory.copy_async; without one a copy runs synchronously",
        required=False, default=()),
    Key("cpu", Object(CPU), "vector width and LLVM CPU/features; required with backend "
        "llvm-cpu", required=False),
))

OBJECT_SPECS: tuple[ObjectSpec, ...] = (TARGET, CLASS, SCOPE, RESOURCE, BANKS, SYNC, ACCESS,
                                        COSTS, CPU, COPY_ENGINE)
