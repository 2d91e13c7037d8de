"""Copy engines (``copy_engines:``): what memory.copy_async runs on, checked on load."""

from __future__ import annotations

import pytest

from planner.catalog import CatalogRegistry, CopyMode, load_target_text

ENGINE = """copy_engines:
  - name: dma
    mode: {mode}
    scope: worker
    from: [{src}]
    to: [scratch]
    bandwidth: 16
    issue: 5
    in_flight: 2
    wait: dma.wait
"""


def _with_engine(mode: str = "prefetch", src: str = "dram", access: str = "[read]") -> str:
    from tests.catalog.conftest import TINY, edit

    text = edit(TINY, ("  - {scope: worker, resource: dram, operations: [read]}",
                       f"  - {{scope: worker, resource: dram, operations: {access}}}"))
    return text + ENGINE.format(mode=mode, src=src)


def test_engine_is_loaded_and_found_by_scope_and_resources():
    target = load_target_text(_with_engine(), "tiny.yaml")
    (eng,) = target.copy_engines
    assert (eng.name, eng.mode, eng.scope) == ("dma", CopyMode.PREFETCH, "worker")
    assert (eng.sources, eng.destinations, eng.bandwidth, eng.issue, eng.in_flight) == (
        ("dram",), ("scratch",), 16, 5, 2)
    assert target.copy_engines_for("worker", "dram", "scratch") == (eng,)
    assert target.copy_engines_for("root", "dram", "scratch") == ()  # another issuer
    assert target.copy_engines_for("worker", "scratch", "dram") == ()  # other direction


def test_no_section_means_no_engines(tiny):
    assert load_target_text(tiny, "tiny.yaml").copy_engines == ()


def test_async_engine_needs_copy_async_access(catalog_errors):
    text = _with_engine(mode="async")
    lines = catalog_errors(text=text)
    # the source (dram) is granted only `read` and scratch only read/write at worker
    assert lines == [
        "tiny.yaml:34:12: error: copy_engines[0].from[0]: copy engine 'dma' (async) is "
        "issued by scope 'worker', which has no 'copy_async' access to resource 'dram' "
        "(add it to 'access')",
        "tiny.yaml:35:10: error: copy_engines[0].to[0]: copy engine 'dma' (async) is issued "
        "by scope 'worker', which has no 'copy_async' access to resource 'scratch' (add it "
        "to 'access')",
    ]


def test_unknown_resource_and_mode(catalog_errors):
    lines = catalog_errors(text=_with_engine(mode="magic", src="hbm"))
    assert lines == [
        "tiny.yaml:32:11: error: copy_engines[0].mode: unknown copy mode 'magic' (known: "
        "async, prefetch)",
        "tiny.yaml:34:12: error: copy_engines[0].from[0]: unknown resource 'hbm' (known: "
        "scratch, dram)",
    ]


def test_prefetch_engine_needs_plain_read_of_its_source(catalog_errors):
    lines = catalog_errors(text=_with_engine(access="[write]"))
    assert lines == [
        "tiny.yaml:34:12: error: copy_engines[0].from[0]: copy engine 'dma' (prefetch) is "
        "issued by scope 'worker', which has no 'read' access to resource 'dram' (add it "
        "to 'access')",
    ]


@pytest.mark.parametrize(("target", "engines"), [
    ("x86-avx2", {("prefetch", "worker", "dram", "local")}),
    ("x86-avx512", {("prefetch", "worker", "dram", "local")}),
    ("apple-m2", set()),
    ("nvidia-h100", {("tma", "block", "hbm", "smem"), ("cp_async", "block", "hbm", "smem"),
                     ("tma_multicast", "cluster", "hbm", "dsmem")}),
    ("nvidia-b200", {("tma", "block", "hbm", "smem"), ("cp_async", "block", "hbm", "smem"),
                     ("tma_multicast", "cluster", "hbm", "dsmem"),
                     ("tcgen05_cp", "block", "smem", "tmem")}),
    ("npu-systolic", {("weight_fetcher", "core", "weight_dram", "weight_fifo"),
                      ("dma", "core", "weight_dram", "unified_buffer")}),
])
def test_shipped_engines(target, engines):
    t = CatalogRegistry().get(target)
    for name, scope, src, dst in engines:
        assert name in [e.name for e in t.copy_engines_for(scope, src, dst)], (target, name)
    assert {e.name for e in t.copy_engines} == {e[0] for e in engines}
