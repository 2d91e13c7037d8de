"""Fixtures for catalog tests: a minimal valid catalog whose line numbers tests rely on."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from planner.catalog import load_target_text
from planner.errors import PlannerError

# Line numbers matter: the error tests name file:line:col in this text.
TINY = """\
name: tiny
backend: null
scopes:
  - {name: root, parent: null, extent: 1}
  - {name: worker, parent: root, extent: 4}
default_parallel_scope: worker
resources:
  - name: scratch
    class: shared
    instance_scope: worker
    capacity: 48 KiB
    coherence: barrier
    operations: [read, write]
    slicing: false
    bandwidth: 64
    latency: 20
  - name: dram
    class: global
    instance_scope: root
    capacity: unbounded
    coherence: coherent
    operations: [read, write]
    slicing: true
    bandwidth: 8
    latency: 300
access:
  - {scope: worker, resource: scratch, operations: [read, write]}
  - {scope: worker, resource: dram, operations: [read]}
costs: {clock_ghz: 1.0, concurrent_instances: 4, cheap: 8, transcendental: 1, mma: 16, barrier: 50}
"""


@pytest.fixture
def tiny() -> str:
    return TINY


def edit(text: str, *replacements: tuple[str, str]) -> str:
    """``text`` with each (old, new) replaced once; old must occur."""
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


@pytest.fixture
def catalog_errors() -> Callable[..., list[str]]:
    """Load TINY edited by (old, new) pairs; return the rendered diagnostics."""

    def run(*replacements: tuple[str, str], text: str = TINY) -> list[str]:
        with pytest.raises(PlannerError) as info:
            load_target_text(edit(text, *replacements), "tiny.yaml")
        assert info.value.kind == "catalog"
        return info.value.render().splitlines()

    return run
