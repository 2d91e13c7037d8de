"""Check and run Metal Shading Language kernels on Linux, with Metal's execution rules.

No Metal compiler exists for Linux. This module gets as close as a stock compiler
allows, for the small MSL subset that planner emits (``msl_runtime/SUBSET.md``):

**Checking** (:func:`check_msl`). The source is rewritten line by line (``[[kernel]]``
becomes ``kernel``, the ``<metal_stdlib>`` include is blanked; columns are kept) and
compiled by clang-19 in "C++ for OpenCL 2021" mode against ``msl_runtime/metal_compat.h``,
which maps ``device/constant/threadgroup/thread`` onto OpenCL address spaces and
declares exactly the subset's library. With the generic address space, fp64 and
program-scope mutable variables switched off, clang rejects what Metal rejects in that
subset: an unqualified pointer to device memory, ``double``, a mutable global. Clang
emits unoptimised LLVM IR as well; its call graph rejects recursion, which the language
mode alone accepts. Diagnostics point at the MSL line and column and speak Metal's
address-space names.

**Running** (:func:`compile_msl`, :meth:`EmulatedKernel.run`). The checked source is
compiled with a one-line entry stub into a shared object together with the fiber
runtime ``msl_runtime/mtl_runtime.c`` (cached by content hash). The runtime runs every
threadgroup as a team of fibers with a real, convergent barrier, in forward, reverse or
random thread order, in a forked child process: buffers end at guard pages, read-only
buffers are mapped read-only, threadgroup memory is filled with 0xFF (NaN) before each
group, and a fault, a divergent barrier, an early exit or a timeout comes back as a
:class:`KernelFault` naming the thread, the group, the buffer and the byte offset.

What this proves and what it cannot is written down in ``msl_runtime/SUBSET.md``.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Literal

import numpy as np

from planner.errors import Diagnostic, PlannerError, Severity, SourceLoc

__all__ = [
    "CheckResult",
    "EmulatedKernel",
    "FaultReason",
    "KernelFault",
    "KernelParam",
    "MslCompileError",
    "MslToolchainError",
    "Order",
    "ParamKind",
    "RunReport",
    "check_msl",
    "clang_available",
    "compile_msl",
    "default_cache_dir",
]

Order = Literal["forward", "reverse", "random"]

CLANG_NAMES = ("clang-19", "/usr/lib/llvm-19/bin/clang")
MAX_BUFFERS = 31
MAX_THREADS_PER_GROUP = 1024
_RUNTIME_DIR = "msl_runtime"
_HEADER = "metal_compat.h"
_RUNTIME = "mtl_runtime.c"
_ENTRY = "__mtl_entry"
_TG_SECTION = "mtl_tg"

_OPENCL_EXTENSIONS_OFF = ",".join(
    "-" + ext
    for ext in (
        "__opencl_c_generic_address_space",
        "cl_khr_fp64",
        "__opencl_c_fp64",
        "__opencl_c_program_scope_global_variables",
        "__opencl_c_pipes",  # both need the generic address space
        "__opencl_c_device_enqueue",
    )
)
# Warnings that mean "outside the subset": the emitter writes conversions explicitly.
_SUBSET_ERRORS = (
    "unknown-attributes",
    "float-conversion",
    "implicit-int-float-conversion",
    "shorten-64-to-32",
    "return-type",
)


# ---- errors and results ---------------------------------------------------------------


class MslToolchainError(PlannerError):
    """clang-19 is missing or failed in a way that is not the kernel's fault."""

    def __init__(self, message: str) -> None:
        super().__init__(Diagnostic(message, rule="msl-toolchain"), kind="toolchain")


class MslCompileError(PlannerError):
    """The MSL source is outside the subset or does not type-check."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        super().__init__(list(diagnostics), kind="msl-compile")


@dataclass(frozen=True, slots=True)
class CheckResult:
    """Outcome of :func:`check_msl`: diagnostics located in the MSL source."""

    diagnostics: tuple[Diagnostic, ...]
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity is Severity.ERROR)

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity is Severity.WARNING)

    def render(self) -> str:
        return "\n".join(d.render() for d in self.diagnostics)

    def raise_for_errors(self) -> None:
        if not self.ok:
            raise MslCompileError(self.errors)


class ParamKind(StrEnum):
    """How a kernel parameter is declared, hence what :meth:`EmulatedKernel.run` takes."""

    DEVICE_POINTER = "device T*"
    CONSTANT_POINTER = "constant T*"
    CONSTANT_REFERENCE = "constant T&"
    POSITION = "position"


@dataclass(frozen=True, slots=True)
class KernelParam:
    """One kernel parameter and where its value comes from.

    ``attribute`` is ``"buffer"`` (then ``index`` is the ``[[buffer(n)]]`` slot and
    ``scalar`` the element type's MSL name) or the name of a position attribute (then
    ``index`` is -1). ``spelling`` is the declaration as written, without the attribute.
    """

    name: str
    kind: ParamKind
    attribute: str
    index: int
    scalar: str
    spelling: str
    read_only: bool
    line: int

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(_SCALARS[self.scalar])

    def describe(self) -> str:
        return f"buffer({self.index}) `{self.name}` ({self.spelling})"


@dataclass(frozen=True, slots=True)
class RunReport:
    """What one successful :meth:`EmulatedKernel.run` did."""

    kernel: str
    grid: tuple[int, int, int]
    threads_per_group: tuple[int, int, int]
    order: Order
    seed: int
    elapsed_s: float
    groups_run: int
    barriers_passed: int
    fiber_switches: int
    written: tuple[int, ...]


class FaultReason(StrEnum):
    """Why a run failed; also the diagnostic's rule (``msl-<value>``)."""

    OUT_OF_BOUNDS = "out-of-bounds"
    READ_ONLY_WRITE = "read-only-write"
    STACK_OVERFLOW = "stack-overflow"
    FAULT = "fault"  # any other signal: a wild pointer, an integer division by zero
    DIVERGENT_BARRIER = "divergent-barrier"
    EARLY_EXIT = "early-exit"
    TIMEOUT = "timeout"
    SETUP = "setup"
    CRASH = "crash"


