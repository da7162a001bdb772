"""Is a storage (and the outputs published from it) whole? One line per damaged file.

`storage_problems` reads every file's footer or text, never its pages, so it is cheap enough to
run whenever a command fails on a storage: `damage_named` turns whatever low-level error a damaged
file caused (pyarrow, DuckDB, json, LZ4) into a WebdedupError naming the file, what is wrong and
the remedy. `output_problems` also checks the published set against its manifest (`webdedup verify`).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq

from ..errors import WebdedupError
from ..storage import sets
from ..storage.objects import ObjectPath, list_objects, open_input, open_text
from ..storage.store import Store
from ..storage.transaction import ROLLBACK_DIR
from .incremental import bodies
from .incremental.layout import GLOBAL, INCREMENTAL_DIR

REBUILD_CORPUS = "rebuild the storage with `webdedup run` over the corpus' whole input"
REBUILD_GLOBAL = "`webdedup add --full-rebuild` (or `webdedup run` over the whole input) rebuilds it"
REBUILD_DERIVED = "it is derived from the other files: `webdedup add --full-rebuild` rebuilds it"

# published output -> the manifest count its data rows must equal
OUTPUT_ROWS = {
    "fingerprinted.parquet": "documents",
    "scored_pairs.parquet": "candidate_pairs",
    "deduped_documents.parquet": "representatives",
    "clusters.csv": "documents",
    "duplicate_pairs.csv": "duplicate_pairs",
}


def _remedy(store: Store, path: Path) -> str:
    top = path.relative_to(store.root).parts[0]
    if top in GLOBAL or top == "manifest":
        return REBUILD_GLOBAL
    if top == INCREMENTAL_DIR:
        return REBUILD_DERIVED
    if top == "published":
        return "a derived copy: delete it, the next publish makes it again"
    return REBUILD_CORPUS  # the daily assets, the corpus state, a converted input


def parquet_problem(path: Path) -> str | None:
    """What is wrong with a Parquet file's footer or row groups (None when it reads): a file cut
    short has no footer; one whose footer points past its end lost pages."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        handle.seek(max(0, size - 4))
        if size < 12 or handle.read(4) != b"PAR1":
            return f"no Parquet footer at its end ({size:,} bytes): cut short or overwritten"
    try:
        meta = pq.ParquetFile(path).metadata
    except Exception as err:  # pyarrow names no file and raises several types for a bad footer
        return f"its Parquet footer is not readable ({str(err).splitlines()[0] if str(err) else type(err).__name__})"
    rows = 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        rows += group.num_rows
        for c in range(group.num_columns):
            chunk = group.column(c)
            start = chunk.dictionary_page_offset or chunk.data_page_offset
            if start + chunk.total_compressed_size > size:
                return f"row group {g} column {chunk.path_in_schema!r} ends past the end of the file ({size:,} bytes)"
    if rows != meta.num_rows:
        return f"its row groups hold {rows:,} rows, its footer says {meta.num_rows:,}"
    return None


def json_problem(path: Path) -> str | None:
    try:
        json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as err:
        return f"not valid JSON ({err})"
    return None


def _files(root: Path, pattern: str) -> Iterator[Path]:
    """Files under root, leaving out hidden ones (temporary files, locks, DuckDB's spill folder)."""
    for path in sorted(root.rglob(pattern)):
        if not any(part.startswith(".") for part in path.relative_to(root).parts):
            yield path


def _rows_of(files: list[Path]) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def storage_problems(store: Store) -> list[str]:
    """One line per damaged file of the storage: `<file>: <what is wrong>; <remedy>`."""
    problems: dict[Path, str] = {}
    for path in _files(store.root, "*.parquet"):
        problem = parquet_problem(path)
        if problem:
            problems[path] = problem
    for path in _files(store.root, "*.json"):
        problem = json_problem(path)
        if problem:
            problems[path] = problem
    for index, blocks in bodies.index_files(store):
        if index not in problems:
            problem = bodies.index_problem(index, blocks)
            if problem:
                problems[blocks] = problem
    problems.update(_row_count_problems(store, problems))
    return [f"{path}: {problem}; {_remedy(store, path)}" for path, problem in sorted(problems.items())]


def interrupted_problems(store: Store) -> list[str]:
    """A command's changes not committed yet: one is running, or one was killed (verify's own
    question; a failed command's damage report must not name its own changes)."""
    if not (store.root / ROLLBACK_DIR).is_dir():
        return []
    return [
        f"{store.root}: a webdedup command is changing it, or one was interrupted there ({ROLLBACK_DIR}): "
        "the next `webdedup run` or `add` undoes that command"
    ]


def publication_problems(store: Store, output_dir: Path | ObjectPath) -> list[str]:
    """The published set describes the corpus the storage holds: the counts of its manifest.json
    are the storage's (an interrupted publish left an output of another corpus that way)."""
    held = store.asset_dir("manifest") / "manifest.json"
    if isinstance(output_dir, ObjectPath) or not held.is_file() or not (output_dir / "manifest.json").is_file():
        return []
    try:
        published = json.loads((output_dir / "manifest.json").read_text()).get("counts") or {}
        stored = json.loads(held.read_text()).get("counts") or {}
    except (OSError, ValueError, AttributeError):
        return []  # (a damaged manifest is named by the other checks)
    names = sorted(stored, key=lambda k: (k != "documents", k))  # the documents first
    differ = [f"{k} {published.get(k)} against {stored[k]}" for k in names if published.get(k) != stored[k]]
    if not differ:
        return []
    return [
        f"{output_dir / 'manifest.json'}: the outputs are of another corpus than {store.root} holds "
        f"({', '.join(differ[:3])}); publish again (`webdedup run`, or `webdedup add`)"
    ]


