"""The folders a command is given: --output (a local folder, or a URI in object storage for the
published outputs) and the storage root (--storage, else OUTPUT/_storage, which has to be local).

A command that reads an output in object storage follows its pointer (storage.sets): the current
set's manifest.json names the storage root of the run that published it."""

from __future__ import annotations

from pathlib import Path

from ..errors import WebdedupError
from ..storage import sets
from ..storage.objects import ObjectPath, is_uri


def output_of(value: str) -> Path | ObjectPath:
    return ObjectPath.of(value) if is_uri(value) else Path(value).expanduser().resolve()


def storage_to_write(output: Path | ObjectPath, storage: str | None) -> Path:
    """The storage root of run and add: --storage, else OUTPUT/_storage (a local output only)."""
    if storage:
        return Path(storage).expanduser().resolve()
    if isinstance(output, ObjectPath):
        raise WebdedupError(
            f"--output {output}: the published outputs may be in object storage, the corpus' storage root may not; "
            "give --storage, a local (or mounted) folder"
        )
    return output / "_storage"


def storage_to_read(output: Path | ObjectPath, storage: str | None) -> Path:
    """The storage root of a command that reads a run: --storage, else OUTPUT/_storage, else (an
    output in object storage) the one its current set was published from."""
    if storage or not isinstance(output, ObjectPath):
        return storage_to_write(output, storage)
    manifest = current_manifest(output)
    if not isinstance(manifest.get("storage_root"), str):
        raise WebdedupError(f"{output}: the manifest of its current set names no storage_root; give --storage")
    return Path(manifest["storage_root"])


def current_manifest(output: ObjectPath) -> dict:
    """manifest.json of the set CURRENT names."""
    return sets.read_json(sets.current_folder(output) / "manifest.json")