class KernelFault(PlannerError):
    """The kernel faulted, diverged at a barrier, exited early or timed out."""

    def __init__(self, message: str, reason: FaultReason, kernel: str) -> None:
        super().__init__(Diagnostic(message, rule=f"msl-{reason.value}"), kind="kernel-fault")
        self.reason = reason
        self.kernel = kernel


# ---- toolchain -------------------------------------------------------------------------


@functools.cache
def _find_clang() -> str | None:
    for name in CLANG_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def clang_available() -> bool:
    """True when clang-19 is installed (``scripts/install_clang.sh`` installs it)."""
    return _find_clang() is not None


def _clang() -> str:
    path = _find_clang()
    if path is None:
        raise MslToolchainError(
            "clang-19 is not installed; run scripts/install_clang.sh (apt-get install clang-19)"
        )
    return path


@functools.cache
def _clang_version(clang: str) -> str:
    return subprocess.run([clang, "--version"], capture_output=True, text=True, check=True).stdout


def _runtime_file(name: str) -> Path:
    return Path(__file__).with_name(_RUNTIME_DIR) / name


def _msl_flags(header: Path) -> list[str]:
    return [
        "-x", "clcpp", "-cl-std=clc++2021",
        "-nostdinc", "-nostdinc++", "-cl-no-stdinc", "-Wno-unused-command-line-argument",
        "-Xclang", f"-cl-ext={_OPENCL_EXTENSIONS_OFF}",
        "-Xclang", "-ffake-address-space-map",  # keeps threadgroup = addrspace(3) in the IR
        "-cl-kernel-arg-info",
        "-include", str(header),
        "-Wall", *(f"-Werror={w}" for w in _SUBSET_ERRORS),
        "-fno-caret-diagnostics", "-fno-color-diagnostics", "-fdiagnostics-show-option",
    ]  # fmt: skip


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/planner/msl``, else ``~/.cache/planner/msl``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "planner" / "msl"


# ---- the line-preserving rewrite -------------------------------------------------------

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_KERNEL_ATTR = re.compile(r"\[\[\s*kernel\s*\]\]")
_STDLIB_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<metal_stdlib>[ \t]*$", re.M)
_TG_PARAM_ATTR = re.compile(r"\[\[\s*threadgroup\s*\(\s*\d+\s*\)\s*\]\]")


def _mask_comments(source: str) -> str:
    """The source with every comment character but newlines replaced by a space."""
    return _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), source)


def _loc_of(source: str, offset: int, filename: str) -> SourceLoc:
    line = source.count("\n", 0, offset) + 1
    return SourceLoc(filename, line, offset - (source.rfind("\n", 0, offset) + 1) + 1)


def _rewrite(source: str, filename: str) -> tuple[str, list[Diagnostic]]:
    """Respell what clashes with OpenCL, keeping every line and column in place."""
    masked = _mask_comments(source)
    problems = [
        Diagnostic(
            "`[[threadgroup(n)]]` kernel parameters (threadgroup memory sized by the host) "
            "are outside the supported MSL subset; declare a statically sized "
            "`threadgroup` array in the kernel body",
            _loc_of(source, m.start(), filename),
            rule="msl-subset",
        )
        for m in _TG_PARAM_ATTR.finditer(masked)
    ]
    out = list(source)
    for pattern, replacement in ((_KERNEL_ATTR, "kernel"), (_STDLIB_INCLUDE, "")):
        for m in pattern.finditer(masked):
            out[m.start() : m.end()] = replacement.ljust(m.end() - m.start())
    return "".join(out), problems


# ---- diagnostics -----------------------------------------------------------------------

_DIAG_LINE = re.compile(
    r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): (?P<sev>fatal error|error|warning|note): "
    r"(?P<msg>.*)$"
)
_SPACE_NAMES = (
    (re.compile(r"\b__global\b"), "device"),
    (re.compile(r"\b__constant\b"), "constant"),
    (re.compile(r"\b__local\b"), "threadgroup"),
)
_QUOTED_TYPE = re.compile(r"'[^']*'")
_PRIVATE_POINTER = re.compile(r"'__private [^']*[*&]")
_DEVICE_SPACE = re.compile(r"__(global|constant|local)\b")
_NO_GENERIC_SPACE = (
    "MSL has no generic address space: a pointer or reference without one is a `thread` "
    "pointer; qualify it device, constant or threadgroup"
)
# First match wins: (what the raw clang message contains, the hint in Metal's terms).
_HINTS = (
    ("double precision constant", "write float literals with an f suffix (1.0f)"),
    ("requires cl_khr_fp64", "Metal has no double: use float"),
    ("program scope variable", "Metal allows only `constant` variables at program scope"),
    ("static local variable", "Metal allows only `constant` variables at program scope"),
    ("non-kernel function variable", "threadgroup variables live at kernel function scope"),
    (
        "PositionBinding",
        "a position attribute is declared uint, uint2, uint3, ushort, ushort2 or ushort3",
    ),
    (
        "BufferBinding",
        "a [[buffer(n)]] parameter is `device T*`, `device const T*`, `constant T*` or "
        "`constant T&`",
    ),
    ("address space", _NO_GENERIC_SPACE),
    ("unknown attribute", "msl_runtime/SUBSET.md lists the supported attributes"),
)


