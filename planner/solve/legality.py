"""Which inlining choices an edge may take, and why not.

The op kinds that may be fused, recomputed or computed inline; the recompute chain a
consumer re-derives (:func:`recompute_chain`); and the reasons fusion (S3) or
recomputation of one edge is refused, each a sentence the plan shows beside the edge.
"""

from __future__ import annotations

from collections.abc import Mapping

from planner.ir import core
from planner.ir.types import TileType
from planner.solve.context import Chain, Context, owner_of, staged, tile_shape

# --------------------------------------------------------------------------- kinds

_ELEMENTWISE_PREFIXES = ("tile.unary.", "tile.binary.")
_FUSIBLE = frozenset({"tile.load", "memory.load", "tile.full", "tile.iota", "tile.cast",
                      "tile.select", "tile.broadcast", "tile.slice"})
_RECOMPUTABLE = (_FUSIBLE - {"memory.load"}) | {"tile.transpose"}
LOADS = frozenset({"tile.load", "memory.load"})
SINKS = frozenset({"tile.store", "memory.store", "memory.copy_async"})


def is_fusible_kind(kind: str) -> bool:
    """Producers that can be computed inline in a consumer (S3 fusion legality)."""
    return kind in _FUSIBLE or kind.startswith(_ELEMENTWISE_PREFIXES)


def is_recomputable_kind(kind: str) -> bool:
    """Producers a consumer may re-derive from global memory."""
    return kind in _RECOMPUTABLE or kind.startswith(_ELEMENTWISE_PREFIXES)


def is_inlinable_kind(kind: str) -> bool:
    """Producers the lowering computes inline when none of their edges stores them."""
    return is_fusible_kind(kind) or kind == "tile.transpose"


def is_elementwise_kind(kind: str) -> bool:
    return kind.startswith(_ELEMENTWISE_PREFIXES) or kind in ("tile.select", "tile.cast")


# --------------------------------------------------------------------------- recompute chains

MAX_RECOMPUTE_CHAIN = 16


def rederivable(ctx: Context, node: str, owner: str) -> bool:
    """Whether a recomputation owned by ``owner`` re-derives ``node`` (else it stops)."""
    d = ctx.nodes[node]
    return is_recomputable_kind(d["kind"]) and owner_of(ctx, d["region"]) == owner


def recompute_chain(ctx: Context, node: str) -> Chain:
    """``node``'s recompute chain (see :class:`Chain`), cached.

    Recomputing through it is refused when it re-reads a view the kernel also stores (a
    store may intervene between the load and the consumer), when it reaches a Memory
    snapshot (a snapshot is read once: re-reading the Memory could see another state),
    or when it has more than :data:`MAX_RECOMPUTE_CHAIN` ops.
    """
    found = ctx.chains.get(node)
    if found is not None:
        return found
    owner = owner_of(ctx, ctx.nodes[node]["region"])
    members, stack = {node}, [node]
    why: str | None = None
    steps = ctx.chain_steps
    while stack and why is None:
        m = stack.pop()
        why, operands = steps.get(m) or _chain_step(ctx, m)  # its cache, read inline
        for u, snapshot, u_owner in operands:
            if snapshot:
                why = why or (f"its chain reaches the Memory snapshot {ctx.node_name[u]} "
                              "(a snapshot is read once)")
            elif u not in members and u_owner == owner:  # :func:`rederivable`
                members.add(u)
                stack.append(u)
        if len(members) > MAX_RECOMPUTE_CHAIN:
            why = f"its producer chain is longer than {MAX_RECOMPUTE_CHAIN} ops"
    chain = Chain(frozenset(members), why)
    ctx.chains[node] = chain
    return chain


def _chain_step(ctx: Context, m: str) -> tuple[str | None, list[tuple[str, bool, str | None]]]:
    """Why chain member ``m`` stops a recomputation, and its operands: (node, a Memory
    snapshot, the owner that may re-derive it: None where it is not recomputable),
    cached (chains overlap)."""
    found = ctx.chain_steps.get(m)
    if found is None:
        op = ctx.nodes[m]["op"]
        why = staged_load_why(ctx, m)
        if isinstance(op, core.LoadOp) and id(op.view) in ctx.stored_views:
            why = (f"its chain re-reads %{ctx.names.get(op.view, '?')}, which the kernel "
                   "also stores (a store may intervene)")
        operands = []
        for u in ctx.producers(m):
            d = ctx.nodes[u]
            kind = str(d["kind"])
            operands.append((u, kind == "memory.load", owner_of(ctx, d["region"])
                             if is_recomputable_kind(kind) else None))
        found = ctx.chain_steps[m] = (why, operands)
    return found


# --------------------------------------------------------------------------- legality


