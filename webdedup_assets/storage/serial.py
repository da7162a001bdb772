"""The one serializer of stored parameters: parameter model -> JSON-able dict -> text kept in a
file's Parquet key-value metadata (or a sidecar), and back.

A stage stores its parameters as a dict of groups, e.g. {"stage": "candidate_pairs",
"fingerprint": {...}, "banding": {...}, "candidates": {...}}: each group is a parameter model's
fields (`to_stored`) plus what the stage derived from them (a fingerprint's kernel version, the
pair-slot budget). `from_stored` reads a group back into its model, ignoring the derived keys.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def to_stored(model: BaseModel, **derived: Any) -> dict[str, Any]:
    """A model's fields as JSON values, with the values a stage derived from them. A field marked
    `stored_unless_default` (a field added after artifacts were first stored, see params) is left
    out while it holds its default: the default path stores what it stored before the field existed."""
    values = model.model_dump(mode="json")
    for name, field in type(model).model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if extra.get("stored_unless_default") and getattr(model, name) == field.default:
            values.pop(name, None)
    return {**values, **derived}


def stored_value(model: type[BaseModel], stored: dict[str, Any] | None, name: str) -> Any:
    """One field of a stored group, its default when the group does not hold it (see to_stored)."""
    if stored and name in stored:
        return stored[name]
    return model.model_fields[name].default


def from_stored(model: type[M], stored: dict[str, Any]) -> M:
    """A stored group back into its model (derived keys left out)."""
    return model(**{name: stored[name] for name in model.model_fields if name in stored})


def encode(params: dict[str, Any]) -> str:
    """Stored parameters as text: the same dict always gives the same text (sorted keys)."""
    return json.dumps(params, sort_keys=True, default=str)


def decode(raw: str | bytes | None) -> dict[str, Any]:
    return json.loads(raw) if raw else {}
