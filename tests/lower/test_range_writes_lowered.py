"""Range-aware MemorySSA (S16) planned and lowered: child instances write disjoint windows.

Each of the ``P = ceil(M / T)`` instances of a child ``parallel`` writes rows
``[p*T, (p+1)*T)`` of a Memory its parent owns (``acc(coord(p*T, 0), shape(T, n))``), and
the parent stores the Memory after the region (the join).  The plan holds one buffer of
the Memory's full shape (bytes computed here from the shape, dtype and the catalog's
alignment), names the catalog's sync rule at the join, and the CPU (1 and 2 workers) and
the emulated Metal (every thread order) match numpy on shapes that are not multiples of
the tile, an empty and a single-element one.  Metal places exactly one barrier, at the
join.  Overlapping windows are refused with the verifier's two-instance counterexample by
the planner, the loop program, the CLI and the HTTP service.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import planner
from planner.catalog import CatalogRegistry
from planner.errors import PlannerError
from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    f32,
    mem,
    memory,
    parallel,
    shape,
    tile_kernel,
    zeros,
)
from planner.ir.interpreter import interpret
from planner.lower.loops import build_loop_program
from planner.lower.loops import program as lp
from planner.lower.metal.emitter import emit_msl
from planner.lower.metal.runtime import run_msl_kernel
from planner.solve import plan_kernel

REG = CatalogRegistry()
T, C = 3, 4  # the row tile of an instance, the column block of an outer instance
SHAPES = [(10, 7), (7, 5), (1, 1), (0, 4), (5, 0), (4, 9)]


def _rows(m: int) -> int:
    return -(-m // T) * T


def build_shared(height: int = T, extra: int = 0, init: bool = False):
    """A kernel-level Memory; the instances of the top-level parallel write its rows."""

    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        rows = ceil_div(X.extent(0), T) * T
        n = X.extent(1)
        p = axis("p", ceil_div(X.extent(0), T))
        acc = memory[f32](shape(rows + extra, n))
        if init:
            acc.store(zeros(shape(rows + extra, n)))
        for inst in parallel(shape(p)):
            r0 = inst.index(p) * T
            tile = X[coord(r0, 0), shape(height, n)] * 2.0 + 1.0
            acc(coord(r0, 0), shape(height, n)).store(tile)  # the window store
        Y(coord(0, 0), shape(rows + extra, n)).store(acc.load())  # the join

    return tile_kernel("shared_rows")(kernel), kernel


def build_block(height: int = T, extra: int = 0, init: bool = False):
    """The Memory of an outer instance (a column block: a Metal threadgroup, a CPU
    worker); the instances of the inner parallel write its rows."""

    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        rows = ceil_div(X.extent(0), T) * T
        gc = axis("gc", ceil_div(X.extent(1), C))
        p = axis("p", ceil_div(X.extent(0), T))
        for col in parallel(shape(gc)):
            c0 = col.index(gc) * C
            acc = memory[f32](shape(rows + extra, C))
            if init:
                acc.store(zeros(shape(rows + extra, C)))
            for inst in parallel(shape(p)):
                r0 = inst.index(p) * T
                tile = X[coord(r0, c0), shape(height, C)] * 2.0 + 1.0
                acc(coord(r0, 0), shape(height, C)).store(tile)  # the window store
            Y(coord(0, c0), shape(rows + extra, C)).store(acc.load())  # the join

    return tile_kernel("block_rows")(kernel), kernel


BUILDS = {"shared": build_shared, "block": build_block}


def _inputs(m: int, n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(m * 37 + n)
    return {"X": rng.standard_normal((m, n)).astype(np.float32),
            "Y": np.full((m, n), np.nan, np.float32)}


def _want(x: np.ndarray) -> np.ndarray:
    return x * np.float32(2.0) + np.float32(1.0)


def _line(fn, text: str) -> int:
    import inspect

    lines, first = inspect.getsourcelines(fn)
    return next(first + i for i, line in enumerate(lines) if text in line)


# --------------------------------------------------------------------------- the plan


@pytest.mark.parametrize(("form", "target"), [("shared", "x86-avx2"), ("block", "x86-avx2"),
                                              ("block", "apple-m2")])
def test_the_plan_holds_one_buffer_of_the_full_shape(form, target):
    k, _ = BUILDS[form]()
    m, n = 10, 7
    plan = plan_kernel(k, REG.get(target), {"M": m, "N": n})
    assert plan.status.value in ("optimal", "feasible"), plan.explanation
    (mem,) = plan.memories
    res = REG.get(target).resource(mem.resource)
    cols = n if form == "shared" else C
    raw = _rows(m) * cols * 4  # f32, the Memory's whole shape: not one window per instance
    assert mem.name == "%acc" and mem.versions == 1 and mem.max_versions == 1
    assert mem.bytes == -(-raw // res.alignment) * res.alignment
    (buf,) = [b for b in plan.buffers if b.name == "%acc"]
    assert buf.bytes == mem.bytes and buf.versions == 1
    (peak,) = [p for p in plan.peaks if p.resource == mem.resource]
    assert peak.holders.count(("%acc", mem.bytes)) == 1 and peak.peak_bytes == mem.bytes


@pytest.mark.parametrize(("form", "target", "rule"), [
    ("shared", "x86-avx2", "worker_barrier"),  # dram at process: the workers' join
    ("block", "apple-m2", "threadgroup_barrier"),  # threadgroup memory at threadgroup
])
def test_the_plan_names_the_catalogs_sync_rule_at_the_join(form, target, rule):
    tgt = REG.get(target)
    plan = plan_kernel(BUILDS[form]()[0], tgt, {"M": 7, "N": 5})
    (buf,) = [b for b in plan.buffers if b.name == "%acc"]
    res = tgt.resource(buf.resource)
    owner = tgt.root_scope.name if form == "shared" else "threadgroup"
    assert [s.name for s in res.sync if s.scope == owner] == [rule]
    assert buf.sync == rule


def test_the_loop_program_writes_each_window_at_its_offsets():
    k, _ = build_shared()
    tgt = REG.get("x86-avx2")
    plan = plan_kernel(k, tgt, {"M": 7, "N": 5})
    program = build_loop_program(k, plan, tgt)
    (acc,) = [b for b in program.buffers if b.name == "acc"]
    assert acc.versions == 1 and [str(e) for e in acc.shape] == ["3 * ceildiv(M, 3)", "N"]
    writes = [s.dest for seg in program.segments for s in lp.walk_stmts(seg.body)
              if isinstance(s, lp.Nest) and isinstance(s.dest, lp.BufWrite)
              and s.dest.buffer == "acc"]
    (w,) = writes
    assert [str(o) for o in w.offsets] == ["3 * %p", "0"]
    assert [str(i) for i in w.index] == ["3 * %p + i.0", "i.1"]


def test_the_loop_program_names_the_plans_sync_after_a_child_parallel():
    k, _ = build_block()
    tgt = REG.get("apple-m2")
    program = build_loop_program(k, plan_kernel(k, tgt, {"M": 7, "N": 5}), tgt)
    (seg,) = program.segments
    kinds = [type(s).__name__ for s in seg.body]
    at = kinds.index("Parallel")
    barrier = seg.body[at + 1]
    assert isinstance(barrier, lp.Barrier) and barrier.rule == "threadgroup_barrier"
    assert barrier.scope == "threadgroup" and "join of parallel p" in barrier.note


def build_piped(windowed: bool):
    """A pipeline over the columns: stage ``write`` fills a Memory (the instances of a
    child parallel each write a window, or one whole store), stage ``read`` stores it."""

    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        rows = ceil_div(X.extent(0), T) * T
        s = axis("s", X.extent(1))
        p = axis("p", ceil_div(X.extent(0), T))
        for col in parallel(shape(axis("one", 1))):
            for step in col.pipeline(shape(s), window=2):
                step.stage("write")
                c = step.index(s)
                acc = memory[f32](shape(rows, 1))
                if windowed:
                    for inst in parallel(shape(p)):
                        r0 = inst.index(p) * T
                        acc(coord(r0, 0), shape(T, 1)).store(
                            X[coord(r0, c), shape(T, 1)] * 2.0 + 1.0)
                else:
                    acc.store(X[coord(0, c), shape(rows, 1)] * 2.0 + 1.0)
                step.stage("read")
                Y(coord(0, c), shape(rows, 1)).store(acc.load())

    return tile_kernel("piped")(kernel)


@pytest.mark.parametrize("target", ["x86-avx2", "apple-m2"])
def test_a_windowed_memory_keeps_one_version_and_its_pipeline_runs_in_order(target):
    tgt = REG.get(target)
    whole = plan_kernel(build_piped(False), tgt, {"M": 7, "N": 5})
    assert [m.versions for m in whole.memories] == [2]  # whole stores rotate versions
    k = build_piped(True)
    plan = plan_kernel(k, tgt, {"M": 7, "N": 5})
    assert [(m.versions, m.max_versions) for m in plan.memories] == [(1, 1)]
    notes = build_loop_program(k, plan, tgt).notes
    assert any("pipeline s ordered: Memory acc is written in windows in stage write and "
               "read in stage read" in n for n in notes), notes
    x = _inputs(7, 5)
    out = planner.run(k, plan, target=target, inputs=x, check=True)
    np.testing.assert_array_equal(out["Y"], _want(x["X"]))


def test_windowed_writes_never_ask_for_versions_even_where_stages_would_overlap(monkeypatch):
    """The cost model's own guard: two windowed stores in stage ``write`` and a load in
    stage ``read`` keep one version, also with the pipeline rule (which runs the loop in
    order) switched off, where the stages would otherwise ask for two."""
    from planner.realize.pipeline import PipelineCuts

    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        s = axis("s", X.extent(1))
        for col in parallel(shape(axis("one", 1))):
            for step in col.pipeline(shape(s), window=2):
                step.stage("write")
                c = step.index(s)
                acc = memory[f32](shape(6, 1))
                acc(coord(0, 0), shape(2, 1)).store(X[coord(0, c), shape(2, 1)])
                acc(coord(2, 0), shape(4, 1)).store(X[coord(2, c), shape(4, 1)])
                step.stage("read")
                Y(coord(0, c), shape(6, 1)).store(acc.load())

    k = tile_kernel("halves")(kernel)
    plan = plan_kernel(k, REG.get("x86-avx2"), {"M": 6, "N": 5})
    assert [(m.versions, m.max_versions) for m in plan.memories] == [(1, 1)]
    monkeypatch.setattr(PipelineCuts, "_window_problem", lambda self, *args: "")
    plan = plan_kernel(k, REG.get("x86-avx2"), {"M": 6, "N": 5})
    assert [(m.versions, m.max_versions) for m in plan.memories] == [(1, 1)]


# --------------------------------------------------------------------------- runs


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("form", ["shared", "block"])
@pytest.mark.parametrize(("m", "n"), SHAPES)
def test_cpu_matches_numpy(form, threads, m, n):
    k, _ = BUILDS[form]()
    x = _inputs(m, n)
    # planned explicitly: the verifier at bindings that make %acc empty refuses its uses
    # (S14), while the planner holds 0 bytes for it and the windows write nothing
    plan = plan_kernel(k, REG.get("x86-avx2"), {"M": m, "N": n})
    out = planner.run(k, plan, target="x86-avx2", inputs=x, check=True, threads=threads)
    np.testing.assert_array_equal(out["Y"], _want(x["X"]))
    np.testing.assert_array_equal(interpret(k, x)["Y"], _want(x["X"]))


@pytest.mark.parametrize(("m", "n"), SHAPES)
def test_metal_matches_numpy_in_every_thread_order(m, n):
    k, _ = build_block()
    tgt = REG.get("apple-m2")
    plan = plan_kernel(k, tgt, {"M": m, "N": n})
    msl = emit_msl(k, plan, tgt)
    x = _inputs(m, n)
    runs = [("forward", 0), ("reverse", 0), *(("random", s) for s in range(3))]
    for order, seed in runs:
        out = run_msl_kernel(k, msl, x, {"M": m, "N": n}, order=order, seed=seed).outputs
        np.testing.assert_array_equal(out["Y"], _want(x["X"]), err_msg=f"{order} {seed}")


def test_metal_has_exactly_one_barrier_at_the_join():
    k, _ = build_block()
    tgt = REG.get("apple-m2")
    msl = emit_msl(k, plan_kernel(k, tgt, {"M": 10, "N": 7}), tgt)
    lines = msl.source.splitlines()
    barriers = [i for i, ln in enumerate(lines) if "threadgroup_barrier(" in ln]
    assert len(barriers) == 1, msl.source
    window = next(i for i, ln in enumerate(lines) if re.search(r"tg_acc\[.*\] =", ln))
    join = next(i for i, ln in enumerate(lines) if re.search(r"\bY\[.*\] = .*tg_acc", ln))
    loop_end = next(i for i in range(window, len(lines)) if lines[i].strip() == "}"
                    and len(lines[i]) - len(lines[i].lstrip()) == 2)  # the instances' loop
    assert window < loop_end < barriers[0] < join, msl.source
    # it is the plan's sync rule for the Memory, named at the join
    assert "plan: threadgroup_barrier, join of parallel p" in lines[barriers[0]]


# --------------------------------------------------------------------------- refused


def test_metal_refuses_a_window_of_per_thread_private_memory():
    """A thread-owned private Memory is per-thread slices of the whole buffer (element
    ``l`` by thread ``l mod threads``): a window's elements belong to other threads."""

    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        gb, sg, ln = axis("gb", 2), axis("sg", 2), axis("ln", 2)
        for blk in parallel(shape(gb)):
            for grp in parallel(shape(sg)):
                for lane in parallel(shape(ln)):
                    r = blk.index(gb) * 4 + grp.index(sg) * 2 + lane.index(ln)
                    acc = memory[f32](shape(1, 4), mem.private_)
                    acc(coord(0, 0), shape(1, 2)).store(X[coord(r, 0), shape(1, 2)])
                    acc(coord(0, 2), shape(1, 2)).store(X[coord(r, 2), shape(1, 2)])
                    Y(coord(r, 0), shape(1, 4)).store(acc.load())

    k = tile_kernel("lanes")(kernel)
    tgt = REG.get("apple-m2")
    plan = plan_kernel(k, tgt, {"M": 8, "N": 4})
    assert [m.resource for m in plan.memories] == ["thread_registers"]
    with pytest.raises(PlannerError) as exc:
        emit_msl(k, plan, tgt)
    (d,) = exc.value.diagnostics
    assert d.rule == "S17" and "%acc is per-thread private storage" in d.message
    assert "windowed store [0, 0] +: [1, 2]" in d.message


