"""Thin, thread-safe JIT layer over llvmlite (MCJIT + the new pass manager).

Design
------
* **Initialization.** llvmlite 0.50 (LLVM 22) raises on ``llvm.initialize()``; only the
  native target and the native asm printer are initialized, once, on first use
  (:func:`ensure_llvm_initialized`).
* **Target.** A plan is compiled for its target catalog, never for the host:
  :func:`catalog_target` turns the catalog's ``cpu`` section into a :class:`TargetSpec`
  (the process triple, ``cpu.llvm_cpu`` and exactly ``+f`` for each of
  ``cpu.llvm_features``; on x86 also ``-avx512f`` unless an AVX-512 feature is listed),
  so an x86-avx2 plan gets ymm code even on an AVX-512 machine.  :func:`missing_features`
  says which of a spec's features the host lacks; code that needs one must not run
  (it would die on an illegal instruction).  :func:`host_target` (the host CPU name and
  feature string) is still the default of :func:`compile_module` for code that is not
  compiled from a plan (the standalone sgemm).
* **Optimization.** ``PipelineTuningOptions(speed_level=3)`` (loop + SLP vectorization
  on) → ``PassBuilder`` → the default O3 ``ModulePassManager``.
* **Caching.** Compiling a packed GEMM takes ~0.5 s, so compiled modules are cached in a
  :class:`JitCache`, keyed by ``sha256(IR text + CPU name + features + opt level)``.
  A cache entry owns its ``ExecutionEngine`` (and so the machine code) for the lifetime of
  the cache. Callers pass a cache explicitly; :func:`default_jit_cache` lazily creates a
  process-wide one for convenience (nothing is created at import time).
* **Disk cache.** Beneath the in-memory cache, :class:`DiskCache` keeps the *object
  code* of every compiled module (plus its optimized IR text, for ``--emit llvm`` and
  assembly) in the user's cache directory (:func:`cache_dir`: ``$PLANNER_CACHE_DIR``,
  else ``$XDG_CACHE_HOME/planner``, else ``~/.cache/planner``; ``PLANNER_DISK_CACHE=0``
  turns it off), so a second process skips optimization and code generation: the object
  file is loaded into a fresh MCJIT engine (``ExecutionEngine.add_object_file``).  The
  key is ``sha256`` of the in-memory key (IR text, CPU, features, opt level), the
  caller's context (``compile_kernel`` passes its kernel/plan/target/config key), the
  llvmlite and LLVM versions, the planner version and :data:`_PIPELINE_VERSION`.  An
  entry is written to a temporary file in the same directory and moved into place with
  ``os.replace``, so concurrent processes never see a partial entry (the last writer
  wins; both wrote the same bytes' worth of valid code); after a write the least recently
  used entries (by mtime, which a hit refreshes) are removed beyond
  ``PLANNER_CACHE_MAX_MB``; an entry whose magic, lengths or checksum do not match
  (corrupt, truncated) is ignored and rewritten.  Any I/O
  error only costs the cache (the module is compiled as usual).
* **Thread safety.** LLVM's global context is not thread-safe, so parsing, optimizing and
  code generation are serialized by one process-wide lock (:data:`_LLVM_LOCK`, the only
  import-time object). Cache look-ups have their own lock. Calling JIT-compiled code is
  lock-free: :meth:`CompiledModule.ctypes_function` builds ``ctypes.CFUNCTYPE`` wrappers,
  which release the GIL for the duration of the call, so several Python threads can run
  compiled kernels in parallel.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import logging
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm
import llvmlite.ir as ir

from planner.lower.cpu.llvm_helpers import declare_function

__all__ = [
    "CompiledModule",
    "DiskCache",
    "JitCache",
    "JitModule",
    "TargetSpec",
    "cache_dir",
    "catalog_target",
    "compile_module",
    "declare_intrinsic",
    "default_disk_cache",
    "default_jit_cache",
    "ensure_llvm_initialized",
    "host_target",
    "intrinsic_suffix",
    "masked_load_store",
    "missing_features",
]

# LLVM's global context (used by parse_assembly, the pass manager and MCJIT) is shared by
# the whole process, so all LLVM work is serialized by this lock. It holds no state.
_LLVM_LOCK = threading.RLock()
_init_state: dict[str, bool] = {}
_host_state: dict[str, TargetSpec] = {}
_default_cache_state: dict[str, JitCache] = {}
_DEFAULT_OPT_LEVEL = 3
#: Bump when the optimization pipeline or the object-code path changes (it is part of
#: every disk cache key, so old entries are simply never looked up again).
_PIPELINE_VERSION = "pipeline-1"
_log = logging.getLogger(__name__)


def ensure_llvm_initialized() -> None:
    """Initialize the native target and the native asm printer (idempotent)."""
    if _init_state.get("done"):
        return
    with _LLVM_LOCK:
        if not _init_state.get("done"):
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _init_state["done"] = True


@dataclass(frozen=True)
class TargetSpec:
    """What the code is compiled for: triple, CPU name and LLVM feature string."""

    triple: str
    cpu: str
    features: str

    def has_feature(self, name: str) -> bool:
        """True when ``+name`` is in the feature string (e.g. ``"avx512f"``)."""
        return f"+{name}" in self.features.split(",")

    @property
    def key(self) -> str:
        return f"{self.triple}|{self.cpu}|{self.features}"

    @property
    def x86(self) -> bool:
        """Whether the code is x86 (x86 intrinsics such as ``pause``, ``sfence`` and
        non-temporal stores apply)."""
        return self.triple.startswith(("x86_64", "i386", "i686"))


def host_target() -> TargetSpec:
    """The host's triple, CPU name and features (computed once, then memoized)."""
    spec = _host_state.get("spec")
    if spec is not None:
        return spec
    ensure_llvm_initialized()
    with _LLVM_LOCK:
        spec = _host_state.get("spec")
        if spec is None:
            spec = TargetSpec(
                triple=llvm.get_process_triple(),
                cpu=llvm.get_host_cpu_name(),
                features=llvm.get_host_cpu_features().flatten(),
            )
            _host_state["spec"] = spec
    return spec


