"""The corpus state of a storage root, and the lock that lets one writer at a time change it.

A storage root holds one corpus. `corpus_state.json` records which crawl days it holds, the
input each day was read from (path and sha256 of its files) and the parameters the daily
stages used, so a run reads that state instead of "whatever files lie in the folder":

- `webdedup run INPUT` clears the days INPUT does not hold before it starts (and says so);
- a Dagster run that reads another input than the one the held days came from is refused;
- the global stages refuse a storage whose daily files disagree with the state (a day with
  documents but no band keys, a file left by another corpus) and name the days.

The writer lock is an OS file lock (`flock`) on `<root>/.webdedup.lock`: the kernel releases it
when its process dies, so a lock can never outlive its holder. Beside it, `.webdedup.locks/`
holds one small JSON file per holder (pid, host, start, what it runs) to name the holder when
another writer is refused; files of dead processes are removed, and reported, by the next
holder. Daily stages of different days share the lock; the global stages, `webdedup run` and
publishing take it exclusively.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import WebdedupError
from .fileio import make_folder, write_text
from .store import Store

STATE_FILE = "corpus_state.json"
STATE_FORMAT = 2  # 2: the daily assets are stored per crawl month
LOCK_FILE = ".webdedup.lock"
HOLDERS_DIR = ".webdedup.locks"
DAILY_ASSETS = ("documents", "fingerprinted", "band_memberships")


class LockBusy(WebdedupError):
    """Another process holds the writer lock."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


# ---------------------------------------------------------------- the writer lock


@dataclass
class _Held:
    fd: int
    exclusive: bool
    holder_file: Path
    depth: int = 1


_HELD: dict[Path, _Held] = {}  # re-entrant per process: the CLI holds the lock while its runs execute in-process


@dataclass
class LockReport:
    """What acquiring the lock found: stale holder files of dead processes it removed."""

    path: Path
    stale: list[dict[str, Any]] = field(default_factory=list)


def _holders(folder: Path) -> list[dict[str, Any]]:
    found = []
    for path in sorted((folder / HOLDERS_DIR).glob("*.json")):
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        info["_file"] = path
        found.append(info)
    return found


def _describe(info: dict[str, Any]) -> str:
    return f"pid {info.get('pid')} on {info.get('host')} since {info.get('started')}" + (
        f" ({info['purpose']})" if info.get("purpose") else ""
    )


@contextmanager
def writer_lock(folder: Path, exclusive: bool = True, timeout: float = 0.0, purpose: str = "") -> Iterator[LockReport]:
    """Hold the writer lock of `folder` (a storage root or an output folder) for the block.

    exclusive: one holder only (global stages, `webdedup run`, publishing); otherwise shared
    with other shared holders (daily stages of different days). Waits up to `timeout` seconds,
    then raises LockBusy naming the holder(s)."""
    folder = Path(folder).expanduser().resolve()
    held = _HELD.get(folder)
    if held is not None:
        if exclusive and not held.exclusive:
            raise WebdedupError(f"{folder}: cannot take the writer lock exclusively while holding it shared")
        held.depth += 1
        try:
            yield LockReport(folder)
        finally:
            held.depth -= 1
        return
    try:
        make_folder(folder)
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        if not exclusive and err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            # a reader of a folder it may not write in (a read-only share): no lock to take, and
            # whoever may write there is told apart by the reading commands' own warnings
            yield LockReport(folder)
            return
        raise WebdedupError(
            f"{folder}: cannot write in it ({err.strerror}); give a folder webdedup may write in"
        ) from None
    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                live = [h for h in _holders(folder) if h.get("host") != socket.gethostname() or pid_alive(h["pid"])]
                named = "; ".join(_describe(h) for h in live) or "a process that left no holder record"
                waited = f" after waiting {timeout:g} s" if timeout else ""
                raise LockBusy(
                    f"{folder} is in use by another webdedup writer{waited}: {named}. "
                    "Wait for it to finish, or use another --output/--storage folder."
                ) from None
            time.sleep(0.2)
    report = LockReport(folder)
    host = socket.gethostname()
    for info in _holders(folder):  # holder records whose process is gone
        if info.get("host") == host and not pid_alive(int(info.get("pid", 0))):
            info["_file"].unlink(missing_ok=True)
            report.stale.append({k: v for k, v in info.items() if k != "_file"})
        elif exclusive and info.get("host") == host:
            # alive but not holding the flock (a record of an earlier lock of a live process): not ours to keep
            info["_file"].unlink(missing_ok=True)
    holder_file = folder / HOLDERS_DIR / f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
    holder_file.parent.mkdir(exist_ok=True)
    record = {
        "pid": os.getpid(),
        "host": host,
        "started": _now(),
        "mode": "exclusive" if exclusive else "shared",
        "purpose": purpose,
    }
    holder_file.write_text(json.dumps(record))
    _HELD[folder] = _Held(fd, exclusive, holder_file)
    try:
        yield report
    finally:
        _HELD.pop(folder, None)
        holder_file.unlink(missing_ok=True)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


