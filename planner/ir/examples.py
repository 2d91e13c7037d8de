"""Loading example kernels by path.

An example is a Python module that exposes

``kernel()``
    builds and returns the :class:`~planner.ir.core.Kernel`;
``BINDINGS``
    default values of the kernel's symbols (``{"M": 100, "N": 70, "K": 37}``);
``reference(**inputs)``
    the expected outputs, ``{writable view name: array}``, computed independently with
    numpy from the input arrays named by its parameters (usually the const views).

and optionally a configuration space for sweeps (``planner sweep``):

``SPACE``
    a :class:`planner.sweep.Space`: each tunable parameter with its ordered value set
    (ints or strings) and named constraints between parameters, e.g.::

        SPACE = Space({"block_m": (16, 32, 64, 128), "block_n": (16, 32, 64, 128)},
                      where("acc tile <= 8192 elements",
                            lambda block_m, block_n: block_m * block_n <= 8192))

    With a ``SPACE``, ``kernel(**config)`` takes every parameter as a keyword with a
    default (``def kernel(block_m=32, block_n=32)``) and builds that instance;
    ``kernel()`` is the default point (a parameter without a default in ``kernel``'s
    signature defaults to the first value of its set).  The
    loader (:func:`load_example` / :meth:`Example.instance` with a ``config``, even
    ``{}``) fills the defaults, checks the names and the constraints, and records the
    full configuration on the kernel (``Kernel.config``), which the text IR prints in
    the kernel header (``config = {block_m = 64, window = 2}``) and the JSON IR keeps as
    ``"config"``.

The built-in examples live in ``planner/examples/`` (package data, so a wheel has them),
located relative to this module.  Loading a file executes it (it is the user's own code):
the service never loads examples from requests.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from planner.errors import PlannerError, SourceLoc, error
from planner.ir.core import Kernel
from planner.ir.types import ViewType

if TYPE_CHECKING:
    from planner.sweep.space import Space

__all__ = ["Example", "builtin_examples_dir", "list_examples", "load_example"]

_KIND = "example"


@dataclass(frozen=True)
class Example:
    """A loaded example: its kernel, default bindings and numpy reference."""

    name: str
    path: Path
    kernel: Kernel
    bindings: dict[str, int]
    reference: Callable[..., Mapping[str, np.ndarray]]
    module: ModuleType
    space: Space | None = None  # the declared configuration space (``SPACE``), if any

    def instance(self, config: Mapping[str, int | str]) -> Kernel:
        """The kernel of one configuration (defaults filled, constraints checked), with
        the full configuration recorded on it."""
        return _instance(self.module, self.space, self.path, config)

    def expected(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Calls ``reference`` with the arrays its parameters name.

        A ``**kwargs`` catch-all receives the const views' arrays.
        """
        readonly = {p.name_hint for p in self.kernel.params
                    if isinstance(p.type, ViewType) and p.type.readonly}
        kwargs: dict[str, np.ndarray] = {}
        for p in inspect.signature(self.reference).parameters.values():
            if p.kind is inspect.Parameter.VAR_KEYWORD:
                kwargs.update({n: a for n, a in arrays.items() if n in readonly})
            elif p.name in arrays:
                kwargs[p.name] = arrays[p.name]
            elif p.default is inspect.Parameter.empty and p.kind is not p.VAR_POSITIONAL:
                raise error(f"example {self.name}: reference() needs {p.name!r}, which is "
                            f"not a view of kernel {self.kernel.name!r}",
                            SourceLoc(str(self.path), 0), kind=_KIND)
        out = self.reference(**kwargs)
        return {k: np.asarray(v) for k, v in out.items()}


def builtin_examples_dir() -> Path:
    """The built-in examples: ``planner/examples/``, package data of the wheel."""
    return Path(__file__).resolve().parents[1] / "examples"


def list_examples(directory: str | Path | None = None) -> list[Path]:
    """The example files of ``directory`` (default: the built-in ones), sorted by name.

    Files whose name starts with ``_`` are helpers, not examples.
    """
    root = Path(directory) if directory is not None else builtin_examples_dir()
    return sorted(p for p in root.glob("*.py") if not p.name.startswith("_"))


