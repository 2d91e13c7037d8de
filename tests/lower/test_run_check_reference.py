"""``planner run --check`` compares with the example's numpy reference on every backend.

An example-style module whose kernel forgets to store one output passes the comparison
with the reference interpreter (the untouched output is the same zeros in both) but not
the one with its own numpy ``reference``: the check fails naming that output (issue 14).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.catalog import CatalogRegistry, Target
from planner.cli import main
from planner.lower.backends import backend_for

EXAMPLE = '''
from __future__ import annotations

import numpy as np

from planner.ir.frontend import (
    TensorView, axis, ceil_div, const, coord, dims, f32, parallel, shape, tile_kernel,
)


def kernel():
    @tile_kernel("twice_thrice")
    def twice_thrice(X: TensorView[const(f32), dims("M", "N")],
                     Y: TensorView[f32, dims("M", "N")],
                     Z: TensorView[f32, dims("M", "N")]):
        gm = axis("gm", ceil_div(X.extent(0), 4))
        m = axis("m", 4)
        n = axis("n", X.extent(1))
        for nest in parallel(shape(gm)):
            r0 = nest.index(gm) * 4
            x = X[coord(r0, 0), shape(m, n)]
            Y(coord(r0, 0), shape(m, n)).store(x + x)
            STORE_Z

    return twice_thrice


BINDINGS = {"M": 10, "N": 7}


def reference(X: np.ndarray) -> dict[str, np.ndarray]:
    return {"Y": 2 * X, "Z": 3 * X}
'''


def _example(tmp_path: Path, *, stores_z: bool) -> str:
    store = "Z(coord(r0, 0), shape(m, n)).store(x + x + x)" if stores_z else "pass"
    path = tmp_path / ("good.py" if stores_z else "forgets_z.py")
    path.write_text(EXAMPLE.replace("STORE_Z", store))
    return str(path)


def _target(name: str) -> Target:
    return CatalogRegistry([]).get(name)


def _runnable(name: str) -> None:
    target = _target(name)
    reason = backend_for(target).unavailable(target)
    if reason is not None:
        pytest.skip(reason)


def _run(path: str, target: str) -> list[str]:
    argv = ["run", path, "--target", target, "--check"]
    return argv + (["--repeat", "1", "--threads", "1"] if target.startswith("x86") else [])


@pytest.mark.filterwarnings("ignore::planner.ir.frontend.DslWarning")
@pytest.mark.parametrize("target", ["x86-avx2", "apple-m2"])
def test_a_forgotten_output_fails_run_check(tmp_path: Path, target: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    _runnable(target)
    assert main(_run(_example(tmp_path, stores_z=False), target)) == 1
    captured = capsys.readouterr()
    assert "Z vs the reference interpreter: max abs error 0 ok" in captured.out
    assert "Z vs the example's numpy reference" in captured.out
    assert "Y vs the example's numpy reference: max abs error" in captured.out
    assert "Z" in captured.err and "example's numpy reference" in captured.err
    if target.startswith("x86"):
        assert "disagrees with the example's numpy reference on Z: max abs error" \
            in captured.err
        assert "reference interpreter on" not in captured.err
    else:
        assert "Z (forward order, vs the example's numpy reference)" in captured.err


@pytest.mark.parametrize("target", ["x86-avx2", "apple-m2"])
def test_the_correct_kernel_passes_both_references(tmp_path: Path, target: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _runnable(target)
    assert main(_run(_example(tmp_path, stores_z=True), target)) == 0
    out = capsys.readouterr().out
    for name in ("Y", "Z"):
        assert f"{name} vs the reference interpreter: max abs error" in out
        assert f"{name} vs the example's numpy reference: max abs error" in out
    assert "MISMATCH" not in out
    assert "the reference interpreter and the example's numpy reference" in out


def test_the_summary_reports_each_comparison(tmp_path: Path) -> None:
    from planner.ir.load import load_kernel

    _runnable("x86-avx2")
    x86 = _target("x86-avx2")
    with pytest.warns(UserWarning, match="output view %Z .* is never stored"):
        loaded = load_kernel(_example(tmp_path, stores_z=False))
    result = backend_for(x86).run(loaded, None, x86, loaded.bindings, threads=1)
    assert result.ok is False
    assert result.summary.startswith("MISMATCH (reference interpreter ok, numpy reference: "
                                     "MISMATCH on Z;")
