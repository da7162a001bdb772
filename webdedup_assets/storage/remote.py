"""The storage root in object storage (`--storage s3://bucket/prefix`): a command works on a local
working copy, and a command that changed the corpus uploads what it changed as a new set.

DuckDB's stages read the stored Parquet many times over, by row group, and the incremental
state keeps hard links; so a command runs on a local folder (under WEBDEDUP_CACHE, default
~/.cache/webdedup), kept between commands: a machine that ran the last command downloads
nothing. Layout under the storage URI:

    CURRENT                    {"set": <id>}: the set readers follow, written last
    sets/<id>.json             every file of the storage: its key and size (hard links share one key)
    files/<id>/<path>          the files a set uploaded (later sets refer to them while unchanged)
    writers/<id>-<host>-<pid>  the lease of the command writing now

One PUT replaces an object whole, so CURRENT names the old set or the new one, never a mix; a
command that fails uploads nothing (its working copy is put back by storage.transaction). One
writer at a time: a writer puts its lease, then lists the leases, and gives up naming the
holder when it sees another (object stores list what was written before, so of two writers at
least one sees the other). After CURRENT moved, the sets before the previous one and the objects
no kept set refers to are deleted.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import WebdedupError
from ..threads import ordered_map
from .objects import ObjectPath, file_system, message, require_bucket
from .sets import CURRENT, current_set, new_set_id, put_file, read_json, write_json
from .state import pid_alive, writer_lock
from .transaction import DISCARDED_DIR, ROLLBACK_DIR, stored_files

TRANSFERS = 8  # files downloaded or uploaded at a time (object stores answer each request with latency)
RECORD_SUFFIX = ".remote.json"  # beside the working copy: what it holds of which set


def cache_folder(root: ObjectPath) -> Path:
    """The working copy of a storage URI on this machine."""
    base = Path(os.environ.get("WEBDEDUP_CACHE") or "~/.cache/webdedup").expanduser().resolve()
    return base / "storage" / root.parts[0].rstrip(":") / root.key


def origin_of(local: Path) -> str | None:
    """The storage URI a local storage root is the working copy of (None: a storage of its own)."""
    record = _record_path(local)
    return json.loads(record.read_text())["origin"] if record.exists() else None


def _record_path(local: Path) -> Path:
    return local.with_name(local.name + RECORD_SUFFIX)


def _save_record(root: ObjectPath, local: Path, set_id: str | None, keys: dict[str, str]) -> dict[str, Any]:
    """What the copy holds: the set, and each file's key with its local identity as it is now."""
    files = {name: {"key": key, "identity": _identity(local / name)} for name, key in keys.items()}
    record = {"origin": str(root), "set": set_id, "files": files}
    _record_path(local).write_text(json.dumps(record))
    return record


@contextmanager
def working_copy(
    root: ObjectPath, write: bool, purpose: str, wait: float = 0.0, notice: Callable[[str], None] | None = None
) -> Iterator[Path]:
    """The local copy of the storage at `root`, brought to its current set for the block; with
    `write`, the block holds the storage's writer lease and what it changed is uploaded after it
    (nothing when it raised). Another command of this machine using the copy is waited for up to
    `wait` seconds. `notice` is told what was uploaded."""
    local = cache_folder(root)
    with writer_lock(local, timeout=wait, purpose=f"{purpose}, on a copy of {root}"):
        lease = _take_lease(root, purpose) if write else None
        try:
            current = current_set(root)
            held = {"record": _download(root, current, local), "set": None, "files": 0, "bytes": 0}

            def upload() -> None:  # the command's set: made at its commit point, amended at its end
                uploaded = _upload(root, local, held["record"], current, held["set"])
                if uploaded:
                    held["files"], held["bytes"] = held["files"] + uploaded[0], held["bytes"] + uploaded[1]
                    held["set"] = uploaded[2]
                    held["record"] = json.loads(_record_path(local).read_text())

            if write:
                _AT_COMMIT[local] = upload
            try:
                yield local
            finally:
                _AT_COMMIT.pop(local, None)
            if write:
                upload()  # what changed after the commit point (a stage's stats)
            if notice and held["set"]:  # said once, for both uploads
                size = held["bytes"] / 1e6
                notice(
                    f"{root}: uploaded {held['files']} changed file(s), {size:,.1f} MB; CURRENT names set {held['set']}"
                )
        finally:
            if lease is not None:
                _delete(lease)