def _thread_spelling(quoted: re.Match[str]) -> str:
    """``'__private float *__private'`` -> ``'thread float *'``, ``'__private int'`` -> ``'int'``"""
    text = re.sub(r"([*&])\s*__private\b", r"\1", quoted.group())
    if "*" in text or "&" in text:
        return text.replace("__private", "thread")
    return text.replace("__private ", "")


def _metal_spelling(message: str) -> str:
    """Clang's OpenCL words in Metal's: address spaces, and fp64 as "double"."""
    message = _QUOTED_TYPE.sub(_thread_spelling, message)
    for pattern, name in _SPACE_NAMES:
        message = pattern.sub(name, message)
    return message.replace("__private", "thread").replace(
        "cl_khr_fp64 and __opencl_c_fp64", "64-bit floating point"
    )


def _hint(message: str) -> str | None:
    if _PRIVATE_POINTER.search(message) and _DEVICE_SPACE.search(message):
        return _NO_GENERIC_SPACE
    return next((hint for key, hint in _HINTS if key in message), None)


def _parse_diagnostics(stderr: str, user_file: str, filename: str) -> list[Diagnostic]:
    """Group clang's output into diagnostics located in the MSL source where possible."""
    groups: list[list[tuple[SourceLoc, str, str, bool]]] = []
    for raw in stderr.splitlines():
        m = _DIAG_LINE.match(raw)
        if not m:
            continue
        in_user = m["file"] == user_file
        loc = SourceLoc(
            filename if in_user else Path(m["file"]).name, int(m["line"]), int(m["col"])
        )
        entry = (loc, m["sev"], m["msg"], in_user)
        if m["sev"] == "note" and groups:
            groups[-1].append(entry)
        elif m["sev"] != "note":
            groups.append([entry])
    return [_diagnostic(group) for group in groups]


def _diagnostic(group: list[tuple[SourceLoc, str, str, bool]]) -> Diagnostic:
    (loc, sev, msg, in_user), rest = group[0], group[1:]
    notes = [(n_loc, _metal_spelling(n_msg)) for n_loc, _, n_msg, _ in rest]
    if not in_user:  # inside metal_compat.h: point at the user's line that led there
        user = next((n for n in rest if n[3]), None)
        if user is not None:
            notes.insert(0, (loc, "inside the compatibility header"))
            loc = user[0]
    severity = Severity.ERROR if sev in ("error", "fatal error") else Severity.WARNING
    if "double precision constant" in msg:
        severity = Severity.ERROR  # unsuffixed literal: the subset has explicit float literals
    hint = _hint(msg)
    if hint is not None:
        notes.append((loc, hint))
    return Diagnostic(_metal_spelling(msg), loc, "msl-check", severity, tuple(notes))


# ---- recursion: the call graph of the unoptimised IR -----------------------------------

_IR_DEFINE = re.compile(r"^define\b[^@]*@(?P<name>[\w.$]+|\"[^\"]+\")\(")
_IR_CALL = re.compile(r"\bcall\b[^@]*@(?P<name>[\w.$]+|\"[^\"]+\")\(")
_IR_DBG = re.compile(r"!dbg !(\d+)")
_IR_META = re.compile(r"^!(?P<id>\d+) = (?:distinct )?!\w+\((?P<body>.*)\)$")


def _dbg(line: str) -> str | None:
    m = _IR_DBG.search(line)
    return m.group(1) if m else None


def _meta_fields(body: str) -> dict[str, str]:
    return {k: v.strip('"') for k, v in re.findall(r'(\w+): ("[^"]*"|[^,]+)', body)}


