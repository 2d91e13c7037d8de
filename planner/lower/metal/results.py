"""What the emitter returns: an MSL kernel and what it takes to dispatch it.

:class:`MslKernel` (re-exported by :mod:`planner.lower.metal.emitter`) carries the source,
its ``[[buffer(n)]]`` parameters in slot order (:class:`MslParam`), the grid (one
threadgroup per parallel instance), and the static arrays sized for the plan's bindings
(:class:`SizeLimit`), against which :meth:`MslKernel.check_bindings` holds a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from planner.errors import error
from planner.ir.dtypes import DType
from planner.ir.expr import Expr, product
from planner.ir.layout import division_by_zero_message
from planner.lower.metal.checks import _KIND, _RULE


@dataclass(frozen=True, slots=True)
class MslParam:
    """A ``[[buffer(n)]]`` parameter: a view (device pointer) or a symbol (``constant long&``)."""

    name: str  # the MSL identifier
    index: int  # its buffer slot; EmulatedKernel.run binds arguments in this order
    role: str  # "view" | "symbol" | "scratch"
    source: str  # the kernel's view or symbol name
    dtype: DType | None  # element type of a view or scratch buffer
    readonly: bool
    per_group: Expr | None = None  # scratch: elements per threadgroup


@dataclass(frozen=True, slots=True)
class SizeLimit:
    """A static array whose size was computed from the plan's bindings."""

    array: str  # the MSL array
    holds: str  # what it holds, for messages
    elements: Expr  # elements needed, over the kernel's symbols
    capacity: int  # elements it has
    itemsize: int


@dataclass(frozen=True, slots=True)
class MslKernel:
    """An emitted Metal kernel and what it takes to dispatch it."""

    source: str
    kernel_name: str
    params: tuple[MslParam, ...]
    threads_per_group: int
    instances: tuple[Expr, ...]  # the parallel segment's extents (one group per instance)
    sized_for: tuple[tuple[str, int], ...]  # the bindings static sizes were computed for
    limits: tuple[SizeLimit, ...]
    threadgroup_bytes: int  # threadgroup memory per group: the arena (at most the plan's peak)
    thread_bytes: int  # per-thread slices per thread
    notes: tuple[str, ...] = ()
    #: the threadgroup arena: (the plan's buffer it realizes, byte offset, bytes)
    arena: tuple[tuple[str, int, int], ...] = ()

    def check_bindings(self, bindings: Mapping[str, int]) -> None:
        """Refuse bindings that need more than an array was sized for (S17)."""
        over = []
        for lim in self.limits:
            try:
                need = lim.elements.evaluate(bindings)
            except ZeroDivisionError:  # S14: only a non-empty domain reaches its strides
                what = division_by_zero_message("the size", lim.elements,
                                                f"{lim.array} ({lim.holds})", bindings)
                raise error(f"{self.kernel_name}: {what}", rule="S14", kind=_KIND) from None
            if need > lim.capacity:
                over.append(f"{lim.array} ({lim.holds}) needs {need * lim.itemsize:,} B, "
                            f"sized {lim.capacity * lim.itemsize:,} B")
        if over:
            planned = ", ".join(f"{k}={v}" for k, v in self.sized_for) or "none"
            raise error(f"{self.kernel_name}: static Metal arrays were sized for the plan's "
                        f"bindings ({planned}); these bindings need more: "
                        f"{'; '.join(over)} (plan the kernel for these bindings)",
                        rule=_RULE, kind=_KIND)

    def scratch_elements(self, param: MslParam, bindings: Mapping[str, int]) -> int:
        """Elements of a device scratch buffer for ``bindings`` (all groups' regions)."""
        assert param.per_group is not None
        groups = int(product(self.instances).evaluate(bindings))
        return groups * int(param.per_group.evaluate(bindings))

    def grid(self, bindings: Mapping[str, int]) -> tuple[int, int, int]:
        """Threadgroups to dispatch for ``bindings`` (one per parallel instance)."""
        self.check_bindings(bindings)
        return int(product(self.instances).evaluate(bindings)), 1, 1
