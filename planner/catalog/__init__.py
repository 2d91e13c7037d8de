"""Target resource catalogs: YAML files describing scopes, resources and access (S6).

A compiler engineer describes a target in ``catalogs/<name>.yaml`` without reading
planner's code; :func:`load_target_file` validates it (reporting every mistake with
its file:line:col) into a frozen :class:`Target`, and :class:`CatalogRegistry` finds
targets by name across the built-in and the user's catalog directories.

Modules: :mod:`.model` (the frozen data and its queries), :mod:`.spec` (the file
format as key tables), :mod:`.loader` (YAML → model, in a documented verification
order), :mod:`.units` (byte sizes), :mod:`.registry` (search path and cache),
:mod:`.schema` (the JSON Schema for editors).
"""

from planner.catalog.loader import load_target_file, load_target_text
from planner.catalog.model import (
    AUTO,
    BUILTIN_CLASSES,
    AccessRule,
    Backend,
    BankGeometry,
    Coherence,
    CopyEngine,
    CopyMode,
    CostModel,
    CpuIsa,
    MmaOperand,
    OpClass,
    Operation,
    Resource,
    ResourceClassDecl,
    Scope,
    SyncRule,
    Target,
    normalize_class,
)
from planner.catalog.registry import (
    BUILTIN_DIR,
    CATALOG_PATH_ENV,
    DEFAULT_TARGET,
    HOST_CANDIDATES,
    HOST_TARGET,
    CatalogEntry,
    CatalogRegistry,
    env_catalog_dirs,
    host_cpu,
    host_target_name,
    missing_host_features,
)
from planner.catalog.schema import catalog_json_schema
from planner.catalog.units import ByteSizeError, format_byte_size, parse_byte_size

__all__ = [
    "AUTO",
    "BUILTIN_CLASSES",
    "BUILTIN_DIR",
    "CATALOG_PATH_ENV",
    "DEFAULT_TARGET",
    "HOST_CANDIDATES",
    "HOST_TARGET",
    "AccessRule",
    "Backend",
    "BankGeometry",
    "ByteSizeError",
    "CatalogEntry",
    "CatalogRegistry",
    "Coherence",
    "CopyEngine",
    "CopyMode",
    "CostModel",
    "CpuIsa",
    "MmaOperand",
    "OpClass",
    "Operation",
    "Resource",
    "ResourceClassDecl",
    "Scope",
    "SyncRule",
    "Target",
    "catalog_json_schema",
    "env_catalog_dirs",
    "format_byte_size",
    "host_cpu",
    "host_target_name",
    "load_target_file",
    "load_target_text",
    "missing_host_features",
    "normalize_class",
    "parse_byte_size",
]
