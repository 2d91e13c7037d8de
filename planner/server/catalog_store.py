"""The catalog files of a service: read by name, written and deleted under preconditions.

Several server processes may share one writable catalog directory, so a write is
serialized across processes, not only across threads: it holds an exclusive
``fcntl.flock`` on ``<dir>/.catalogs.lock`` (:data:`LOCK_FILE`) from reading the
current file, through the ``If-Match`` / ``If-None-Match`` comparison with its content
hash, to the atomic replacement (temporary file, fsync, ``os.replace``, fsync of the
directory).  Two clients holding the same ETag therefore cannot both succeed, in one
process or in two, and a DELETE cannot remove a file that another process has just
replaced (its precondition then fails: 412) or removed (404).  Reads take no lock:
``os.replace`` makes a reader see the old file or the new one, never a mix.

Every accepted file is also kept, content-addressed, as
``<dir>/.revisions/<name>/<sha256>.yaml`` (:data:`planner.catalog.registry.REVISIONS_DIR`)
before it becomes the visible file, together with the file it replaces (a built-in,
say), so the ``catalog_hash`` a plan records always names a revision that can be read
back (``GET /v1/catalogs/{name}/revisions/{hash}``, ``--target NAME@HASH``).

A crash between creating a temporary and renaming it leaves ``.<name>.*.tmp``; the
store removes such files when it starts, under the same lock, so a live writer's
temporary in another process is never taken.  A write the file system refuses (disk
full, read-only, permission denied) removes what it had written and raises
:class:`StoreError` 507 / 503 with a ``kind`` that says which; messages name catalogs
by name, never by the server's paths.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from planner.catalog import CatalogRegistry, Target, load_target_text
from planner.catalog.registry import REVISION_SEP, REVISIONS_DIR
from planner.errors import Diagnostic, PlannerError, SourceLoc

log = logging.getLogger("planner.server")

Origin = Literal["builtin", "user", "extra"]

#: The lock file, in the writable catalog directory, that serializes writes.
LOCK_FILE = ".catalogs.lock"

#: (status, kind, what happened) of the OSErrors a write can meet on the file system.
_STORAGE_FAULTS: dict[int, tuple[int, str, str]] = {
    errno.ENOSPC: (507, "insufficient-storage", "the server's disk is full"),
    errno.EDQUOT: (507, "insufficient-storage", "the server's disk quota is exhausted"),
    errno.EROFS: (503, "read-only-storage", "the server's catalog storage is read-only"),
    errno.EACCES: (503, "storage-permission-denied",
                   "the server may not write its catalog storage"),
    errno.EPERM: (503, "storage-permission-denied",
                  "the server may not write its catalog storage"),
}


class StoreError(Exception):
    """A refused catalog write: ``status`` and ``kind`` are the HTTP answer's."""

    def __init__(self, status: int, kind: str, message: str, *,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message
        self.headers = dict(headers or {})


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


def _unknown(name: str) -> PlannerError:
    return PlannerError(Diagnostic(f"unknown target {name!r}"), kind="unknown-target")


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


@dataclass(frozen=True, slots=True)
class Revision:
    """One kept revision of a catalog: its content hash, size, when it was first kept."""

    digest: str
    size: int
    kept_at: float  # seconds since the epoch; 0 for a visible file never stored
    current: bool


class CatalogStore:
    """Reads catalogs by name; writes and deletes files of the writable directory."""

    def __init__(self, registry: CatalogRegistry, writable: Path | None, builtin: Path, *,
                 lock_timeout_s: float = 10.0) -> None:
        self.registry, self.writable, self.builtin = registry, writable, builtin
        self.lock_timeout_s = lock_timeout_s
        self._guard = threading.Lock()  # one thread per process waits on the file lock
        self._targets: dict[str, Target] = {}  # content hash -> target
        self.removed_temporaries: list[str] = []
        if writable is not None:
            try:
                self.removed_temporaries = self.remove_temporaries()
            except (StoreError, OSError) as exc:  # a read-only directory: writes answer 503
                log.warning("catalog storage: stale temporaries not removed: %s", exc)

    # -- reading -----------------------------------------------------------------------

    def origin(self, path: Path) -> Origin:
        if self.writable is not None and path.parent == self.writable:
            return "user"
        return "builtin" if path.parent == self.builtin else "extra"

    def find(self, name: str) -> CatalogFile:
        """The visible file of target ``name`` (PlannerError unknown-target if none)."""
        for _ in range(3):  # a file deleted between lookup and read: look again
            path = self.registry.path(name)
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            overrides = (self.builtin / f"{name}.yaml").is_file() and path.parent != self.builtin
            return CatalogFile(name, path, data, self.origin(path), overrides)
        raise _unknown(name)

    def find_or_none(self, name: str) -> CatalogFile | None:
        try:
            return self.find(name)
        except PlannerError as exc:
            if exc.kind == "unknown-target":
                return None
            raise

    def target(self, name: str) -> Target:
        """The validated target ``name``, as its current file says (cached by content);
        ``host`` is the catalog that matches this machine; ``NAME@HASH`` is a kept
        revision (:meth:`revision`).  Diagnostics name the file ``<name>.yaml`` (or
        ``<name>@<hash>.yaml``), never the server's path."""
        if REVISION_SEP in name:
            base, _, digest = name.partition(REVISION_SEP)
            base = self.registry.resolve_name(base)
            digest, data = self.revision(base, digest)
            filename = f"{base}{REVISION_SEP}{digest[:12]}.yaml"
        else:
            base = self.registry.resolve_name(name)
            file = self.find(base)
            digest, data, filename = file.etag, file.data, f"{base}.yaml"
        cached = self._targets.get(digest)
        if cached is not None and cached.name == base:
            return cached
        target = self.load(data, filename, base)
        if len(self._targets) >= 64:  # old versions of edited catalogs
            self._targets.clear()
        self._targets[digest] = target
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

    def revisions(self, name: str) -> list[Revision]:
        """Every kept revision of catalog ``name``, oldest first, and the visible file
        (marked ``current``) even where it was never stored; unknown-target if none."""
        current = self.find_or_none(name)
        now = current.etag if current else None
        out = []
        for digest, path in self.registry.revision_files(name).items():
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            out.append(Revision(digest, stat.st_size, stat.st_mtime, digest == now))
        if current is not None and not any(r.current for r in out):
            out.append(Revision(current.etag, len(current.data), 0.0, True))
        if not out:
            raise _unknown(name)
        return sorted(out, key=lambda r: (r.kept_at, r.digest))

    def revision(self, name: str, digest: str) -> tuple[str, bytes]:
        """The full content hash and the bytes of revision ``digest`` of ``name``."""
        path = self.registry.revision_file(name, digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # the visible file, replaced since it was found
            raise PlannerError(Diagnostic(f"unknown revision {digest!r} of catalog {name!r}"),
                               kind="unknown-target") from None
        return etag_of(data), data

    # -- writing -----------------------------------------------------------------------

    def write(self, name: str, data: bytes, if_match: str | None,
              if_none_match: str | None) -> WriteResult:
        """Validate, then under the directory's lock check the precondition, keep the
        revision and atomically replace ``<writable>/name.yaml``."""
        assert self.writable is not None
        self.load(data, f"{name}.yaml", name)
        with self._storage(name, "written"), self._exclusive(name):
            current = self.find_or_none(name)
            self._precondition(current, if_match, if_none_match)
            kept: list[Path] = []
            try:
                if current is not None:  # the file it replaces (a built-in, say)
                    self._keep_revision(name, current.data, kept)
                self._keep_revision(name, data, kept)
                _atomic_write(self.writable / f"{name}.yaml", data)
            except BaseException:
                for path in kept:  # nothing of a refused write stays
                    path.unlink(missing_ok=True)
                raise
        overrides = (self.builtin / f"{name}.yaml").is_file()
        return WriteResult(etag_of(data), current is None or current.origin != "user", overrides)

    def delete(self, name: str, if_match: str | None) -> bool:
        """Remove the user's file; True when a built-in of that name shows again.

        404 when no catalog of that name is visible (another process deleted it first),
        428 without If-Match, 412 when the visible file is not the one the client read,
        409 for a file that is not the user's.  The file's revisions are kept.
        """
        assert self.writable is not None
        path = self.writable / f"{name}.yaml"
        with self._storage(name, "deleted"), self._exclusive(name):
            current = self.find_or_none(name)
            if current is None:
                raise _unknown(name)
            if if_match is None:
                raise StoreError(428, "precondition-required", "DELETE needs If-Match with "
                                 "the catalog's ETag")
            self._precondition(current, if_match, None)
            if current.origin != "user":
                raise StoreError(409, "read-only-catalog", f"catalog {name!r} is not a user "
                                 f"file ({current.origin}); only files written through this "
                                 "API can be deleted")
            try:
                path.unlink()
            except FileNotFoundError:  # removed behind the lock's back
                raise _unknown(name) from None
            _fsync_dir(path.parent)
        return (self.builtin / f"{name}.yaml").is_file()

    def remove_temporaries(self) -> list[str]:
        """Remove the ``.*.tmp`` files a crashed writer left (under the lock); their names."""
        assert self.writable is not None

        def stale() -> list[Path]:
            folders = [self.writable, *self._revision_root().glob("*")]
            return [tmp for folder in folders if folder is not None and folder.is_dir()
                    for tmp in folder.glob(".*.tmp")]

        if not stale():  # nothing to do: take no lock, create no lock file
            return []
        with self._exclusive("*"):
            removed = []
            for tmp in stale():
                tmp.unlink(missing_ok=True)
                removed.append(tmp.name)
        if removed:
            log.info("catalog storage: removed %d stale temporary file(s)", len(removed))
        return removed

    def _revision_root(self) -> Path:
        assert self.writable is not None
        return self.writable / REVISIONS_DIR

    def _keep_revision(self, name: str, data: bytes, kept: list[Path]) -> None:
        """Store ``data`` as a revision of ``name`` unless it is stored; new files go to
        ``kept`` so that a failed write can take them back."""
        folder = self._revision_root() / name
        path = folder / f"{etag_of(data)}.yaml"
        if path.is_file():
            return
        folder.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, data)
        kept.append(path)

    @contextmanager
    def _exclusive(self, name: str) -> Iterator[None]:
        """Hold the directory's write lock, across threads and processes (503 after
        ``lock_timeout_s``)."""
        assert self.writable is not None
        busy = StoreError(503, "catalog-busy", f"catalog {name!r}: the catalog storage is "
                          "busy; try again", headers={"Retry-After": "1"})
        deadline = time.monotonic() + self.lock_timeout_s
        if not self._guard.acquire(timeout=self.lock_timeout_s):
            raise busy
        try:
            fd = os.open(self.writable / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            raise busy from None
                        time.sleep(0.002)
                yield
            finally:
                os.close(fd)  # releases the flock
        finally:
            self._guard.release()

    @staticmethod
    @contextmanager
    def _storage(name: str, done: str) -> Iterator[None]:
        """Turn a file-system refusal into a :class:`StoreError` that names ``name``."""
        try:
            yield
        except OSError as exc:
            if isinstance(exc, FileNotFoundError | FileExistsError | BlockingIOError):
                fault = (503, "storage-error", f"the catalog storage changed underneath "
                         f"({os.strerror(exc.errno or 0)})")
            else:
                fault = _STORAGE_FAULTS.get(exc.errno or 0, (
                    503, "storage-error",
                    f"the catalog storage failed ({os.strerror(exc.errno or 0)})"))
            status, kind, why = fault
            log.warning("catalog %r not %s: %s", name, done, exc)
            raise StoreError(status, kind, f"catalog {name!r} was not {done}: {why}; "
                             "nothing was changed") from None

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
            raise StoreError(428, "precondition-required", "a catalog write needs If-Match "
                             "with the current ETag (GET the catalog first), or "
                             "If-None-Match: * to create a new one")
        if not ok:
            state = f"its current ETag is {etag}" if etag else "it does not exist"
            raise StoreError(412, "precondition-failed", f"the catalog changed: {state}",
                             headers={"ETag": f'"{etag}"'} if etag else None)


def _atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file
    (and perhaps a ``.<stem>.*.tmp`` that the next start removes)."""
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
