"""Finding catalogs by name: built-in ``planner/catalogs/`` plus the user's directories.

A catalog is the file ``<name>.yaml`` in one of the search directories.  The user's
directories come first, in the order given (explicit ``--catalog-dir`` arguments, then
``PLANNER_CATALOG_PATH``), and the built-in directory last, so a user's file overrides
a built-in target of the same name.  Directories are rescanned on every call: a file
added while a server runs is found without a restart.

Nothing here reads the environment on import; callers pass the directories in
(:func:`env_catalog_dirs` turns the environment variable into a list when asked).
Loaded targets are cached per path and reused while the file's mtime and size are
unchanged, or, when they changed, while its content hash is.

Every accepted revision of a catalog written through the service is kept under
``<dir>/.revisions/<name>/<sha256>.yaml`` (:data:`REVISIONS_DIR`), named by its content
hash, which is the ``catalog_hash`` a plan records; ``NAME@HASH`` (a unique prefix of
at least six hex digits will do) names that revision wherever a target is looked up by
name (:meth:`CatalogRegistry.revision`), so ``planner compare K --target x@3f2a91
--target x@77c0de`` compares two revisions of one catalog.

The name ``host`` (:data:`HOST_TARGET`) is not a file: :func:`host_target_name` resolves
it to the first of :data:`HOST_CANDIDATES` whose ``cpu.llvm_features`` the machine this
process runs on has (``x86-avx512`` with AVX-512 F/BW/CD/DQ/VL, else ``x86-avx2``), as
LLVM detects the host CPU.  :meth:`CatalogRegistry.path` and :meth:`CatalogRegistry.get`
resolve it, so every command that looks a target up by name accepts ``host``.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from planner.catalog.loader import load_target_source, read_catalog_text
from planner.catalog.model import Target
from planner.catalog.spec import TARGET_NAME
from planner.errors import Diagnostic, PlannerError, SourceLoc

#: The target used when none is named.
DEFAULT_TARGET = "x86-avx2"
#: The environment variable listing extra catalog directories (os.pathsep separated).
CATALOG_PATH_ENV = "PLANNER_CATALOG_PATH"
#: The catalogs shipped with planner, at the repository root.
BUILTIN_DIR = Path(__file__).resolve().parents[1] / "catalogs"
#: The target name that stands for the catalog matching this machine.
HOST_TARGET = "host"
#: The catalogs ``host`` may stand for, most capable first.
HOST_CANDIDATES: tuple[str, ...] = ("x86-avx512", "x86-avx2")

#: The folder of a catalog directory that keeps every accepted revision of its files.
REVISIONS_DIR = ".revisions"
#: The separator of ``NAME@HASH``, a target at one revision of its catalog.
REVISION_SEP = "@"
_DIGEST = re.compile(r"[0-9a-f]{6,64}")

_host_lock = threading.Lock()
_host_state: dict[str, tuple[str, frozenset[str]]] = {}


def host_cpu() -> tuple[str, frozenset[str]]:
    """LLVM's name of this machine's CPU and the features it has (detected once)."""
    found = _host_state.get("cpu")
    if found is None:
        import llvmlite.binding as llvm

        with _host_lock:
            features = llvm.get_host_cpu_features()
            found = (llvm.get_host_cpu_name(),
                     frozenset(name for name, on in features.items() if on))
            _host_state["cpu"] = found
    return found


def missing_host_features(target: Target) -> tuple[str, ...]:
    """The ``cpu.llvm_features`` of ``target`` this machine lacks (none without ``cpu``)."""
    if target.cpu is None:
        return ()
    have = host_cpu()[1]
    return tuple(f for f in target.cpu.llvm_features if f not in have)


def env_catalog_dirs(environ: Mapping[str, str]) -> list[Path]:
    """The existing directories named in ``environ[PLANNER_CATALOG_PATH]``."""
    entries = environ.get(CATALOG_PATH_ENV, "").split(os.pathsep)
    return [Path(e) for e in entries if e and Path(e).is_dir()]


class CatalogEntry(NamedTuple):
    """A target that can be loaded: its name, file, and the file it overrides (if any)."""

    name: str
    path: Path
    overrides: Path | None


@dataclass(frozen=True, slots=True)
class _Cached:
    mtime_ns: int
    size: int
    content_hash: str
    target: Target


class CatalogRegistry:
    """Targets by name over an ordered list of catalog directories."""

    def __init__(self, extra_dirs: Iterable[str | Path] = (), *,
                 builtin_dir: Path = BUILTIN_DIR) -> None:
        self.dirs: tuple[Path, ...] = (*(Path(d) for d in extra_dirs), builtin_dir)
        for directory in self.dirs[:-1]:
            if not directory.is_dir():
                raise PlannerError(Diagnostic(f"catalog directory {str(directory)!r} does "
                                              "not exist", SourceLoc(str(directory), 0)),
                                   kind="catalog")
        self._cache: dict[Path, _Cached] = {}

    @classmethod
    def from_environment(cls, extra_dirs: Iterable[str | Path] = (),
                         environ: Mapping[str, str] | None = None) -> CatalogRegistry:
        """``extra_dirs`` first, then the directories of ``PLANNER_CATALOG_PATH``."""
        env = os.environ if environ is None else environ
        return cls([*extra_dirs, *env_catalog_dirs(env)])

    def list(self) -> list[CatalogEntry]:
        """Every visible target, by name, with the file it came from."""
        found: dict[str, list[Path]] = {}
        for directory in self.dirs:
            for path in sorted(directory.glob("*.yaml")) if directory.is_dir() else ():
                found.setdefault(path.stem, []).append(path)
        return [CatalogEntry(name, paths[0], paths[1] if len(paths) > 1 else None)
                for name, paths in sorted(found.items())]

    def names(self) -> list[str]:
        return [entry.name for entry in self.list()]

    def resolve_name(self, name: str) -> str:
        """``name``, or for ``host`` the name of the catalog that matches this machine."""
        return host_target_name(self) if name == HOST_TARGET else name

    def path(self, name: str) -> Path:
        """The file that defines target ``name`` (``host``: see :func:`host_target_name`)."""
        name = self.resolve_name(name)
        valid = re.fullmatch(TARGET_NAME.pattern or "", name) is not None
        for directory in self.dirs if valid else ():
            candidate = directory / f"{name}.yaml"
            if candidate.is_file():
                return candidate
        known = self.names()
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise PlannerError(Diagnostic(f"unknown target {name!r}{hint}; known targets: "
                                      f"{', '.join(known)}"), kind="unknown-target")

    def revision_files(self, name: str) -> dict[str, Path]:
        """Every stored revision of catalog ``name``, by content hash (first directory wins)."""
        found: dict[str, Path] = {}
        if re.fullmatch(TARGET_NAME.pattern or "", name) is None:
            return found
        for directory in self.dirs:
            folder = directory / REVISIONS_DIR / name
            for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else ():
                if re.fullmatch(r"[0-9a-f]{64}", path.stem):
                    found.setdefault(path.stem, path)
        return found

    def revision_file(self, name: str, digest: str) -> Path:
        """The file of revision ``digest`` of catalog ``name``: a stored revision, or the
        visible file when its content hash is ``digest``.  ``digest`` may be a unique prefix
        of at least six hex digits; a PlannerError ``unknown-target`` names the known ones."""
        digest = digest.lower()
        if _DIGEST.fullmatch(digest) is None:
            raise PlannerError(Diagnostic(f"{digest!r} is not a catalog revision (6 to 64 hex "
                                          "digits of its SHA-256)"), kind="usage")
        files = self.revision_files(name)
        try:
            current: Path | None = self.path(name)
        except PlannerError:
            current = None
        if current is not None:
            files.setdefault(hashlib.sha256(current.read_bytes()).hexdigest(), current)
        matches = sorted(h for h in files if h.startswith(digest))
        if len(matches) > 1:
            raise PlannerError(Diagnostic(f"revision {digest!r} of catalog {name!r} is "
                                          f"ambiguous: {', '.join(m[:12] for m in matches)}"),
                               kind="usage")
        if not matches:
            known = ", ".join(h[:12] for h in sorted(files)) or "none"
            raise PlannerError(Diagnostic(f"unknown revision {digest!r} of catalog {name!r} "
                                          f"(known revisions: {known})"), kind="unknown-target")
        return files[matches[0]]

    def revision(self, name: str, digest: str) -> Target:
        """Target ``name`` as revision ``digest`` of its catalog says (see
        :meth:`revision_file`); its ``content_hash`` is the full digest."""
        path = self.revision_file(name, digest)
        return load_target_source(read_catalog_text(path), str(path), expected_name=name)

    def get(self, name: str) -> Target:
        """The validated target ``name`` (cached while its file is unchanged; ``host``: the
        catalog matching this machine; ``NAME@HASH``: that revision, see :meth:`revision`)."""
        if REVISION_SEP in name:
            base, _, digest = name.partition(REVISION_SEP)
            return self.revision(self.resolve_name(base), digest)
        name = self.resolve_name(name)
        path = self.path(name)
        stat = path.stat()
        cached = self._cache.get(path)
        if cached and (cached.mtime_ns, cached.size) == (stat.st_mtime_ns, stat.st_size):
            return cached.target
        text = read_catalog_text(path)
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if cached and cached.content_hash == digest:
            target = cached.target
        else:
            target = load_target_source(text, str(path), expected_name=name)
        self._cache[path] = _Cached(stat.st_mtime_ns, stat.st_size, digest, target)
        return target


def host_target_name(registry: CatalogRegistry) -> str:
    """The first of :data:`HOST_CANDIDATES` (as ``registry`` finds them) whose
    ``cpu.llvm_features`` this machine has all of; a PlannerError when none fits."""
    tried: list[str] = []
    for name in HOST_CANDIDATES:
        try:
            target = registry.get(name)
        except PlannerError as exc:
            if exc.kind != "unknown-target":
                raise
            continue
        if target.cpu is None:
            tried.append(f"{name} (no cpu section)")
            continue
        missing = missing_host_features(target)
        if not missing:
            return name
        tried.append(f"{name} (lacks {', '.join(missing)})")
    why = "; ".join(tried) if tried else f"none of {', '.join(HOST_CANDIDATES)} is a known target"
    raise PlannerError(Diagnostic(f"no target catalog matches this machine (host CPU "
                                  f"{host_cpu()[0]!r}): {why}"), kind="unknown-target")
