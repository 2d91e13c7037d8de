"""Metal Shading Language spellings: the Metal renderer is mostly data (STYLE pattern 9).

Everything :mod:`planner.lower.metal.emitter` prints that is a matter of *spelling* lives
here as tables: element types, address-space qualifiers, the barrier and its memory
flags, operator and library templates, literal spellings, parameter declarations and
the small helper functions a kernel may need.  The emitter decides *what* to print
(placement, distribution, barriers); a new spelling is a table edit, never a new
branch.  Every template stays inside the subset that ``msl_runtime/metal_compat.h``
declares (``msl_runtime/SUBSET.md``): plain ``kernel void``, explicit ``float``
literals with an ``f`` suffix, explicit conversions (``static_cast``), ``metal::``
math on ``float`` only.

Templates are ``str.format`` strings: ``{x}`` for a unary operand, ``{a}``/``{b}`` for
binary operands, ``{acc}``/``{x}`` for a reduction step, ``{t}`` for a type.
"""

from __future__ import annotations

import math
from enum import StrEnum

import numpy as np

from planner.ir.core import BinaryFn, ReduceFn, UnaryFn
from planner.ir.dtypes import DType
from planner.ir.expr import ExprOp

__all__ = [
    "ARENA_BYTES",
    "ARENA_DECL",
    "ARENA_GRANULE",
    "ARENA_VIEW",
    "ARRAY_DECL",
    "BARRIER",
    "BINARY",
    "CAST",
    "EXPR_GENERAL",
    "EXPR_NONNEG",
    "HELPERS",
    "INDEX_TYPE",
    "MEM_FLAGS",
    "MSL_SCALAR",
    "PLACEMENT",
    "POSITION_PARAMS",
    "REDUCE_COMBINE",
    "REDUCE_IDENTITY",
    "RESERVED",
    "SCRATCH_PARAM",
    "SPECIAL_FLOATS",
    "SYMBOL_PARAM",
    "SYNC_RULE_CLASSES",
    "UNARY",
    "UNSUPPORTED_DTYPES",
    "VIEW_PARAM",
    "Kind",
    "Space",
    "float_literal",
    "kind_of",
    "literal",
]


class Kind(StrEnum):
    """The arithmetic family of an element type: it selects an operator template."""

    FLOAT = "float"
    INT = "int"
    BOOL = "bool"


class Space(StrEnum):
    """Where a buffer lives in the emitted kernel."""

    THREADGROUP = "threadgroup"  # one array per threadgroup, visible to all its threads
    THREAD = "thread"  # per-thread slices (registers): each thread holds what it computes
    DEVICE = "device"  # a per-group region of a device scratch buffer the host allocates


#: Element types of the subset, by IR dtype.
MSL_SCALAR: dict[DType, str] = {DType.F32: "float", DType.I32: "int", DType.BOOL: "bool"}
KIND: dict[DType, Kind] = {DType.F32: Kind.FLOAT, DType.I32: Kind.INT, DType.BOOL: Kind.BOOL}
#: Why an IR dtype has no spelling (asked of the emulator's owner before it can have one).
UNSUPPORTED_DTYPES: dict[DType, str] = {
    DType.F16: "half is not in the checked MSL subset (msl_runtime/SUBSET.md §3)",
    DType.BF16: "bfloat is not in the checked MSL subset (msl_runtime/SUBSET.md §3)",
}

#: Index arithmetic is signed 64-bit (S14: byte addressing is checked as int64).
INDEX_TYPE = "long"

#: Catalog resource class -> where the Metal kernel keeps it (S17).  A class missing
#: here has no home in an emitted kernel and is refused with a diagnostic.
PLACEMENT: dict[str, Space] = {"shared": Space.THREADGROUP, "private": Space.THREAD,
                               "global": Space.DEVICE}

#: Array declarations at kernel function scope (statically sized, no initializer).
#: ``thread`` is the default address space of a local, so its arrays are unqualified;
#: device scratch is a kernel parameter (``SCRATCH_PARAM``), not a declaration.
ARRAY_DECL: dict[Space, str] = {
    Space.THREADGROUP: "threadgroup {t} {name}[{n}];",
    Space.THREAD: "{t} {name}[{n}];",
}

#: Threadgroup memory is one byte arena per kernel (the plan's capacity counts bytes
#: live at once, whatever their element type).  ``float4`` is storage only here: it
#: makes the arena 16-byte aligned (``ARENA_GRANULE`` bytes per element); the bytes are
#: addressed through a ``uchar`` pointer and each buffer through a typed view at its
#: byte offset.
ARENA_GRANULE = 16
ARENA_DECL = "threadgroup float4 {name}[{n}];"
ARENA_BYTES = "threadgroup uchar* {name} = reinterpret_cast<threadgroup uchar*>({arena});"
ARENA_VIEW = "threadgroup {t}* {name} = reinterpret_cast<threadgroup {t}*>({bytes} + {offset});"