_COUNTEREXAMPLE = re.compile(r"instance %p = (\d+) and instance %p = (\d+) both write "
                             r"element \[(\d+), (\d+)\]")


def _check_counterexample(message: str) -> None:
    found = _COUNTEREXAMPLE.search(message)
    assert found, message
    a, b, row, _ = (int(g) for g in found.groups())
    assert a != b  # two instances, each of whose windows [p*T, p*T + T + 1) holds the row
    assert all(p * T <= row < p * T + T + 1 for p in (a, b)), message


@pytest.mark.parametrize("target", ["x86-avx2", "apple-m2"])
@pytest.mark.parametrize("form", ["shared", "block"])
def test_overlapping_windows_are_refused_by_planning_and_lowering(form, target):
    k, fn = BUILDS[form](height=T + 1, extra=1, init=True)
    for call in (lambda: plan_kernel(k, REG.get(target), {"M": 7, "N": 5}),
                 lambda: build_loop_program(k, None)):
        with pytest.raises(PlannerError) as exc:
            call()
        (d,) = exc.value.diagnostics
        assert exc.value.kind == "invalid-ir" and d.rule == "S16"
        assert d.loc.line == _line(fn, "# the window store")
        assert "two instances write overlapping windows" in d.message
        _check_counterexample(d.message)


