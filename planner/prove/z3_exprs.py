"""Symbolic index expressions as z3 integer terms, with the symbols' bounds.

Every proof in :mod:`planner.prove.proofs` asks z3 for a *counterexample*: an
assignment of the kernel's free symbols (extents such as ``M``, region indices such
as ``%gm``) that breaks a property.  :class:`SymbolSpace` owns that assignment's
variables:

* a symbol bound in ``bindings`` is a concrete value: it is substituted into the
  :class:`~planner.ir.expr.Expr` before translation, so known zero factors and
  constant folding happen first (S14) and z3 never sees the symbol;
* an unbound kernel symbol ranges over ``symbol_bounds[name]`` (inclusive), by
  default ``0 ≤ s ≤ 2**31 - 1``;
* a region index ``%i`` declared with :meth:`SymbolSpace.declare_index` ranges over
  ``[0, extent)`` of its region, the extent itself being an expression.

Terms are unbounded z3 integers (never machine words: signed-64-bit overflow is a
property we *check*, with ``> 2**63 - 1`` over integers, which z3 decides in
milliseconds where 64-bit bit-vector products time out).  ``floordiv``, ``mod`` and
``ceildiv`` follow Python's floor semantics for either sign of divisor; each
divisor that is not a known non-zero constant is recorded in
:attr:`SymbolSpace.divisors` so a totality proof can ask whether it may be zero.

Every term lives in the space's own :class:`z3.Context` (``SymbolSpace.ctx``): z3's
default global context is not thread-safe, and the service proves kernels from
several threads.  Share one context between the spaces of one proof run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import z3

from planner.ir.expr import Apply, Const, Expr, ExprOp, Sym

#: The range of an unbound kernel symbol when ``symbol_bounds`` does not name it.
DEFAULT_SYMBOL_BOUNDS: tuple[int, int] = (0, 2**31 - 1)
INT64_MAX = 2**63 - 1


class SymbolSpace:
    """z3 variables for the free symbols of one proof, with their range constraints."""

    def __init__(self, bindings: Mapping[str, int] | None = None,
                 symbol_bounds: Mapping[str, tuple[int, int]] | None = None,
                 default_bounds: tuple[int, int] = DEFAULT_SYMBOL_BOUNDS,
                 prefix: str = "", ctx: z3.Context | None = None) -> None:
        self.ctx = ctx if ctx is not None else z3.Context()
        self.bindings = {k: int(v) for k, v in (bindings or {}).items()}
        self.bounds = dict(symbol_bounds or {})
        self.default_bounds = default_bounds
        self.prefix = prefix
        self.vars: dict[str, z3.ArithRef] = {}
        self.index_extent: dict[str, Expr] = {}
        self.divisors: list[z3.ArithRef] = []

    # -- symbols -------------------------------------------------------------------
    def declare_index(self, name: str, extent: Expr) -> None:
        """Region index ``name`` ranges over ``[0, extent)`` (the innermost wins)."""
        self.index_extent[name] = extent

    def substitute(self, e: Expr) -> Expr:
        """``e`` with bound symbols replaced by their values (and re-simplified).

        Where a bound value makes a divisor zero (``ceildiv(64, N)`` at ``N = 0``) the
        division is kept, unfolded, with its zero divisor: it is never evaluated here
        (an empty domain does not reach it, S14), :meth:`to_z3` records the divisor so a
        totality proof refutes it, and :meth:`evaluate` raises ZeroDivisionError.
        """
        if not self.bindings or not (e.symbols() & self.bindings.keys()):
            return e
        try:
            return e.substitute(self.bindings)
        except ZeroDivisionError:
            return _substitute_unfolded(e, self.bindings)

    def free_symbols(self, exprs: Iterable[Expr]) -> set[str]:
        """Unbound symbols of ``exprs``, following region-index extents."""
        out: set[str] = set()
        todo = [self.substitute(e) for e in exprs]
        while todo:
            for s in todo.pop().symbols():
                if s not in out and s not in self.bindings:
                    out.add(s)
                    if s in self.index_extent:
                        todo.append(self.substitute(self.index_extent[s]))
        return out

    def is_concrete(self, exprs: Iterable[Expr]) -> bool:
        return not self.free_symbols(exprs)

    def evaluate(self, e: Expr) -> int:
        """The value of an expression whose symbols are all bound."""
        return self.substitute(e).evaluate(self.bindings)

    def var(self, name: str) -> z3.ArithRef:
        v = self.vars.get(name)
        if v is None:
            v = self.vars[name] = z3.Int(self.prefix + name, self.ctx)
        return v

    # -- translation ---------------------------------------------------------------
    def to_z3(self, e: Expr) -> z3.ArithRef:
        """The z3 integer term of ``e`` (bindings substituted first)."""
        return self._term(self.substitute(e))

    def to_z3_renamed(self, e: Expr, terms: Mapping[str, z3.ArithRef]) -> z3.ArithRef:
        """The term of ``e`` where each symbol ``terms`` names is that term, not the space's
        variable: one copy of a region's indices, so that two instances of a ``parallel``
        (``%g`` and ``%g'``) can be compared in one query (S16).  The renamed symbols get
        no range constraint from :meth:`constraints`; the caller states their ranges."""
        return self._term(self.substitute(e), terms)

    def _term(self, e: Expr, terms: Mapping[str, z3.ArithRef] | None = None) -> z3.ArithRef:
        if isinstance(e, Const):
            return z3.IntVal(e.value, self.ctx)
        if isinstance(e, Sym):
            if terms is not None and e.name in terms:
                return terms[e.name]
            return self.var(e.name)
        assert isinstance(e, Apply)
        args = [self._term(a, terms) for a in e.args]
        if e.op is ExprOp.ADD:
            return z3.Sum(args)
        if e.op is ExprOp.MUL:
            return z3.Product(args)
        if e.op is ExprOp.MIN:
            return z3.If(args[0] <= args[1], args[0], args[1])
        if e.op is ExprOp.MAX:
            return z3.If(args[0] >= args[1], args[0], args[1])
        a, b = args
        if not (isinstance(e.args[1], Const) and e.args[1].value != 0):
            self.divisors.append(b)
        if e.op is ExprOp.FLOORDIV:
            return floor_div(a, b, e.args[1])
        if e.op is ExprOp.CEIL_DIV:
            return -floor_div(-a, b, e.args[1])
        assert e.op is ExprOp.MOD
        return a - b * floor_div(a, b, e.args[1])

    # -- constraints ---------------------------------------------------------------
    def constraints(self) -> list[z3.BoolRef]:
        """Range constraints of every variable created so far (and of their extents)."""
        out: list[z3.BoolRef] = []
        done: set[str] = set()
        while len(done) < len(self.vars):
            for name in [n for n in self.vars if n not in done]:
                done.add(name)
                out.extend(self._range(name))
        return out

    def _range(self, name: str) -> list[z3.BoolRef]:
        v = self.vars[name]
        if name in self.index_extent:
            return [v >= 0, v < self.to_z3(self.index_extent[name])]
        lo, hi = self.bounds.get(name, self.default_bounds)
        return [v >= lo, v <= hi]

    def nonzero_divisors(self) -> z3.BoolRef:
        """True when every recorded divisor is non-zero (the terms are total)."""
        if not self.divisors:
            return z3.BoolVal(True, self.ctx)
        return z3.And([d != 0 for d in self.divisors])

    def int_var(self, name: str) -> z3.ArithRef:
        """A helper variable (an index, a coordinate) that no kernel symbol can name."""
        return z3.Int(f"!{self.prefix}{name}", self.ctx)

    def int_val(self, value: int) -> z3.ArithRef:
        return z3.IntVal(value, self.ctx)

    def bool_val(self, value: bool) -> z3.BoolRef:
        return z3.BoolVal(value, self.ctx)

    def solver(self) -> z3.Solver:
        return z3.Solver(ctx=self.ctx)

    def model_values(self, model: z3.ModelRef) -> dict[str, int]:
        """The counterexample's symbol values (bindings excluded: they are given)."""
        out: dict[str, int] = {}
        for name, v in self.vars.items():
            val = model.eval(v, model_completion=True)
            out[name] = val.as_long()
        return out


def _substitute_unfolded(e: Expr, bindings: Mapping[str, int]) -> Expr:
    """``e.substitute(bindings)``, except that a node whose folding divides by zero is
    rebuilt as is (an :class:`Apply` of its substituted operands) instead of raising."""
    try:
        return e.substitute(bindings)
    except ZeroDivisionError:
        assert isinstance(e, Apply)
        return Apply(e.op, tuple(_substitute_unfolded(a, bindings) for a in e.args))


def floor_div(a: z3.ArithRef, b: z3.ArithRef, divisor: Expr) -> z3.ArithRef:
    """Python's ``a // b``: z3's ``div`` is Euclidean, equal to floor for ``b > 0``."""
    if isinstance(divisor, Const):
        if divisor.value > 0:
            return a / b
        return (-a) / (-b)
    return z3.If(b > 0, a / b, (-a) / (-b))


def check(solver: z3.Solver, time_limit_ms: int) -> z3.CheckSatResult:
    """``solver.check()`` under a time limit (z3 answers ``unknown`` when it gives up)."""
    solver.set("timeout", max(1, int(time_limit_ms)))
    return solver.check()


def minimal_model(ctx: z3.Context, constraints: Iterable[z3.BoolRef],
                  terms: Iterable[z3.ArithRef], time_limit_ms: int) -> z3.ModelRef | None:
    """A model of ``constraints`` minimizing ``terms`` lexicographically (the first one
    first), or None when z3 finds none within the limit.  Counterexamples printed to users
    come from here, so that they are small and the same from run to run (a plain
    ``check()`` returns whichever model the search meets first)."""
    opt = z3.Optimize(ctx=ctx)
    opt.set("timeout", max(1, int(time_limit_ms)))
    opt.set(priority="lex")
    opt.add(*constraints)
    for t in terms:
        opt.minimize(t)
    return opt.model() if opt.check() == z3.sat else None