def _row_count_problems(store: Store, damaged: dict[Path, str]) -> dict[Path, str]:
    """Each asset's stats record the rows it wrote (per partition): the files must hold them."""
    found: dict[Path, str] = {}
    for stats in _files(store.root, "stats*.json"):
        asset = stats.parent.name
        if stats in damaged or asset == "manifest" or stats.parent.parent != store.root:
            continue
        partition = stats.stem.removeprefix("stats-") if stats.stem != "stats" else None
        files = store.partition_files(asset, partition) if partition else [store.path(asset)]
        files = [f for f in files if f.exists()]
        if not files or any(f in damaged for f in files):
            continue
        recorded = json.loads(stats.read_text()).get("rows")
        held = _rows_of(files)
        if isinstance(recorded, int) and recorded != held:
            found[files[-1]] = f"holds {held:,} rows, {stats.name} records {recorded:,}"
    return found


def output_problems(output_dir: Path | ObjectPath) -> list[str]:
    """One line per problem of the published set: manifest.json readable, every output it lists
    present with its size, the row counts of the tables equal to the manifest's counts."""
    remedy = "publish again (`webdedup run`, or `webdedup add`)"
    if isinstance(output_dir, ObjectPath):
        return _set_problems(output_dir, remedy)
    manifest_path = output_dir / "manifest.json"
    if (output_dir / ".publish-journal.json").exists():
        return [
            f"{output_dir}: a publish was interrupted (.publish-journal.json): the outputs may mix two sets; "
            f"the next `webdedup run` or `add` completes it"
        ]
    if not manifest_path.is_file():
        return [f"{manifest_path}: missing; {remedy}"]
    problem = json_problem(manifest_path)
    if problem:
        return [f"{manifest_path}: {problem}; {remedy}"]
    manifest = json.loads(manifest_path.read_text())
    problems = []
    for name, size in sorted((manifest.get("outputs") or {}).items()):
        path = output_dir / name
        if not path.is_file():
            problems.append(f"{path}: listed in manifest.json but missing; {remedy}")
        elif size is not None and path.stat().st_size != size:
            problems.append(f"{path}: {path.stat().st_size:,} bytes, manifest.json lists {size:,}; {remedy}")
        elif name in OUTPUT_ROWS:
            expected = manifest["counts"].get(OUTPUT_ROWS[name])
            try:
                rows = _output_rows(path)
            except Exception as err:  # a damaged table: named, whatever the reader raised
                problems.append(f"{path}: not readable ({str(err).splitlines()[0]}); {remedy}")
                continue
            if expected is not None and rows != expected:
                problems.append(
                    f"{path}: {rows:,} rows, manifest.json counts {expected:,} {OUTPUT_ROWS[name]}; {remedy}"
                )
    return problems


def _set_problems(output: ObjectPath, remedy: str) -> list[str]:
    """output_problems of an output in object storage: the set its CURRENT names."""
    try:
        folder = sets.current_folder(output)
        manifest = sets.read_json(folder / "manifest.json")
        held: dict[str, int] = {}
        for path, size in list_objects(str(folder)):
            name = path.relative_to(folder).parts[0]  # a folder output (shards/) by its files' bytes
            held[name] = held.get(name, 0) + size
    except WebdedupError as err:
        return [f"{err}; {remedy}"]
    problems = []
    for name, size in sorted((manifest.get("outputs") or {}).items()):
        path = folder / name
        if name not in held:
            problems.append(f"{path}: listed in manifest.json but missing; {remedy}")
        elif size is not None and held[name] != size:
            problems.append(f"{path}: {held[name]:,} bytes, manifest.json lists {size:,}; {remedy}")
        elif name in OUTPUT_ROWS and manifest["counts"].get(OUTPUT_ROWS[name]) is not None:
            expected = manifest["counts"][OUTPUT_ROWS[name]]
            try:
                if name.endswith(".parquet"):
                    with open_input(path) as handle:
                        rows = pq.ParquetFile(handle).metadata.num_rows
                else:
                    with open_text(path) as handle:
                        rows = sum(1 for _ in csv.reader(handle)) - 1  # the header
            except Exception as err:  # a damaged table: named, whatever the reader raised
                problems.append(f"{path}: not readable ({str(err).splitlines()[0]}); {remedy}")
                continue
            if rows != expected:
                problems.append(
                    f"{path}: {rows:,} rows, manifest.json counts {expected:,} {OUTPUT_ROWS[name]}; {remedy}"
                )
    return problems


def _output_rows(path: Path) -> int:
    if path.suffix == ".parquet":
        problem = parquet_problem(path)
        if problem:
            raise ValueError(problem)
        return pq.ParquetFile(path).metadata.num_rows
    with open(path, newline="", encoding="utf-8") as handle:
        return sum(1 for _ in csv.reader(handle)) - 1  # the header


@contextmanager
def damage_named(store: Store) -> Iterator[None]:
    """Run a command's work on `store`; when it fails and a file of the storage is damaged, the
    error becomes a WebdedupError naming that file (what pyarrow or DuckDB raised names no file, or
    not the remedy). Costs nothing unless the work fails."""
    try:
        yield
    except WebdedupError:
        raise
    except Exception:
        message = damage_message(store)
        if message is None:
            raise
        raise WebdedupError(message) from None


def damage_message(store: Store) -> str | None:
    """The error that names the first damaged file of the storage, or None when all is whole."""
    problems = storage_problems(store) if store.root.is_dir() else []
    if not problems:
        return None
    more = f" (and {len(problems) - 1} more: `webdedup verify --storage {store.root}` lists them)"
    return f"damaged storage: {problems[0]}" + (more if len(problems) > 1 else "")
