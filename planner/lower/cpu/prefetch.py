"""Software prefetch of a view window (``lp.Prefetch``): the x86 catalogs' copy engine.

A prefetching copy (:mod:`planner.realize.copies`) copies its window on the worker and
asks the cache for the next copy's window first: one ``llvm.prefetch`` (read, keep in
all cache levels, data) per 64-byte line of each row of the window that lies inside the
view; rows and lines outside it are skipped, so no address past the view is formed.
"""

from __future__ import annotations

from llvmlite import ir

from planner.ir.expr import Const, Sym, add, product
from planner.lower.cpu.llvm_helpers import I8P, I32, c64
from planner.lower.cpu.memory import _Memory
from planner.lower.loops import program as lp

LINE = 64  # bytes per cache line on every CPU catalog


class _Prefetch(_Memory):
    def prefetch(self, s: lp.Prefetch) -> None:
        """Prefetch every line of ``s.window`` that lies inside its view."""
        b = self.b
        win = s.window
        p = self.cg.program.param(win.view)
        itemsize = p.dtype.itemsize
        per_line = max(1, LINE // itemsize)
        outer = win.shape[:-1]
        fn = self.intrinsic("llvm.prefetch", [I8P], ir.VoidType(), [I8P, I32, I32, I32])
        base = b.bitcast(self.view_ptr(win.view), I8P)
        lines = self.expr(add(win.shape[-1], Const(per_line - 1)))
        lines = b.udiv(lines, c64(per_line))
        with self.loop(c64(0), self.expr(product(outer) if outer else Const(1)), 1,
                       "pf.row") as row:
            rest, index = row, []
            for ext in reversed(outer):
                n = self.smax(self.expr(ext), c64(1))
                index.append(b.urem(rest, n))
                rest = b.udiv(rest, n)
            index.reverse()
            with self.loop(c64(0), lines, 1, "pf.line") as line:
                col = b.mul(line, c64(per_line))
                coords = [b.add(self.expr(o), i) for o, i in zip(win.offsets[:-1], index,
                                                                   strict=True)]
                coords.append(b.add(self.expr(win.offsets[-1]), col))
                ok = None
                for c, ext in zip(coords, p.shape, strict=True):
                    inside = b.and_(b.icmp_signed(">=", c, c64(0)),
                                    b.icmp_signed("<", c, self.expr(ext)))
                    ok = inside if ok is None else b.and_(ok, inside)
                with b.if_then(ok):
                    off = c64(0)
                    rank = len(coords)
                    for d, c in enumerate(coords):
                        term = c if d == rank - 1 else b.mul(
                            c, self.expr(Sym(self.cg.stride_sym(win.view, d))))
                        off = b.add(off, term)
                    addr = b.gep(base, [b.mul(off, c64(itemsize))])
                    b.call(fn, [addr, ir.Constant(I32, 0), ir.Constant(I32, 3),
                                ir.Constant(I32, 1)])