def catalog_target(cpu: Any) -> TargetSpec:
    """The spec a catalog's ``cpu`` section (:class:`planner.catalog.CpuIsa`) asks for.

    Only the triple comes from the process (the code runs here); the CPU name and the
    features are the catalog's.  On x86, ``-avx512f`` (which LLVM propagates to every
    AVX-512 feature) is appended unless the catalog lists an AVX-512 or AVX10 feature,
    so no CPU name can bring in 512-bit registers the target does not describe.
    """
    triple = host_target().triple
    features = [f"+{f}" for f in cpu.llvm_features]
    wide = any(f.startswith(("avx512", "avx10")) for f in cpu.llvm_features)
    if TargetSpec(triple, "", "").x86 and not wide:
        features.append("-avx512f")
    return TargetSpec(triple=triple, cpu=cpu.llvm_cpu, features=",".join(features))


def missing_features(spec: TargetSpec) -> tuple[str, ...]:
    """The features ``spec`` enables (``+f``) that the host CPU does not have."""
    have = {f[1:] for f in host_target().features.split(",") if f.startswith("+")}
    return tuple(f[1:] for f in spec.features.split(",")
                 if f.startswith("+") and f[1:] not in have)


def _target_machine(spec: TargetSpec, opt_level: int) -> llvm.TargetMachine:
    target = llvm.Target.from_triple(spec.triple)
    return target.create_target_machine(
        cpu=spec.cpu,
        features=spec.features,
        opt=opt_level,
        reloc="default",
        codemodel="jitdefault",
        jit=True,
    )


class CompiledModule:
    """A module compiled and loaded into its own MCJIT ``ExecutionEngine``.

    Keep this object (or the :class:`JitCache` that holds it) alive while any function
    address or ctypes wrapper obtained from it is in use.
    """

    def __init__(
        self,
        engine: llvm.ExecutionEngine,
        target_machine: llvm.TargetMachine,
        llvm_ir: str,
        spec: TargetSpec,
        key: str,
    ) -> None:
        self._engine = engine
        self._tm = target_machine
        self._llvm_ir = llvm_ir
        self._asm: str | None = None
        self._spec = spec
        self.key = key
        self._lock = threading.Lock()
        self._addresses: dict[str, int] = {}

    @property
    def llvm_ir(self) -> str:
        """The optimized LLVM IR text."""
        return self._llvm_ir

    @property
    def target(self) -> TargetSpec:
        return self._spec

    @property
    def asm(self) -> str:
        """Assembly text for the optimized module (generated lazily, then kept)."""
        if self._asm is None:
            with _LLVM_LOCK:
                if self._asm is None:
                    mod = llvm.parse_assembly(self._llvm_ir)
                    self._asm = self._tm.emit_assembly(mod)
        return self._asm

    def address(self, name: str) -> int:
        """Address of the function (or global) ``name``; ``KeyError`` if it is absent."""
        with self._lock:
            addr = self._addresses.get(name)
            if addr is None:
                with _LLVM_LOCK:
                    addr = self._engine.get_function_address(name)
                    if not addr:
                        addr = self._engine.get_global_value_address(name)
                if not addr:
                    raise KeyError(f"symbol {name!r} not found in compiled module")
                self._addresses[name] = addr
        return addr

    def ctypes_function(
        self, name: str, restype: Any, argtypes: list[Any] | tuple[Any, ...]
    ) -> Any:
        """A ``ctypes.CFUNCTYPE`` wrapper for ``name``; calls release the GIL.

        The wrapper holds a reference to this module so the machine code outlives it.
        """
        proto = ctypes.CFUNCTYPE(restype, *argtypes)
        fn = proto(self.address(name))
        fn._planner_owner = self  # keep the engine alive as long as the wrapper
        return fn


