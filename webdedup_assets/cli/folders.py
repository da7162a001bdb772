"""The folders a command is given: --output and the storage root (--storage, else
OUTPUT/_storage), each a local folder or a URI in object storage (storage.remote: a command works
on a local copy of a storage in object storage).

A command that reads an output in object storage follows its pointer (storage.sets): the current
set's manifest.json names the storage root of the run that published it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import WebdedupError
from ..storage import sets
from ..storage.objects import ObjectPath, is_uri


def output_of(value: str) -> Path | ObjectPath:
    return ObjectPath.of(value) if is_uri(value) else Path(value).expanduser().resolve()


def remote_storage(args: argparse.Namespace) -> ObjectPath | None:
    """The storage root in object storage a command works on, if any: --storage as a URI; for run
    with --output in object storage and no --storage, OUTPUT/_storage; for add, the storage the
    output's current set was published from (OUTPUT/_storage when nothing was published there);
    for a command that reads an output (check --against too) without --storage, the storage in
    object storage its manifest names (of its current set, for an output in object storage)."""
    storage = getattr(args, "storage", None)
    if storage:
        return ObjectPath.of(storage) if is_uri(storage) else None
    output = getattr(args, "against" if args.command == "check" else "output", None)
    if not isinstance(output, str):
        return None
    if is_uri(output):
        own = ObjectPath.of(output) / "_storage"
        if args.command == "run" or (args.command == "add" and sets.current_set(ObjectPath.of(output)) is None):
            return own
        named = current_manifest(ObjectPath.of(output)).get("storage_root")
        if args.command == "add" and isinstance(named, str) and not is_uri(named):  # as for a local output
            raise WebdedupError(f"--output {output} was published from the storage {named}; give --storage {named}")
        if args.command == "add" and not isinstance(named, str):
            return own
    else:
        folder = Path(output).expanduser()
        manifest = folder / "manifest.json"
        if args.command in ("run", "add") or (folder / "_storage").is_dir() or not manifest.is_file():
            return None
        named = json.loads(manifest.read_text()).get("storage_root")
    return ObjectPath.of(named) if isinstance(named, str) and is_uri(named) else None


def storage_to_write(output: Path | ObjectPath, storage: str | None) -> Path:
    """The storage root of run and add: --storage, else OUTPUT/_storage when it exists, else the
    local one the output's manifest.json names (the corpus published there: an `add` without
    --storage extends it, never a new corpus in OUTPUT/_storage that would replace it), else
    OUTPUT/_storage (main gives an output in object storage the working copy of its _storage as
    --storage). The corpus published in the output is followed also where OUTPUT/_storage holds
    another one (the output folder was given another --storage since)."""
    if storage:
        return Path(storage).expanduser().resolve()
    if isinstance(output, ObjectPath):
        raise WebdedupError(f"--output {output}: no storage root given; give --storage")
    own, named = output / "_storage", _published_from(output)
    # its own, also where the manifest names another path: a copied output folder reads its copy
    if own.is_dir() and not (named is not None and _holds_another_corpus(output, own, named)):
        return own
    if named is not None and is_uri(named):
        raise WebdedupError(f"--output {output} was published from the storage {named}; give --storage {named}")
    if own.is_dir() and not Path(named).is_dir():
        raise WebdedupError(
            f"--output {output} publishes the corpus of the storage {named}, which is not there, and {own} holds "
            "another corpus; give --storage"
        )
    return Path(named) if named is not None else own


def _holds_another_corpus(output: Path, own: Path, named: str) -> bool:
    """OUTPUT/_storage holds documents of other input files than the corpus the output's manifest
    describes (published from the storage `named`), so it is neither that storage nor a copy of it."""
    from ..engine.stages.documents import stored_input
    from ..storage.store import Store

    if not is_uri(named) and Path(named).resolve() == own.resolve():
        return False
    try:
        described = json.loads((output / "manifest.json").read_text(encoding="utf-8"))["input"]["sha256"]
        return described != stored_input(Store(own))[1]
    except (OSError, ValueError, KeyError, TypeError):  # a damaged file is named by the command that reads it
        return False


def require_same_corpus(output: Path | ObjectPath, storage_root: Path) -> None:
    """`add --storage`: a storage root that holds no corpus, given with an output that publishes the
    corpus of another one, is taken for a mistyped path, before anything is written (the add
    published a new corpus of its input over the output's)."""
    published = _published_from(output) if isinstance(output, Path) else None
    if published is None or is_uri(published) or Path(published).resolve() == storage_root.resolve():
        return
    if any((storage_root / "documents").glob("*.parquet")):  # another corpus held there: the user's choice
        return
    raise WebdedupError(
        f"--storage {storage_root} holds no corpus, and --output {output} publishes the corpus held in {published}: "
        f"an add would publish a new corpus over it; give --storage {published} (or no --storage), or another --output"
    )


def _published_from(output: Path) -> str | None:
    """The storage root named by the manifest.json of a local output folder, if any."""
    try:
        named = json.loads((output / "manifest.json").read_text(encoding="utf-8")).get("storage_root")
    except (OSError, ValueError, AttributeError):
        return None
    return named if isinstance(named, str) and named else None


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


def warn_of_unread_files(input_path: str) -> None:
    """A folder's files that no format reads are named once, before the run (they were left out
    without a word: 20 of 51 files read)."""
    import sys

    from ..ingest.inputs import unread_files

    unread = unread_files(input_path)
    if unread:
        shown = ", ".join(p.name for p in unread[:5]) + (", ..." if len(unread) > 5 else "")
        print(
            f"webdedup: warning: {input_path}: {len(unread)} file(s) not read, of suffixes no input format has "
            f"({shown}); webdedup reads .csv, .tsv, .parquet, .jsonl (.gz, .zst), .json.gz, .json.zst, .warc, .warc.gz",
            file=sys.stderr,
        )