def _recursion_diagnostics(ir: str, filename: str) -> list[Diagnostic]:
    """Every cycle of the call graph, reported at a call inside the cycle.

    The language mode rejects function pointers and virtual calls, so the direct calls
    of the unoptimised IR are the whole call graph.
    """
    meta: dict[str | None, dict[str, str]] = {}
    calls: dict[str, list[tuple[str, str | None]]] = {}
    dbg_of: dict[str, str | None] = {}
    current: str | None = None
    for line in ir.splitlines():
        if line.startswith("define "):
            m = _IR_DEFINE.match(line)
            if m:
                current = m["name"]
                calls[current] = []
                dbg_of[current] = _dbg(line)
        elif line.startswith("}"):
            current = None
        elif current is not None and " call " in line:
            m = _IR_CALL.search(line)
            if m:
                calls[current].append((m["name"], _dbg(line)))
        elif line.startswith("!"):
            m = _IR_META.match(line)
            if m:
                meta[m["id"]] = _meta_fields(m["body"])
    graph = {f: [c for c, _ in cs if c in calls] for f, cs in calls.items()}
    diagnostics = []
    for cycle in _cycles(graph):
        names = [meta.get(dbg_of[f], {}).get("name", f) for f in cycle]
        site = meta.get(next(d for c, d in calls[cycle[0]] if c == cycle[1 % len(cycle)]), {})
        line, col = int(site.get("line", "0")), int(site.get("column", "0"))
        path = " -> ".join([*names, names[0]])
        diagnostics.append(
            Diagnostic(
                f"recursion is not allowed in Metal: {path}",
                SourceLoc(filename, line, col),
                "msl-recursion",
                notes=((SourceLoc(filename, line, col), "Metal functions cannot call "
                        "themselves, directly or through other functions"),),
            )
        )
    return diagnostics


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """One cycle per strongly connected component that has one (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            succ = graph[node]
            if i < len(succ):
                work.append((node, i + 1))
                nxt = succ[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    found.append(_cycle_in(graph, set(component), node))
    return found


def _cycle_in(graph: dict[str, list[str]], component: set[str], start: str) -> list[str]:
    """A simple cycle through ``start`` inside one strongly connected component."""
    path, seen, node = [start], {start}, start
    while True:
        nxt = next(s for s in graph[node] if s in component and (s == start or s not in seen))
        if nxt == start:
            return path
        path.append(nxt)
        seen.add(nxt)
        node = nxt


# ---- checking --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Checked:
    result: CheckResult
    rewritten: str
    kernels: dict[str, tuple[KernelParam, ...]]  # the kernels whose signature is usable


def _run_check(source: str, filename: str) -> _Checked:
    clang = _clang()
    start = time.perf_counter()
    rewritten, problems = _rewrite(source, filename)
    with tempfile.TemporaryDirectory(prefix="msl-check-") as tmp:
        user_file = str(Path(tmp) / "kernel.metal")
        Path(user_file).write_text(rewritten)
        proc = subprocess.run(
            [clang, *_msl_flags(_runtime_file(_HEADER)), "-O0", "-gline-tables-only",
             "-S", "-emit-llvm", "-o", "-", user_file],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    diagnostics = problems + _parse_diagnostics(proc.stderr, user_file, filename)
    if proc.returncode != 0 and not any(d.severity is Severity.ERROR for d in diagnostics):
        raise MslToolchainError(f"clang-19 failed without a diagnostic:\n{proc.stderr}")
    kernels: dict[str, tuple[KernelParam, ...]] = {}
    if proc.returncode == 0:
        diagnostics += _recursion_diagnostics(proc.stdout, filename)
        for name in _IR_KERNEL.findall(proc.stdout):
            try:
                kernels[name] = _kernel_params(rewritten, proc.stdout, name, filename)
            except MslCompileError as e:
                diagnostics += e.diagnostics
    result = CheckResult(tuple(diagnostics), time.perf_counter() - start)
    return _Checked(result, rewritten, kernels)


def check_msl(source: str, *, filename: str = "kernel.metal") -> CheckResult:
    """Type-check MSL against the supported subset; diagnostics point at MSL lines.

    Raises :class:`MslToolchainError` when clang-19 is missing; never raises for a bad
    kernel (see :meth:`CheckResult.raise_for_errors`).
    """
    return _run_check(source, filename).result


# ---- kernel signature ------------------------------------------------------------------

_SCALARS: dict[str, str] = {
    "float": "float32",
    "int": "int32",
    "uint": "uint32",
    "long": "int64",
    "ulong": "uint64",
    "short": "int16",
    "ushort": "uint16",
    "char": "int8",
    "uchar": "uint8",
    "bool": "bool",
}
_BASE_NAMES = {
    "unsigned int": "uint",
    "unsigned long": "ulong",
    "unsigned short": "ushort",
    "unsigned char": "uchar",
    "signed char": "char",
}
_POSITIONS = (
    "thread_position_in_grid",
    "threadgroup_position_in_grid",
    "thread_position_in_threadgroup",
    "threads_per_threadgroup",
    "threadgroups_per_grid",
    "threads_per_grid",
    "thread_index_in_threadgroup",
)
_PARAM_ATTR = re.compile(r"\[\[\s*(?P<attr>\w+)\s*(?:\(\s*(?P<arg>\d+)\s*\))?\s*\]\]")
_META_STRINGS = re.compile(r'!"((?:[^"\\]|\\.)*)"')
_META_INTS = re.compile(r"i32 (-?\d+)")
_IR_KERNEL = re.compile(r"^define [^@]*\bspir_kernel void @([\w.$]+)\(", re.M)


def _split_params(masked: str, name: str, filename: str) -> list[tuple[str, int]]:
    """The parameter texts of ``kernel void name(...)`` with their line numbers."""
    m = re.search(rf"\bkernel\s+void\s+{re.escape(name)}\s*\(", masked)
    if m is None:
        raise MslCompileError(
            [Diagnostic(f"no `kernel void {name}(...)` in the source", SourceLoc(filename, 1))]
        )
    params: list[tuple[str, int]] = []
    depth, start = 0, m.end()
    for i in range(m.end(), len(masked)):
        ch = masked[i]
        if ch in "([":
            depth += 1
        elif ch in ")]" and depth > 0:
            depth -= 1
        elif ch in ",)" and depth == 0:
            text = masked[start:i]
            if text.strip():
                params.append((text, masked.count("\n", 0, start + len(text) - len(text.lstrip()))
                               + 1))
            if ch == ")":
                return params
            start = i + 1
    raise MslCompileError([Diagnostic(f"unterminated parameter list of `{name}`",
                                      _loc_of(masked, m.start(), filename))])


def _kernel_metadata(ir: str, name: str) -> dict[str, list[str]]:
    define = next(
        (ln for ln in ir.splitlines() if ln.startswith("define ") and f"@{name}(" in ln), None
    )
    if define is None or "!kernel_arg_type" not in define:
        return {}
    out: dict[str, list[str]] = {}
    for key in ("addr_space", "base_type", "type", "type_qual", "name"):
        ref = re.search(rf"!kernel_arg_{key} !(\d+)", define)
        node = ref and re.search(rf"^!{ref.group(1)} = !\{{(.*)\}}$", ir, re.M)
        if node:
            body = node.group(1)
            out[key] = _META_INTS.findall(body) if key == "addr_space" else [
                s.replace('\\"', '"') for s in _META_STRINGS.findall(body)
            ]
    return out


def _kernel_params(rewritten: str, ir: str, name: str, filename: str
                   ) -> tuple[KernelParam, ...]:
    """Bindings from the source's attributes, types from clang's kernel-argument metadata."""
    masked = _mask_comments(rewritten)
    texts = _split_params(masked, name, filename)
    meta = _kernel_metadata(ir, name)
    if len(meta.get("type", [])) != len(texts):
        raise MslCompileError([Diagnostic(
            f"`{name}` is not a kernel of this source (or its signature could not be read)",
            SourceLoc(filename, texts[0][1] if texts else 1))])
    params = []
    for i, (text, line) in enumerate(texts):
        loc = SourceLoc(filename, line)
        attr = _PARAM_ATTR.search(text)
        pname = meta["name"][i]
        if attr is None:
            raise MslCompileError([Diagnostic(
                f"kernel parameter `{pname}` has no [[buffer(n)]] or position attribute", loc,
                "msl-subset")])
        space, ctype = int(meta["addr_space"][i]), meta["base_type"][i]
        spelled = " ".join(text[: attr.start()].split())
        if attr["attr"] == "buffer":
            params.append(_buffer_param(pname, int(attr["arg"] or -1), space, ctype,
                                        "const" in meta["type_qual"][i], spelled, loc))
        elif attr["attr"] in _POSITIONS:
            params.append(KernelParam(pname, ParamKind.POSITION, attr["attr"], -1, "", spelled,
                                      True, line))
        else:
            raise MslCompileError([Diagnostic(
                f"kernel parameter `{pname}` has attribute [[{attr['attr']}]], which is "
                "outside the supported subset", loc, "msl-subset")])
    seen: set[int] = set()
    for p in params:
        if p.index in seen:
            raise MslCompileError([Diagnostic(f"`{name}` binds [[buffer({p.index})]] twice",
                                              SourceLoc(filename, p.line), "msl-subset")])
        if p.index >= 0:
            seen.add(p.index)
    return tuple(params)


def _buffer_param(name: str, index: int, space: int, ctype: str, const: bool, spelled: str,
                  loc: SourceLoc) -> KernelParam:
    if not 0 <= index < MAX_BUFFERS:
        raise MslCompileError([Diagnostic(f"[[buffer({index})]] is out of range 0..30", loc)])
    ref = re.fullmatch(r"__constant (.+?) &", ctype)
    if ref is not None:
        kind, scalar = ParamKind.CONSTANT_REFERENCE, ref.group(1)
    elif ctype.endswith("*") and space in (1, 2):
        kind = ParamKind.DEVICE_POINTER if space == 1 else ParamKind.CONSTANT_POINTER
        scalar = ctype[:-1].strip()
    else:
        raise MslCompileError([Diagnostic(
            f"kernel parameter `{name}` ({spelled}) is outside the subset: buffers are "
            "`device T*`, `constant T*` or `constant T&` of a scalar type", loc, "msl-subset")])
    scalar = _BASE_NAMES.get(scalar, scalar)
    if scalar not in _SCALARS:
        raise MslCompileError([Diagnostic(
            f"kernel parameter `{name}` has element type `{scalar}`; the subset's buffers "
            f"hold {', '.join(_SCALARS)}", loc, "msl-subset")])
    read_only = kind is not ParamKind.DEVICE_POINTER or const
    return KernelParam(name, kind, "buffer", index, scalar, spelled, read_only, loc.line)


# ---- compiling -------------------------------------------------------------------------

# Stack probes make a frame larger than a page touch the fiber's guard page instead of
# jumping over it into the neighbouring fiber's stack.
_KERNEL_FLAGS = ("-O2", "-fstack-clash-protection", "-S", "-emit-llvm")
_LINK_FLAGS = ("-O2", "-fPIC", "-shared", "-Wl,-Bsymbolic", "-Wl,-z,noexecstack",
               "-Wno-override-module")
_RUNTIME_FLAGS = ("-O2", "-fPIC", "-fvisibility=hidden", "-Wall", "-Werror", "-std=gnu11")

_TG_GLOBAL = re.compile(r"^(@\S+ = internal (?:\w*unnamed_addr )?addrspace\(3\) global .*? "
                        r"(?:undef|poison))(.*)$", re.M)
_ANY_TG_GLOBAL = re.compile(r"^@\S+ = .*\baddrspace\(3\) global ", re.M)


def _place_threadgroup_memory(ir: str) -> str:
    """Put the kernel-scope threadgroup arrays into the section the runtime refills."""
    placed, count = _TG_GLOBAL.subn(rf'\1, section "{_TG_SECTION}"\2', ir)
    if count != len(_ANY_TG_GLOBAL.findall(ir)):
        raise MslToolchainError("could not place every threadgroup variable of the LLVM IR "
                                f"into section {_TG_SECTION}: the IR form changed")
    return placed


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _run_clang(args: list[str], what: str) -> None:
    proc = subprocess.run([_clang(), *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise MslToolchainError(f"clang-19 failed to {what}:\n{proc.stderr}")


def _runtime_object(cache: Path, clang: str) -> Path:
    source = _runtime_file(_RUNTIME)
    key = hashlib.sha256(
        "\0".join([_clang_version(clang), *_RUNTIME_FLAGS, source.read_text()]).encode()
    ).hexdigest()[:24]
    obj = cache / f"mtl_runtime-{key}.o"
    if not obj.exists():
        with tempfile.TemporaryDirectory(dir=cache, prefix=".rt-") as tmp:
            out = Path(tmp) / "rt.o"
            _run_clang([*_RUNTIME_FLAGS, "-c", str(source), "-o", str(out)],
                       "compile mtl_runtime.c")
            _atomic_write(obj, out.read_bytes())
    return obj


@functools.lru_cache(maxsize=256)
def _load(so_path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(so_path)
    lib.mtl_launch.argtypes = [ctypes.POINTER(_Launch), ctypes.POINTER(_Report)]
    lib.mtl_launch.restype = ctypes.c_int
    return lib


def compile_msl(source: str, kernel_name: str, *, cache_dir: Path | None = None,
                filename: str = "kernel.metal") -> EmulatedKernel:
    """Check ``source`` and build ``kernel_name`` into a runnable :class:`EmulatedKernel`.

    Raises :class:`MslCompileError` with diagnostics on MSL lines when the check fails.
    The shared object is cached in ``cache_dir`` (default :func:`default_cache_dir`)
    under the hash of everything that goes into it; concurrent builds of the same kernel
    are safe (each writes a private file and renames it into place).
    """
    start = time.perf_counter()
    clang = _clang()
    checked = _run_check(source, filename)
    checked.result.raise_for_errors()
    params = checked.kernels.get(kernel_name)
    if params is None:
        raise MslCompileError([Diagnostic(
            f"no kernel `{kernel_name}` in the source (it defines: "
            f"{', '.join(checked.kernels) or 'no kernels'})", SourceLoc(filename, 1))])
    unit = f'{checked.rewritten}\nextern "C" void {_ENTRY}(void) {{ {kernel_name}(); }}\n'
    header, runtime = _runtime_file(_HEADER), _runtime_file(_RUNTIME)
    flags = _msl_flags(header)
    key = hashlib.sha256("\0".join([
        _clang_version(clang), *flags, *_KERNEL_FLAGS, *_LINK_FLAGS, *_RUNTIME_FLAGS,
        header.read_text(), runtime.read_text(), unit,
    ]).encode()).hexdigest()[:32]
    cache = cache_dir if cache_dir is not None else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    so_path = cache / f"{kernel_name}-{key}.so"
    cached = so_path.exists()
    if not cached:
        rt_obj = _runtime_object(cache, clang)
        with tempfile.TemporaryDirectory(dir=cache, prefix=".build-") as tmp:
            src, ll, so = Path(tmp) / "kernel.metal", Path(tmp) / "kernel.ll", Path(tmp) / "k.so"
            src.write_text(unit)
            _run_clang([*flags, *_KERNEL_FLAGS, "-o", str(ll), str(src)],
                       f"compile kernel `{kernel_name}`")
            ll.write_text(_place_threadgroup_memory(ll.read_text()))
            _run_clang([*_LINK_FLAGS, str(ll), str(rt_obj), "-lm", "-o", str(so)],
                       f"link kernel `{kernel_name}`")
            _atomic_write(so_path, so.read_bytes())
    return EmulatedKernel(kernel_name, params, so_path, time.perf_counter() - start, cached)


# ---- running ---------------------------------------------------------------------------


class _Launch(ctypes.Structure):
    _fields_ = [  # ctypes layout, mirrors mtl_launch_t
        ("nbuffers", ctypes.c_int32),
        ("readonly", ctypes.c_int32 * MAX_BUFFERS),
        ("used", ctypes.c_int32 * MAX_BUFFERS),
        ("host", ctypes.c_void_p * MAX_BUFFERS),
        ("size", ctypes.c_uint64 * MAX_BUFFERS),
        ("grid", ctypes.c_uint32 * 3),
        ("tpg", ctypes.c_uint32 * 3),
        ("order", ctypes.c_int32),
        ("seed", ctypes.c_uint64),
        ("timeout_s", ctypes.c_double),
        ("stack_size", ctypes.c_uint64),
    ]


class _Report(ctypes.Structure):
    _fields_ = [  # ctypes layout, mirrors mtl_report_t
        ("status", ctypes.c_int32),
        ("signo", ctypes.c_int32),
        ("si_code", ctypes.c_int32),
        ("is_write", ctypes.c_int32),
        ("errno_value", ctypes.c_int32),
        ("fault_addr", ctypes.c_uint64),
        ("buffer", ctypes.c_int32),
        ("region", ctypes.c_int32),
        ("offset", ctypes.c_int64),
        ("in_thread", ctypes.c_int32),
        ("group", ctypes.c_uint32 * 3),
        ("thread", ctypes.c_uint32 * 3),
        ("other_thread", ctypes.c_uint32 * 3),
        ("line", ctypes.c_int32),
        ("column", ctypes.c_int32),
        ("other_line", ctypes.c_int32),
        ("other_column", ctypes.c_int32),
        ("groups_done", ctypes.c_uint64),
        ("barriers_passed", ctypes.c_uint64),
        ("switches", ctypes.c_uint64),
        ("elapsed_s", ctypes.c_double),
    ]


_ORDERS: dict[str, int] = {"forward": 0, "reverse": 1, "random": 2}
_STATUS_FAULT, _STATUS_DIVERGENT, _STATUS_EARLY_EXIT = 1, 2, 3
_STATUS_TIMEOUT, _STATUS_SETUP, _STATUS_CRASH, _STATUS_UNDERRUN = 4, 5, 6, 7
_REGION_DATA, _REGION_AFTER, _REGION_STACK = 1, 2, 4


def _signal_name(signo: int) -> str:
    name = signal.strsignal(signo) or f"signal {signo}"
    return f"{name} (an integer division by zero?)" if signo == signal.SIGFPE else name


@dataclass(frozen=True, slots=True)
class EmulatedKernel:
    """A compiled kernel: its parameters and the shared object that runs it."""

    name: str
    params: tuple[KernelParam, ...]
    so_path: Path
    compile_s: float
    from_cache: bool

    @property
    def buffers(self) -> tuple[KernelParam, ...]:
        """The ``[[buffer(n)]]`` parameters in index order: what :meth:`run` takes."""
        return tuple(sorted((p for p in self.params if p.index >= 0),
                            key=lambda p: p.index))

    def run(
        self,
        args: Sequence[np.ndarray | int | float],
        grid: tuple[int, int, int],
        threads_per_group: tuple[int, int, int],
        order: Order = "forward",
        seed: int = 0,
        *,
        read_only: Iterable[int] = (),
        timeout_s: float = 30.0,
        stack_bytes: int = 64 * 1024,
    ) -> RunReport:
        """Run the kernel over ``grid`` threadgroups of ``threads_per_group`` threads.

        ``args`` bind to the ``[[buffer(n)]]`` parameters in increasing ``n``: numpy
        arrays for pointers (dtype must match; written back in place unless read-only),
        Python or numpy scalars for ``constant T&``. Buffers declared ``device const``
        or ``constant``, and the indices in ``read_only``, are mapped read-only. Raises
        :class:`KernelFault` when the kernel faults, diverges at a barrier, exits early
        or runs past ``timeout_s``; arrays are then left unchanged.
        """
        if order not in _ORDERS:
            raise ValueError(f"order must be forward, reverse or random, not {order!r}")
        launch, keep = self._launch(args, grid, threads_per_group, set(read_only))
        launch.order, launch.seed = _ORDERS[order], seed & 0xFFFFFFFFFFFFFFFF
        launch.timeout_s, launch.stack_size = timeout_s, stack_bytes
        report = _Report()
        _load(str(self.so_path)).mtl_launch(ctypes.byref(launch), ctypes.byref(report))
        if report.status != 0:
            raise self._fault(report, timeout_s)
        for index, array, staged in keep:
            if staged is not array and not launch.readonly[index]:
                array[...] = staged
        return RunReport(
            self.name, _dims(grid), _dims(threads_per_group), order, seed, report.elapsed_s,
            report.groups_done, report.barriers_passed, report.switches,
            tuple(i for i, _, _ in keep if not launch.readonly[i]),
        )

    def _launch(self, args: Sequence[np.ndarray | int | float], grid: tuple[int, int, int],
                tpg: tuple[int, int, int], read_only: set[int]
                ) -> tuple[_Launch, list[tuple[int, np.ndarray, np.ndarray]]]:
        buffers = self.buffers
        if len(args) != len(buffers):
            raise ValueError(
                f"kernel `{self.name}` takes {len(buffers)} buffers "
                f"({', '.join(p.describe() for p in buffers)}); got {len(args)} arguments"
            )
        for what, dims in (("grid", grid), ("threads_per_group", tpg)):
            if len(dims) != 3 or any(int(d) < 1 for d in dims):
                raise ValueError(f"{what} must be three positive integers, got {dims!r}")
        if int(np.prod(grid, dtype=np.int64)) >= 2**32:
            raise ValueError(f"grid {grid} has 2**32 threadgroups or more")
        if int(np.prod(tpg)) > MAX_THREADS_PER_GROUP:
            raise ValueError(f"threads_per_group {tpg} exceeds Metal's "
                             f"{MAX_THREADS_PER_GROUP} threads per threadgroup")
        unknown = read_only - {p.index for p in buffers}
        if unknown:
            raise ValueError(f"read_only names {sorted(unknown)}, which are not buffers of "
                             f"`{self.name}`")
        launch = _Launch()
        launch.nbuffers = max(p.index for p in buffers) + 1 if buffers else 0
        launch.grid[:] = [int(g) for g in grid]
        launch.tpg[:] = [int(t) for t in tpg]
        keep: list[tuple[int, np.ndarray, np.ndarray]] = []
        for param, arg in zip(buffers, args, strict=True):
            readonly = param.read_only or param.index in read_only
            array, staged = _stage(param, arg, readonly)
            keep.append((param.index, array, staged))
            launch.used[param.index] = 1
            launch.readonly[param.index] = int(readonly)
            launch.host[param.index] = staged.ctypes.data
            launch.size[param.index] = staged.nbytes
        return launch, keep

    def _fault(self, r: _Report, timeout_s: float) -> KernelFault:
        group = _xyz(r.group)
        who = f"thread {_xyz(r.thread)} of threadgroup {group}" if r.in_thread else (
            f"the runtime, in threadgroup {group}")
        if r.status == _STATUS_DIVERGENT:
            return KernelFault(
                f"divergent barrier in threadgroup {group} of `{self.name}`: thread "
                f"{_xyz(r.thread)} waits at the barrier at line {r.line}:{r.column} while "
                f"thread {_xyz(r.other_thread)} waits at line {r.other_line}:{r.other_column}",
                FaultReason.DIVERGENT_BARRIER, self.name)
        if r.status == _STATUS_EARLY_EXIT:
            return KernelFault(
                f"early exit in threadgroup {group} of `{self.name}`: thread "
                f"{_xyz(r.other_thread)} returned while thread {_xyz(r.thread)} waits at the "
                f"barrier at line {r.line}:{r.column}", FaultReason.EARLY_EXIT, self.name)
        if r.status == _STATUS_TIMEOUT:
            return KernelFault(f"`{self.name}` ran past its {timeout_s:g} s timeout, in {who}",
                               FaultReason.TIMEOUT, self.name)
        if r.status == _STATUS_UNDERRUN:
            return KernelFault(
                f"out-of-bounds write before the start of {self._buffer(r.buffer).describe()} "
                f"(found after the run: the first changed byte is at offset {r.offset})",
                FaultReason.OUT_OF_BOUNDS, self.name)
        if r.status == _STATUS_FAULT:
            return self._signal_fault(r, who)
        if r.status == _STATUS_SETUP:
            return KernelFault(f"could not set up the run of `{self.name}` (errno "
                               f"{r.errno_value})", FaultReason.SETUP, self.name)
        return KernelFault(f"the process running `{self.name}` died "
                           f"({_signal_name(r.signo)}) without a report",
                           FaultReason.CRASH, self.name)

    def _signal_fault(self, r: _Report, who: str) -> KernelFault:
        access = {1: "write", 0: "read"}.get(r.is_write, "access")
        kind = _signal_name(r.signo)
        if r.buffer >= 0:
            param = self._buffer(r.buffer)
            size = param.dtype.itemsize
            where = f"byte offset {r.offset} (element {r.offset // size})"
            if r.region == _REGION_DATA:
                return KernelFault(
                    f"{access} to read-only {param.describe()} at {where} by {who}",
                    FaultReason.READ_ONLY_WRITE, self.name)
            side = "past the end" if r.region == _REGION_AFTER else "before the start"
            return KernelFault(
                f"out-of-bounds {access} {side} of {param.describe()} at {where} by {who}",
                FaultReason.OUT_OF_BOUNDS, self.name)
        if r.region == _REGION_STACK:
            return KernelFault(f"stack overflow in {who} (thread stacks hold stack_bytes: deep "
                               "calls or large thread arrays)", FaultReason.STACK_OVERFLOW,
                               self.name)
        if r.signo in (signal.SIGSEGV, signal.SIGBUS):
            return KernelFault(f"{kind}: {access} at address {r.fault_addr:#x}, outside every "
                               f"buffer, by {who}", FaultReason.FAULT, self.name)
        return KernelFault(f"{kind} in {who}", FaultReason.FAULT, self.name)

    def _buffer(self, index: int) -> KernelParam:
        return next(p for p in self.buffers if p.index == index)


def _dims(v: Sequence[int]) -> tuple[int, int, int]:
    return int(v[0]), int(v[1]), int(v[2])


def _xyz(v: Sequence[int]) -> str:
    return f"({v[0]},{v[1]},{v[2]})"


def _stage(param: KernelParam, arg: np.ndarray | int | float, readonly: bool
           ) -> tuple[np.ndarray, np.ndarray]:
    """The caller's array and the contiguous array whose bytes the kernel sees."""
    if param.kind is ParamKind.CONSTANT_REFERENCE:
        if isinstance(arg, np.ndarray) and arg.size != 1:
            raise TypeError(f"{param.describe()} takes a scalar, got an array of shape "
                            f"{arg.shape}")
        value = arg.item() if isinstance(arg, np.ndarray | np.generic) else arg
        if param.dtype.kind in "iu":
            if not isinstance(value, int | bool):
                raise TypeError(f"{param.describe()} takes an integer, got {value!r}")
            info = np.iinfo(param.dtype)
            if not info.min <= int(value) <= info.max:
                raise ValueError(f"{value} does not fit {param.describe()}")
        staged = np.array(value, dtype=param.dtype)
        return staged, staged
    if not isinstance(arg, np.ndarray):
        raise TypeError(f"{param.describe()} takes a numpy array, got {type(arg).__name__}")
    if arg.dtype != param.dtype:
        raise TypeError(f"{param.describe()} takes {param.dtype} elements, got a {arg.dtype} "
                        "array")
    if readonly:
        return arg, np.ascontiguousarray(arg)
    if not arg.flags.writeable:
        raise ValueError(f"{param.describe()} is written by the kernel; pass a writable array")
    return arg, np.ascontiguousarray(arg)

