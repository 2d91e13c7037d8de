"""The MSL text printer: the spread program as one ``kernel void``.

:class:`_Printer` prints what the emitter decided (:class:`_Mapped` lists what it reads)
with the spellings of :mod:`planner.lower.metal.tables`: header comments, helpers, the
signature, the declarations (per-thread slices, the arena and its typed views) and the
statements.  :class:`_Namer` hands out the kernel's unique MSL identifiers, to the
emitter (arrays) and the printer (symbols) alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from planner.catalog import Target
from planner.ir.dtypes import DType
from planner.ir.expr import Apply, Const, Expr, ExprOp, Sym, add, mul, product
from planner.ir.layout import dense
from planner.lower.loops import program as lp
from planner.lower.metal import tables as tb
from planner.lower.metal.arena import _what
from planner.lower.metal.checks import _fail
from planner.lower.metal.results import MslParam
from planner.lower.metal.spread import (
    _ZERO,
    _Cached,
    _Comment,
    _Home,
    _Loop,
    _Node,
    _Pipe,
    _Sync,
    _Work,
)
from planner.lower.metal.tables import Space

_ARENA_BYTES = "tg_bytes_"  # the arena's bytes (emitter locals end with "_")


class _Namer:
    """Unique MSL identifiers from IR names (``%acc_1`` -> ``acc_1``, ``i.0`` -> ``i_0``)."""

    def __init__(self) -> None:
        self.used: set[str] = set(tb.RESERVED)

    def new(self, base: str, prefix: str = "") -> str:
        text = re.sub(r"[^A-Za-z0-9_]", "", base.replace(".", "_").lstrip("%"))
        text = re.sub(r"_+", "_", text).strip("_") or "v"
        if prefix:
            text = prefix + text
        elif text[0].isdigit():
            text = "v" + text
        name, i = text, 1
        while name in self.used:
            name, i = f"{text}_{i}", i + 1
        self.used.add(name)
        return name


class _Mapped(Protocol):
    """What the printer reads of the emitter: its decisions for one kernel."""

    names: _Namer
    program: lp.LoopProgram
    target: Target
    env: dict[str, int]
    threads: int
    segment: lp.Segment
    views: dict[str, lp.ViewParam]
    homes: dict[str, _Home]
    scratch: dict[DType, tuple[str, Expr]]
    nonneg_symbols: set[str]
    notes: list[str]
    planned_peak: int | None
    arena: str
    arena_bytes: int
    arena_shared: bool
    arena_items: dict[str, tuple[int, tuple[int, int]]]


class _Printer:
    """Prints the mapped program as MSL (spellings from :mod:`msl_tables`)."""

    def __init__(self, em: _Mapped) -> None:
        self.em = em
        self.names = em.names
        self.kernel_name = self.names.new(em.program.kernel)
        self.sym_names: dict[str, str] = {}
        self.depth = 0

    # ------------------------------------------------------------------ names

    def sym(self, name: str) -> str:
        found = self.sym_names.get(name)
        if found is None:
            found = self.names.new(name)
            self.sym_names[name] = found
        return found

    def params(self) -> list[MslParam]:
        out: list[MslParam] = []
        for p in self.em.program.params:
            out.append(MslParam(self.sym(p.name), len(out), "view", p.name, p.dtype,
                                p.readonly))
        for dt, (array, per_group) in self.em.scratch.items():
            out.append(MslParam(array, len(out), "scratch", f"device scratch ({dt})", dt,
                                False, per_group))
        for s in self.em.program.symbols:
            out.append(MslParam(self.sym(s), len(out), "symbol", s, None, True))
        return out

    # ------------------------------------------------------------------ expressions

    def nonneg(self, e: Expr) -> bool:
        if isinstance(e, Const):
            return e.value >= 0
        if isinstance(e, Sym):
            return e.name.startswith(("%", "i.")) or e.name in self.em.nonneg_symbols
        assert isinstance(e, Apply)
        return all(self.nonneg(a) for a in e.args)

    def expr(self, e: Expr) -> str:
        if isinstance(e, Const):
            return str(e.value) if e.value >= 0 else f"({e.value})"
        if isinstance(e, Sym):
            return self.sym(e.name)
        assert isinstance(e, Apply)
        if e.op is ExprOp.ADD:
            text = self.expr(e.args[0])
            for a in e.args[1:]:
                neg = _negated(a)
                text += f" - {self.expr(neg)}" if neg is not None else f" + {self.expr(a)}"
            return f"({text})"
        if e.op is ExprOp.MUL:
            return "(" + " * ".join(self.expr(a) for a in e.args) + ")"
        table = tb.EXPR_NONNEG if all(self.nonneg(a) for a in e.args) else tb.EXPR_GENERAL
        return table[e.op].format(a=self.expr(e.args[0]), b=self.expr(e.args[1]))

    def index(self, e: Expr) -> str:
        """An index expression without its outer parentheses."""
        text = self.expr(e)
        return text[1:-1] if text.startswith("(") and _balanced(text[1:-1]) else text

    # ------------------------------------------------------------------ elements

    def elem(self, e: lp.Elem, w: _Work) -> str:
        return _ELEM[type(e)](self, e, w)

    def _lit(self, e: lp.Lit, w: _Work) -> str:
        return tb.literal(e.value, e.dtype)

    def _indexof(self, e: lp.IndexOf, w: _Work) -> str:
        return tb.CAST.format(t=_scalar(e.dtype), x=self.index(e.expr))

    def _viewread(self, e: lp.ViewRead, w: _Work) -> str:
        view = self.em.views[e.view]
        access = f"{self.sym(view.name)}[{self.index(_row_major(e.index, view.shape))}]"
        mask = self.mask(e.index, e.window, view)
        if not mask:
            return access
        return f"({mask} ? {access} : {tb.literal(e.fill, view.dtype)})"

    def _bufread(self, e: lp.BufRead, w: _Work) -> str:
        return self.buffer_ref(e.buffer, e.index, e.version, w)

    def _unary(self, e: lp.Unary, w: _Work) -> str:
        tmpl = tb.UNARY.get((e.fn, tb.kind_of(e.x.dtype)))
        if tmpl is None:
            raise _fail(f"{e.fn.value} of {e.x.dtype} has no Metal spelling",
                        rule="msl-subset")
        return tmpl.format(x=self.elem(e.x, w))

    def _binary(self, e: lp.Binary, w: _Work) -> str:
        tmpl = tb.BINARY.get((e.fn, tb.kind_of(e.a.dtype)))
        if tmpl is None:
            raise _fail(f"{e.fn.value} of {e.a.dtype} has no Metal spelling",
                        rule="msl-subset")
        return tmpl.format(a=self.elem(e.a, w), b=self.elem(e.b, w))

    def _select(self, e: lp.Select, w: _Work) -> str:
        return f"({self.elem(e.cond, w)} ? {self.elem(e.a, w)} : {self.elem(e.b, w)})"

    def _cast(self, e: lp.Cast, w: _Work) -> str:
        return tb.CAST.format(t=_scalar(e.dtype), x=self.elem(e.x, w))

    def buffer_ref(self, name: str, index: tuple[Expr, ...], version: Expr, w: _Work) -> str:
        h = self.em.homes[name]
        buf = h.buffer
        if h.space is Space.THREAD:
            if tuple(index) != tuple(Sym(v) for v, _ in w.dist):
                raise _fail(f"internal: per-thread slice %{name} read away from its owner",
                            rule="msl-lowering")
            slot = f"l_ / {self.em.threads}"
            if buf.versions > 1:
                slot = f"{self.index(mul(version, h.slots))} + {slot}"
            return f"{h.array}[{slot}]"
        linear = buf.layout.linear(index)
        text = self.expr(linear)
        for sw in buf.layout.swizzles:
            mask = ((1 << sw.bits) - 1) << (sw.base + sw.shift)
            text = f"pl_swizzle({_strip(text)}, {mask}, {sw.shift})"
        base: Expr = _ZERO  # a threadgroup buffer's view starts at its first byte
        array = h.array
        if h.space is Space.DEVICE:
            base, array = h.base, _group_pointer(buf.dtype)
        if buf.versions > 1:
            base = add(base, mul(version, buf.version_stride()))
        if base != Const(0):
            text = f"{self.index(base)} + {_strip(text)}"
        return f"{array}[{_strip(text)}]"

    def mask(self, index: tuple[Expr, ...], window: lp.Window, view: lp.ViewParam) -> str:
        conds = []
        for d, (i, ext) in enumerate(zip(index, view.shape, strict=True)):
            if window.offsets[d] == Const(0) and window.shape[d] == ext:
                continue  # the window spans the view in this dimension
            conds.append(f"ulong({self.index(i)}) < ulong({self.index(ext)})")
        return " && ".join(conds)

    # ------------------------------------------------------------------ statements

    def source(self, nodes: list[_Node], params: list[MslParam], tg_bytes: int,
               thread_bytes: int) -> str:
        em = self.em
        body: list[str] = []
        body.append("  const long tid_ = long(tid_pos_);")
        body.append("  const long gid_ = long(tg_pos_);")
        seg = em.segment
        if seg.parallel:
            body.extend(self.decompose("gid_", seg.vars, seg.extents, "  "))
        for dt, (array, per_group) in em.scratch.items():
            body.append(f"  device {_scalar(dt)}* {_group_pointer(dt)} = {array} + gid_ * "
                        f"{self.expr(per_group)};  // this group's region of {array}")
        decls = self.declarations()
        main = self.nodes(nodes, "  ")
        text_main = "\n".join(main)
        header = self.header(tg_bytes, thread_bytes)
        sig = self.signature(params)
        kernel = "\n".join([*sig, *body, *decls, *main, "}"])
        helpers = self.helpers(text_main + "\n".join(body))
        return "\n".join([*header, "#include <metal_stdlib>", "using namespace metal;", "",
                          *helpers, kernel]) + "\n"

    def header(self, tg_bytes: int, thread_bytes: int) -> list[str]:
        em = self.em
        seg = em.segment
        lines = [f"// {em.program.kernel} for {em.target.name}: emitted by planner from the "
                 "loop program"]
        if em.program.plan_hash:
            lines.append(f"// plan {em.program.plan_hash[:16]}")
        if seg.parallel:
            axes = ", ".join(f"{v} < {e}" for v, e in zip(seg.vars, seg.extents, strict=True))
            lines.append(f"// one threadgroup per instance of {seg.label} ({axes}); "
                         f"{em.threads} threads per threadgroup")
        else:
            lines.append(f"// a grid of one threadgroup of {em.threads} threads")
        sized = ", ".join(f"{k}={v}" for k, v in sorted(em.env.items())) or "-"
        lines.append(f"// threadgroup memory {tg_bytes:,} B per group; per-thread slices "
                     f"{thread_bytes:,} B per thread; static sizes for {sized}")
        for n in em.notes:
            lines.append(f"// note: {n}")
        for n in em.program.notes:
            lines.append(f"// note: {n}")
        return [*lines, ""]

    def helpers(self, text: str) -> list[str]:
        used: list[str] = []
        for name in tb.HELPERS:
            if re.search(rf"\b{name}\(", text):
                for dep in tb.HELPER_DEPENDS.get(name, ()):
                    if dep not in used:
                        used.append(dep)
                if name not in used:
                    used.append(name)
        ordered = [n for n in tb.HELPERS if n in used]
        return [*(tb.HELPERS[n] for n in ordered), ""] if ordered else []

    def signature(self, params: list[MslParam]) -> list[str]:
        decls = []
        for p in params:
            if p.role == "view":
                assert p.dtype is not None
                decls.append(tb.VIEW_PARAM[p.readonly].format(t=_scalar(p.dtype), name=p.name,
                                                              index=p.index))
            elif p.role == "scratch":
                assert p.dtype is not None
                decls.append(tb.SCRATCH_PARAM.format(t=_scalar(p.dtype), name=p.name,
                                                     index=p.index))
            else:
                decls.append(tb.SYMBOL_PARAM.format(name=p.name, index=p.index))
        decls.extend(f"{t} {n} [[{a}]]" for t, n, a in tb.POSITION_PARAMS)
        head = f"kernel void {self.kernel_name}("
        pad = " " * len(head)
        lines = [head + decls[0] + ("," if len(decls) > 1 else ") {")]
        for i, d in enumerate(decls[1:], start=1):
            lines.append(pad + d + ("," if i < len(decls) - 1 else ") {"))
        return lines

    def declarations(self) -> list[str]:
        em = self.em
        lines: list[str] = []
        for h in em.homes.values():
            if h.space is Space.THREADGROUP:
                continue
            if h.space is Space.DEVICE:
                lines.append(f"  // {_describe_buffer(h.buffer)}: in {h.array}, this group's "
                             f"region from {h.base}")
                continue
            lines.append(f"  // {_describe_buffer(h.buffer)}: per-thread slice, {h.slots} of "
                         "each version per thread")
            lines.append("  " + tb.ARRAY_DECL[h.space].format(t=_scalar(h.buffer.dtype),
                                                              name=h.array,
                                                              n=max(h.capacity, 1)))
        if em.arena:
            lines.extend(self.arena())
        return lines

    def arena(self) -> list[str]:
        """The threadgroup arena, its map (byte ranges) and one typed view per buffer."""
        em = self.em
        how = ("sharing bytes when their lifetimes do not overlap" if em.arena_shared
               else "side by side")
        peak = (f" (the plan's peak: {em.planned_peak:,} B)" if em.planned_peak is not None
                else "")
        lines = [f"  // threadgroup memory: one arena of {em.arena_bytes:,} B{peak}, buffers "
                 f"at byte offsets, {how}:"]
        members = sorted((em.homes[n] for n in em.arena_items),
                         key=lambda h: (h.offset, h.buffer.name))
        for h in members:
            what = _what(h) if h.exchange else _describe_buffer(h.buffer)
            lines.append(f"  //   [{h.offset}, {h.offset + h.nbytes}) {what}")
        lines.append("  " + tb.ARENA_DECL.format(name=em.arena,
                                                 n=max(1, em.arena_bytes // tb.ARENA_GRANULE)))
        lines.append("  " + tb.ARENA_BYTES.format(name=_ARENA_BYTES, arena=em.arena))
        for h in members:
            lines.append("  " + tb.ARENA_VIEW.format(t=_scalar(h.buffer.dtype), name=h.array,
                                                     bytes=_ARENA_BYTES, offset=h.offset))
        return lines

    def nodes(self, nodes: Iterable[_Node], ind: str) -> list[str]:
        out: list[str] = []
        for n in nodes:
            out.extend(_NODE[type(n)](self, n, ind))
        return out

    def _sync(self, n: _Sync, ind: str) -> list[str]:
        flags = " | ".join(tb.MEM_FLAGS[c] for c in sorted(n.classes, key=_flag_order))
        return [f"{ind}{tb.BARRIER.format(flags=flags)}  // {n.note}"]

    def _comment(self, n: _Comment, ind: str) -> list[str]:
        return [f"{ind}// {n.text}"]

    def _loop(self, n: _Loop, ind: str) -> list[str]:
        it = f"it{self.depth}_"
        self.depth += 1
        trip = self.expr(product(n.extents))
        lines = [f"{ind}// {n.comment}",
                 f"{ind}for (long {it} = 0; {it} < {_strip(trip)}; ++{it}) {{"]
        lines.extend(self.decompose(it, n.vars, n.extents, ind + "  "))
        lines.extend(self.nodes(n.body, ind + "  "))
        self.depth -= 1
        return [*lines, f"{ind}}}"]

    def _pipe(self, n: _Pipe, ind: str) -> list[str]:
        t, it = f"t{self.depth}_", f"it{self.depth}_"
        self.depth += 1
        trip = _strip(self.expr(product(n.extents)))
        lag = max(st.lag for st in n.stages)
        lines = [f"{ind}// pipeline {n.label}: window {n.window}; stage s runs iteration "
                 "t - lag(s) at time step t",
                 f"{ind}for (long {t} = 0; {t} < {trip} + {lag}; ++{t}) {{"]
        inner = ind + "  "
        for st in n.stages:
            cond = f"{it} < {trip}" if st.lag == 0 else f"{it} >= 0 && {it} < {trip}"
            if st.lead is not None:
                lines.extend(self._sync(st.lead, inner))
            lines.append(f"{inner}{{  // stage {st.name}: iteration t - {st.lag}")
            lines.append(f"{inner}  const long {it} = {t} - {st.lag};")
            lines.append(f"{inner}  if ({cond}) {{")
            lines.extend(self.decompose(it, n.vars, n.extents, inner + "    "))
            lines.extend(self.nodes(st.body, inner + "    "))
            lines.append(f"{inner}  }}")
            lines.append(f"{inner}}}")
        self.depth -= 1
        return [*lines, f"{ind}}}"]

    def _work(self, w: _Work, ind: str) -> list[str]:
        inner = ind + "  "
        body: list[str] = []
        if w.fold is not None:
            kind = tb.kind_of(w.value.dtype)
            init = (tb.REDUCE_IDENTITY[(w.fold, kind)] if w.init is None
                    else self.elem(w.init, w))
            body.append(f"{inner}{_scalar(w.value.dtype)} acc_ = {init};")
        deep = inner
        for v, e in w.serial:  # each thread's own loops, outermost first
            body.append(f"{deep}for (long {self.sym(v)} = 0; {self.sym(v)} < "
                        f"{self.index(e)}; ++{self.sym(v)}) {{")
            deep += "  "
        if w.fold is None:
            body.extend(self.store(w, self.elem(w.value, w), deep))
        else:
            step = tb.REDUCE_COMBINE[(w.fold, kind)].format(acc="acc_",
                                                            x=self.elem(w.value, w))
            body.append(f"{deep}acc_ = {step};")
        for _ in w.serial:
            deep = deep[:-2]
            body.append(f"{deep}}}")
        if w.fold is not None:
            body.extend(self.store(w, "acc_", inner))
        ext = dict(w.dist)
        keep: list[str] = []  # per-thread caches: recompute when the key changes
        for k, (e, deps) in enumerate(w.cached):
            key = self.index(_row_major(tuple(Sym(v) for v in deps),
                                        tuple(ext[v] for v in deps)))
            keep.append(f"{inner}if ({key} != hk{k}_) {{ hk{k}_ = {key}; hc{k}_ = "
                        f"{self.elem(e, w)}; }}")
        body = [*keep, *body]
        text = "\n".join(body)
        dist_vars = tuple(v for v, _ in w.dist)
        decomp = [ln for ln, v in zip(self.decompose("l_", dist_vars,
                                                     tuple(e for _, e in w.dist), inner),
                                      dist_vars, strict=True)
                  if re.search(rf"\b{self.sym(v)}\b", text)]
        total = _strip(self.expr(product(tuple(e for _, e in w.dist))))
        head = [f"{ind}// {w.comment}"] if w.comment else []
        loop = [f"{ind}for (long l_ = tid_; l_ < {total}; l_ += {self.em.threads}) {{",
                *decomp, *body, f"{ind}}}"]
        if not w.cached:
            return [*head, *loop]
        what = "; ".join(f"{lp.format_elem(e)} while [{', '.join(deps)}] stays the same"
                         for e, deps in w.cached)
        decls = [f"{ind}  {_scalar(e.dtype)} hc{k}_ = {tb.literal(0, e.dtype)};\n"
                 f"{ind}  long hk{k}_ = -1;" for k, (e, _) in enumerate(w.cached)]
        return [*head, f"{ind}{{  // each thread keeps {what}", *decls,
                *(f"  {ln}" for ln in loop), f"{ind}}}"]

    def _cached(self, e: _Cached, w: _Work) -> str:
        return f"hc{e.index}_"

    def store(self, w: _Work, value: str, ind: str) -> list[str]:
        d = w.dest
        if isinstance(d, lp.BufWrite):
            return [f"{ind}{self.buffer_ref(d.buffer, d.index, d.version, w)} = {value};"]
        view = self.em.views[d.view]
        access = f"{self.sym(view.name)}[{self.index(_row_major(d.index, view.shape))}]"
        mask = self.mask(d.index, d.window, view)
        if not mask:
            return [f"{ind}{access} = {value};"]
        return [f"{ind}if ({mask}) {{", f"{ind}  {access} = {value};", f"{ind}}}"]

    def decompose(self, lin: str, vars_: tuple[str, ...], extents: tuple[Expr, ...],
                  ind: str) -> list[str]:
        """``const long v = ...;`` for each variable of the row-major split of ``lin``."""
        out = []
        for j, v in enumerate(vars_):
            inner = product(extents[j + 1:])
            q = lin if inner == Const(1) else f"{lin} / {self.expr(inner)}"
            if j > 0:
                q = f"{q if q == lin else f'({q})'} % {self.expr(extents[j])}"
            out.append(f"{ind}const long {self.sym(v)} = {q};")
        return out


#: Element expression -> its printer.
_ELEM: dict[type, Callable[[_Printer, Any, _Work], str]] = {
    lp.Lit: _Printer._lit, lp.IndexOf: _Printer._indexof, lp.ViewRead: _Printer._viewread,
    lp.BufRead: _Printer._bufread, lp.Unary: _Printer._unary, lp.Binary: _Printer._binary,
    lp.Select: _Printer._select, lp.Cast: _Printer._cast, _Cached: _Printer._cached,
}
#: Spread statement -> its printer.
_NODE: dict[type, Callable[[_Printer, Any, str], list[str]]] = {
    _Work: _Printer._work, _Sync: _Printer._sync, _Loop: _Printer._loop,
    _Pipe: _Printer._pipe, _Comment: _Printer._comment,
}


def _describe_buffer(b: lp.Buffer) -> str:
    shape = ", ".join(map(str, b.shape))
    lay = ""
    if b.layout.strides != dense(b.shape).strides or b.layout.swizzles:
        lay = " stride [" + ", ".join(map(str, b.layout.strides)) + "]" + "".join(
            f" {sw}" for sw in b.layout.swizzles)
    ver = f" x{b.versions}" if b.versions > 1 else ""
    return f"%{b.name}: {b.dtype}[{shape}]{lay}{ver}, {b.role} in {b.resource}"


def _group_pointer(dtype: DType) -> str:
    return f"group_{dtype.value}_"


def _flag_order(cls: str) -> int:
    return list(tb.MEM_FLAGS).index(cls)


def _scalar(dtype: DType) -> str:
    found = tb.MSL_SCALAR.get(dtype)
    if found is None:
        reason = tb.UNSUPPORTED_DTYPES.get(dtype, "no MSL spelling")
        raise _fail(f"element type {dtype}: {reason}", rule="msl-subset")
    return found


def _row_major(index: tuple[Expr, ...], shape: tuple[Expr, ...]) -> Expr:
    terms = [mul(i, product(shape[d + 1:])) for d, i in enumerate(index)]
    return add(0, *terms)


def _negated(e: Expr) -> Expr | None:
    if isinstance(e, Const) and e.value < 0:
        return Const(-e.value)
    if isinstance(e, Apply) and e.op is ExprOp.MUL and isinstance(e.args[0], Const) \
            and e.args[0].value < 0:
        return mul(-e.args[0].value, *e.args[1:])
    return None


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def _strip(text: str) -> str:
    return text[1:-1] if text.startswith("(") and text.endswith(")") and _balanced(
        text[1:-1]) else text
