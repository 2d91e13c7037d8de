"""Symbolic integer expressions for extents, offsets and strides.

An :class:`Expr` is a frozen tree over integer constants, named symbols (a view's
extent such as ``M``, or a loop index such as ``%gm``) and the operators
``+ * floordiv mod ceil_div min max``.  Construction simplifies eagerly: constants
fold, and a known zero factor makes a product zero *before* any other factor is
looked at, so ``0 * (huge * dynamic)`` is ``0`` even when the rest would overflow
or is unknown (S14).  The printed form is also the parsed form (``parse_expr``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Union

IntLike = Union[int, "Expr"]


class ExprOp(Enum):
    ADD = "+"
    MUL = "*"
    FLOORDIV = "floordiv"
    MOD = "mod"
    CEIL_DIV = "ceildiv"
    MIN = "min"
    MAX = "max"


class Expr:
    """Base of symbolic integer expressions; use :func:`const`, :func:`sym` and operators."""

    __slots__ = ()

    def __add__(self, other: IntLike) -> Expr:
        return add(self, other)

    def __radd__(self, other: IntLike) -> Expr:
        return add(other, self)

    def __sub__(self, other: IntLike) -> Expr:
        return add(self, mul(-1, other))

    def __rsub__(self, other: IntLike) -> Expr:
        return add(other, mul(-1, self))

    def __mul__(self, other: IntLike) -> Expr:
        return mul(self, other)

    def __rmul__(self, other: IntLike) -> Expr:
        return mul(other, self)

    def __neg__(self) -> Expr:
        return mul(-1, self)

    def __floordiv__(self, other: IntLike) -> Expr:
        return _binary(ExprOp.FLOORDIV, self, other)

    def __rfloordiv__(self, other: IntLike) -> Expr:
        return _binary(ExprOp.FLOORDIV, other, self)

    def __mod__(self, other: IntLike) -> Expr:
        return _binary(ExprOp.MOD, self, other)

    def __rmod__(self, other: IntLike) -> Expr:
        return _binary(ExprOp.MOD, other, self)

    @property
    def is_const(self) -> bool:
        return isinstance(self, Const)

    def const_value(self) -> int | None:
        return self.value if isinstance(self, Const) else None

    def symbols(self) -> frozenset[str]:
        if isinstance(self, Sym):
            return frozenset((self.name,))
        if isinstance(self, Apply):
            return frozenset().union(*(a.symbols() for a in self.args))
        return frozenset()

    def evaluate(self, env: Mapping[str, int]) -> int:
        """The value under ``env``; raises KeyError naming an unbound symbol."""
        if isinstance(self, Const):
            return self.value
        if isinstance(self, Sym):
            if self.name not in env:
                raise KeyError(self.name)
            return int(env[self.name])
        assert isinstance(self, Apply)
        if self.op is ExprOp.MUL:  # known zero factor first (S14)
            return product_value(self.args, lambda a: a.evaluate(env))
        if self.op is ExprOp.ADD:
            return sum(a.evaluate(env) for a in self.args)
        x, y = self.args
        return BINARY_FOLD[self.op](x.evaluate(env), y.evaluate(env))

    def substitute(self, env: Mapping[str, IntLike]) -> Expr:
        """Replace symbols by expressions (or ints) and re-simplify."""
        if isinstance(self, Sym):
            return as_expr(env[self.name]) if self.name in env else self
        if isinstance(self, Apply):
            if self.op is ExprOp.MUL:  # a zero factor wins before the others fold (S14)
                return _substitute_product(self.args, env)
            return _make(self.op, [a.substitute(env) for a in self.args])
        return self

    def __str__(self) -> str:
        return _print(self, 0)


@dataclass(frozen=True, slots=True, repr=False)
class Const(Expr):
    value: int

    def __repr__(self) -> str:
        return f"Const({self.value})"


_SYM_RE = re.compile(r"%?[A-Za-z_][A-Za-z0-9_.]*")


@dataclass(frozen=True, slots=True, repr=False)
class Sym(Expr):
    """A named symbol: a kernel extent (``M``) or a region index (``%gm``)."""

    name: str

    def __post_init__(self) -> None:
        if not _SYM_RE.fullmatch(self.name):
            raise ValueError(f"invalid symbol name {self.name!r}")

    def __repr__(self) -> str:
        return f"Sym({self.name!r})"


@dataclass(frozen=True, slots=True, repr=False)
class Apply(Expr):
    op: ExprOp
    args: tuple[Expr, ...]

    def __repr__(self) -> str:
        return f"Apply({self.op.name}, {self.args!r})"


def const(value: int) -> Const:
    return Const(int(value))


def sym(name: str) -> Sym:
    return Sym(name)


def as_expr(value: IntLike) -> Expr:
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            import numpy as np

            if isinstance(value, np.integer):
                return Const(int(value))
        except ImportError:  # pragma: no cover
            pass
        raise TypeError(f"expected an integer or an Expr, got {type(value).__name__}")
    return Const(value)


def _divisor(op: ExprOp, b: int) -> int:
    if b == 0:
        raise ZeroDivisionError(f"{op.value} by zero in an index expression")
    return b


def product_value(factors: tuple[Expr, ...] | list[Expr], value: Callable[[Expr], int]) -> int:
    """The product of ``value(f)`` over ``factors``, a known zero factor first (S14).

    Constant and symbol factors are looked at before compound ones, and a factor that
    cannot be evaluated (a zero divisor, an unbound symbol) is set aside while the
    others are: a zero factor makes the product 0 without it (its arithmetic is never
    needed).  Only when no factor is zero is the first failure raised.
    """
    if any(isinstance(f, Const) and f.value == 0 for f in factors):
        return 0
    ordered = sorted(factors, key=lambda f: isinstance(f, Apply))
    failure: Exception | None = None
    out = 1
    for f in ordered:
        try:
            v = value(f)
        except (ZeroDivisionError, KeyError) as exc:
            if failure is None:
                failure = exc
            continue
        if v == 0:
            return 0
        out *= v
    if failure is not None:
        raise failure
    return out


def _substitute_product(factors: tuple[Expr, ...], env: Mapping[str, IntLike]) -> Expr:
    """``mul`` of the substituted factors; a factor that becomes 0 makes the product 0
    even when another one folds a division by zero (it is never needed, S14)."""
    out: list[Expr] = []
    failure: ZeroDivisionError | None = None
    for f in factors:
        try:
            g = f.substitute(env)
        except ZeroDivisionError as exc:
            if failure is None:
                failure = exc
            continue
        if g == Const(0):
            return g
        out.append(g)
    if failure is not None:
        raise failure
    return mul(*out)


BINARY_FOLD: dict[ExprOp, Callable[[int, int], int]] = {
    ExprOp.FLOORDIV: lambda a, b: a // _divisor(ExprOp.FLOORDIV, b),
    ExprOp.MOD: lambda a, b: a % _divisor(ExprOp.MOD, b),
    ExprOp.CEIL_DIV: lambda a, b: -(-a // _divisor(ExprOp.CEIL_DIV, b)),
    ExprOp.MIN: min,
    ExprOp.MAX: max,
}
"""The integer meaning of each two-operand op, shared by ``Expr.evaluate``, constant
folding and the interpreter's compiled expressions; a zero divisor raises
ZeroDivisionError naming the op."""


def _make(op: ExprOp, args: list[Expr]) -> Expr:
    if op is ExprOp.ADD:
        return add(*args)
    if op is ExprOp.MUL:
        return mul(*args)
    return _binary(op, args[0], args[1])


def add(*terms: IntLike) -> Expr:
    flat: list[Expr] = []
    total = 0
    for t in map(as_expr, terms):
        parts = t.args if isinstance(t, Apply) and t.op is ExprOp.ADD else (t,)
        for p in parts:
            if isinstance(p, Const):
                total += p.value
            else:
                flat.append(p)
    if total:
        flat.append(Const(total))
    if not flat:
        return Const(0)
    return flat[0] if len(flat) == 1 else Apply(ExprOp.ADD, tuple(flat))


def mul(*factors: IntLike) -> Expr:
    exprs = [as_expr(f) for f in factors]
    # A known zero factor wins before anything else is combined (S14).
    if any(isinstance(e, Const) and e.value == 0 for e in exprs):
        return Const(0)
    flat: list[Expr] = []
    coeff = 1
    for e in exprs:
        parts = e.args if isinstance(e, Apply) and e.op is ExprOp.MUL else (e,)
        for p in parts:
            if isinstance(p, Const):
                coeff *= p.value
            else:
                flat.append(p)
    if coeff == 0:
        return Const(0)
    if coeff != 1 or not flat:
        flat.insert(0, Const(coeff))
    return flat[0] if len(flat) == 1 else Apply(ExprOp.MUL, tuple(flat))


def _binary(op: ExprOp, a: IntLike, b: IntLike) -> Expr:
    x, y = as_expr(a), as_expr(b)
    if isinstance(x, Const) and isinstance(y, Const):
        return Const(BINARY_FOLD[op](x.value, y.value))
    if op in (ExprOp.FLOORDIV, ExprOp.CEIL_DIV, ExprOp.MOD) and y == Const(0):
        raise ZeroDivisionError(f"{op.value} by zero in an index expression")
    if op in (ExprOp.FLOORDIV, ExprOp.CEIL_DIV):
        if y == Const(1):
            return x
        if x == Const(0) and isinstance(y, Const) and y.value != 0:
            return Const(0)
    if op is ExprOp.MOD and y == Const(1):
        return Const(0)
    if op in (ExprOp.MIN, ExprOp.MAX) and x == y:
        return x
    return Apply(op, (x, y))


def floordiv(a: IntLike, b: IntLike) -> Expr:
    return _binary(ExprOp.FLOORDIV, a, b)


def mod(a: IntLike, b: IntLike) -> Expr:
    return _binary(ExprOp.MOD, a, b)


def ceil_div(a: IntLike, b: IntLike) -> Expr:
    """``ceil(a / b)`` for the integer extents of tiled loops."""
    return _binary(ExprOp.CEIL_DIV, a, b)


def emin(a: IntLike, b: IntLike) -> Expr:
    return _binary(ExprOp.MIN, a, b)


def emax(a: IntLike, b: IntLike) -> Expr:
    return _binary(ExprOp.MAX, a, b)


def product(factors: list[IntLike] | tuple[IntLike, ...]) -> Expr:
    """The product of extents, zero as soon as any factor is a known zero (S14)."""
    return mul(1, *factors)


# --------------------------------------------------------------------------- printing

def _print(e: Expr, outer: int) -> str:
    if isinstance(e, Const):
        return str(e.value) if e.value >= 0 or outer == 0 else f"({e.value})"
    if isinstance(e, Sym):
        return e.name
    assert isinstance(e, Apply)
    if e.op is ExprOp.ADD:
        text = _print(e.args[0], 1)
        for a in e.args[1:]:
            neg = _negated(a)
            text += f" - {_print(neg, 2)}" if neg is not None else f" + {_print(a, 2)}"
        return f"({text})" if outer > 1 else text
    if e.op is ExprOp.MUL:
        args = e.args
        sign = ""
        if isinstance(args[0], Const) and args[0].value == -1:
            sign, args = "-", args[1:]
        text = sign + " * ".join(_print(a, 3) for a in args)
        return f"({text})" if outer > 2 else text
    return f"{e.op.value}({_print(e.args[0], 0)}, {_print(e.args[1], 0)})"


def _negated(e: Expr) -> Expr | None:
    """``-e`` when ``e`` prints better after a minus sign (a negative constant or coefficient)."""
    if isinstance(e, Const) and e.value < 0:
        return Const(-e.value)
    if (isinstance(e, Apply) and e.op is ExprOp.MUL and isinstance(e.args[0], Const)
            and e.args[0].value < 0):
        return mul(-e.args[0].value, *e.args[1:])
    return None


# --------------------------------------------------------------------------- parsing

_TOKEN = re.compile(r"\s*(?:(\d+)|(%?[A-Za-z_][A-Za-z0-9_.]*)|(.))")
_FUNCS = {op.value: op for op in (ExprOp.FLOORDIV, ExprOp.MOD, ExprOp.CEIL_DIV,
                                  ExprOp.MIN, ExprOp.MAX)}


class ExprSyntaxError(ValueError):
    """A malformed expression; ``pos`` is the 0-based character offset."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.pos = pos


