"""``planner report`` pages in a real headless Chromium (issue 14).

The page is loaded with ``chromium --headless --dump-dom`` (a plain subprocess): its
script must run without a console message, and the counts it writes on ``<body>``
(``data-edge-count``: edges drawn in the dataflow SVG, ``data-resource-count``:
memory charts drawn) must match the plan.  Skipped, never failed, where no Chromium
can be found (``scripts/install_chromium.sh`` installs it; CI runs that script).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from planner.catalog import CatalogRegistry
from planner.ir.examples import builtin_examples_dir, load_example
from planner.ir.printer import print_kernel
from planner.plan.report import plan_report_html
from planner.solve import plan_kernel

CASES = [("softmax", "x86-avx2"), ("attention", "apple-m2")]


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def load_in_chromium(browser: str, page: Path, profile: Path) -> tuple[str, str]:
    """The page's DOM after its scripts ran, and Chromium's log (stderr)."""
    args = [browser, "--headless", "--disable-gpu", "--no-first-run",
            "--no-default-browser-check", "--enable-logging=stderr", "--v=0",
            f"--user-data-dir={profile}", "--dump-dom", page.as_uri()]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.insert(1, "--no-sandbox")  # Chromium refuses to run as root with the sandbox
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


def console_errors(log: str) -> list[str]:
    return [line for line in log.splitlines()
            if "Uncaught" in line or ":CONSOLE" in line or "console" in line.lower()]


def body_attribute(dom: str, name: str) -> str | None:
    body = re.search(r"<body\b[^>]*>", dom)
    assert body, dom[:500]
    found = re.search(rf'\b{name}="([^"]*)"', body.group(0))
    return found.group(1) if found else None


@pytest.mark.parametrize(("kernel", "target"), CASES, ids=lambda x: x)
def test_report_renders_in_headless_chromium(kernel: str, target: str, tmp_path: Path) -> None:
    browser = chromium()
    if browser is None:
        pytest.skip("no Chromium on PATH (chromium, chromium-browser, google-chrome): "
                    "run scripts/install_chromium.sh")
    example = load_example(builtin_examples_dir() / f"{kernel}.py")
    plan = plan_kernel(example.kernel, CatalogRegistry().get(target), dict(example.bindings))
    page = tmp_path / f"{kernel}.html"
    page.write_text(plan_report_html(plan, print_kernel(example.kernel)))

    dom, log = load_in_chromium(browser, page, tmp_path / "profile")

    assert console_errors(log) == []
    assert body_attribute(dom, "data-ready") == "yes"  # the script ran to its end
    assert body_attribute(dom, "data-edge-count") == str(len(plan.edges))
    resources = {b.resource for b in plan.buffers}
    assert resources and body_attribute(dom, "data-resource-count") == str(len(resources))
    for resource in resources:
        assert f'data-resource="{resource}"' in dom
