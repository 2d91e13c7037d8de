"""Symbolic integer expressions: simplification, evaluation, print/parse round trip."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.ir.expr import (
    Const,
    ExprSyntaxError,
    ceil_div,
    const,
    emax,
    emin,
    floordiv,
    parse_expr,
    product,
    sym,
)

M, N, I = sym("M"), sym("N"), sym("%i")

atoms = st.one_of(st.integers(-5, 5).map(const), st.sampled_from([M, N, I]))


def _extend(children):
    pair = st.tuples(children, children)
    small = st.tuples(children, st.integers(1, 5))
    return st.one_of(
        pair.map(lambda t: t[0] + t[1]), pair.map(lambda t: t[0] * t[1]),
        pair.map(lambda t: t[0] - t[1]), small.map(lambda t: ceil_div(t[0], t[1])),
        small.map(lambda t: floordiv(t[0], t[1])), small.map(lambda t: t[0] % t[1]),
        pair.map(lambda t: emin(t[0], t[1])), pair.map(lambda t: emax(t[0], t[1])),
    )


exprs = st.recursive(atoms, _extend, max_leaves=10)


@given(exprs)
def test_print_parse_round_trip(e):
    assert parse_expr(str(e)) == e


@given(exprs, st.integers(-50, 50), st.integers(-50, 50), st.integers(-50, 50))
def test_simplification_preserves_value(e, m, n, i):
    env = {"M": m, "N": n, "%i": i}
    assert parse_expr(str(e)).evaluate(env) == e.evaluate(env)


def test_s14_known_zero_factor_wins_before_overflow_or_dynamic_factors():
    huge = product([1 << 62, 1 << 62, M])
    assert product([huge, 0, N]) == Const(0)
    assert Const(0) == (M * 0)
    # evaluation recognises a zero factor before multiplying the others
    e = product([sym("Z"), M, N])
    assert e.evaluate({"Z": 0, "M": 1 << 62, "N": 1 << 62}) == 0


def test_folding_and_readable_printing():
    assert str(ceil_div(M, 64) * 64 + I * 3 - 1) == "64 * ceildiv(M, 64) + 3 * %i - 1"
    assert str(M - 16 * I) == "M - 16 * %i"
    assert ceil_div(100, 32) == Const(4)
    assert ceil_div(M, 1) == M
    assert emin(M, M) == M


@pytest.mark.parametrize("text, message, pos", [
    ("M +", "expression ends early", 3),
    ("(M", "expected ')'", 2),
    ("M $ 2", "unexpected '$'", 2),
    ("floordiv(M, 0)", "by zero", 0),
])
def test_parse_errors_have_positions(text, message, pos):
    with pytest.raises(ExprSyntaxError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("$", r"\$")) as info:
        parse_expr(text)
    assert info.value.pos == pos
