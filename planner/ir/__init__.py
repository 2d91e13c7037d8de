"""The Tile IR: types, ops, the Python frontend, verifier, text/JSON forms, interpreter.

Public names are re-exported here; import private modules only inside ``planner``.
"""

from planner.ir.core import (
    OP_CLASSES,
    Axis,
    BinaryFn,
    Block,
    Kernel,
    LoopKind,
    Op,
    ReduceFn,
    ResourceClass,
    ResourceConstraint,
    UnaryFn,
    Value,
)
from planner.ir.dtypes import DType
from planner.ir.expr import Expr, ceil_div, const, parse_expr, sym
from planner.ir.graph import dataflow_graph
from planner.ir.layout import Layout, XorSwizzle, dense, strided
from planner.ir.types import MemoryType, StateType, TileType, ViewType
from planner.ir.verify import collect_diagnostics, remove_unused_empty_allocs, verify

__all__ = [
    "OP_CLASSES", "Axis", "BinaryFn", "Block", "DType", "Expr", "Kernel", "Layout", "LoopKind",
    "MemoryType", "Op", "ReduceFn", "ResourceClass", "ResourceConstraint", "StateType",
    "TileType", "UnaryFn", "Value", "ViewType", "XorSwizzle", "ceil_div", "collect_diagnostics",
    "const", "dataflow_graph", "dense", "parse_expr", "remove_unused_empty_allocs", "strided",
    "sym", "verify",
]