# The brief's name for the same thing.
JitModule = CompiledModule


class JitCache:
    """Compiled-module cache keyed by sha256(IR text + target + opt level). Thread-safe."""

    def __init__(self) -> None:
        self._entries: dict[str, CompiledModule] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @staticmethod
    def make_key(ir_text: str, spec: TargetSpec, opt_level: int) -> str:
        h = hashlib.sha256()
        h.update(ir_text.encode())
        h.update(b"\0")
        h.update(spec.key.encode())
        h.update(f"\0O{opt_level}".encode())
        return h.hexdigest()

    def lookup(self, key: str) -> CompiledModule | None:
        with self._lock:
            return self._entries.get(key)

    def get_or_compile(
        self,
        ir_text: str,
        *,
        target: TargetSpec | None = None,
        opt_level: int = _DEFAULT_OPT_LEVEL,
        disk: DiskCache | bool | None = True,
        context: str = "",
    ) -> CompiledModule:
        """The compiled module of ``ir_text``: from memory, else from ``disk`` (True: the
        :func:`default_disk_cache`; False/None: none), else compiled (and stored)."""
        spec = target if target is not None else host_target()
        key = self.make_key(ir_text, spec, opt_level)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self.hits += 1
                return hit
        with _LLVM_LOCK:  # compile at most once per key
            with self._lock:
                hit = self._entries.get(key)
                if hit is not None:
                    self.hits += 1
                    return hit
            use_disk = default_disk_cache() if disk is True else (disk or None)
            compiled = _compile(ir_text, spec, opt_level, key, use_disk, context)
            with self._lock:
                self._entries[key] = compiled
                self.misses += 1
        return compiled

    def clear(self) -> None:
        """Drop all entries (their code is freed once no wrapper references them)."""
        with self._lock:
            self._entries.clear()


def default_jit_cache() -> JitCache:
    """The lazily created process-wide cache used when no cache is passed."""
    cache = _default_cache_state.get("cache")
    if cache is None:
        with _LLVM_LOCK:
            cache = _default_cache_state.get("cache")
            if cache is None:
                cache = JitCache()
                _default_cache_state["cache"] = cache
    return cache


# -- the on-disk cache ------------------------------------------------------------------

_MAGIC = b"PLANNER-JIT-1\n"


