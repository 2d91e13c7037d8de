"""Config sweeps: which tile configurations fit, which is fastest, and why.

An example declares a configuration space (:class:`Space`: parameter value sets and
named constraints, see :mod:`planner.ir.examples`); a sweep plans every point of it ×
targets × policies, one task per point, on a local process pool or a Dask cluster
(:mod:`planner.sweep.execute`), serving repeats from an on-disk plan cache
(:mod:`planner.sweep.cache`), and ranks the results (:mod:`planner.sweep.run`).

Importing this package stays light (no numpy, solver or dask): the examples import
:class:`Space` and :func:`where` from here.
"""

from planner.sweep.space import Config, Constraint, Space, parse_space_overrides, where

__all__ = ["Config", "Constraint", "Space", "parse_space_overrides", "where"]