# ---------------------------------------------------------------- leftovers of dead runs


def remove_leftovers(root: Path) -> list[Path]:
    """Temporary files and staging folders that only a dead writer can have left (call with the
    exclusive lock held): `.<name>.<pid>.<id>.tmp` files of atomic writes and `.staging-*` /
    `.publish-*` folders, at the top of `root` and one level below (the asset folders)."""
    root = Path(root)
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    folders = [root, *(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))]
    for folder in folders:
        for entry in os.scandir(folder):
            name = entry.name
            if not name.startswith("."):
                continue
            path = Path(entry.path)
            if entry.is_file() and name.endswith(".tmp"):
                path.unlink(missing_ok=True)
                removed.append(path)
            elif entry.is_dir() and name.startswith((".staging-", ".publish-")):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    spill = root / ".duckdb_tmp"
    if spill.is_dir() and any(spill.iterdir()):
        shutil.rmtree(spill, ignore_errors=True)
        removed.append(spill)
    return removed


# ---------------------------------------------------------------- the corpus state


def state_path(store: Store) -> Path:
    return store.root / STATE_FILE


def crawl_month(day: str) -> str:
    """The partition of a crawl day (ISO date): its month, YYYY-MM. Files, Dagster partitions and
    materialization events are per month, so a corpus spanning years costs per page, not per day
    (see the README, "Storage"); the state still records every day."""
    return day[:7]


def months_of(days: list[str]) -> list[str]:
    return sorted({crawl_month(day) for day in days})


def _empty_state() -> dict[str, Any]:
    return {"format": STATE_FORMAT, "input": None, "days": {}, "months": {}, "parameters": {}, "updated_at": None}


class StateOutdated(WebdedupError):
    """The storage was written by an earlier webdedup whose layout this one does not read."""


def load_state(store: Store) -> dict[str, Any]:
    """The recorded state; for a storage written before the state existed, one derived from
    its documents files (days only)."""
    path = state_path(store)
    if path.exists():
        try:
            state = json.loads(path.read_text())
        except ValueError as err:
            raise WebdedupError(
                f"{path}: the corpus state is not valid JSON ({err}); remove the storage root and run again"
            ) from None
        if state.get("format") != STATE_FORMAT:
            raise StateOutdated(
                f"{path}: corpus state format {state.get('format')!r} of an earlier webdedup (this one writes "
                f"format {STATE_FORMAT}: daily assets per crawl month); `webdedup run` rebuilds the storage, or "
                "remove the storage root"
            )
        return state
    return _empty_state()


def reset_outdated(store: Store) -> bool:
    """Remove the daily assets and the state of a storage written in an earlier layout (`webdedup
    run` rebuilds from its input anyway); False when the state is current or absent."""
    try:
        load_state(store)
        return False
    except StateOutdated:
        pass
    for asset in DAILY_ASSETS:
        shutil.rmtree(store.asset_dir(asset), ignore_errors=True)
    state_path(store).unlink(missing_ok=True)
    return True


