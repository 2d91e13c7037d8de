"""Configuration spaces: the tunable parameters an example declares, and their points.

An example file declares ``SPACE = Space({"block_m": (16, 32, 64), ...}, where(...))``:
each parameter has a finite, ordered set of values (ints or strings: tile sizes,
pipeline windows, scope or resource names) and the constraints between parameters are
named predicates (:func:`where`), so a point that is left out says which rule left it
out.  The points are the cartesian product in declaration order (the last parameter
varies fastest) less those a constraint rejects; ``kernel(**config)`` builds the
instance of one point.  Nothing here imports numpy or the solver.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from planner.errors import Diagnostic, PlannerError

Value = int | str
Config = dict[str, Value]

__all__ = ["Config", "Constraint", "Space", "parse_space_overrides", "where"]


@dataclass(frozen=True, slots=True)
class Constraint:
    """A named predicate over some parameters (the predicate's own parameter names)."""

    name: str
    predicate: Callable[..., bool]
    params: tuple[str, ...]

    def holds(self, config: Mapping[str, Value]) -> bool:
        return bool(self.predicate(**{p: config[p] for p in self.params}))


def where(name: str, predicate: Callable[..., bool]) -> Constraint:
    """``where("acc tile <= 8192 elements", lambda block_m, block_n: block_m * block_n <=
    8192)``: the predicate's parameters name the space parameters it reads."""
    params = tuple(inspect.signature(predicate).parameters)
    return Constraint(name, predicate, params)


@dataclass(frozen=True)
class Space:
    """Parameter value sets (ordered; the first value is the default) and constraints."""

    params: Mapping[str, tuple[Value, ...]]
    constraints: tuple[Constraint, ...] = field(default=())

    def __init__(self, params: Mapping[str, Sequence[Value]], *constraints: Constraint):
        values = {name: tuple(vs) for name, vs in params.items()}
        for name, vs in values.items():
            if not vs:
                raise _usage(f"parameter {name!r} has no values")
            bad = [v for v in vs if isinstance(v, bool) or not isinstance(v, int | str)]
            if bad:
                raise _usage(f"parameter {name!r}: {bad[0]!r} is not an int or a string")
            if len(set(vs)) != len(vs):
                raise _usage(f"parameter {name!r} repeats a value: {list(vs)}")
        for c in constraints:
            unknown = [p for p in c.params if p not in values]
            if unknown:
                raise _usage(f"constraint {c.name!r} reads {', '.join(unknown)}, which "
                             f"{'is' if len(unknown) == 1 else 'are'} not a parameter "
                             f"(parameters: {', '.join(values)})")
        object.__setattr__(self, "params", values)
        object.__setattr__(self, "constraints", tuple(constraints))

    def restrict(self, overrides: Mapping[str, Sequence[Value]]) -> Space:
        """This space with some parameters' value sets replaced (``--space name=v1,v2``);
        a name the space does not declare is a usage error."""
        unknown = [n for n in overrides if n not in self.params]
        if unknown:
            raise _usage(f"--space {unknown[0]}: not a parameter of this kernel "
                         f"(parameters: {', '.join(self.params) or 'none'})")
        typed = {n: tuple(_typed(n, v, self.params[n]) for v in vs)
                 for n, vs in overrides.items()}
        return Space({**self.params, **typed}, *self.constraints)

    def rejected_by(self, config: Mapping[str, Value]) -> Constraint | None:
        """The first constraint ``config`` violates, or None."""
        return next((c for c in self.constraints if not c.holds(config)), None)

    def points(self) -> Iterator[Config]:
        """Every configuration that satisfies all constraints, in product order."""
        names = list(self.params)
        for values in itertools.product(*self.params.values()):
            config = dict(zip(names, values, strict=True))
            if self.rejected_by(config) is None:
                yield config

    def size(self) -> int:
        return sum(1 for _ in self.points())

    def describe(self) -> str:
        parts = [f"{n} in {{{', '.join(map(str, vs))}}}" for n, vs in self.params.items()]
        parts += [f"where {c.name}" for c in self.constraints]
        return "; ".join(parts)


def _typed(name: str, text: Value, declared: tuple[Value, ...]) -> Value:
    """An override value as the declared values' type (ints stay ints)."""
    if isinstance(text, int) or not all(isinstance(v, int) for v in declared):
        return text
    try:
        return int(text)
    except ValueError:
        raise _usage(f"--space {name}={text}: {name} takes integers "
                     f"(declared: {', '.join(map(str, declared))})") from None


def parse_space_overrides(items: Sequence[str] | None) -> dict[str, tuple[str, ...]]:
    """``["block_m=32,64", "window=2"]`` → ``{"block_m": ("32", "64"), "window": ("2",)}``."""
    out: dict[str, tuple[str, ...]] = {}
    for item in items or ():
        name, sep, values = item.partition("=")
        vs = tuple(v.strip() for v in values.split(",") if v.strip())
        if not sep or not name.strip() or not vs:
            raise _usage(f"--space expects NAME=V1,V2,..., got {item!r}")
        out[name.strip()] = vs
    return out


def _usage(message: str) -> PlannerError:
    return PlannerError(Diagnostic(message), kind="usage")