#: The barrier statement and the memory flag of each resource class it orders.
BARRIER = "threadgroup_barrier({flags});"
MEM_FLAGS: dict[str, str] = {
    "shared": "mem_flags::mem_threadgroup",
    "global": "mem_flags::mem_device",
}
#: Catalog sync rules -> the classes whose memory the emitted barrier orders.  A
#: ``simdgroup_barrier`` is printed as the (stronger) threadgroup barrier: the emitter
#: spreads every statement over all threads of the group, not over one simdgroup.
SYNC_RULE_CLASSES: dict[str, tuple[str, ...]] = {
    "threadgroup_barrier": ("shared",),
    "threadgroup_barrier_mem_device": ("global",),
    "simdgroup_barrier": ("shared",),
}

#: Kernel parameters.  Views are device pointers (const when the view is), symbols
#: are ``constant long&`` scalars, positions are the two the emitter reads.
VIEW_PARAM: dict[bool, str] = {
    True: "device const {t}* {name} [[buffer({index})]]",
    False: "device {t}* {name} [[buffer({index})]]",
}
SYMBOL_PARAM = "constant long& {name} [[buffer({index})]]"
SCRATCH_PARAM = "device {t}* {name} [[buffer({index})]]"
POSITION_PARAMS: tuple[tuple[str, str, str], ...] = (
    ("uint", "tg_pos_", "threadgroup_position_in_grid"),
    ("uint", "tid_pos_", "thread_index_in_threadgroup"),
)

UNARY: dict[tuple[UnaryFn, Kind], str] = {
    (UnaryFn.NEG, Kind.FLOAT): "(-{x})",
    (UnaryFn.NEG, Kind.INT): "(-{x})",
    (UnaryFn.EXP, Kind.FLOAT): "metal::exp({x})",
    (UnaryFn.LOG, Kind.FLOAT): "metal::log({x})",
    (UnaryFn.SQRT, Kind.FLOAT): "metal::sqrt({x})",
    (UnaryFn.RSQRT, Kind.FLOAT): "metal::rsqrt({x})",
    (UnaryFn.TANH, Kind.FLOAT): "metal::tanh({x})",
    (UnaryFn.ABS, Kind.FLOAT): "metal::fabs({x})",
    (UnaryFn.ABS, Kind.INT): "pl_abs({x})",
}

#: ``max``/``min`` on floats propagate NaN like the reference interpreter (numpy);
#: Metal's own ``max`` is IEEE ``fmax``.  i1 arithmetic follows numpy's bool rules.
BINARY: dict[tuple[BinaryFn, Kind], str] = {
    (BinaryFn.ADD, Kind.FLOAT): "({a} + {b})",
    (BinaryFn.ADD, Kind.INT): "({a} + {b})",
    (BinaryFn.ADD, Kind.BOOL): "({a} || {b})",
    (BinaryFn.SUB, Kind.FLOAT): "({a} - {b})",
    (BinaryFn.SUB, Kind.INT): "({a} - {b})",
    (BinaryFn.MUL, Kind.FLOAT): "({a} * {b})",
    (BinaryFn.MUL, Kind.INT): "({a} * {b})",
    (BinaryFn.MUL, Kind.BOOL): "({a} && {b})",
    (BinaryFn.DIV, Kind.FLOAT): "({a} / {b})",
    (BinaryFn.DIV, Kind.INT): "({a} / {b})",  # C truncation, as the interpreter's i32 div
    (BinaryFn.MAX, Kind.FLOAT): "pl_max({a}, {b})",
    (BinaryFn.MAX, Kind.INT): "metal::max({a}, {b})",
    (BinaryFn.MAX, Kind.BOOL): "({a} || {b})",
    (BinaryFn.MIN, Kind.FLOAT): "pl_min({a}, {b})",
    (BinaryFn.MIN, Kind.INT): "metal::min({a}, {b})",
    (BinaryFn.MIN, Kind.BOOL): "({a} && {b})",
    **{(fn, kind): f"({{a}} {sym} {{b}})"
       for fn, sym in ((BinaryFn.LT, "<"), (BinaryFn.LE, "<="), (BinaryFn.GT, ">"),
                       (BinaryFn.GE, ">="), (BinaryFn.EQ, "=="))
       for kind in Kind},
}

CAST = "static_cast<{t}>({x})"

#: Reductions: the identity the accumulator starts from and one step.
REDUCE_IDENTITY: dict[tuple[ReduceFn, Kind], str] = {
    (ReduceFn.SUM, Kind.FLOAT): "0.0f",
    (ReduceFn.SUM, Kind.INT): "0",
    (ReduceFn.SUM, Kind.BOOL): "false",
    (ReduceFn.MAX, Kind.FLOAT): "(-1.0f / 0.0f)",
    (ReduceFn.MAX, Kind.INT): "(-2147483647 - 1)",
    (ReduceFn.MAX, Kind.BOOL): "false",
}
REDUCE_COMBINE: dict[tuple[ReduceFn, Kind], str] = {
    (ReduceFn.SUM, Kind.FLOAT): "{acc} + {x}",
    (ReduceFn.SUM, Kind.INT): "{acc} + {x}",
    (ReduceFn.SUM, Kind.BOOL): "{acc} || {x}",
    (ReduceFn.MAX, Kind.FLOAT): "pl_max({acc}, {x})",
    (ReduceFn.MAX, Kind.INT): "metal::max({acc}, {x})",
    (ReduceFn.MAX, Kind.BOOL): "{acc} || {x}",
}

