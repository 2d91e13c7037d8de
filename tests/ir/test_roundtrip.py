"""Three-way round trips of the text and JSON forms, for every example and random kernels.

* text:  print -> parse is structurally equal to the original (locations included),
         and print -> parse -> print is a fixpoint;
* JSON:  to_json -> json text -> from_json is structurally equal (name hints and
         locations included), and to_json of the result is the same document.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.errors import UNKNOWN_LOC, SourceLoc
from planner.ir import core
from planner.ir.core import Axis, Block, Kernel, Value
from planner.ir.dtypes import DType
from planner.ir.examples import list_examples
from planner.ir.examples import load_example as _load_example
from planner.ir.expr import Expr, add, ceil_div, const, emax, emin, floordiv, mod, mul, sym
from planner.ir.json_form import kernel_from_json, kernel_to_json
from planner.ir.layout import Layout, XorSwizzle
from planner.ir.parser import parse_kernel
from planner.ir.printer import PrintOptions, print_kernel
from planner.ir.structural import structural_diff, structurally_equal
from planner.ir.types import TileType, ViewType

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = list_examples()


def load_example(path: Path) -> Kernel:
    return _load_example(path).kernel


def check_text_roundtrip(kernel: Kernel) -> None:
    text = print_kernel(kernel)
    parsed = parse_kernel(text, "roundtrip.mlir")
    assert structural_diff(kernel, parsed, locs=True) is None, text
    assert print_kernel(parsed) == text
    bare = print_kernel(kernel, PrintOptions(locations=False))
    reparsed = parse_kernel(bare)
    assert structural_diff(kernel, reparsed) is None, bare
    assert print_kernel(reparsed, PrintOptions(locations=False)) == bare


def check_json_roundtrip(kernel: Kernel) -> None:
    doc = kernel_to_json(kernel)
    wire = json.dumps(doc, allow_nan=False)
    back = kernel_from_json(json.loads(wire))
    assert structural_diff(kernel, back, names=True, locs=True) is None, wire
    assert kernel_to_json(back) == doc


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_text_roundtrip(path: Path) -> None:
    check_text_roundtrip(load_example(path))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_json_roundtrip(path: Path) -> None:
    check_json_roundtrip(load_example(path))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_text_and_json_agree(path: Path) -> None:
    kernel = load_example(path)
    via_text = parse_kernel(print_kernel(kernel))
    via_json = kernel_from_json(kernel_to_json(kernel))
    assert structural_diff(via_text, via_json, locs=True) is None


# --------------------------------------------------------------------------- random kernels

SYMS = ("M", "N", "K")
HINTS = (None, None, None, "x", "x", "x_0", "acc", "As", "weird name", "9lives")
STAGES = (None, None, "load", "compute")
LOCS = (UNKNOWN_LOC, SourceLoc("k.py", 3, 0), SourceLoc("/abs/dir/k\u00e9.py", 10, 4),
        SourceLoc('we"ird\\\\path.py', 1, 1))
#: Resource constraints: the built-in classes and names only a catalog defines (S6), the
#: seed's ``private_``/``auto_`` spellings included (they become the built-in class).
RESOURCES = st.one_of(
    st.sampled_from(["psum", "weight_buffer", "private_", "auto_", "tmem_", "_x9"])
      .map(core.ResourceConstraint),
    st.sampled_from(list(core.ResourceClass)).map(core.ResourceConstraint),
    st.from_regex(core.CLASS_NAME_PATTERN, fullmatch=True).filter(lambda s: len(s) <= 12)
      .map(core.ResourceConstraint))
FLOATS = st.one_of(st.sampled_from([0.0, -0.0, 1.0, 0.1, 1e-05, -1.5e300, 5e-324, math.inf,
                                    -math.inf, math.nan]),
                   st.floats(allow_nan=True, allow_infinity=True))


def exprs_over(names: tuple[str, ...]) -> st.SearchStrategy[Expr]:
    leaves = st.one_of(st.integers(-3, 64).map(const), st.sampled_from(names).map(sym))
    divisor = st.one_of(st.integers(1, 16).map(const), st.sampled_from(names).map(sym))

    def grow(inner: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        return st.one_of(
            st.tuples(inner, inner).map(lambda t: add(*t)),
            st.tuples(inner, inner).map(lambda t: mul(*t)),
            st.tuples(inner, inner).map(lambda t: t[0] - t[1]),
            st.tuples(inner, divisor, st.sampled_from([floordiv, mod, ceil_div]))
              .map(lambda t: t[2](t[0], t[1])),
            st.tuples(inner, inner, st.sampled_from([emin, emax])).map(lambda t: t[2](t[0], t[1])),
        )

    return st.recursive(leaves, grow, max_leaves=4)


class _Gen:
    """Builds one random, type-correct kernel from hypothesis draws."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.labels = 0

    def pick(self, seq):  # type: ignore[no-untyped-def]
        return self.draw(st.sampled_from(seq))

    def expr(self, names: tuple[str, ...]) -> Expr:
        return self.draw(exprs_over(names))

    def shape(self, rank: int | None = None) -> tuple[Expr, ...]:
        rank = self.draw(st.integers(1, 2)) if rank is None else rank
        return tuple(self.draw(st.one_of(st.integers(1, 8).map(const),
                                         st.sampled_from(SYMS).map(sym))) for _ in range(rank))

    def emit(self, block: Block, op: core.Op) -> core.Op:
        op.loc = self.pick(LOCS)
        op.stage = self.pick(STAGES)
        for r in op.results:
            r.name_hint = self.pick(HINTS)
        block.append(op)
        return op

    def label(self) -> str:
        self.labels += 1
        return self.pick(("g", "loop", "k_tiles")) + f"_{self.labels}"

    def axes(self, names: tuple[str, ...]) -> tuple[Axis, ...]:
        n = self.draw(st.integers(1, 2))
        return tuple(Axis(f"{self.label()}", self.expr(names)) for _ in range(n))

    def full(self, block: Block, shape: tuple[Expr, ...], dtype: DType) -> Value:
        value = self.draw(st.one_of(FLOATS, exprs_over(SYMS)))
        return self.emit(block, core.FullOp(shape, dtype, value)).result

    def layout(self) -> Layout:
        shape = self.shape()
        strides = tuple(self.draw(st.one_of(st.integers(0, 64).map(const),
                                            exprs_over(SYMS).filter(lambda e: not e.is_const)))
                        for _ in shape)
        swizzles = []
        for _ in range(self.draw(st.integers(0, 2))):
            bits = self.draw(st.integers(0, 3))
            swizzles.append(XorSwizzle(bits, self.draw(st.integers(0, 3)),
                                       bits + self.draw(st.integers(0, 3))))
        return Layout(shape, strides, tuple(swizzles), self.draw(st.booleans()))

    def block(self, block: Block, env: dict[str, list[Value]], names: tuple[str, ...],
              depth: int) -> None:
        for _ in range(self.draw(st.integers(1, 5))):
            self.one_op(block, env, names, depth)

    def one_op(self, block: Block, env: dict[str, list[Value]], names: tuple[str, ...],
               depth: int) -> None:
        tiles, views = env["tiles"], env["views"]
        choice = self.draw(st.integers(0, 13 if depth < 2 else 11))
        if choice == 0 or not tiles:
            tiles.append(self.full(block, self.shape(), self.pick(list(DType))))
        elif choice == 1:
            shape = self.shape()
            tiles.append(self.emit(block, core.IotaOp(shape, len(shape) - 1)).result)
        elif choice == 2:
            view = self.pick(views)
            offsets = tuple(self.expr(names) for _ in view.type.shape)
            op = core.LoadOp(view, offsets, self.shape(view.type.rank), self.draw(FLOATS))
            tiles.append(self.emit(block, op).result)
        elif choice == 3:
            op = core.UnaryOp(self.pick(list(core.UnaryFn)), self.pick(tiles))
            tiles.append(self.emit(block, op).result)
        elif choice == 4:
            x = self.pick(tiles)
            other = self.full(block, x.type.shape, x.type.dtype)
            tiles.append(self.emit(block, core.BinaryOp(self.pick(list(core.BinaryFn)), x,
                                                        other)).result)
        elif choice == 5:
            x = self.pick(tiles)
            cond = self.emit(block, core.BinaryOp(core.BinaryFn.LT, x, x)).result
            tiles.append(self.emit(block, core.SelectOp(cond, x, x)).result)
        elif choice == 6:
            op = core.CastOp(self.pick(tiles), self.pick(list(DType)))
            tiles.append(self.emit(block, op).result)
        elif choice == 7:
            x = self.pick(tiles)
            op = core.ReduceOp(self.pick(list(core.ReduceFn)), x,
                               self.draw(st.integers(0, x.type.rank - 1)))
            tiles.append(self.emit(block, op).result)
        elif choice == 8:
            x = self.pick(tiles)
            shape = self.shape(x.type.rank + 1)
            dims = tuple(sorted(self.draw(st.permutations(range(x.type.rank + 1)))[:x.type.rank]))
            tiles.append(self.emit(block, core.BroadcastOp(x, shape, dims)).result)
        elif choice == 9:
            x = self.full(block, self.shape(2), DType.F32)
            tiles.append(self.emit(block, core.TransposeOp(x, (1, 0))).result)
        elif choice == 10:
            m, n, k = self.shape(3)
            a, b = self.full(block, (m, k), DType.F16), self.full(block, (k, n), DType.F16)
            acc = self.full(block, (m, n), DType.F32)
            tiles.append(self.emit(block, core.MmaOp(a, b, acc)).result)
        elif choice == 11:
            self.memory_ops(block, env)
        elif choice == 12:
            self.parallel(block, env, names, depth)
        else:
            self.loop(block, env, names, depth)
        if self.draw(st.integers(0, 5)) == 0:
            writable = [v for v in views if isinstance(v.type, ViewType) and not v.type.readonly]
            if writable:
                view = self.pick(writable)
                tile = self.full(block, self.shape(view.type.rank), view.type.dtype)
                offsets = tuple(self.expr(names) for _ in view.type.shape)
                self.emit(block, core.StoreOp(view, tile, offsets))

    def memory_ops(self, block: Block, env: dict[str, list[Value]]) -> None:
        lay = self.layout()
        dtype = self.pick(list(DType))
        alloc = self.emit(block, core.AllocOp(dtype, lay, self.draw(RESOURCES),
                                              self.pick(("kernel", "g_1", "weird \"owner\""))))
        tile = self.full(block, lay.shape, dtype)
        state = self.emit(block, core.MemStoreOp(alloc.results[0], alloc.results[1],
                                                 tile)).result
        env["tiles"].append(self.emit(block, core.MemLoadOp(alloc.results[0], state)).result)
        env["mems"].append(alloc.results[0])
        env["states"].append(state)

    def parallel(self, block: Block, env: dict[str, list[Value]], names: tuple[str, ...],
                 depth: int) -> None:
        axes = self.axes(names)
        op = core.ParallelOp(self.label(), axes, self.pick(("AUTOMATIC", "block", "warp")))
        self.emit(block, op)
        inner = {k: list(v) for k, v in env.items()}
        self.block(op.body, inner, names + tuple(a.index.name for a in axes), depth + 1)

    def loop(self, block: Block, env: dict[str, list[Value]], names: tuple[str, ...],
             depth: int) -> None:
        tiles, mems, states = env["tiles"], env["mems"], env["states"]
        n_tiles = self.draw(st.integers(0, min(2, len(tiles))))
        carried_tiles = [self.pick(tiles) for _ in range(n_tiles)]
        carry_mem = bool(mems) and self.draw(st.booleans())
        inits = carried_tiles + ([states[-1]] if carry_mem else [])
        axes = self.axes(names)
        window, interval = self.draw(st.integers(1, 3)), self.draw(st.integers(1, 3))
        stages = tuple(self.draw(st.lists(st.sampled_from(["load", "compute", "s 2"]),
                                          max_size=2, unique=True)))
        body = Block([Value(v.type, self.pick(HINTS)) for v in inits])
        op = core.LoopOp(self.pick(list(core.LoopKind)), self.label(), axes, tuple(inits),
                         window, interval, stages, body)
        self.emit(block, op)
        inner = {k: list(v) for k, v in env.items()}
        inner["tiles"] += body.args[:n_tiles]
        self.block(body, inner, names + tuple(a.index.name for a in axes), depth + 1)
        yields: list[Value] = []
        for arg in body.args[:n_tiles]:
            if self.draw(st.booleans()):
                arg = self.emit(body, core.UnaryOp(core.UnaryFn.NEG, arg)).result
            yields.append(arg)
        if carry_mem:
            tile = self.full(body, mems[-1].type.shape, mems[-1].type.dtype)
            yields.append(self.emit(body, core.MemStoreOp(mems[-1], body.args[-1],
                                                          tile)).result)
        self.emit(body, core.YieldOp(tuple(yields)))
        tiles += op.results[:n_tiles]
        if carry_mem:
            states.append(op.results[-1])


