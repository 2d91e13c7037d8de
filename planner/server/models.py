"""Request and response bodies of the HTTP API (pydantic models → the OpenAPI schema).

A kernel travels as the JSON IR object (:mod:`planner.ir.json_form`) or as a string of
the generic text IR; never as Python source — the service executes no submitted code.
Plans, comparisons and kernels are documents defined by their own JSON Schemas
(``GET /v1/schemas/{name}``); the models here describe the envelope around them.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict

from planner.catalog import DEFAULT_TARGET
from planner.errors import Diagnostic, PlannerError
from planner.plan.decisions import Baseline, Policy

TargetName = Annotated[str, Field(
    min_length=1, max_length=100, pattern=r"^[a-z0-9][a-z0-9_.-]*(@[0-9a-f]{6,64})?$",
    description="a catalog target name (GET /v1/catalogs lists them), or NAME@HASH: one "
    "revision of that catalog (GET /v1/catalogs/{name}/revisions lists them)",
    examples=[DEFAULT_TARGET])]
SymbolName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=64)]
Bindings = Annotated[dict[SymbolName, Annotated[int, Strict(), Field(ge=0, le=2**31 - 1)]], Field(
    max_length=64, description="values of the kernel's size symbols",
    examples=[{"M": 256, "N": 256, "K": 128}])]
#: The largest declared bound: a symbol's range must fit a signed 64-bit integer.
MAX_BOUND = 2**63 - 1


def _check_bounds(value: Any) -> Any:
    """Every ``bounds`` entry is ``[lo, hi]``, two integers with ``0 <= lo <= hi <=
    2**63 - 1``; one ValueError names each bad symbol and its numbers.  Anything that is
    not a JSON object is left to pydantic's own error."""
    if not isinstance(value, dict):
        return value
    problems = []
    for name, pair in value.items():
        if not (isinstance(pair, list | tuple) and len(pair) == 2
                and all(type(x) is int for x in pair)):
            shown = repr(pair) if len(repr(pair)) <= 60 else repr(pair)[:57] + "..."
            problems.append(f"{name}: expected [LO, HI], two integers, got {shown}")
            continue
        lo, hi = pair
        if lo < 0:
            problems.append(f"{name} = [{lo}, {hi}]: the lower end {lo} is negative (symbols "
                            "are extents and offsets)")
        elif hi > MAX_BOUND:
            problems.append(f"{name} = [{lo}, {hi}]: the upper end {hi} exceeds 2**63 - 1 = "
                            f"{MAX_BOUND}")
        elif lo > hi:
            problems.append(f"{name} = [{lo}, {hi}]: the range is empty ({lo} > {hi})")
    if problems:
        raise ValueError("; ".join(problems))
    return value


BoundEnd = Annotated[int, Strict(), Field(ge=0, le=MAX_BOUND)]
Bounds = Annotated[dict[SymbolName, tuple[BoundEnd, BoundEnd]], BeforeValidator(_check_bounds),
                   Field(max_length=64, description="declared inclusive ranges [lo, hi] of the "
                         "kernel's size symbols (0 <= lo <= hi <= 2**63 - 1): the proofs range "
                         "over them where no binding fixes the symbol (default [0, 2**31 - 1]; "
                         "e.g. {\"N\": [1, 4096]})",
                         examples=[{"M": [1, 65536], "N": [1, 4096]}])]
KernelText = Annotated[str, Field(min_length=1, description="the generic text IR of one kernel")]
KernelInput = Annotated[dict[str, Any] | KernelText, Field(
    description="the kernel: a JSON IR object (schema: GET /v1/schemas/kernel) or a "
    "string of text IR")]
TimeLimit = Annotated[float | None, Field(
    gt=0, le=86400, description="solver time limit in seconds (capped by the server)")]