@contextmanager
def _state_mutex(store: Store) -> Iterator[None]:
    """A short exclusive section around read-modify-write of the state file (daily runs of
    different days may update it at the same time)."""
    store.root.mkdir(parents=True, exist_ok=True)
    fd = os.open(store.root / ".corpus_state.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def update_state(store: Store, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    with _state_mutex(store):
        state = load_state(store)
        change(state)
        state["updated_at"] = _now()
        write_text(state_path(store), json.dumps(state, indent=1, sort_keys=True))
        return state


def input_identity(input_path: str, input_format: str) -> dict[str, str]:
    """How a corpus' input is named in the state: the resolved path (a glob stays a glob)."""
    path = str(input_path)
    if not any(ch in path for ch in "*?["):
        path = str(Path(path).expanduser().resolve())
    return {"path": path, "format": input_format}


def require_same_input(store: Store, input_path: str, input_format: str, months: list[str]) -> None:
    """Refuse a daily run that would add months read from another input to the held corpus."""
    state = load_state(store)
    held = state.get("input")
    wanted = input_identity(input_path, input_format)
    others = sorted(d for d in state["days"] if crawl_month(d) not in set(months))
    if held and others and held["path"] != wanted["path"]:
        raise WebdedupError(
            f"storage {store.root} holds {len(others)} crawl day(s) ({others[0]} .. {others[-1]}) read from "
            f"{held['path']}, and this run reads {wanted['path']}: one storage root holds one corpus. "
            f"Use another storage root, or `webdedup run {input_path}` to replace the corpus."
        )


def record_documents(
    store: Store, input_path: str, input_format: str, months: list[str], days: dict[str, dict[str, Any]]
) -> None:
    """After the documents stage built `months`: `days` maps each day of them that has
    documents to its entry ({"rows": n, "input_files": [...]}); every other day of those months
    leaves the corpus."""

    def change(state: dict[str, Any]) -> None:
        state["input"] = input_identity(input_path, input_format)
        built = set(months)
        for day in [d for d in state["days"] if crawl_month(d) in built and d not in days]:
            del state["days"][day]
        for day, entry in days.items():
            state["days"][day] = {"documents": entry}
        for month in built:
            state["months"].pop(month, None)
            rows = sum(e["rows"] for d, e in days.items() if crawl_month(d) == month)
            if rows:
                state["months"][month] = {"documents": rows}

    update_state(store, change)


def record_stage(store: Store, asset: str, built: dict[str, int], params: dict[str, Any]) -> None:
    """After a daily stage: the rows it wrote per month, and the parameters it used."""

    def change(state: dict[str, Any]) -> None:
        for month, rows in built.items():
            state["months"].setdefault(month, {})[asset] = rows
        state["parameters"][asset] = params

    update_state(store, change)


def clear_days(store: Store, days: list[str]) -> None:
    """Drop `days` from the state; the files of months left without any day are removed (a month
    that keeps some of its days is rebuilt by the run that keeps them)."""
    gone = set(days)
    remaining = {crawl_month(d) for d in load_state(store)["days"] if d not in gone}
    emptied = sorted({crawl_month(d) for d in days} - remaining)
    for month in emptied:
        for asset in DAILY_ASSETS:
            store.remove(asset, month)

    def change(state: dict[str, Any]) -> None:
        for day in days:
            state["days"].pop(day, None)
        for month in emptied:
            state["months"].pop(month, None)

    update_state(store, change)


def present_months(store: Store, asset: str) -> set[str]:
    return set(store.partitions(asset))


def held_days(store: Store) -> list[str]:
    return sorted(load_state(store)["days"])


def check_consistent(store: Store) -> None:
    """Before the global stages: every daily asset holds exactly the months of the state's crawl
    days, each with the state's row count for it (months without documents hold no file
    anywhere), or an error naming the months that disagree."""
    state = load_state(store)
    months = {crawl_month(d) for d in state["days"]}
    problems = []
    for asset in DAILY_ASSETS:
        present = set(store.partitions(asset))
        missing = sorted(months - present)
        extra = sorted(present - months)
        if missing:
            problems.append(f"{asset} lacks {len(missing)} month(s) of the corpus (first: {', '.join(missing[:3])})")
        if extra:
            problems.append(
                f"{asset} holds {len(extra)} month(s) that are not part of the corpus (first: {', '.join(extra[:3])})"
            )
    for asset in DAILY_ASSETS[1:]:
        # documents (re)built after this asset: its rows describe other documents
        stale = sorted(m for m in months & present_months(store, asset) if asset not in state["months"].get(m, {}))
        if stale:
            problems.append(
                f"{asset} was built before the documents it should describe for {len(stale)} month(s) "
                f"(first: {', '.join(stale[:3])})"
            )
    if problems:
        raise WebdedupError(
            f"storage {store.root} is not one consistent corpus: " + "; ".join(problems) + ". Materialize the "
            "daily assets for those months (documents, fingerprinted, band_memberships), or re-run `webdedup run`."
        )