def cache_dir() -> Path:
    """``$PLANNER_CACHE_DIR``, else ``$XDG_CACHE_HOME/planner``, else ``~/.cache/planner``."""
    explicit = os.environ.get("PLANNER_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "planner"
    return Path.home() / ".cache" / "planner"


def _compiler_versions() -> str:
    import llvmlite

    from planner import __version__

    llvm_version = ".".join(map(str, llvm.llvm_version_info))
    return f"llvmlite {llvmlite.__version__}|llvm {llvm_version}|planner {__version__}"


class DiskCache:
    """Object code of compiled modules, one file per key under ``root/jit``.

    Counters (per process): ``hits`` (an entry was loaded), ``misses`` (no usable
    entry), ``writes`` (an entry was stored), ``corrupt`` (an entry was unreadable and
    ignored), ``errors`` (I/O or load failures that only cost the cache).
    """

    def __init__(self, root: str | Path, max_bytes: int | None = None) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes if max_bytes is not None else _max_cache_bytes()
        self.hits = 0
        self.pruned = 0
        self.misses = 0
        self.writes = 0
        self.corrupt = 0
        self.errors = 0

    @property
    def directory(self) -> Path:
        return self.root / "jit"

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "writes": self.writes,
                "corrupt": self.corrupt, "errors": self.errors, "pruned": self.pruned}

    def prune(self) -> int:
        """Removes least recently used entries (by mtime; a hit touches its entry) until
        the directory holds at most ``max_bytes``; returns how many were removed.

        Another process may remove or replace an entry meanwhile: a missing file is
        skipped, and a reader that loses the race recompiles (a miss, never an error).
        """
        entries: list[tuple[float, int, Path]] = []
        try:
            for path in self.directory.glob("*.obj"):
                with contextlib.suppress(OSError):
                    st = path.stat()
                    entries.append((st.st_mtime, st.st_size, path))
        except OSError:
            return 0
        total = sum(size for _, size, _ in entries)
        removed = 0
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            with contextlib.suppress(OSError):
                path.unlink()
                removed += 1
            total -= size
        self.pruned += removed
        return removed

    @staticmethod
    def make_key(memory_key: str, context: str = "") -> str:
        h = hashlib.sha256()
        for part in ("planner-jit-disk", memory_key, context, _compiler_versions(),
                     _PIPELINE_VERSION):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.obj"

    def load(self, key: str) -> tuple[str, bytes] | None:
        """``(optimized IR text, object code)`` of ``key``, or None (missing/corrupt)."""
        path = self.path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self.misses += 1
            return None
        except OSError as exc:
            self.errors += 1
            self.misses += 1
            _log.debug("planner jit disk cache: cannot read %s: %s", path, exc)
            return None
        entry = self._decode(key, data)
        if entry is None:
            self.corrupt += 1
            self.misses += 1
            _log.info("planner jit disk cache: ignoring corrupt entry %s", path)
            return None
        self.hits += 1
        with contextlib.suppress(OSError):
            os.utime(path)  # least-recently-used order for prune()
        _log.debug("planner jit disk cache: hit %s", key)
        return entry

    @staticmethod
    def _decode(key: str, data: bytes) -> tuple[str, bytes] | None:
        if not data.startswith(_MAGIC):
            return None
        rest = data[len(_MAGIC):]
        line, sep, payload = rest.partition(b"\n")
        if not sep:
            return None
        try:
            header = json.loads(line)
            ir_len, obj_len = int(header["ir_bytes"]), int(header["obj_bytes"])
            digest = str(header["sha256"])
            if header["key"] != key or ir_len < 0 or obj_len <= 0:
                return None
        except (ValueError, KeyError, TypeError):
            return None
        if len(payload) != ir_len + obj_len or hashlib.sha256(payload).hexdigest() != digest:
            return None
        try:
            ir_text = payload[:ir_len].decode()
        except UnicodeDecodeError:
            return None
        return ir_text, payload[ir_len:]

    def store(self, key: str, ir_text: str, obj: bytes) -> bool:
        """Write the entry atomically (temp file in the same directory, ``os.replace``)."""
        ir_bytes = ir_text.encode()
        payload = ir_bytes + obj
        header = json.dumps({"key": key, "ir_bytes": len(ir_bytes), "obj_bytes": len(obj),
                             "sha256": hashlib.sha256(payload).hexdigest(),
                             "versions": _compiler_versions()}, sort_keys=True)
        tmp: str | None = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}-", suffix=".tmp",
                                       dir=self.directory)
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + header.encode() + b"\n" + payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path(key))
            tmp = None
        except OSError as exc:
            self.errors += 1
            _log.debug("planner jit disk cache: cannot write %s: %s", self.path(key), exc)
            return False
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        self.writes += 1
        self.prune()
        return True


#: Default size cap of the disk cache; ``PLANNER_CACHE_MAX_MB`` overrides it.
DEFAULT_CACHE_MAX_MB = 512


def _max_cache_bytes() -> int:
    text = os.environ.get("PLANNER_CACHE_MAX_MB", "").strip()
    try:
        mb = float(text) if text else DEFAULT_CACHE_MAX_MB
    except ValueError:
        mb = DEFAULT_CACHE_MAX_MB
    return max(0, int(mb * (1 << 20)))


_disk_state: dict[str, DiskCache] = {}


def default_disk_cache() -> DiskCache | None:
    """The disk cache in :func:`cache_dir` (None when ``PLANNER_DISK_CACHE=0``); one
    object per directory, so changing ``PLANNER_CACHE_DIR`` takes effect at once."""
    if os.environ.get("PLANNER_DISK_CACHE", "1").strip().lower() in ("0", "off", "no",
                                                                      "false"):
        return None
    root = str(cache_dir())
    cache = _disk_state.get(root)
    if cache is None:
        with _LLVM_LOCK:
            cache = _disk_state.setdefault(root, DiskCache(root))
    return cache


