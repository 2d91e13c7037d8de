"""Diagnostics shared by every layer: a located message with a rule and notes.

Every user-facing failure is a :class:`PlannerError` carrying one or more
:class:`Diagnostic` values.  The CLI and the HTTP service catch this one type at
their boundary and render it; nothing below them prints or exits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


@dataclass(frozen=True, slots=True)
class SourceLoc:
    """A position in a user's file: Python source, text IR, JSON or YAML."""

    file: str
    line: int
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}" if self.col else f"{self.file}:{self.line}"


UNKNOWN_LOC = SourceLoc("<unknown>", 0)


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding: the rule it enforces (e.g. ``S13``), where, and what."""

    message: str
    loc: SourceLoc = UNKNOWN_LOC
    rule: str = ""
    severity: Severity = Severity.ERROR
    notes: tuple[tuple[SourceLoc, str], ...] = field(default=())

    def render(self) -> str:
        rule = f" [{self.rule}]" if self.rule else ""
        where = "" if self.loc == UNKNOWN_LOC else f"{self.loc}: "
        lines = [f"{where}{self.severity.value}{rule}: {self.message}"]
        lines += [f"{loc}: note: {text}" for loc, text in self.notes]
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        return {
            "severity": self.severity.value,
            "rule": self.rule,
            "message": self.message,
            "location": {"file": self.loc.file, "line": self.loc.line, "col": self.loc.col},
            "notes": [
                {"location": {"file": n.file, "line": n.line, "col": n.col}, "message": m}
                for n, m in self.notes
            ],
        }


class PlannerError(Exception):
    """A user-facing failure carrying located diagnostics.

    ``kind`` classifies it for the HTTP layer (``invalid-ir``, ``parse``,
    ``catalog``, ``infeasible``, ``unknown-target``, ``too-large``, ...).
    """

    def __init__(self, diagnostics: list[Diagnostic] | Diagnostic, kind: str = "invalid") -> None:
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        self.kind = kind
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(d.render() for d in self.diagnostics)

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "errors": [d.to_json() for d in self.diagnostics]}


def error(message: str, loc: SourceLoc = UNKNOWN_LOC, rule: str = "", kind: str = "invalid"
          ) -> PlannerError:
    """Shorthand for a single-diagnostic :class:`PlannerError`."""
    return PlannerError(Diagnostic(message, loc, rule), kind)
