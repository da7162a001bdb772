"""Published outputs in object storage, one set at a time.

Object storage has no rename, so the local publish's swap (engine.publish) cannot be done there.
Each publish uploads its files under `OUTPUT/sets/<set-id>/` and then writes the small pointer
`OUTPUT/CURRENT` (JSON naming the set), last: one PUT replaces an object whole, so a reader that
follows CURRENT sees the previous set or the new one, never a mix. An upload that fails leaves
CURRENT where it was (and its partial set is deleted, as far as the store allows). Set ids sort by
the time their publish began; after CURRENT moved, the sets older than the one it named before
are deleted: the previous set stays for readers that followed the old pointer, and a set begun
after it (another writer's, still uploading) is never touched.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import WebdedupError
from .objects import ObjectPath, file_system, message

CURRENT = "CURRENT"
SETS = "sets"


def new_set_id() -> str:
    """A set id that sorts by the time it is made (then a random part against a tie)."""
    return f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}-{uuid.uuid4().hex[:8]}"


def current_set(output: ObjectPath) -> str | None:
    """The id of the set CURRENT names, None before the first publish (of an output, or of a
    storage root: storage.remote)."""
    try:
        with file_system(output).open_input_stream((output / CURRENT).key, compression=None) as handle:
            return json.loads(handle.read())["set"]
    except FileNotFoundError:
        return None
    except OSError as err:
        raise WebdedupError(f"{output / CURRENT}: {message(err)}") from None
    except (ValueError, KeyError, TypeError):
        raise WebdedupError(f"{output / CURRENT}: not a pointer to a set (JSON naming its set)") from None


def current_folder(output: ObjectPath) -> ObjectPath:
    """Where the files of the current set are; a WebdedupError when nothing was published there."""
    found = current_set(output)
    if found is None:
        raise WebdedupError(f"{output}: no published set ({output / CURRENT} does not exist); run or add there first")
    return output / SETS / found


def read_json(path: ObjectPath) -> dict[str, Any]:
    try:
        with file_system(path).open_input_stream(path.key, compression=None) as handle:
            return json.loads(handle.read())
    except OSError as err:
        raise WebdedupError(f"{path}: {message(err)}") from None
    except ValueError as err:
        raise WebdedupError(f"{path}: not readable JSON ({err})") from None


def put_file(source: Path, target: ObjectPath) -> None:
    """Upload one file (pyarrow sends a large one in parts)."""
    with open(source, "rb") as handle, file_system(target).open_output_stream(target.key, compression=None) as out:
        while chunk := handle.read(8 << 20):
            out.write(chunk)


def upload_set(staging: Path, output: ObjectPath, set_id: str) -> None:
    """Every file under staging into OUTPUT/sets/<set_id>/ (same relative paths); on a failure a
    WebdedupError says that CURRENT was not moved (the caller deletes the partial set)."""
    folder = output / SETS / set_id
    try:
        for source in sorted(p for p in staging.rglob("*") if p.is_file()):
            put_file(source, folder / source.relative_to(staging).as_posix())
    except OSError as err:
        raise WebdedupError(
            f"{output}: publishing failed ({message(err)}); {output / CURRENT} still names the previous set"
        ) from None


def remove_set(output: ObjectPath, set_id: str) -> None:
    """Delete a set that CURRENT never named (what is left is deleted by a later publish)."""
    folder = output / SETS / set_id
    try:
        file_system(folder).delete_dir(folder.key)
    except OSError:
        pass


def point_to(output: ObjectPath, set_id: str) -> None:
    """Write CURRENT: from now on readers see set_id."""
    write_json(output / CURRENT, {"set": set_id, "folder": f"{SETS}/{set_id}"})


def write_json(path: ObjectPath, value: dict[str, Any]) -> None:
    """A small JSON object, one line, in one PUT (it replaces the object whole)."""
    try:
        with file_system(path).open_output_stream(path.key, compression=None) as out:
            out.write((json.dumps(value) + "\n").encode())
    except OSError as err:
        raise WebdedupError(f"{path}: {message(err)}") from None


def remove_older_sets(output: ObjectPath, previous: str | None) -> list[str]:
    """Delete the sets whose ids sort before `previous` (the set CURRENT named before this
    publish); returns the ids deleted. Nothing when there was no previous set. Called after
    CURRENT moved, so a failure here fails nothing: what is left is deleted by a later publish."""
    if previous is None:
        return []
    import pyarrow.fs as pafs

    fs = file_system(output)
    folder = output / SETS
    removed: list[str] = []
    try:
        found = fs.get_file_info(pafs.FileSelector(folder.key, allow_not_found=True))
        for name in sorted(Path(f.path).name for f in found if f.type == pafs.FileType.Directory):
            if name < previous:
                fs.delete_dir((folder / name).key)
                removed.append(name)
    except OSError:
        pass
    return removed
