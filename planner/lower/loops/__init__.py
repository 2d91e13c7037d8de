"""The target-neutral loop program built from a kernel and its realization."""

from planner.lower.loops.program import LoopProgram, build_loop_program

__all__ = ["LoopProgram", "build_loop_program"]