def _compile(ir_text: str, spec: TargetSpec, opt_level: int, key: str,
             disk: DiskCache | None = None, context: str = "") -> CompiledModule:
    """Parse, verify, optimize and JIT ``ir_text``. Caller holds ``_LLVM_LOCK``.

    With ``disk``, the object code is loaded from (or, after compiling, stored in) the
    disk cache and loaded into the engine with ``add_object_file``."""
    ensure_llvm_initialized()
    disk_key = disk.make_key(key, context) if disk is not None else ""
    if disk is not None:
        entry = disk.load(disk_key)
        if entry is not None:
            optimized, obj = entry
            try:
                tm = _target_machine(spec, opt_level)
                return CompiledModule(_engine_from_object(tm, obj), tm, optimized, spec, key)
            except Exception as exc:  # a bad object file: compile it again
                disk.errors += 1
                _log.info("planner jit disk cache: cannot load %s: %s", disk_key, exc)
    tm = _target_machine(spec, opt_level)
    mod = llvm.parse_assembly(ir_text)
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    if opt_level > 0:
        pto = llvm.PipelineTuningOptions(speed_level=min(opt_level, 3))
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_unrolling = True
        pb = llvm.PassBuilder(tm, pto)
        mpm = pb.getModulePassManager()
        mpm.run(mod, pb)
    optimized = str(mod)
    if disk is not None:
        obj = tm.emit_object(mod)
        disk.store(disk_key, optimized, obj)
        return CompiledModule(_engine_from_object(tm, obj), tm, optimized, spec, key)
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    engine.run_static_constructors()
    return CompiledModule(engine, tm, optimized, spec, key)


def _engine_from_object(tm: llvm.TargetMachine, obj: bytes) -> llvm.ExecutionEngine:
    """A fresh MCJIT engine (over an empty module) with the object code ``obj`` loaded."""
    empty = llvm.parse_assembly("")
    empty.triple = tm.triple
    empty.data_layout = str(tm.target_data)
    engine = llvm.create_mcjit_compiler(empty, tm)
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    engine.run_static_constructors()
    return engine


def intrinsic_suffix(ty: ir.Type) -> str:
    """LLVM's overload suffix for ``ty``: ``f32``, ``v8f32``, ``i64``, ``v8i32``, ``p0``."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{intrinsic_suffix(ty.element)}"
    if isinstance(ty, ir.FloatType):
        return "f32"
    if isinstance(ty, ir.DoubleType):
        return "f64"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    if isinstance(ty, ir.PointerType):
        return "p0"
    raise NotImplementedError(f"no intrinsic suffix for {ty}")


def declare_intrinsic(
    module: ir.Module, base: str, overloads: list[ir.Type], ret: ir.Type, args: list[ir.Type]
) -> ir.Function:
    """Get or declare ``base.<suffixes>`` (e.g. ``llvm.fma.v8f32``) in ``module``."""
    name = ".".join([base, *(intrinsic_suffix(t) for t in overloads)])
    return declare_function(module, name, ir.FunctionType(ret, args))


def masked_load_store(module: ir.Module, vty: ir.VectorType
                      ) -> tuple[ir.Function, ir.Function]:
    """``llvm.masked.load`` and ``llvm.masked.store`` of ``vty`` (opaque pointers)."""
    mty = ir.VectorType(ir.IntType(1), vty.count)
    ptr, i32 = ir.PointerType(), ir.IntType(32)
    mload = declare_intrinsic(module, "llvm.masked.load", [vty, ptr], vty,
                              [ptr, i32, mty, vty])
    mstore = declare_intrinsic(module, "llvm.masked.store", [vty, ptr], ir.VoidType(),
                               [vty, ptr, i32, mty])
    return mload, mstore


def compile_module(
    module_or_ir_text: ir.Module | str,
    *,
    cache: JitCache | None = None,
    target: TargetSpec | None = None,
    opt_level: int = _DEFAULT_OPT_LEVEL,
    disk: DiskCache | bool | None = True,
    context: str = "",
) -> CompiledModule:
    """Compile an ``llvmlite.ir.Module`` (or IR text) for the host, through ``cache``.

    ``cache=None`` uses :func:`default_jit_cache`. Identical IR compiled for the same
    target and opt level returns the same :class:`CompiledModule`.  Beneath it, ``disk``
    (default: :func:`default_disk_cache`) keeps the object code across processes;
    ``context`` is folded into the disk key (``compile_kernel`` passes its kernel key).
    """
    ir_text = str(module_or_ir_text)
    use = cache if cache is not None else default_jit_cache()
    return use.get_or_compile(ir_text, target=target, opt_level=opt_level, disk=disk,
                              context=context)
