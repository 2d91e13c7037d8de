"""Loading example kernels by path.

An example is a Python module that exposes

``kernel()``
    builds and returns the :class:`~planner.ir.core.Kernel`;
``BINDINGS``
    default values of the kernel's symbols (``{"M": 100, "N": 70, "K": 37}``);
``reference(**inputs)``
    the expected outputs, ``{writable view name: array}``, computed independently with
    numpy from the input arrays named by its parameters (usually the const views).

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

import numpy as np

from planner.errors import PlannerError, SourceLoc, error
from planner.ir.core import Kernel
from planner.ir.types import ViewType

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


def load_example(path: str | Path) -> Example:
    """Executes the example module at ``path`` and builds its kernel.

    Each call loads the file afresh.  A missing file, an import error or a missing
    ``kernel``/``BINDINGS``/``reference`` raises :class:`PlannerError`.
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
    try:
        kernel = module.kernel()
    except PlannerError:
        raise
    except Exception as e:
        raise error(f"example {p.name}: kernel() failed: {type(e).__name__}: {e}", loc,
                    kind=_KIND) from e
    if not isinstance(kernel, Kernel):
        raise error(f"example {p.name}: kernel() returned {type(kernel).__name__}, not a "
                    "Kernel", loc, kind=_KIND)
    bindings = dict(module.BINDINGS)
    for name, value in bindings.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise error(f"example {p.name}: BINDINGS[{name!r}] = {value!r} is not an int",
                        loc, kind=_KIND)
    if not callable(module.reference):
        raise error(f"example {p.name}: reference is not callable", loc, kind=_KIND)
    return Example(p.stem, p, kernel, bindings, module.reference, module)


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