def load_example(path: str | Path, config: Mapping[str, int | str] | None = None
                 ) -> Example:
    """Executes the example module at ``path`` and builds its kernel (the instance of
    ``config`` when the example declares a ``SPACE``; default: its default point).

    Each call loads the file afresh.  A missing file, an import error or a missing
    ``kernel``/``BINDINGS``/``reference`` raises :class:`PlannerError`; so does a
    ``config`` naming a parameter ``SPACE`` lacks or violating a constraint.
    """
    p = Path(path).resolve()
    loc = SourceLoc(str(p), 0)
    if not p.is_file():
        raise error(f"no example file {p}", loc, kind=_KIND)
    module = _import(p, loc)
    missing = [a for a in ("kernel", "BINDINGS", "reference") if not hasattr(module, a)]
    if missing:
        raise error(f"example {p.name} does not define {', '.join(missing)} (an example "
                    "exposes kernel(), BINDINGS and reference(**inputs))", loc, kind=_KIND)
    space = _space(module, p, loc)
    kernel = _instance(module, space, p, config)
    bindings = dict(module.BINDINGS)
    for name, value in bindings.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise error(f"example {p.name}: BINDINGS[{name!r}] = {value!r} is not an int",
                        loc, kind=_KIND)
    if not callable(module.reference):
        raise error(f"example {p.name}: reference is not callable", loc, kind=_KIND)
    return Example(p.stem, p, kernel, bindings, module.reference, module, space)


def _space(module: ModuleType, p: Path, loc: SourceLoc) -> Space | None:
    space = getattr(module, "SPACE", None)
    if space is None:
        return None
    from planner.sweep.space import Space

    if not isinstance(space, Space):
        raise error(f"example {p.name}: SPACE is a {type(space).__name__}, not a "
                    "planner.sweep.Space", loc, kind=_KIND)
    return space


def _defaults(module: ModuleType, space: Space) -> dict[str, int | str]:
    sig = inspect.signature(module.kernel).parameters
    return {name: sig[name].default if name in sig and sig[name].default is not
            inspect.Parameter.empty else values[0] for name, values in space.params.items()}


def _instance(module: ModuleType, space: Space | None, p: Path,
              config: Mapping[str, int | str] | None) -> Kernel:
    """``kernel(**config)`` with the space's defaults filled in, checked and recorded
    (``config`` None: ``kernel()``, the plain default instance, nothing recorded)."""
    loc = SourceLoc(str(p), 0)
    if space is None and config:
        raise error(f"example {p.name} declares no SPACE, so it takes no configuration "
                    f"(got {', '.join(config)})", loc, kind="usage")
    full: dict[str, int | str] = {}
    if space is not None and config is not None:
        unknown = [n for n in config if n not in space.params]
        if unknown:
            raise error(f"example {p.name}: {unknown[0]!r} is not a parameter of its SPACE "
                        f"({', '.join(space.params)})", loc, kind="usage")
        full = {**_defaults(module, space), **dict(config)}
        rejected = space.rejected_by(full)
        if rejected is not None:
            raise error(f"example {p.name}: configuration {full} violates the constraint "
                        f"{rejected.name!r}", loc, kind="usage")
    try:
        kernel = module.kernel(**full)
    except PlannerError:
        raise
    except Exception as e:
        raise error(f"example {p.name}: kernel() failed: {type(e).__name__}: {e}", loc,
                    kind=_KIND) from e
    if not isinstance(kernel, Kernel):
        raise error(f"example {p.name}: kernel() returned {type(kernel).__name__}, not a "
                    "Kernel", loc, kind=_KIND)
    if config is not None:
        kernel.config = full
    return kernel


def _import(p: Path, loc: SourceLoc) -> ModuleType:
    digest = hashlib.sha1(str(p).encode()).hexdigest()[:10]
    name = f"_planner_example_{p.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise error(f"cannot load {p} as a Python module", loc, kind=_KIND)
    module = importlib.util.module_from_spec(spec)
    # Registered like any import (dataclasses look their module up in sys.modules);
    # loading the same file again replaces it.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(name, None)
        if isinstance(e, PlannerError):
            raise
        raise error(f"example {p.name} failed to import: {type(e).__name__}: {e}", loc,
                    kind=_KIND) from e
    return module