def parse_expr(text: str) -> Expr:
    """Parse the printed form of an :class:`Expr`."""
    tokens: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            break
        kind = "int" if m.group(1) else "name" if m.group(2) else "punct"
        val = m.group(1) or m.group(2) or m.group(3)
        if val is not None:
            tokens.append((kind, val, m.start(m.lastindex or 0)))
        pos = m.end()
    parser = _ExprParser(tokens, len(text))
    try:
        out = parser.parse_sum()
    except ZeroDivisionError as exc:
        raise ExprSyntaxError(str(exc), 0) from None
    if parser.i != len(tokens):
        raise ExprSyntaxError(f"unexpected {tokens[parser.i][1]!r} in expression",
                              tokens[parser.i][2])
    return out


MAX_EXPR_DEPTH = 64


class _ExprParser:
    def __init__(self, tokens: list[tuple[str, str, int]], end: int) -> None:
        self.tokens, self.i, self.end = tokens, 0, end
        self.depth = 0

    def peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def expect(self, value: str) -> None:
        if self.peek() != value:
            where = self.tokens[self.i][2] if self.i < len(self.tokens) else self.end
            raise ExprSyntaxError(f"expected {value!r} in expression", where)
        self.i += 1

    def parse_sum(self) -> Expr:
        terms = [self.parse_product()]
        while self.peek() in ("+", "-"):
            op = self.peek()
            self.i += 1
            t = self.parse_product()
            terms.append(t if op == "+" else mul(-1, t))
        return add(*terms) if len(terms) > 1 else terms[0]

    def parse_product(self) -> Expr:
        factors = [self.parse_atom()]
        while self.peek() == "*":
            self.i += 1
            factors.append(self.parse_atom())
        return mul(*factors) if len(factors) > 1 else factors[0]

    def parse_atom(self) -> Expr:
        if self.i >= len(self.tokens):
            raise ExprSyntaxError("expression ends early", self.end)
        kind, val, where = self.tokens[self.i]
        if self.depth >= MAX_EXPR_DEPTH:
            raise ExprSyntaxError(f"expression nested deeper than {MAX_EXPR_DEPTH} levels", where)
        self.depth += 1
        try:
            return self._atom(kind, val, where)
        finally:
            self.depth -= 1

    def _atom(self, kind: str, val: str, where: int) -> Expr:
        self.i += 1
        if kind == "int":
            return Const(int(val))
        if val == "-":
            return mul(-1, self.parse_atom())
        if val == "(":
            inner = self.parse_sum()
            self.expect(")")
            return inner
        if kind == "name" and val in _FUNCS and self.peek() == "(":
            self.i += 1
            a = self.parse_sum()
            self.expect(",")
            b = self.parse_sum()
            self.expect(")")
            return _binary(_FUNCS[val], a, b)
        if kind == "name":
            return Sym(val)
        raise ExprSyntaxError(f"unexpected {val!r} in expression", where)
