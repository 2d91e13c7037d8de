"""The target-neutral loop program: what a MaterializationPlan means physically.

One program sits between a plan and every backend (the llvmlite CPU backend today, a
Metal emitter later).  It holds no LLVM or Metal types: only frozen dataclasses over the
IR's symbolic :class:`~planner.ir.expr.Expr` extents, so every size stays a run-time
value and one compiled program serves every shape.

The model
---------
* **Segments.**  Each top-level ``region.parallel`` becomes a *parallel segment*: its
  instances (the row-major product of its axes) are split across workers.  Other
  top-level ops form *serial segments* run once.  Segments run in order; the join
  between two segments is the only cross-worker barrier the CPU needs.
* **Buffers** are the physical home of a value: a name, element type, logical shape, a
  :class:`~planner.ir.layout.Layout` (padding, transposed strides and XOR swizzles live
  in the address arithmetic), the catalog resource it is placed in, a version count
  and a role (``materialized``, ``virtual``, ``memory`` for explicit Memory, ``carry``
  for loop-carried values, ``stage`` for operand staging, ``reduce`` / ``mma`` for
  results that always need storage).  Buffers are per instance of their segment.
* **Element expressions** (:class:`Elem`) compute one element of a tile at an index
  (a tuple of Exprs over nest variables ``i.0``, ``i.1``, ...).  Virtual and
  materialized edges read the producer's buffer.  A fused edge inlines the producer's
  expression into the consumer, reading the producer's own operands as their edges
  decided (a buffer, or their inlined expression).  A recomputed edge re-derives the
  producer's whole chain from the kernel's inputs, whatever the chain's edges decided:
  its loads are re-read from their views (a :class:`ViewRead` in the consumer's nest,
  e.g. softmax's ``x - max`` recomputed into ``exp`` reads ``X`` again even where ``x``
  is kept in local storage for ``max``), elementwise ops, broadcasts, transposes,
  ``full`` and ``iota`` are recomputed, and the values that cannot be recomputed
  (reductions, mma results, loop carries, Memory snapshots, values of another
  parallel instance, loads of views the kernel stores) are read as their own edges
  decided; ``planner.solve.costs`` prices the same chain.  Either way the producer is
  duplicated when several consumers inline it.  Transposes and broadcasts are index
  permutations, never data movement.
* **Statements.**  :class:`Nest` assigns an expression over an iteration space (the
  innermost variable is the one a backend vectorizes; a nest writing a transposed
  layout iterates so that its destination is unit-stride there);
  :class:`ReduceNest` reduces over its innermost variable (:class:`SquaresNest`, on the
  CPU, sums the squares of ``a - c`` in the pass that evaluates ``a``, see
  :func:`~planner.lower.loops.fuse.one_pass_squares`); :class:`FusedNest` runs
  sibling nests over the same space as one loop (a producer and the reduction that
  reads it, one pass over the row instead of two; a nest may move before independent
  nests to join one, one that writes registers only before nests that read no buffer,
  which keeps the registers held within what the plan counts; a buffer only ever read
  at the point just written is not stored by the CPU backend); :class:`Mma` calls the
  backend's matrix multiply on row-major buffers, or in place on a view window when it lies
  inside the view (staged with its fill otherwise), other operands being staged;
  :class:`Loop`, :class:`Pipeline`, :class:`Parallel` are the temporal and
  nested-spatial structure; :class:`Barrier` marks the plan's sync points.
* **Masked edge tiles.**  A view read or write knows its window (the load's offsets and
  shape).  A nest whose windows all lie inside their views runs unmasked; otherwise the
  backend masks each element (reads outside a view give the load's ``fill``, writes
  outside are dropped), exactly like the reference interpreter.
* **Pipelines (S18).**  A pipeline loop whose stage cut is safe becomes a software
  pipeline: stage ``s`` runs iteration ``t - lag(s)`` at time step ``t`` with
  ``lag(s) = min(s, window - 1)``; a buffer written in one stage and read in a later
  one gets ``lag difference + 1`` iteration-local versions, addressed by ``iteration
  mod versions``.  The plan's version counts are followed: where it keeps fewer
  versions than that overlap needs (trading stalls for capacity), the lags are
  lowered until they suffice (no lag left: the loop runs in order, and the program
  says why); every buffer keeps at least the versions the plan counted.  A cut is
  unsafe when a stage reads a value carried from a later stage, when explicit Memory
  is read in a state from an earlier iteration or from outside the loop (a recurrence
  through outer Memory), when one Memory is stored in several stages, or when a view
  is stored before the last stage; such loops stay ordered and the program says why.
  Memory declared inside a temporal region is owned by the nearest spatial parallel
  (S7): its buffer is one per instance of the segment, created before the loop is
  scheduled, and a pipeline gives it versions like Memory declared outside.
* **Loop-carried values** live in a carry buffer with two versions (the current and
  the next iteration, rotated by parity), or one version when the update can be done
  in place: every read of the old value happens before the first write of the new one
  or, inside that write's own nest, at the same element (``acc = mma(a, b, acc)``).
  The carry buffer is where the plan keeps the carried value (a materialized use's
  resource, else registers); the yielded value is computed straight into it when the
  plan keeps that value in the same storage, else copied at the yield.
* **Buffers follow the plan's storage**: a value with a materialized edge lives in that
  resource; when it also has virtual edges it gets a register copy for them (the plan
  counts both), filled right after the value is computed.

:func:`build_loop_program` builds a program from a kernel and a plan;
``str(program)`` is the readable form printed by ``planner lower --emit loops``.

This module is the loop program's face: it names what the backends and the tests use,
from the modules that hold them:

* :mod:`~planner.lower.loops.ir`: the frozen data (elements, buffers, statements,
  segments, the program) and its readable form;
* :mod:`~planner.lower.loops.uses`: the plan's decision on each use of a value;
* :mod:`~planner.lower.loops.pipeline`: the software-pipeline schedule analysis;
* :mod:`~planner.lower.loops.fuse`: sibling-nest fusion over a statement tree;
* :mod:`~planner.lower.loops.builder`: the lowering itself.
"""