def fusion_illegal(ctx: Context, u: str, v: str, data: Mapping[str, object]) -> str | None:
    pd, cd = ctx.nodes[u], ctx.nodes[v]
    kind, ckind = pd["kind"], cd["kind"]
    common = _inline_illegal(ctx, u, v, data)
    if common:
        return common
    if kind.startswith("tile.reduce"):
        return "a reduction's result cannot be fused into its consumer"
    if kind == "tile.mma":
        return "an mma accumulator cannot be fused into its consumer"
    if not is_fusible_kind(kind):
        return f"{kind} is not fusible (only elementwise, broadcast, load, full, iota, cast, " \
               "select producers are)"
    if ckind == "tile.mma" and data["operand"] != 2 and kind not in LOADS:
        return "an mma operand is read from storage (fusing arithmetic would repeat it " \
               "for every output column)"
    if data["stage_distance"]:
        return "fusion across pipeline stages would undo the schedule"
    if kind == "memory.load" and _stored_between(ctx, pd, cd):
        return "the Memory is stored between the snapshot and this use"
    op = cd["op"]
    result = op.results[0] if op is not None and op.results else None
    if (result is not None and isinstance(result.type, TileType)
            and not ckind.startswith(("tile.reduce", "tile.broadcast"))
            and ckind != "tile.mma"):
        pshape = tile_shape(ctx, pd["value"])
        cshape = tile_shape(ctx, result)
        if pshape != cshape:
            return f"iteration spaces differ ({list(pshape)} vs {list(cshape)})"
    return None


def staged_load_why(ctx: Context, node: str) -> str | None:
    """Why a view load cannot be inlined: its scope reads the view only through a copy
    engine, which lands the tile in a buffer (the load's value is materialized there)."""
    op = ctx.nodes[node]["op"]
    if not isinstance(op, core.LoadOp):
        return None
    how = staged(ctx, op)
    if how is None:
        return None
    return (f"{how.scope} reads view {how.view} only through {how.engine.name}, which lands "
            f"the tile in a buffer ({how.source_resource} → {how.destination}): the load is "
            "materialized there (S20)")


def _inline_illegal(ctx: Context, u: str, v: str, data: Mapping[str, object]) -> str | None:
    pd, cd = ctx.nodes[u], ctx.nodes[v]
    why = staged_load_why(ctx, u)
    if why:
        return why
    if data["loop_carried"]:
        return "loop-carried edges are virtual or materialized"
    if cd["kind"] == "loop.carry":
        return "a loop-carried value's initial value is stored, not inlined"
    if pd["kind"] == "loop.carry":
        return "a loop carry is a recurrence: it cannot be re-derived per consumer"
    if owner_of(ctx, pd["region"]) != owner_of(ctx, cd["region"]):
        return "producer and consumer run in different parallel instances"
    return None


def recompute_illegal(ctx: Context, u: str, v: str, data: Mapping[str, object],
                      fuse_why: str | None) -> str | None:
    """Why ``u -> v`` may not be recomputed, or None.

    Besides what cannot be re-derived, recomputation is not offered where it is the
    same program as fusion: when fusion is legal and the producer's chain is the
    producer alone (a load, full or iota, or an op whose operands all stop the chain),
    re-deriving it bypasses no realization of an intermediate value, so both inline
    the producer reading its operands as their edges decided.
    """
    common = _inline_illegal(ctx, u, v, data)
    if common:
        return common
    kind = ctx.nodes[u]["kind"]
    if kind.startswith("tile.reduce"):
        return "a reduction is not re-executed per consumer"
    if kind == "tile.mma":
        return "an mma result is not recomputed"
    if kind == "memory.load":
        return "a Memory snapshot is read once (a later read could see another state)"
    if not is_recomputable_kind(kind):
        return f"{kind} is not recomputable"
    if ctx.nodes[v]["kind"] == "tile.mma" and data["operand"] == 2:
        return ("never recomputed into an mma accumulator: it is evaluated once per element "
                "into the mma's output, which fusing it does")
    chain = recompute_chain(ctx, u)
    if chain.why_not:
        return chain.why_not
    if fuse_why is None and chain.members == {u}:
        return (f"the same program as fused: {ctx.node_name[u]} has no recomputable operand "
                "whose realization re-deriving it would bypass")
    return None


def _stored_between(ctx: Context, pd: Mapping[str, object], cd: Mapping[str, object]) -> bool:
    mem = pd["op"].memory  # type: ignore[attr-defined]
    lo, hi = pd["order"], cd["order"]
    return any(isinstance(d["op"], core.MEMORY_WRITE_OPS) and d["op"].memory is mem
               and lo < d["order"] < hi for _, d in ctx.g.nodes(data=True))
