"""What the routers share: settings, catalogs, the plan cache, the worker pool, metrics.

One :class:`Service` per app, built by :func:`server.app.create_app` from its settings
and reached from a route through the ``ServiceDep`` dependency.  Parsing, planning,
proving and lowering run in :attr:`Service.pool` (``settings.pool_workers`` threads),
never on the event loop, so a long solve leaves other requests (``/healthz``, catalog
reads) answering; CP-SAT and z3 release the GIL while they search.

Catalog writes go through :class:`CatalogStore`: validate, then under a per-name lock
compare the client's ``If-Match`` with the current file's hash and replace the file
atomically (temp file, fsync, ``os.replace``, fsync of the directory).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from fastapi import Depends, Request

from planner.catalog import BUILTIN_DIR, CatalogRegistry, Target, load_target_text
from planner.errors import Diagnostic, PlannerError, SourceLoc
from planner.ir.core import Kernel
from planner.ir.json_form import kernel_from_json
from planner.ir.parser import parse_kernel
from planner.ir.verify import verify
from planner.lower.backends import backend_for, emit_forms
from planner.prove.proofs import prove_kernel
from planner.server.cache import PlanCache, PlanKey
from planner.server.metrics import Metrics
from planner.server.settings import Settings
from planner.solve import (
    Baseline,
    MaterializationPlan,
    Policy,
    Status,
    compare_plans,
    comparison_to_json,
    plan_kernel,
    plan_to_json,
)

T = TypeVar("T")
KernelSource = dict[str, Any] | str
SymbolBounds = Mapping[str, tuple[int, int]]
Origin = Literal["builtin", "user", "extra"]

REQUEST_FILE = "<request>"


class ApiError(Exception):
    """A 4xx answer that is not a :class:`PlannerError` (preconditions, auth, ...)."""

    def __init__(self, status: int, kind: str, message: str, *,
                 headers: Mapping[str, str] | None = None,
                 explanation: list[str] | None = None,
                 diagnostics: list[Diagnostic] | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message
        self.headers = dict(headers or {})
        self.explanation = explanation or []
        self.diagnostics = diagnostics or []


# -- the work done in the pool ---------------------------------------------------------


def decode_kernel(source: KernelSource, max_ops: int, bindings: Mapping[str, int],
                  bounds: SymbolBounds | None = None) -> Kernel:
    """A verified kernel from its JSON IR object or text IR; never executes anything.

    Every endpoint that takes a kernel reads it here, and here it is verified under
    ``bindings`` and the declared ``bounds`` (S10's zero-trip loops are decided over the
    bounds, never the bindings) with the call the CLI's load path makes
    (``planner.cli.common.kernel_and_bindings``): :func:`planner.ir.verify.verify`.
    A rejected kernel is a 422 with the verifier's rule and location before anything
    plans, proves or lowers it.  Then every name in ``bounds`` (the request's declared
    symbol ranges, already range-checked by :mod:`server.models`) must be one of the
    kernel's symbols (:meth:`Kernel.symbols`), else 422 naming it and them.

    The readers bound ops and region depth; nesting they do not bound (parentheses in
    an expression) ends in a RecursionError, reported here as ``too-large``.
    """
    try:
        if isinstance(source, str):
            kernel = parse_kernel(source, REQUEST_FILE, max_ops=max_ops)
        else:
            kernel = kernel_from_json(source, file=REQUEST_FILE, max_ops=max_ops)
        verify(kernel, bindings, bounds)
    except RecursionError:
        raise PlannerError(Diagnostic("the kernel is nested too deeply to read",
                                      SourceLoc(REQUEST_FILE, 0)), kind="too-large") from None
    check_bound_names(kernel, bounds or {})
    return kernel


def check_bound_names(kernel: Kernel, bounds: SymbolBounds) -> None:
    """422 (``validation``) when ``bounds`` names something that is not a kernel symbol."""
    symbols = kernel.symbols()
    unknown = [name for name in bounds if name not in symbols]
    if unknown:
        names = ", ".join(repr(n) for n in unknown)
        known = ", ".join(symbols) if symbols else "none"
        what = "is not a symbol" if len(unknown) == 1 else "are not symbols"
        raise PlannerError(Diagnostic(
            f"bounds: {names} {what} of kernel {kernel.name!r} (its symbols: {known})",
            SourceLoc(REQUEST_FILE, 0), rule="unknown-symbol"), kind="validation")


@dataclass(frozen=True, slots=True)
class Planned:
    """A solved plan, its JSON and target, as the cache keeps them.

    ``refuted`` holds the located diagnostics of proofs the plan's kernel fails on its
    target (an inaccessible resource, say): /plan and /lower refuse such a plan (422),
    /compare shows it beside the others.
    """

    plan: MaterializationPlan
    json: dict[str, Any]
    target: Target
    refuted: tuple[Diagnostic, ...] = ()

    @property
    def infeasible(self) -> bool:
        return self.plan.status == Status.INFEASIBLE

    def raise_if_unusable(self) -> None:
        """422 for a plan that must not be used: infeasible, or a refuted proof."""
        if self.refuted:
            raise PlannerError(list(self.refuted), kind="proof")
        if self.infeasible:
            explanation = [str(line) for line in self.plan.explanation]
            message = "no plan satisfies the constraints" + (
                f": {explanation[0]}" if explanation else "")
            raise ApiError(422, "infeasible", message, explanation=explanation)


@dataclass(frozen=True, slots=True)
class PlanJob:
    """Everything one solve needs (plain data: safe to hand to a worker thread)."""

    kernel: KernelSource
    target: Target
    bindings: dict[str, int]
    policy: Policy
    baseline: Baseline | None
    time_limit_s: float
    max_ops: int
    solver_workers: int
    bounds: dict[str, tuple[int, int]] = field(default_factory=dict)

    def run(self) -> Planned:
        kernel = decode_kernel(self.kernel, self.max_ops, self.bindings, self.bounds)  # verified
        plan = plan_kernel(kernel, self.target, bindings=self.bindings or None,
                           policy=self.policy, baseline=self.baseline,
                           time_limit_s=self.time_limit_s, workers=self.solver_workers,
                           bounds=self.bounds or None)
        refuted: tuple[Diagnostic, ...] = ()
        if any(p.status == "refuted" for p in plan.proofs):  # re-prove for the locations
            report = prove_kernel(kernel, self.target, self.bindings or None,
                                  symbol_bounds=self.bounds or None)
            refuted = tuple(r.diagnostic() for r in report.refuted) or tuple(
                Diagnostic(f"{p.name} refuted: {p.detail}") for p in plan.proofs
                if p.status == "refuted")
        return Planned(plan, plan_to_json(plan), self.target, refuted)


def check_job(source: KernelSource, target: Target, bindings: dict[str, int],
              max_ops: int, time_limit_s: float,
              bounds: SymbolBounds | None = None) -> dict[str, Any]:
    """Verifier, then the target's proofs over ``bounds`` where no binding fixes a
    symbol; a verifier error or an unknown bound name raises (422)."""
    kernel = decode_kernel(source, max_ops, bindings, bounds)
    report = prove_kernel(kernel, target, bindings or None,
                          symbol_bounds=dict(bounds) if bounds else None,
                          time_limit_ms=max(1, int(time_limit_s * 1000)))
    return {"kernel": kernel.name, "target": target.name, "ok": report.ok,
            "proofs": [r.to_json() for r in report.results],
            "diagnostics": [d.to_json() for d in report.diagnostics()]}


def lower_job(source: KernelSource, plan: MaterializationPlan, target: Target, emit: str,
              max_ops: int, bindings: Mapping[str, int],
              bounds: SymbolBounds | None = None) -> str:
    """The code form ``emit`` of ``plan``, from the target's backend in the registry."""
    return backend_for(target).emit(decode_kernel(source, max_ops, bindings, bounds), plan,
                                    target, emit)