from planner.lower.loops.builder import DEFAULT_RESOURCES, build_loop_program
from planner.lower.loops.fuse import dest_key, fuse_siblings
from planner.lower.loops.ir import (
    Barrier,
    Binary,
    Buffer,
    BufRead,
    BufWrite,
    Cast,
    Dest,
    Elem,
    FusedNest,
    IndexOf,
    Lit,
    Loop,
    LoopProgram,
    Mma,
    MmaBuf,
    MmaView,
    Nest,
    Note,
    Parallel,
    Pipeline,
    Prefetch,
    ReduceNest,
    Segment,
    Select,
    SquaresNest,
    Stage,
    Stmt,
    Unary,
    ViewParam,
    ViewRead,
    ViewWrite,
    Window,
    elem_children,
    elem_reads,
    format_elem,
    format_program,
    nest_var,
    walk_stmts,
)
from planner.lower.loops.uses import EdgeKey, plan_edge_map

__all__ = [
    "DEFAULT_RESOURCES",
    "Barrier",
    "Binary",
    "BufRead",
    "BufWrite",
    "Buffer",
    "Cast",
    "Dest",
    "EdgeKey",
    "Elem",
    "FusedNest",
    "IndexOf",
    "Lit",
    "Loop",
    "LoopProgram",
    "Mma",
    "MmaBuf",
    "MmaView",
    "Nest",
    "Note",
    "Parallel",
    "Pipeline",
    "Prefetch",
    "ReduceNest",
    "Segment",
    "Select",
    "SquaresNest",
    "Stage",
    "Stmt",
    "Unary",
    "ViewParam",
    "ViewRead",
    "ViewWrite",
    "Window",
    "build_loop_program",
    "dest_key",
    "elem_children",
    "elem_reads",
    "format_elem",
    "format_program",
    "fuse_siblings",
    "nest_var",
    "plan_edge_map",
    "walk_stmts",
]
