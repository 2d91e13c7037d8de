"""Streamed (non-temporal) view stores of the CPU backend (``planner.lower.cpu.nests``).

A plain nest whose one view store is unit-stride streams it when the kernel's views hold
at least ``STREAM_MIN_BYTES`` together: per row, plain stores up to the destination's
first cache line, whole lines of aligned non-temporal vector stores, plain stores after
the last whole line, and one ``sfence`` per segment call.  The threshold is lowered here
so that small shapes take the streamed path; the output starts at every element offset
within a cache line (0..15 elements of plain head).  Expected values are computed with
numpy; the outputs start as NaN, so an element no store wrote fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.catalog import CatalogRegistry
from planner.ir.examples import builtin_examples_dir, load_example
from planner.lower import compile_kernel
from planner.lower.cpu import nests
from planner.lower.cpu.jit import host_target
from planner.lower.cpu.runtime import KernelCache
from planner.solve.planner import plan_kernel
from tests.lower.test_cpu_backend import EXAMPLES, check
from tests.lower.test_cpu_backend import SHAPES as SHAPES_BY_EXAMPLE

# A platform guard, not a disagreement: the backend emits non-temporal stores only where
# the code is x86 (``TargetSpec.x86``, the rule it uses itself).
pytestmark = pytest.mark.skipif(not host_target().x86,
                                reason="non-temporal stores are emitted for x86 code only")

EPS = 1e-5


def _x86():
    return CatalogRegistry().get("x86-avx2")


def _compiled(name: str, bindings: dict[str, int]):
    ex = load_example(builtin_examples_dir() / f"{name}.py")
    plan = plan_kernel(ex.kernel, _x86(), bindings)
    return compile_kernel(ex.kernel, plan, _x86(), cache=KernelCache())


def _np_layernorm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    if x.shape[1] == 0:
        return np.zeros(x.shape, np.float32)
    mean = x64.mean(axis=1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=1, keepdims=True)
    return ((x64 - mean) / np.sqrt(var + EPS) * w + b).astype(np.float32)


def _np_softmax(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    if x.shape[1] == 0:
        return np.zeros(x.shape, np.float32)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def _out_at(shape: tuple[int, ...], misalign: int) -> np.ndarray:
    """A C-contiguous float32 array of ``shape`` whose data starts ``misalign`` elements
    past a 64-byte boundary (canaries of NaN around it)."""
    size = int(np.prod(shape))
    raw = np.full(size + 48, np.nan, np.float32)
    start = (-raw.ctypes.data // 4) % 16 + misalign
    return raw[start:start + size].reshape(shape)


@pytest.fixture
def streaming(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nests, "STREAM_MIN_BYTES", 1)


SHAPES = [(100, 70), (9, 8), (13, 33), (1, 1), (0, 5), (3, 0)]


def test_streamed_kernel_emits_aligned_non_temporal_stores_and_a_fence(streaming: None
                                                                        ) -> None:
    ck = _compiled("layernorm", {"M": 100, "N": 70})
    text = ck.llvm_ir
    assert "!nontemporal" in text
    assert "llvm.x86.sse.sfence" in text
    nt = [ln for ln in text.splitlines() if "!nontemporal" in ln and "store" in ln]
    assert nt and all("align 32" in ln for ln in nt)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_streamed_layernorm_matches_numpy_at_every_misalignment(
        streaming: None, shape: tuple[int, int]) -> None:
    m, n = shape
    ck = _compiled("layernorm", {"M": 100, "N": 70})
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 3 + 2).astype(np.float32)
    w, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    want = _np_layernorm(x, w, b)
    for misalign in range(16):
        for threads in (1, 2):
            y = _out_at(shape, misalign)
            got = ck({"X": x, "W": w, "Bias": b}, bindings={"M": m, "N": n}, threads=threads,
                     Y=y)["Y"]
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5,
                                       err_msg=f"{shape} misaligned by {misalign}, {threads}")


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_streamed_softmax_matches_numpy_at_every_misalignment(
        streaming: None, shape: tuple[int, int]) -> None:
    m, n = shape
    ck = _compiled("softmax", {"M": 100, "N": 70})
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    want = _np_softmax(x)
    out = next(p.name for p in ck.loop_program.params if not p.readonly)
    for misalign in range(16):
        y = _out_at(shape, misalign)
        got = ck({"X": x}, bindings={"M": m, "N": n}, threads=2, **{out: y})[out]
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6,
                                   err_msg=f"{shape} misaligned by {misalign}")


@pytest.mark.parametrize("size", [1000, 1, 0, 257, 8, 15])
def test_streamed_gelu_matches_numpy_at_every_misalignment(streaming: None, size: int
                                                           ) -> None:
    ck = _compiled("gelu", {"N": 1000})
    x = (np.random.default_rng(3).standard_normal(size) * 3).astype(np.float32)
    x64 = x.astype(np.float64)
    want = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64 ** 3)))
    out = next(p.name for p in ck.loop_program.params if not p.readonly)
    for misalign in range(16):
        y = _out_at((size,), misalign)
        got = ck({"X": x}, bindings={"N": size}, threads=2, **{out: y})[out]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6,
                                   err_msg=f"N={size} misaligned by {misalign}")


def test_layernorm_over_the_default_threshold_matches_numpy() -> None:
    """Views of 17 MB together: the streamed path at the shipped threshold."""
    m, n = 520, 4100
    assert 2 * m * n * 4 >= nests.STREAM_MIN_BYTES
    ck = _compiled("layernorm", {"M": m, "N": n})
    rng = np.random.default_rng(4)
    x = rng.standard_normal((m, n)).astype(np.float32)
    w, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    want = _np_layernorm(x, w, b)
    for misalign in (0, 3):
        y = _out_at((m, n), misalign)
        got = ck({"X": x, "W": w, "Bias": b}, bindings={"M": m, "N": n}, threads=2, Y=y)["Y"]
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", sorted(SHAPES_BY_EXAMPLE))
def test_every_example_streamed_matches_the_interpreter(streaming: None, name: str) -> None:
    """Every example with its stores streamed wherever they can be: odd shapes, single
    elements and empty extents, 1 and 2 threads, against the reference interpreter."""
    ex = load_example(EXAMPLES[name])
    plan = plan_kernel(ex.kernel, _x86(), ex.bindings)
    ck = compile_kernel(ex.kernel, plan, _x86(), cache=KernelCache())
    for bindings in SHAPES_BY_EXAMPLE[name]:
        check(ex.kernel, ck, bindings)


@pytest.mark.parametrize("name", ["softmax", "layernorm"])
def test_streamed_results_do_not_depend_on_the_outputs_alignment(streaming: None, name: str
                                                                 ) -> None:
    """The head of plain stores moves with the output's address; every element is still
    computed the same way (a division by a row value is a multiply by its reciprocal in
    every loop and tail), so the results are bitwise equal at every misalignment."""
    ck = _compiled(name, {"M": 100, "N": 70})
    m, n = 9, 70
    rng = np.random.default_rng(8)
    arrays = {"X": rng.standard_normal((m, n)).astype(np.float32)}
    if name == "layernorm":
        arrays |= {"W": rng.standard_normal(n).astype(np.float32),
                   "Bias": rng.standard_normal(n).astype(np.float32)}
    out = next(p.name for p in ck.loop_program.params if not p.readonly)
    got = [ck(arrays, bindings={"M": m, "N": n}, threads=1, **{out: _out_at((m, n), k)})[out]
           for k in range(16)]
    for k, g in enumerate(got[1:], 1):
        np.testing.assert_array_equal(g, got[0], err_msg=f"misaligned by {k}")


def test_stream_trial_alternates_and_keeps_the_faster_minimum() -> None:
    from planner.lower.cpu.runtime import _STREAM_SAMPLES, _StreamTrial

    t = _StreamTrial()
    runs = [(True, 5.0), (False, 3.0), (True, 1.0), (False, 2.0), (True, 9.0), (False, 4.0)]
    for i, (streamed, seconds) in enumerate(runs):
        assert t.stream_next() is streamed  # streamed first, then taking turns
        state = t.record(streamed, seconds)
        assert (state is t) == (i < 2 * _STREAM_SAMPLES - 1)
    assert state is True  # streamed min 1.0 beats plain min 2.0
    t = _StreamTrial()
    for streamed, seconds in runs:
        state = t.record(not streamed, seconds)
    assert state is False  # the same runs with the ways swapped


def test_stream_decision_per_thread_count_drives_the_threshold_and_the_results(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 8 MiB in, 8 MiB out: at the streaming floor; the trial runs on checked calls of one
    # signature and thread count, then the fast path applies that decision to the module
    # global before every call; another thread count has a trial of its own
    import ctypes

    from planner.lower.cpu import runtime

    n = 1 << 21
    ck = _compiled("gelu", {"N": n})
    at = ck._code.module.address(nests.STREAM_THRESHOLD_SYMBOL)
    threshold = ctypes.c_int64.from_address(at)
    x = (np.random.default_rng(5).standard_normal(n) * 3).astype(np.float32)
    x64 = x.astype(np.float64)
    want = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64 ** 3)))
    out = next(p.name for p in ck.loop_program.params if not p.readonly)
    checked = []
    real = runtime.CompiledKernel._run_checked
    monkeypatch.setattr(runtime.CompiledKernel, "_run_checked",
                        lambda self, *a, **kw: checked.append(1) or real(self, *a, **kw))

    def call(threads: int) -> None:
        got = ck({"X": x}, threads=threads, **{out: np.empty_like(x)})[out]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

    def states() -> dict:
        (prep,) = [c[4] for c in ck._calls.values()]
        return prep[10]

    for _ in range(2 * runtime._STREAM_SAMPLES - 1):
        call(1)
        assert not isinstance(states().get(1), bool)
    call(1)
    assert isinstance(states()[1], bool)  # decided after its runs, all on the checked path
    assert len(checked) == 2 * runtime._STREAM_SAMPLES
    assert not isinstance(states().get(2), bool)  # nothing decided for two threads
    for decided, value in ((True, nests.STREAM_MIN_BYTES), (False, runtime._NO_STREAMING)):
        states()[1] = decided
        before = len(checked)
        for _ in range(3):
            call(1)
            assert threshold.value == value
        assert len(checked) == before  # the fast path set it


def test_the_stream_decision_is_measured_again_after_the_steady_calls(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # one thread, so no split decides anything: after _REDECIDE_CALLS fast calls the
    # streamed-store decision is forgotten and its trial runs again on checked calls
    from planner.lower.cpu import runtime

    monkeypatch.setattr(runtime, "_REDECIDE_CALLS", 5)
    n = 1 << 21
    ck = _compiled("gelu", {"N": n})
    x = np.linspace(-4, 4, n, dtype=np.float32)
    out = next(p.name for p in ck.loop_program.params if not p.readonly)
    checked = []
    real = runtime.CompiledKernel._run_checked
    monkeypatch.setattr(runtime.CompiledKernel, "_run_checked",
                        lambda self, *a, **kw: checked.append(1) or real(self, *a, **kw))
    first = None

    def call() -> None:
        nonlocal first
        got = ck({"X": x}, threads=1, **{out: np.empty_like(x)})[out]
        if first is None:
            first = got.copy()
        np.testing.assert_array_equal(got, first)  # streamed or not: the same values

    def state() -> object:
        (prep,) = [c[4] for c in ck._calls.values()]
        return prep[10].get(1)

    trial = 2 * runtime._STREAM_SAMPLES
    for _ in range(trial):
        call()
    assert isinstance(state(), bool) and len(checked) == trial
    for _ in range(5):  # the steady calls: fast, until the fifth forgets the decision
        call()
    assert len(checked) == trial and state() is None
    for _ in range(trial):  # the trial again, on checked calls
        call()
    assert isinstance(state(), bool) and len(checked) == 2 * trial


def test_a_split_that_keeps_losing_waits_twice_as_long_each_time() -> None:
    from planner.lower.cpu import runtime

    assert [runtime._redecide_calls([0.023], r) for r in range(7)] == \
        [10, 20, 40, 80, 160, 320, 512]  # 0.25 / 0.023 = 10.9, doubled, at most 512
    assert runtime._redecide_calls([0.0], 5) == 512  # no lost split: the default