def compare_job(labelled: list[tuple[str, MaterializationPlan]]) -> dict[str, Any]:
    return comparison_to_json(compare_plans(labelled))


#: The emit forms the backend registry offers (``planner.lower.backends``).
EMITTERS: tuple[str, ...] = emit_forms()


def check_emitter(emit: str | None, target: Target) -> str:
    """The form to emit (``None``: the backend's default), or 400 unsupported unless
    ``target``'s backend emits ``emit`` (the registry's message, naming its forms).

    Called before planning, so a request that cannot be lowered is refused at once;
    a planning-only target gets the message ``planner lower`` prints for it.
    """
    return backend_for(target).require(target, emit)


# -- catalogs --------------------------------------------------------------------------


def load_catalog_bytes(data: bytes, filename: str) -> Target:
    """Validate a catalog file's bytes (PlannerError kind ``catalog`` with located errors)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlannerError(Diagnostic(f"catalog is not UTF-8 text (byte {exc.start})",
                                      SourceLoc(filename, 1)), kind="catalog") from None
    return load_target_text(text, filename)


def etag_of(data: bytes) -> str:
    """A catalog's entity tag: the SHA-256 of its file's bytes (= Target.content_hash)."""
    return hashlib.sha256(data).hexdigest()


def _tags(header: str) -> list[str]:
    """The entity tags of an If-Match / If-None-Match header (quotes and W/ removed)."""
    tags = []
    for part in header.split(","):
        tag = part.strip().removeprefix("W/").strip()
        if tag:
            tags.append(tag[1:-1] if len(tag) >= 2 and tag[0] == tag[-1] == '"' else tag)
    return tags


@dataclass(frozen=True, slots=True)
class CatalogFile:
    name: str
    path: Path
    data: bytes
    origin: Origin
    overrides_builtin: bool

    @property
    def etag(self) -> str:
        return etag_of(self.data)


@dataclass(frozen=True, slots=True)
class WriteResult:
    etag: str
    created: bool
    overrides_builtin: bool


class CatalogStore:
    """Reads catalogs by name; writes and deletes files of the writable directory."""

    def __init__(self, registry: CatalogRegistry, writable: Path | None, builtin: Path) -> None:
        self.registry, self.writable, self.builtin = registry, writable, builtin
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._targets: dict[str, Target] = {}  # content hash -> target

    def lock(self, name: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(name, threading.Lock())

    def origin(self, path: Path) -> Origin:
        if self.writable is not None and path.parent == self.writable:
            return "user"
        return "builtin" if path.parent == self.builtin else "extra"

    def find(self, name: str) -> CatalogFile:
        """The visible file of target ``name`` (PlannerError unknown-target if none)."""
        path = self.registry.path(name)
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # deleted between lookup and read
            raise PlannerError(Diagnostic(f"unknown target {name!r}"),
                               kind="unknown-target") from None
        overrides = (self.builtin / f"{name}.yaml").is_file() and path.parent != self.builtin
        return CatalogFile(name, path, data, self.origin(path), overrides)

    def find_or_none(self, name: str) -> CatalogFile | None:
        try:
            return self.find(name)
        except PlannerError as exc:
            if exc.kind == "unknown-target":
                return None
            raise

    def target(self, name: str) -> Target:
        """The validated target ``name``, as its current file says (cached by content);
        ``host`` is the catalog that matches this machine."""
        name = self.registry.resolve_name(name)
        file = self.find(name)
        cached = self._targets.get(file.etag)
        if cached is not None and cached.name == name:
            return cached
        target = self.load(file.data, str(file.path), name)
        if len(self._targets) >= 64:  # old versions of edited catalogs
            self._targets.clear()
        self._targets[file.etag] = target
        return target

    @staticmethod
    def load(data: bytes, filename: str, name: str) -> Target:
        """Validate catalog bytes whose target must be called ``name``."""
        target = load_catalog_bytes(data, filename)
        if target.name != name:
            raise PlannerError(Diagnostic(
                f"target name {target.name!r} does not match the catalog name {name!r} in "
                "the URL", SourceLoc(filename, 1), rule="name"), kind="catalog")
        return target

    def write(self, name: str, data: bytes, if_match: str | None,
              if_none_match: str | None) -> WriteResult:
        """Validate, check the precondition and atomically replace ``<writable>/name.yaml``."""
        assert self.writable is not None
        self.load(data, f"{name}.yaml", name)
        with self.lock(name):
            current = self.find_or_none(name)
            self._precondition(current, if_match, if_none_match)
            _atomic_write(self.writable / f"{name}.yaml", data)
        overrides = (self.builtin / f"{name}.yaml").is_file()
        return WriteResult(etag_of(data), current is None or current.origin != "user", overrides)

    def delete(self, name: str, if_match: str | None) -> bool:
        """Remove the user's file; True when a built-in of that name shows again."""
        assert self.writable is not None
        path = self.writable / f"{name}.yaml"
        with self.lock(name):
            current = self.find_or_none(name)
            if current is None:
                raise PlannerError(Diagnostic(f"unknown target {name!r}"),
                                   kind="unknown-target")
            if current.origin != "user":
                raise ApiError(409, "read-only-catalog", f"catalog {name!r} is not a user "
                               f"file ({current.origin}); only files written through this "
                               "API can be deleted")
            if if_match is None:
                raise ApiError(428, "precondition-required", "DELETE needs If-Match with the "
                               "catalog's ETag")
            self._precondition(current, if_match, None)
            path.unlink()
            _fsync_dir(path.parent)
        return (self.builtin / f"{name}.yaml").is_file()

    @staticmethod
    def _precondition(current: CatalogFile | None, if_match: str | None,
                      if_none_match: str | None) -> None:
        etag = current.etag if current else None
        if if_match is not None:
            tags = _tags(if_match)
            ok = etag is not None and ("*" in tags or etag in tags)
        elif if_none_match is not None:
            tags = _tags(if_none_match)
            ok = etag is None or not ("*" in tags or etag in tags)
        else:
            raise ApiError(428, "precondition-required", "a catalog write needs If-Match with "
                           "the current ETag (GET the catalog first), or If-None-Match: * to "
                           "create a new one")
        if not ok:
            state = f"its current ETag is {etag}" if etag else "it does not exist"
            raise ApiError(412, "precondition-failed", f"the catalog changed: {state}",
                           headers={"ETag": f'"{etag}"'} if etag else None)