_OVERLAP_FILE = """
from planner.ir.frontend import (TensorView, axis, ceil_div, const, coord, dims, f32,
                                 memory, parallel, shape, tile_kernel, zeros)


def kernel():
    @tile_kernel("overlap")
    def k(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        rows = ceil_div(X.extent(0), 3) * 3 + 1
        n = X.extent(1)
        p = axis("p", ceil_div(X.extent(0), 3))
        acc = memory[f32](shape(rows, n))
        acc.store(zeros(shape(rows, n)))
        for inst in parallel(shape(p)):
            r0 = inst.index(p) * 3
            acc(coord(r0, 0), shape(4, n)).store(X[coord(r0, 0), shape(4, n)])
        Y(coord(0, 0), shape(rows, n)).store(acc.load())
    return k


BINDINGS = {"M": 7, "N": 5}


def reference(X):
    return {"Y": X}
"""


def test_the_cli_reports_the_overlap_as_an_s16_error(tmp_path: Path):
    path = tmp_path / "overlap.py"
    path.write_text(textwrap.dedent(_OVERLAP_FILE))
    for target in ("x86-avx2", "apple-m2"):
        r = subprocess.run([sys.executable, "-m", "planner", "plan", str(path), "--target",
                            target], capture_output=True, text=True, timeout=120)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "Traceback" not in r.stderr and "error [S16]" in r.stderr, r.stderr
        assert f"{path}:16:" in r.stderr  # the window store's line
        _check_counterexample(r.stderr)


def test_the_http_service_answers_the_overlap_with_a_422_naming_s16(tmp_path: Path):
    from fastapi.testclient import TestClient

    from planner.ir.json_form import kernel_to_json
    from planner.server import Settings, create_app

    bad, _ = build_shared(height=T + 1, extra=1, init=True)
    good, _ = build_shared()
    app = create_app(Settings(pool_workers=1))
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.post("/v1/plan", json={"kernel": kernel_to_json(bad),
                                          "bindings": {"M": 7, "N": 5}})
        assert r.status_code == 422, r.text
        err = r.json()
        assert err["kind"] == "invalid-ir" and err["rule"] == "S16"
        _check_counterexample(err["detail"])
        ok = client.post("/v1/plan", json={"kernel": kernel_to_json(good),
                                           "bindings": {"M": 7, "N": 5}})
        assert ok.status_code == 200, ok.text
        assert ok.json()["status"] in ("optimal", "feasible")
