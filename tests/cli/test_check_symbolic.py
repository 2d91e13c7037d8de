"""``planner check --symbolic`` on every built-in example: nothing refuted or unknown,
and every ``assumed`` result is one of the assumptions the README lists.

The README's proof section names each assumption (``planner.prove.proofs.ASSUMPTIONS``
maps the name to the words an assumed result starts with); declaring bounds for every
view extent turns the view-storage assumption into a z3 proof.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planner.cli import main
from planner.ir.examples import builtin_examples_dir, load_example
from planner.prove.proofs import ASSUMPTIONS

README = Path(__file__).resolve().parents[2] / "README.md"
EXAMPLES = sorted(p.stem for p in builtin_examples_dir().glob("*.py")
                  if not p.name.startswith("_"))
LINE = re.compile(r"^  (proved|refuted|assumed|unknown)\s+(\S+)\s+(.*)$")


def test_the_readme_lists_every_assumption() -> None:
    text = README.read_text()
    for name in ASSUMPTIONS:
        assert f"**{name}**" in text, name


@pytest.mark.parametrize("target", ["x86-avx2", "apple-m2"])
@pytest.mark.parametrize("name", EXAMPLES)
def test_check_symbolic_reports_only_listed_assumptions(name: str, target: str,
                                                        capsys: pytest.CaptureFixture) -> None:
    rc = main(["check", name, "--target", target, "--symbolic"])
    out = capsys.readouterr().out
    statuses = [m.groups() for line in out.splitlines() if (m := LINE.match(line))]
    assert rc == 0 and statuses, out
    assert not [s for s in statuses if s[0] in ("refuted", "unknown")], out
    for status, _, rest in statuses:
        if status == "assumed":
            detail = rest.split("  (", 1)[1]
            assert any(detail.startswith(words) for words in ASSUMPTIONS.values()), rest


def test_bounds_on_every_view_extent_prove_what_was_assumed(capsys: pytest.CaptureFixture
                                                            ) -> None:
    kernel = load_example(builtin_examples_dir() / "softmax.py").kernel
    bounds = [f"--bound={s}=1..65536" for s in sorted(kernel.symbols())]
    assert main(["check", "softmax", "--target", "x86-avx2", "--symbolic", *bounds]) == 0
    out = capsys.readouterr().out
    assert "assumed" not in out and "all proved" in out


@pytest.mark.parametrize("bad", ["N=5..1", "N=1-4", "N=-1..4", "N=a..b"])
def test_a_malformed_bound_is_a_usage_error(bad: str, capsys: pytest.CaptureFixture) -> None:
    rc = main(["check", "softmax", "--target", "x86-avx2", f"--bound={bad}"])
    err = capsys.readouterr().err
    assert rc != 0 and "--bound" in err and "Traceback" not in err