def _atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- the service -----------------------------------------------------------------------


class Service:
    """The state of one app instance (see the module docstring)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        writable = settings.writable_catalog_dir
        if writable is not None:
            writable.mkdir(parents=True, exist_ok=True)
            writable = writable.resolve()
        dirs = [d.resolve() for d in (writable, *settings.catalog_dirs) if d is not None]
        self.registry = CatalogRegistry(dirs)
        self.catalogs = CatalogStore(self.registry, writable, BUILTIN_DIR.resolve())
        self.cache: PlanCache[Planned] = PlanCache(settings.cache_size)
        self.metrics = Metrics()
        self.pool = ThreadPoolExecutor(settings.pool_workers, thread_name_prefix="planner-pool")
        self.in_flight = 0

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def run(self, fn: Callable[..., T], /, *args: Any) -> T:
        """``fn(*args)`` in the worker pool."""
        self.in_flight += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)
        finally:
            self.in_flight -= 1

    async def plan(self, kernel: KernelSource, target_name: str, bindings: dict[str, int],
                   policy: Policy, baseline: Baseline | None, time_limit: float | None,
                   bounds: SymbolBounds | None = None) -> tuple[Planned, bool]:
        """The plan (from the cache when an identical request was solved) and ``hit``.

        ``bounds`` (declared symbol ranges) decide proofs, so they are part of the key.
        """
        target = await asyncio.to_thread(self.catalogs.target, target_name)
        bounds = dict(bounds or {})
        key = PlanKey.of(kernel, target_name, target.content_hash, bindings, policy.value,
                         baseline.value if baseline else None, bounds)
        job = PlanJob(kernel, target, dict(bindings), policy, baseline,
                      self.settings.time_limit(time_limit), self.settings.max_graph_ops,
                      self.settings.solver_workers, bounds)
        # Plans cut short by the time limit are not kept: a later request may do better.
        return await self.cache.get_or_compute(key, lambda: self.run(job.run),
                                               keep=lambda p: p.plan.status != Status.FEASIBLE)


def get_service(request: Request) -> Service:
    """The app's :class:`Service` (a dependency)."""
    service: Service = request.app.state.service
    return service


ServiceDep = Annotated[Service, Depends(get_service)]