#: The subset has no ``INFINITY``/``NAN`` macros: non-finite floats are spelled as
#: constant divisions (IEEE on the emulator; Metal's fast math may assume them away).
SPECIAL_FLOATS: dict[str, str] = {"inf": "(1.0f / 0.0f)", "-inf": "(-1.0f / 0.0f)",
                                  "nan": "(0.0f / 0.0f)"}

#: Index expressions.  ``EXPR_NONNEG`` applies when both operands are provably
#: non-negative (C division is then floor division); ``EXPR_GENERAL`` otherwise.
EXPR_NONNEG: dict[ExprOp, str] = {
    ExprOp.FLOORDIV: "({a} / {b})",
    ExprOp.MOD: "({a} % {b})",
    ExprOp.CEIL_DIV: "(({a} + {b} - 1) / {b})",
    ExprOp.MIN: "metal::min({a}, {b})",
    ExprOp.MAX: "metal::max({a}, {b})",
}
EXPR_GENERAL: dict[ExprOp, str] = {
    ExprOp.FLOORDIV: "pl_floordiv({a}, {b})",
    ExprOp.MOD: "pl_mod({a}, {b})",
    ExprOp.CEIL_DIV: "(-pl_floordiv(-({a}), {b}))",
    ExprOp.MIN: "metal::min({a}, {b})",
    ExprOp.MAX: "metal::max({a}, {b})",
}

#: Helper functions, printed before the kernel only when its text calls them.
HELPERS: dict[str, str] = {
    "pl_max": "inline float pl_max(float a, float b) { return (a > b || a != a) ? a : b; }",
    "pl_min": "inline float pl_min(float a, float b) { return (a < b || a != a) ? a : b; }",
    "pl_abs": "inline int pl_abs(int a) { return a < 0 ? -a : a; }",
    "pl_floordiv": ("inline long pl_floordiv(long a, long b) {\n"
                    "  long q = a / b;\n"
                    "  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;\n"
                    "}"),
    "pl_mod": "inline long pl_mod(long a, long b) { return a - pl_floordiv(a, b) * b; }",
    "pl_swizzle": ("inline long pl_swizzle(long offset, long mask, int shift) {\n"
                   "  return offset ^ ((offset & mask) >> shift);\n"
                   "}"),
}
#: Helpers that call other helpers.
HELPER_DEPENDS: dict[str, tuple[str, ...]] = {"pl_mod": ("pl_floordiv",)}

#: Identifiers an emitted name must not take (MSL/C++ keywords, the subset's attribute
#: macros and library names).  The emitter's own locals (``tid_``, ``l_``, ``acc_``,
#: ``t0_``, ...) end with ``_``, which a name made from the IR never does.
RESERVED: frozenset[str] = frozenset({
    "kernel", "device", "constant", "threadgroup", "thread", "buffer", "metal",
    "using", "namespace", "void", "bool", "char", "uchar", "short", "ushort", "int",
    "uint", "long", "ulong", "float", "half", "double", "auto", "const", "static",
    "inline", "return", "for", "if", "else", "while", "do", "break", "continue", "switch",
    "case", "default", "struct", "class", "template", "typename", "true", "false",
    "this", "new", "delete", "sizeof", "volatile", "register", "signed", "unsigned",
    "select", "exp", "log", "sqrt", "rsqrt", "tanh", "fabs", "fma", "max", "min",
    "mem_flags", "threadgroup_barrier", "static_cast", "uint2", "uint3", "ushort2",
    "ushort3", "thread_position_in_grid", "threadgroup_position_in_grid",
    "thread_position_in_threadgroup", "threads_per_threadgroup", "threadgroups_per_grid",
    "threads_per_grid", "thread_index_in_threadgroup", "simd", "vec", "packed", "atomic",
    "array", "texture", "sampler", "half2", "float2", "float3", "float4", *HELPERS,
})


def kind_of(dtype: DType) -> Kind:
    return KIND[dtype]


def float_literal(value: float) -> str:
    """An ``f``-suffixed literal that round-trips the float32 value (or a special)."""
    if math.isnan(value):
        return SPECIAL_FLOATS["nan"]
    if math.isinf(value):
        return SPECIAL_FLOATS["inf" if value > 0 else "-inf"]
    text = str(np.float32(value))
    if "e" not in text and "." not in text:
        text += ".0"
    text += "f"
    return f"({text})" if text.startswith("-") else text


def literal(value: float | int | bool, dtype: DType) -> str:
    """The spelling of a constant of ``dtype``."""
    kind = KIND[dtype]
    if kind is Kind.FLOAT:
        return float_literal(float(value))
    if kind is Kind.BOOL:
        return "true" if value else "false"
    v = int(value)
    if v == -(2**31):
        return "(-2147483647 - 1)"
    return f"({v})" if v < 0 else str(v)
