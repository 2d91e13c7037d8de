"""The networkx dataflow view the planner consumes."""

from __future__ import annotations

import attention
import manual_gemm
import softmax

from planner.ir.graph import dataflow_graph, live_edges


def edges_by_kind(g):
    return [(g.nodes[u]["kind"], g.nodes[v]["kind"], d) for u, v, d in g.edges(data=True)]


def test_softmax_graph_has_the_two_multi_consumer_values():
    g = dataflow_graph(softmax.kernel(), softmax.BINDINGS)
    fanout = {g.nodes[n]["kind"]: g.out_degree(n) for n in g if g.out_degree(n) > 1}
    assert fanout == {"tile.load": 2, "tile.unary.exp": 2}
    for _, _, d in edges_by_kind(g):
        if d["bytes_value"] != 16:
            assert d["bytes_value"] == 4 * 70 * 4  # block_m rows of N floats
    assert len(live_edges(g)) == g.number_of_edges() == 10


def test_manual_gemm_memory_is_a_fixed_occupant_and_acc_a_carried_cycle():
    g = dataflow_graph(manual_gemm.kernel(), manual_gemm.BINDINGS)
    assert [a["name"] for a in g.graph["allocs"]] == ["As", "Bs"]
    carried = [(u, v) for u, v, d in g.edges(data=True) if d["loop_carried"]]
    assert len(carried) == 1
    u, v = carried[0]
    assert g.nodes[u]["kind"] == "tile.mma" and g.nodes[v]["kind"] == "loop.carry"
    assert g.nodes[u]["pipeline"] == "k_tiles" and g.nodes[u]["stage"] == "compute"


def test_attention_stage_distance_between_load_and_compute():
    g = dataflow_graph(attention.kernel(), attention.BINDINGS)
    dist = {(g.nodes[u]["kind"], g.nodes[v]["kind"]): d["stage_distance"]
            for u, v, d in g.edges(data=True) if d["stage_distance"]}
    assert dist == {("tile.load", "tile.transpose"): 1, ("tile.load", "tile.mma"): 1}
    assert all(g.nodes[n]["window"] == 2 for n in g if g.nodes[n].get("pipeline"))