@st.composite
def kernels(draw: st.DrawFn) -> Kernel:
    gen = _Gen(draw)
    params = []
    for i in range(draw(st.integers(1, 3))):
        rank = draw(st.integers(1, 2))
        vt = ViewType(gen.pick(list(DType)), tuple(sym(s) for s in SYMS[:rank]),
                      draw(st.booleans()))
        params.append(Value(vt, f"V{i}"))
    body = Block()
    env: dict[str, list[Value]] = {"tiles": [], "views": params, "mems": [], "states": []}
    gen.block(body, env, SYMS, 0)
    return Kernel(gen.pick(("k", "random kernel", "k\u00e9")), params, body, gen.pick(LOCS))


PROFILE = settings(max_examples=60, derandomize=True, deadline=None, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@PROFILE
@given(kernels())
def test_random_text_roundtrip(kernel: Kernel) -> None:
    check_text_roundtrip(kernel)
    relative = print_kernel(kernel, base_dir="/abs")
    assert "/abs/" not in relative
    assert structurally_equal(kernel, parse_kernel(relative))


@PROFILE
@given(kernels())
def test_random_json_roundtrip(kernel: Kernel) -> None:
    check_json_roundtrip(kernel)


@PROFILE
@given(exprs_over(("M", "%i")))
def test_random_expressions_roundtrip_in_attributes(e: Expr) -> None:
    kernel = Kernel("k", [Value(ViewType(DType.F32, (e,)), "X")], Block())
    kernel.body.append(core.FullOp((e, const(2)), DType.F32, e))
    assert structural_diff(kernel, parse_kernel(print_kernel(kernel))) is None
    assert structural_diff(kernel, kernel_from_json(kernel_to_json(kernel))) is None


def test_structural_diff_reports_first_difference() -> None:
    kernel = load_example(ROOT / "planner" / "examples" / "manual_gemm.py")
    other = parse_kernel(print_kernel(kernel))
    loop = other.body.ops[0].body.ops[3]
    assert isinstance(loop, core.LoopOp)
    loop.window = 3
    assert structural_diff(kernel, other) == ("$.body.ops[0].regions[0].ops[3].attrs.window: "
                                              "2 != 3")
    loop.window = 2
    load = loop.body.ops[0]
    load.stage = None
    assert structural_diff(kernel, other) == ("$.body.ops[0].regions[0].ops[3].regions[0]"
                                              ".ops[0].stage: 'load' != None")
    assert structural_diff(kernel, other, stages=False) is None


def test_structural_diff_follows_the_value_graph() -> None:
    kernel = load_example(ROOT / "planner" / "examples" / "manual_gemm.py")
    other = parse_kernel(print_kernel(kernel))
    mma = other.body.ops[0].body.ops[3].body.ops[6]
    assert isinstance(mma, core.MmaOp)
    mma.a, mma.b = mma.b, mma.a  # same kinds of values, swapped
    diff = structural_diff(kernel, other)
    assert diff is not None and diff.endswith("ops[6].operands[0]: refers to a different value")


def test_structural_diff_names_and_floats() -> None:
    def k(value: float, hint: str) -> Kernel:
        kernel = Kernel("k", [], Block())
        kernel.body.append(core.FullOp((const(4),), DType.F32, value))
        kernel.body.ops[0].result.name_hint = hint
        return kernel

    assert structurally_equal(k(math.nan, "a"), k(math.nan, "b"))
    assert not structurally_equal(k(math.nan, "a"), k(math.nan, "b"), names=True)
    assert structural_diff(k(0.0, "a"), k(-0.0, "a")) == "$.body.ops[0].attrs.value: 0.0 != -0.0"
    assert not structurally_equal(k(1.0, "a"), k(math.inf, "a"))
    tile = TileType(DType.F32, (const(4),))
    assert k(1.0, "a").body.ops[0].result.type == tile
