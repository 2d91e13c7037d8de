"""The cost model: the priced planning problem and its reference evaluator.

:func:`build_problem` turns a kernel's dataflow graph (``planner.ir.graph``) and a
target catalog into a :class:`Problem`: every value (a Tile definition) with its
edges, the choices each edge may take, what each choice costs, where each value
could live, and which program points are checked for capacity.  The CP-SAT model
(``planner.solve.model``) encodes exactly this problem; :func:`evaluate` is the
pure-Python reference of the same semantics (used to decode plans, to explain them,
and by the exhaustive tests that confirm CP-SAT's optimum).

Time units
    Integer nanoseconds.  A term is ``cycles × executions / clock_ghz`` rounded once,
    where cycles come from the catalog's figures and ``executions`` is how often the
    op runs: ``ceil(parallel instances / concurrent_instances) × loop trip counts``.

Compute (per execution)
    elementwise ops ``elements / throughput`` (``cheap`` or ``transcendental``),
    reductions ``input elements / cheap``, mma ``2·m·n·k / mma``; broadcast, full,
    iota and transpose are free (they become index arithmetic).

Traffic (per execution)
    ``bytes / bandwidth`` of the resource touched.  A resource instance shared by the
    concurrently running instances (an ancestor of the executing scope, e.g. DRAM for
    CPU workers) gives each of them ``bandwidth / concurrent_instances``.  A
    ``tile.load``/``tile.store`` moves its tile through the global resource; a
    ``memory.load``/``memory.store`` through the resource its Memory resolved to.

Per edge decision (producer value ``v`` → consumer ``c``)
    * virtual: free; ``v`` occupies registers (the private resource of its owner,
      aggregated over the owner's descendant instances) from definition to use.
    * materialized in ``(resource, layout)``: ``v`` is written once (write traffic,
      plus the catalog's sync rule when the resource is shared by several executing
      members and is not hardware-coherent) and read by each materialized consumer
      (read traffic; consumers that read columns — mma operand b, transpose,
      reductions over axis 0 — pay ``(degree - 1)`` times the read for bank conflicts
      of the layout; a swizzled layout pays one cheap op per element for its address
      arithmetic).  Padding counts toward capacity.
    * fused: ``v`` is computed inline in the consumer's loop, reading its own operands
      as their edges decided (their terms are theirs): the producer's compute (or, for
      a load, its read) at the consumer's execution count.  Fused into an mma's
      accumulator, ``v`` is evaluated once per element into the mma's output before
      it runs (zeros: the mma overwrites instead of accumulating).
    * recomputed: the consumer re-derives ``v`` from the kernel's inputs, whatever its
      operands' edges decided: its chain (:func:`recompute_chain`: ``v`` and its
      recomputable ancestors of the same parallel instance, each once) back to the
      loads, each re-reading its tile from its view at the global resource's
      bandwidth (shared by the concurrent instances), or to values that cannot be
      recomputed (reductions, mma results, loop carries), which are read as their own
      edges decided; all at the consumer's execution count, plus the producer's
      exposed latency when the edge crosses pipeline stages.  Not offered where it is
      the same program as fused (fusion legal and the chain is ``v`` alone: nothing
      whose realization it would bypass), into an mma accumulator (fusing it evaluates it
      once per element into the mma's output: ``c = a @ b`` for zeros), through
      a Memory snapshot or a load of a view the kernel also stores.
    The producer itself runs once ("home" compute) when at least one of its edges is
    virtual or materialized.

Versions
    Inside a pipeline a value preserved across stages wants ``min(stage distance,
    window - 1) + 1`` versions.  Fewer is legal: each missing version exposes a share
    of the producer's latency (load latency plus its own time) per iteration as a
    stall, and the lowering then overlaps the stages less (in order when no lag is
    left).  Explicit Memory versions are decided the same way.  Versions are one array
    live over the whole pipeline loop, 64 bytes apart (the lowering's version stride).

Capacity: what the lowering allocates
    Live ranges are half-open intervals of program points (the op order of the
    kernel).  A value is held from its definition through the evaluation of each
    reader (the reader's operands and the result it writes coexist), to the end of a
    loop when read inside a loop that does not define it.  A reader fused or
    recomputed into a later consumer is evaluated there, so the value stays held
    until then: these extensions depend on other edges' choices (:class:`Guard`
    ``site``).  A value kept in registers for some edges and in a buffer for others is
    held in both (the lowering keeps a register copy).  A loop carry's buffer exists
    for the whole loop: until the yielded value is written into it in place (two
    versions for the whole loop when the old value is read after the new one is
    written), and beside the yielded value when they live in different storage
    (:class:`Guard` ``split``); its initial value is held until the carry is filled.
    Compiler temporaries count too (:class:`Temp`): the staging copy of an mma
    operand the multiply cannot read in place (a view window, an inlined expression,
    a swizzled or non-row-major buffer) in the resource the lowering gives it, and,
    where registers are split among the owner's threads, the shared exchange area
    through which a register tile is read across threads (a reduction, broadcast,
    transpose or mma operand).  Explicit Memory is held wherever its owner runs (it is
    allocated per instance).  At every point where something starts to be live, each
    resource's occupancy (bytes × versions over live holders, explicit Memory
    included) must stay within its per-owner-instance capacity.
    ``tests/solve/test_plan_matches_lowering.py`` checks the loop program against it.

Approximations (documented, deliberate): a value is held to every point where its
consumer may be evaluated, also where a recomputation re-derives its operands instead
of reading them, and a value that stops a recompute chain to every point where the
chain's root may be evaluated (both over-approximations); reading a stop is free (it
is a buffer already paid for, usually registers); the op order is fixed (the
lowering's fusion of sibling loops, which runs two ops' statements as one loop, is
not modelled; the lowering does not move a nest writing registers earlier); stalls of
missing versions are priced per buffer, while the lowering overlaps whole stages (one
buffer short of versions orders the pipeline for all).  Edge terms are per edge, so
a producer evaluated at several places reading its operands as decided (at home and
fused into another consumer) pays their reads once, and the edges into a value that
is only ever recomputed are still priced though nothing reads them.

Modules
    This module is the cost model's face: it holds no code and re-exports the names the
    planner, its baselines, explanations and tests use.  :mod:`~planner.solve.problem`
    holds the frozen problem data and the term vocabulary; :mod:`~planner.solve.figures`
    the catalog's figures; :mod:`~planner.solve.layouts` the storage geometry of a
    buffer; :mod:`~planner.solve.build` assembles a problem from
    :mod:`~planner.solve.context` (the build's state and graph arithmetic),
    :mod:`~planner.solve.legality` (fusion and recompute legality),
    :mod:`~planner.solve.pricing` (edges, values, placements),
    :mod:`~planner.solve.holding` (live segments, guards, temporaries) and
    :mod:`~planner.solve.memories` (explicit Memory); :mod:`~planner.solve.evaluator` is
    the reference semantics; :mod:`~planner.solve.budget` predicts the model's size
    before any of this is built.
"""

