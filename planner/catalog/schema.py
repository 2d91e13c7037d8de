"""The JSON Schema of catalog files, generated from the tables in :mod:`.spec`.

Point an editor's YAML language server at ``planner catalog schema > catalog.json``
and it checks keys, types, enums and byte-size spellings as the user types.  What a
schema cannot say (references between names, cycles, whether a resource supports an
operation an ``access`` entry grants) is checked by the loader only.
"""

from __future__ import annotations

from planner.catalog.spec import OBJECT_SPECS, TARGET, object_schema

SCHEMA_ID = "https://planner.invalid/schemas/catalog.json"


def catalog_json_schema() -> dict[str, object]:
    """A JSON Schema (draft 2020-12) that every valid catalog file satisfies."""
    defs = {spec.name: object_schema(spec) for spec in OBJECT_SPECS}
    # What the llvm-cpu backend compiles for is the target's to say, never the host's.
    defs[TARGET.name]["if"] = {"properties": {"backend": {"const": "llvm-cpu"}},
                               "required": ["backend"]}
    defs[TARGET.name]["then"] = {"required": ["cpu"]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "planner target catalog",
        "$ref": f"#/$defs/{TARGET.name}",
        "$defs": defs,
    }
