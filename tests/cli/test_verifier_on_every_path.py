"""Every CLI command and HTTP endpoint that takes a kernel runs the verifier first.

Each kernel under ``kernels/`` breaks one verifier rule (S10 twice: never stored, and
stored only in a loop that runs zero times; S13; S14; S15 twice, as text IR: an old
state after a store, and a state of another memory; S16).  The offending line carries
the marker ``verifier: RULE "words"``, the words being part of the verifier's message
(worded unlike the interpreter's own run-time checks); the expected rule, line and words
come from that marker, never from the code under test.  ``plan``, ``run``, ``lower``,
``compare``, ``interpret`` and ``check`` (in-process, through :func:`planner.cli.main`)
must exit 1 with the verifier's diagnostic on that line and nothing on stdout;
``/v1/plan``, ``/v1/compare``, ``/v1/check`` and ``/v1/lower`` of a real server on
loopback must answer 422 ``invalid-ir`` with the same rule, line and words, for the
kernel as JSON IR and as text IR.  ``show`` only prints, and still prints these kernels.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from live_http import checked_client

from planner.cli import main
from planner.ir.core import Kernel
from planner.ir.json_form import kernel_to_json
from planner.ir.load import load_kernel
from planner.ir.printer import print_kernel
from planner.server import Settings

KERNELS = Path(__file__).resolve().parent / "kernels"
MARKER = re.compile(r'verifier: (S\d+) "([^"]+)"\s*$')
#: ``FILE:LINE[:COL]: error [RULE]: MESSAGE`` as the CLI renders a diagnostic.
RENDERED = re.compile(r"^(?P<file>.+?):(?P<line>\d+)(?::\d+)?: error \[(?P<rule>[^\]]*)\]: "
                      r"(?P<message>.*)$", re.MULTILINE)
#: Bindings for the text IR kernels (the .py kernels bring their own BINDINGS).
TEXT_BINDINGS = {"M": 16, "N": 4}


@dataclass(frozen=True)
class Bad:
    path: Path
    rule: str
    line: int
    says: str  # words of the verifier's message

    @property
    def is_text_ir(self) -> bool:
        return self.path.suffix == ".mlir"

    @property
    def bind_args(self) -> list[str]:
        if not self.is_text_ir:
            return []
        return [arg for k, v in TEXT_BINDINGS.items() for arg in ("--bind", f"{k}={v}")]


def _bad(path: Path) -> Bad:
    found = [(i, *m.groups()) for i, text in enumerate(path.read_text().splitlines(), start=1)
             if (m := MARKER.search(text))]
    assert len(found) == 1, f"{path.name}: expected one 'verifier: RULE \"words\"' marker"
    line, rule, says = found[0]
    return Bad(path, rule, line, says)


BAD = [_bad(p) for p in sorted(KERNELS.iterdir()) if p.suffix in (".py", ".mlir")]
IDS = [b.path.stem for b in BAD]


def test_every_rejection_kind_has_a_kernel() -> None:
    assert sorted(b.rule for b in BAD) == ["S10", "S10", "S13", "S14", "S15", "S15", "S16"]


# -- the command line ------------------------------------------------------------------

#: argv after the kernel for each command that takes one (``--plan`` names a file that
#: does not exist: the verifier must answer before the plan is read).
COMMANDS: dict[str, list[str]] = {
    "plan": ["plan"],
    "plan-json": ["plan", "--json", "--target", "apple-m2"],
    "run": ["run", "--check"],
    "run-plan-file": ["run", "--plan", "/nonexistent/plan.json"],
    "run-metal": ["run", "--target", "apple-m2", "--check"],
    "lower": ["lower"],
    "lower-llvm": ["lower", "--emit", "llvm", "--baseline", "all-materialize"],
    "lower-msl": ["lower", "--target", "apple-m2", "--emit", "msl"],
    "compare-baseline": ["compare", "--baseline", "all-materialize"],
    "compare-targets": ["compare", "--target", "x86-avx2", "--target", "apple-m2"],
    "interpret": ["interpret"],
    "check": ["check"],
    "check-symbolic": ["check", "--symbolic"],
}


@pytest.mark.parametrize("command", COMMANDS, ids=list(COMMANDS))
@pytest.mark.parametrize("bad", BAD, ids=IDS)
def test_cli_command_reports_the_verifier_diagnostic(bad: Bad, command: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    name, *rest = COMMANDS[command]
    rc = main([name, str(bad.path), *rest, *bad.bind_args])
    out, err = capsys.readouterr()
    assert rc == 1, (out, err)
    assert out == "", "the verifier must run before anything is printed"
    assert "Traceback" not in err
    found = [(Path(m["file"]).name, int(m["line"]), m["rule"]) for m in RENDERED.finditer(err)]
    assert found == [(bad.path.name, bad.line, bad.rule)], err
    assert bad.says in err, err


@pytest.mark.parametrize("bad", BAD, ids=IDS)
def test_cli_show_still_prints_an_invalid_kernel(bad: Bad,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(bad.path), "--no-loc"]) == 0
    assert '"tile.kernel"' in capsys.readouterr().out


# -- HTTP ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    settings = Settings(writable_catalog_dir=tmp_path_factory.mktemp("catalogs"),
                        pool_workers=2, default_time_limit_s=5.0, max_time_limit_s=5.0)
    with checked_client(settings) as client:
        yield client


def _loaded(bad: Bad) -> tuple[Kernel, dict[str, int]]:
    loaded = load_kernel(str(bad.path))
    return loaded.kernel, dict(TEXT_BINDINGS if bad.is_text_ir else loaded.bindings)


def _source(bad: Bad, form: str) -> dict[str, Any] | str:
    kernel, _ = _loaded(bad)
    if form == "json":
        return kernel_to_json(kernel)
    # text IR: the file itself, or the Python kernel printed with its source locations
    return bad.path.read_text() if bad.is_text_ir else print_kernel(kernel)


ENDPOINTS: dict[str, tuple[str, dict[str, Any]]] = {
    "plan": ("/v1/plan", {}),
    "plan-baseline": ("/v1/plan", {"baseline": "all-materialize", "target": "apple-m2"}),
    "compare": ("/v1/compare", {"variants": [{"target": "x86-avx2"}, {"target": "apple-m2"}]}),
    "check": ("/v1/check", {}),
    "lower": ("/v1/lower", {"emit": "loops"}),
    "lower-llvm": ("/v1/lower", {"emit": "llvm"}),
}


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=list(ENDPOINTS))
@pytest.mark.parametrize("form", ["json", "text"])
@pytest.mark.parametrize("bad", BAD, ids=IDS)
def test_http_endpoint_reports_the_verifier_diagnostic(http: httpx.Client, bad: Bad, form: str,
                                                       endpoint: str) -> None:
    url, extra = ENDPOINTS[endpoint]
    _, bindings = _loaded(bad)
    r = http.post(url, json={"kernel": _source(bad, form), "bindings": bindings, **extra})
    assert r.status_code == 422, r.text
    err = r.json()  # an RFC 9457 problem with the verifier's members
    assert err["kind"] == "invalid-ir", err
    assert (err["rule"], err["location"]["line"]) == (bad.rule, bad.line), err
    assert bad.says in err["detail"], err
    # JSON IR and printed Python keep the user's file; a text IR body is "<request>"
    want_file = "<request>" if bad.is_text_ir and form == "text" else bad.path.name
    assert Path(err["location"]["file"]).name == want_file, err
    assert [(d["rule"], d["location"]["line"]) for d in err["diagnostics"]] == \
        [(bad.rule, bad.line)], err
