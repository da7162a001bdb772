"""A command that fails changes nothing: the storage root as it was, kept as hard links.

Stored files are only ever replaced whole (written under a temporary name, then os.replace),
never changed in place, so a hard link to every file taken before a command keeps the
storage as it was for the price of one link per file. When the command fails (an error, a
refused input, a failed blocking check, an interrupt), every file is put back from those links
and every file the command created is removed. When it succeeds, the links are dropped.

The commit point is the publish: `commit()` is called once the new outputs are staged and
their journal is written (engine.publish), so a command killed after it is completed forward
by the next one (publish.recover), and one killed before it is rolled back by the next one
(`storage_transaction` finds the links of a dead command and restores them first).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .state import HOLDERS_DIR, LOCK_FILE

# The journal engine.publish writes while it moves a publish into place: a command killed after it
# is completed forward by the next one.
JOURNAL = ".publish-journal.json"

ROLLBACK_DIR = ".rollback"
DISCARDED_DIR = ".rollback.discarded"
COMPLETE = "COMPLETE"  # written last: links without it were never a complete copy (nothing was changed yet)
# Not part of the corpus: locks, their holder records, the state file's mutex, DuckDB's spill folder.
NOT_STORED = {ROLLBACK_DIR, DISCARDED_DIR, LOCK_FILE, HOLDERS_DIR, ".corpus_state.lock", ".duckdb_tmp"}
# The outputs a command stages in the storage root to publish them in object storage: not part of
# the storage, so never uploaded with it (a stage's own staging is removed before its commit point).
PUBLISHING = ".publish-"


def stored_files(root: Path) -> Iterator[Path]:
    """Every file of the storage (relative to root), what a command may replace or create."""
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        if here == root:
            dirs[:] = [d for d in dirs if d not in NOT_STORED and not d.startswith(PUBLISHING)]
            files = [f for f in files if f not in NOT_STORED]
        for name in files:
            yield (here / name).relative_to(root)


class StorageTransaction:
    """The links of one command's storage root; see the module's docstring."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.links = root / ROLLBACK_DIR
        self.committed = False
        self.undone = False  # rolled back before its commit point: the storage is as it was

    def begin(self) -> None:
        self.links.mkdir(parents=True)
        for relative in stored_files(self.root):
            target = self.links / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(self.root / relative, target)
        (self.links / COMPLETE).touch()

    def commit(self) -> None:
        """The command's storage is final: the links are dropped (renamed first, so that a kill
        while they are removed cannot leave a partial copy that looks like a complete one)."""
        if self.committed:
            return
        self.committed = True
        discarded = self.root / DISCARDED_DIR
        shutil.rmtree(discarded, ignore_errors=True)
        if self.links.exists():
            os.rename(self.links, discarded)
        shutil.rmtree(discarded, ignore_errors=True)

    def roll_back(self) -> None:
        restore(self.root)
        self.undone = not self.committed
        self.committed = True


def discard(root: Path) -> None:
    """Drop the links a command left that had reached its commit point (its publish was
    completed by publish.recover)."""
    StorageTransaction(root).commit()


def restore(root: Path) -> bool:
    """Put back the storage a dead or failed command left links of; True if there were any.

    Safe to repeat after a kill part way: files are linked back (the links stay until the end),
    then the files the command created are removed, then the links."""
    shutil.rmtree(root / DISCARDED_DIR, ignore_errors=True)
    links = root / ROLLBACK_DIR
    if not links.is_dir():
        return False
    if not (links / COMPLETE).exists():  # killed while taking the links: the storage was not changed yet
        shutil.rmtree(links)
        return False
    kept = {p for p in stored_files(links) if p.name != COMPLETE or p.parent != Path(".")}
    for relative in kept:
        source, target = links / relative, root / relative
        if target.exists() and os.path.samefile(source, target):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.parent / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        os.link(source, temporary)
        os.replace(temporary, target)
    for relative in list(stored_files(root)):
        if relative not in kept:
            (root / relative).unlink()
    for folder, _, _ in sorted(os.walk(root), key=lambda entry: -len(entry[0])):
        here = Path(folder)
        relative = here.relative_to(root)
        if relative.parts and relative.parts[0] in NOT_STORED:
            continue
        if here != root and not (links / relative).is_dir() and not any(here.iterdir()):
            here.rmdir()  # a folder the command created
    shutil.rmtree(links)
    return True


@contextmanager
def storage_transaction(root: Path) -> Iterator[StorageTransaction]:
    """The block's changes to `root` kept, or (on any exception) undone. The caller holds the
    storage's exclusive writer lock; what a dead command left is restored first."""
    root.mkdir(parents=True, exist_ok=True)
    restore(root)
    transaction = StorageTransaction(root)
    transaction.begin()
    try:
        yield transaction
    except BaseException:
        transaction.roll_back()
        raise
    transaction.commit()


def reading_warnings(storage_root: Path, output_dir: Path | None = None) -> list[str]:
    """What a command that only reads (check, inspect, explain, evaluate, tune) should tell its user
    about the folders it reads: a writer changing them now, or one that was interrupted there."""
    warnings = []
    if (storage_root / ROLLBACK_DIR).is_dir():
        warnings.append(
            f"{storage_root} is being changed by a webdedup command, or one was interrupted there (the next run or "
            "add undoes it): what is read may mix the corpus before and after that command"
        )
    if isinstance(output_dir, Path) and (output_dir / JOURNAL).exists():  # (an output in object storage has none)
        warnings.append(
            f"{output_dir} holds a publish that was interrupted (the next run or add completes it): its files may "
            "come from two runs"
        )
    return warnings