#: Every form some backend emits (``planner.lower.backends.emit_forms()``; a test keeps
#: the two equal).
EmitForm = Literal["loops", "llvm", "asm", "msl"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


#: The text IR of softmax (``planner show softmax``, without locations): the kernel of
#: every request example, so that an example sent from /docs succeeds as it stands.
EXAMPLE_KERNEL = """\
"tile.kernel"() <{sym_name = "softmax"}> ({
^bb0(%X: view<[M, N], f32, const>, %Y: view<[M, N], f32>):
  "region.parallel"() <{label = "block_m", axes = [#axis<block_m = ceildiv(M, 4)>], \
scope = "AUTOMATIC"}> ({
    %0 = "tile.load"(%X) <{offsets = [4 * %block_m, 0], shape = [4, N], fill = 0.0}> : \
(view<[M, N], f32, const>) -> (tile<[4, N], f32>)
    %1 = "tile.reduce"(%0) <{fn = #reduce<max>, axis = 1}> : (tile<[4, N], f32>) -> \
(tile<[4], f32>)
    %2 = "tile.broadcast"(%1) <{shape = [4, N], dims = [0]}> : (tile<[4], f32>) -> \
(tile<[4, N], f32>)
    %3 = "tile.binary"(%0, %2) <{fn = #binary<sub>}> : (tile<[4, N], f32>, \
tile<[4, N], f32>) -> (tile<[4, N], f32>)
    %4 = "tile.unary"(%3) <{fn = #unary<exp>}> : (tile<[4, N], f32>) -> (tile<[4, N], f32>)
    %5 = "tile.reduce"(%4) <{fn = #reduce<sum>, axis = 1}> : (tile<[4, N], f32>) -> \
(tile<[4], f32>)
    %6 = "tile.broadcast"(%5) <{shape = [4, N], dims = [0]}> : (tile<[4], f32>) -> \
(tile<[4, N], f32>)
    %7 = "tile.binary"(%4, %6) <{fn = #binary<div>}> : (tile<[4, N], f32>, \
tile<[4, N], f32>) -> (tile<[4, N], f32>)
    "tile.store"(%Y, %7) <{offsets = [4 * %block_m, 0]}> : (view<[M, N], f32>, \
tile<[4, N], f32>) -> ()
  }) : () -> ()
}) : () -> ()
"""
EXAMPLE_BINDINGS = {"M": 100, "N": 70}
_EXAMPLE = {"kernel": EXAMPLE_KERNEL, "bindings": EXAMPLE_BINDINGS}
#: One request example per body model (also the media-type examples of the routes).
REQUEST_EXAMPLES: dict[str, dict[str, Any]] = {
    "PlanRequest": {**_EXAMPLE, "target": DEFAULT_TARGET},
    "LowerRequest": {**_EXAMPLE, "target": DEFAULT_TARGET, "emit": "loops"},
    "CheckRequest": {**_EXAMPLE, "target": DEFAULT_TARGET},
    "CompareRequest": {**_EXAMPLE, "variants": [{"target": "x86-avx2"},
                                                {"target": "apple-m2"}]},
}


def _with_example(name: str) -> ConfigDict:
    return ConfigDict(extra="forbid", json_schema_extra={"examples": [REQUEST_EXAMPLES[name]]})


class PlanRequest(_Body):
    """One kernel, one target: plan it."""

    model_config = _with_example("PlanRequest")

    kernel: KernelInput
    target: TargetName = DEFAULT_TARGET
    bindings: Bindings = {}
    bounds: Bounds = {}
    policy: Policy = Policy.DEFAULT
    baseline: Baseline | None = Field(None, description="plan with a fixed baseline strategy")
    time_limit: TimeLimit = None


class LowerRequest(PlanRequest):
    """Plan a kernel (or reuse the cached plan) and emit code for it."""

    model_config = _with_example("LowerRequest")

    emit: EmitForm | None = Field(
        None, description="a form the target's backend emits (planner.lower.backends), as "
        "`planner lower --emit`: loops: the scheduled loop program (every backend); llvm: "
        "optimized LLVM IR, asm: assembly (llvm-cpu targets); msl: Metal Shading Language "
        "(metal targets). Default: the backend's default form (msl on metal targets, else "
        "loops). Any other pairing, and every planning-only target, is 400 unsupported "
        "naming the forms the target's backend emits")


class CheckRequest(_Body):
    """Verify a kernel and run the target's proofs; no planning."""

    model_config = _with_example("CheckRequest")

    kernel: KernelInput
    target: TargetName = DEFAULT_TARGET
    bindings: Bindings = {}
    bounds: Bounds = {}
    time_limit: TimeLimit = Field(None, description="z3 time limit per proof obligation, "
                                  "in seconds (default 2, capped by the server)")


class CompareVariant(_Body):
    """One column of a comparison."""

    label: Annotated[str, Field(min_length=1, max_length=64)] | None = Field(
        None, description="column title (default: target/policy[/baseline])")
    target: TargetName = DEFAULT_TARGET
    policy: Policy = Policy.DEFAULT
    baseline: Baseline | None = None

    def default_label(self) -> str:
        parts = [self.target, self.policy.value, *([self.baseline.value] if self.baseline else [])]
        return self.label or "/".join(parts)


class CompareRequest(_Body):
    """One kernel planned under several targets, policies or baselines."""

    model_config = _with_example("CompareRequest")

    kernel: KernelInput
    bindings: Bindings = {}
    bounds: Bounds = {}
    variants: Annotated[list[CompareVariant], Field(min_length=2, max_length=64)]
    time_limit: TimeLimit = None


# -- responses --------------------------------------------------------------------------


class Location(BaseModel):
    file: str
    line: int
    col: int = 0


class Note(BaseModel):
    location: Location
    message: str


class DiagnosticModel(BaseModel):
    """A located finding (the JSON of :class:`planner.errors.Diagnostic`)."""

    severity: Literal["error", "warning", "note"]
    rule: str
    message: str
    location: Location
    notes: list[Note] = []


#: The longest list and the longest message an error body carries (the rest is counted
#: in ``omitted``; a longer message keeps its head and tail).
MAX_LIST_ITEMS = 200
MAX_MESSAGE_CHARS = 4000


def _clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2  # the head and the tail: messages end with what went wrong
    return f"{text[:half]} ... ({len(text) - 2 * half} characters left out) ... {text[-half:]}"


#: The base of the ``type`` URI of every problem: ``PROBLEM_BASE + kind``.
PROBLEM_BASE = "https://planner.invalid/problems/"
PROBLEM_MEDIA_TYPE = "application/problem+json"

_CLI_BIND = re.compile(r"--bind ([A-Za-z_][A-Za-z0-9_]*)=(-?\d+)")
_CLI_BOUNDS = re.compile(r"--bound [A-Za-z_]\w*=[^\s,;)]*(?: --bound [A-Za-z_]\w*=[^\s,;)]*)*")
_CLI_BOUND_ONE = re.compile(r"--bound ([A-Za-z_][A-Za-z0-9_]*)=(\d*)\.\.(\d*)")


def api_wording(text: str) -> str:
    """``text`` with the CLI's flags (``--bind N=128``, ``--bound N=1..``) spelled as the
    request members they stand for (``"bindings": {"N": 128}``, ``"bounds": {"N": [1, ...]}``).

    The library's messages name the CLI's flags; an HTTP client sets request members.
    """
    def bounds(m: re.Match[str]) -> str:
        pairs = [f'"{name}": [{lo or 0}, {hi or 2**31 - 1}]'
                 for name, lo, hi in _CLI_BOUND_ONE.findall(m.group(0))]
        return '"bounds": {' + ", ".join(pairs) + "}" if pairs else '"bounds"'

    text = _CLI_BIND.sub(lambda m: f'"bindings": {{"{m.group(1)}": {m.group(2)}}}', text)
    text = _CLI_BOUNDS.sub(bounds, text)
    return text.replace("--bound", '"bounds"').replace("--bind", '"bindings"')


def _title(kind: str) -> str:
    return kind.replace("-", " ").capitalize()


class ErrorResponse(BaseModel):
    """The body of every 4xx and 5xx response: an RFC 9457 problem details object
    (``application/problem+json``) whose extension members locate the problem."""

    type: str = Field(description="a URI naming the problem type: " + PROBLEM_BASE + "<kind>")
    title: str = Field(description="a short summary of the problem type")
    status: int = Field(description="the HTTP status code of this response")
    detail: str = Field(description="what went wrong in this request")
    instance: str = Field("", description="the request path")
    kind: str = Field(description="machine-readable class: parse, invalid-ir, catalog, "
                      "unknown-target, too-large, infeasible, unsupported, validation, ...")
    rule: str = ""
    location: Location | None = None
    diagnostics: list[DiagnosticModel] = []
    explanation: list[str] = Field([], description="infeasible plans: the violated groups")
    omitted: int = Field(0, description="diagnostics and explanation lines left out (at "
                         f"most {MAX_LIST_ITEMS} of each are sent)")
    request_id: str | None = None

    def capped(self, limit: int = MAX_LIST_ITEMS) -> ErrorResponse:
        """This body with at most ``limit`` diagnostics, notes and explanation lines, and
        every message clipped; ``omitted`` counts the list entries left out."""
        omitted = max(0, len(self.diagnostics) - limit) + max(0, len(self.explanation) - limit)
        diagnostics = []
        for d in self.diagnostics[:limit]:
            omitted += max(0, len(d.notes) - limit)
            notes = [n.model_copy(update={"message": _clip(n.message)}) for n in d.notes[:limit]]
            diagnostics.append(d.model_copy(update={"message": _clip(d.message), "notes": notes}))
        return self.model_copy(update={
            "detail": _clip(self.detail, 4 * MAX_MESSAGE_CHARS), "diagnostics": diagnostics,
            "explanation": [_clip(line) for line in self.explanation[:limit]],
            "omitted": self.omitted + omitted})

    @classmethod
    def of(cls, kind: str, message: str, diagnostics: list[Diagnostic] | None = None,
           **extra: Any) -> ErrorResponse:
        diags = diagnostics or []
        first = diags[0] if diags else None
        dumped = [DiagnosticModel.model_validate(d.to_json()) for d in diags[:MAX_LIST_ITEMS]]
        extra.setdefault("omitted", max(0, len(diags) - MAX_LIST_ITEMS))
        for d in dumped:
            d.message = api_wording(d.message)
            for note in d.notes:
                note.message = api_wording(note.message)
        return cls(
            type=PROBLEM_BASE + kind, title=_title(kind), status=500,
            detail=api_wording(message), kind=kind, rule=first.rule if first else "",
            location=Location(file=first.loc.file, line=first.loc.line, col=first.loc.col)
            if first else None, diagnostics=dumped, **extra)

    @classmethod
    def from_planner_error(cls, exc: PlannerError, **extra: Any) -> ErrorResponse:
        message = exc.diagnostics[0].message if exc.diagnostics else str(exc)
        return cls.of(exc.kind, message, exc.diagnostics, **extra)


PlanDocument = Annotated[dict[str, Any], Field(
    description="a MaterializationPlan (schema: GET /v1/schemas/plan)")]


class ProofResult(BaseModel):
    """One proof obligation (S13-S20) and its verdict."""

    name: str = Field(description="can_access, factorization, int64, capacity, ...")
    subject: str
    status: str = Field(description="proved, refuted (with a counterexample), assumed "
                        "(holds under the assumption the detail states; declared bounds may "
                        "prove it) or unknown")
    detail: str = ""
    counterexample: dict[str, int] | None = None
    rule: str = ""
    elapsed_ms: float = 0.0
    location: Location


class CheckResponse(BaseModel):
    kernel: str
    target: str
    ok: bool = Field(description="the verifier passed and every proof was proved (none "
                     "refuted, assumed or unknown)")
    proofs: list[ProofResult]
    diagnostics: list[DiagnosticModel]
    omitted: int = Field(0, description="proofs and diagnostics left out (at most "
                         f"{MAX_LIST_ITEMS} of each are sent; ok still covers all)")

    def capped(self, limit: int = MAX_LIST_ITEMS) -> CheckResponse:
        omitted = max(0, len(self.proofs) - limit) + max(0, len(self.diagnostics) - limit)
        return self.model_copy(update={"proofs": self.proofs[:limit],
                                       "diagnostics": self.diagnostics[:limit],
                                       "omitted": self.omitted + omitted})


class LowerResponse(BaseModel):
    kernel: str
    target: str
    emit: str
    code: str
    plan: PlanDocument


class CatalogSummary(BaseModel):
    name: str
    etag: str = Field(description="content hash of the catalog file (send it as If-Match)")
    origin: Literal["builtin", "user", "extra"] = Field(
        description="builtin: shipped; user: the writable directory; extra: --catalog-dir")
    description: str = ""
    backend: str | None = None
    overrides_builtin: bool = False


class CatalogList(BaseModel):
    catalogs: list[CatalogSummary]
    writes_enabled: bool


class CatalogDetail(CatalogSummary):
    content: dict[str, Any] = Field(description="the catalog document (as its YAML loads)")


class CatalogWritten(BaseModel):
    name: str
    etag: str
    created: bool
    overrides_builtin: bool
    note: str = ""
    dropped_plans: int = Field(0, description="cached plans for this target, now dropped")


class CatalogDeleted(BaseModel):
    name: str
    builtin_restored: bool = Field(description="a built-in catalog of this name is visible again")
    dropped_plans: int = 0


class CatalogValidation(BaseModel):
    valid: Literal[True] = True
    name: str
    etag: str = Field(description="the ETag the catalog would have once written")


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    version: str
    targets: int
    plans_cached: int
    solves_in_flight: int