_AT_COMMIT: dict[Path, Callable[[], None]] = {}  # working copy -> its upload, while a command writes it


def upload_at_commit(local: Path) -> None:
    """Upload the working copy `local` now, when it is the copy of a storage in object storage that
    a command of this process writes: called by the publish before its commit point, so that the
    storage is final before any output names the new corpus (a command killed in between leaves
    the storage ahead of the outputs, which the next command publishes, never behind them)."""
    upload = _AT_COMMIT.get(Path(local).resolve())
    if upload is not None:
        upload()


def _identity(path: Path) -> list[int]:
    info = path.stat()
    return [info.st_size, info.st_mtime_ns, info.st_ino]


def _download(root: ObjectPath, current: str | None, local: Path) -> dict[str, Any]:
    """Bring the working copy to the set `current` (empty when None): files whose key differs from
    the copy's record are downloaded (TRANSFERS at a time), files the set does not hold are
    removed. Returns the record."""
    record_path = _record_path(local)
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    held = record.get("files", {}) if record.get("origin") == str(root) else {}
    wanted = read_json(root / "sets" / f"{current}.json")["files"] if current else {}
    for leftover in (ROLLBACK_DIR, DISCARDED_DIR):  # a killed command's undo links: the set is what holds
        shutil.rmtree(local / leftover, ignore_errors=True)
    have: dict[str, Path] = {}  # key -> a local file holding it (hard links share a key)
    missing: list[str] = []
    for relative, entry in sorted(wanted.items()):
        target, kept = local / relative, held.get(relative)
        if kept and kept["key"] == entry["key"] and target.exists() and kept["identity"] == _identity(target):
            have.setdefault(entry["key"], target)
        else:
            missing.append(relative)
    fetched = local.with_name(f".{local.name}.downloads")
    shutil.rmtree(fetched, ignore_errors=True)
    fetched.mkdir(parents=True)
    try:
        keys = sorted({wanted[r]["key"] for r in missing} - set(have))
        places = {key: fetched / str(n) for n, key in enumerate(keys)}
        for _ in ordered_map(lambda key: _get_file(root / key, places[key]), keys, TRANSFERS):
            pass
        for relative in missing:
            target, key = local / relative, wanted[relative]["key"]
            target.parent.mkdir(parents=True, exist_ok=True)
            temporary = target.with_name(f".{target.name}.download")
            temporary.unlink(missing_ok=True)
            os.link(have.get(key) or places[key], temporary)
            if "mtime_ns" in wanted[relative]:  # the file's time as stored: the corpus state recognizes its files
                os.utime(temporary, ns=(wanted[relative]["mtime_ns"],) * 2)
            os.replace(temporary, target)
            have.setdefault(key, target)
    finally:
        shutil.rmtree(fetched, ignore_errors=True)
    for relative in list(stored_files(local)) if local.exists() else []:
        if relative.as_posix() not in wanted:
            (local / relative).unlink()
    return _save_record(root, local, current, {name: entry["key"] for name, entry in wanted.items()})


def _upload(
    root: ObjectPath, local: Path, record: dict[str, Any], previous: str | None, amended: str | None = None
) -> tuple[int, int, str] | None:
    """Upload the files the command changed (TRANSFERS at a time) as a new set (or into the set
    `amended`, which CURRENT names already) and move CURRENT to it; nothing when no file changed.
    Returns the files and bytes uploaded and the set's id."""
    held = record["files"]
    set_id = amended or new_set_id()
    files: dict[str, dict[str, Any]] = {}
    linked: dict[tuple[int, int], str] = {}  # (device, inode) -> key
    sending: list[tuple[Path, str]] = []
    for relative in sorted(stored_files(local)):
        path, name = local / relative, relative.as_posix()
        info = path.stat()
        kept = held.get(name)
        if (info.st_dev, info.st_ino) in linked:
            key = linked[(info.st_dev, info.st_ino)]
        elif kept and kept["identity"] == _identity(path):
            key = kept["key"]
        else:
            key = f"files/{set_id}/{name}"
            sending.append((path, key))
        linked[(info.st_dev, info.st_ino)] = key
        files[name] = {"key": key, "bytes": info.st_size, "mtime_ns": info.st_mtime_ns}
    if not sending and {n: e["key"] for n, e in files.items()} == {n: e["key"] for n, e in held.items()}:
        return None
    try:
        for _ in ordered_map(lambda item: put_file(item[0], root / item[1]), sending, TRANSFERS):
            pass
    except OSError as err:
        raise WebdedupError(
            f"{root}: uploading failed ({message(err)}); {root / CURRENT} still names the corpus as it was before "
            "this command: run the command again"
        ) from None
    write_json(root / "sets" / f"{set_id}.json", {"files": files})
    write_json(root / CURRENT, {"set": set_id})
    _save_record(root, local, set_id, {name: entry["key"] for name, entry in files.items()})
    _remove_unreferenced(root, set_id, previous, files)
    return len(sending), sum(path.stat().st_size for path, _ in sending), set_id