from planner.solve.build import build_problem
from planner.solve.context import Chain, owner_of
from planner.solve.evaluator import (
    Truth,
    allowed_choices,
    derived_flags,
    evaluate,
    occupancies,
    segment_live,
)
from planner.solve.figures import Figures
from planner.solve.layouts import (
    VERSION_ALIGN,
    conflict_degree,
    layout_bytes,
    layout_candidates,
    version_bytes,
)
from planner.solve.legality import (
    MAX_RECOMPUTE_CHAIN,
    is_fusible_kind,
    is_inlinable_kind,
    is_recomputable_kind,
    recompute_chain,
    rederivable,
)
from planner.solve.problem import (
    BANK,
    BARRIERS,
    CHOICES,
    COMPUTE,
    FIXED,
    FUSED,
    INLINING,
    LAYOUT,
    MATERIALIZED,
    PRESERVING,
    RECOMPUTE,
    RECOMPUTED,
    STALLS,
    TERMS,
    TRAFFIC,
    VIRTUAL,
    Assignment,
    Edge,
    Evaluation,
    Guard,
    Lit,
    LivePoint,
    MemoryOccupant,
    Occupancy,
    Placement,
    Point,
    Problem,
    Segment,
    Temp,
    Terms,
    Value,
    add_terms,
    illegal_text,
    terms,
    total,
)

__all__ = [
    "BANK",
    "BARRIERS",
    "CHOICES",
    "COMPUTE",
    "FIXED",
    "FUSED",
    "INLINING",
    "LAYOUT",
    "MATERIALIZED",
    "MAX_RECOMPUTE_CHAIN",
    "PRESERVING",
    "RECOMPUTE",
    "RECOMPUTED",
    "STALLS",
    "TERMS",
    "TRAFFIC",
    "VERSION_ALIGN",
    "VIRTUAL",
    "Assignment",
    "Chain",
    "Edge",
    "Evaluation",
    "Figures",
    "Guard",
    "Lit",
    "LivePoint",
    "MemoryOccupant",
    "Occupancy",
    "Placement",
    "Point",
    "Problem",
    "Segment",
    "Temp",
    "Terms",
    "Truth",
    "Value",
    "add_terms",
    "allowed_choices",
    "build_problem",
    "conflict_degree",
    "derived_flags",
    "evaluate",
    "illegal_text",
    "is_fusible_kind",
    "is_inlinable_kind",
    "is_recomputable_kind",
    "layout_bytes",
    "layout_candidates",
    "occupancies",
    "owner_of",
    "recompute_chain",
    "rederivable",
    "segment_live",
    "terms",
    "total",
    "version_bytes",
]