def _remove_unreferenced(root: ObjectPath, current: str, previous: str | None, files: dict[str, Any]) -> None:
    """Delete the sets before `previous` and every uploaded file neither `current` nor `previous`
    refers to. Failures are left to a later command's cleanup."""
    import pyarrow.fs as pafs

    fs = file_system(root)
    try:
        keep = {e["key"] for e in files.values()}
        if previous is not None:
            keep |= {e["key"] for e in read_json(root / "sets" / f"{previous}.json")["files"].values()}
        kept_sets = {f"{current}.json", f"{previous}.json"}
        for found in fs.get_file_info(pafs.FileSelector((root / "sets").key, allow_not_found=True)):
            name = Path(found.path).name
            if name not in kept_sets and name < f"{previous or current}.json":
                fs.delete_file(found.path)
        prefix = root.key + "/"
        kept_sets = {key.split("/")[1] for key in keep if key.startswith("files/")}
        # A set none of whose files is kept goes whole (one request, and no folder markers left
        # behind: pyarrow marks a folder it empties file by file with an empty object).
        for found in fs.get_file_info(pafs.FileSelector((root / "files").key, allow_not_found=True)):
            if found.type == pafs.FileType.Directory and Path(found.path).name not in kept_sets:
                fs.delete_dir(found.path)
        listing = fs.get_file_info(pafs.FileSelector((root / "files").key, recursive=True, allow_not_found=True))
        for found in listing:
            if found.type == pafs.FileType.File and found.path[len(prefix) :] not in keep:
                fs.delete_file(found.path)
    except (OSError, WebdedupError):
        pass


def _take_lease(root: ObjectPath, purpose: str) -> ObjectPath:
    """Put this command's lease, then give it up and refuse if another writer holds one (a lease
    of a dead process on this host is removed)."""
    import pyarrow.fs as pafs

    host = socket.gethostname()
    lease = root / "writers" / f"{new_set_id()}-{host}-{os.getpid()}.json"
    started = datetime.now(UTC).isoformat(timespec="seconds")
    fs = file_system(root)
    require_bucket(root, "storage")
    write_json(lease, {"host": host, "pid": os.getpid(), "started": started, "purpose": purpose})
    try:
        found = fs.get_file_info(pafs.FileSelector((root / "writers").key, allow_not_found=True))
        for other in sorted(f.path for f in found if f.path != lease.key):
            holder = read_json(ObjectPath(root.parts[0], *other.split("/")))
            if holder.get("host") == host and not pid_alive(int(holder.get("pid", 0))):
                fs.delete_file(other)  # left by a command that died
                continue
            raise WebdedupError(
                f"{root} is in use by another webdedup writer: pid {holder.get('pid')} on {holder.get('host')} "
                f"since {holder.get('started')} ({holder.get('purpose')}). Wait for it to finish; if it is no "
                f"longer running, delete {root.parts[0]}//{other}"
            )
    except OSError as err:
        _delete(lease)
        raise WebdedupError(f"{root}: {message(err)}") from None
    except WebdedupError:
        _delete(lease)
        raise
    return lease


def _get_file(source: ObjectPath, target: Path) -> None:
    try:
        with file_system(source).open_input_stream(source.key, compression=None) as handle, open(target, "wb") as out:
            while chunk := handle.read(8 << 20):
                out.write(chunk)
    except OSError as err:
        target.unlink(missing_ok=True)
        raise WebdedupError(f"{source}: {message(err)}") from None


def _delete(path: ObjectPath) -> None:
    try:
        file_system(path).delete_file(path.key)
    except OSError:
        pass
