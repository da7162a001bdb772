"""Publishing: the output folder's files, exported from storage as one set.

Stages write to storage only. Publishing builds every output into a staging folder inside the
output folder, then swaps it in: the list of moves is written to `.publish-journal.json` first,
the files are renamed into place (`manifest.json` last), stale outputs of the previous set are
removed, and the journal is deleted. A run killed before the swap leaves the previous set
untouched; one killed during the swap leaves the journal, and the next publish (or `webdedup
run`) completes the moves before anything else. `manifest.json` lists the files of its set
with their sizes, so a reader can check that what it sees belongs together.

An output in object storage (`--output s3://bucket/prefix`) has no rename: the same files are
built into a staging folder in the storage root and uploaded as a new set under
`OUTPUT/sets/<set-id>/`, then the pointer `OUTPUT/CURRENT` names it (storage.sets).

The published fingerprinted.parquet puts every crawl day's file together (every page's
signature). It is built once per set of stored fingerprinted files, into the
storage's `published/` folder under a name derived from those files, and linked into the output:
a publish whose fingerprinted files have not changed (a run again over the same input) links it
again, and `webdedup add` and `webdedup run` have it built while the global stages run
(`publication_prepared`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import WebdedupError
from ..storage import sets
from ..storage.fileio import atomic_path, write_text
from ..storage.objects import ObjectPath, require_bucket
from ..storage.remote import upload_at_commit
from ..storage.store import Store, connect, file_identity, link_or_copy, publish_concatenated, sql_string
from ..storage.transaction import JOURNAL
from .invariants import MEMBER_CACHE, cluster_parts_sql, measured_key, read_keyed_table

MANIFEST = "manifest.json"
# Every file name webdedup publishes: only these are ever replaced or removed in the output folder.
OUTPUT_NAMES = (
    "fingerprinted.parquet",
    "candidate_summary.csv",
    "collision_buckets.csv",
    "scored_pairs.parquet",
    "duplicate_pairs.csv",
    "clusters.csv",
    "cluster_inspection.csv",
    "cluster_diagnostics.csv",
    "domain_summary.csv",
    "removed.csv",
    "deduped_documents.parquet",
    "rejected_records.csv",
    "shards",
    # written beside the outputs by `check` and `evaluate` about the corpus published then: removed
    # when another is published, so that the folder never answers for a corpus it no longer holds
    "check.parquet",
    "evaluation",
    MANIFEST,
)
# Reports a stage writes beside its stored data, published as they are.
STAGE_REPORTS = {
    "candidate_summary.csv": "candidate_pairs",
    "collision_buckets.csv": "candidate_pairs",
    "cluster_inspection.csv": "deduped_documents",
    "cluster_diagnostics.csv": "deduped_documents",  # engine.diagnostics
}


def require_replaceable(output_dir: Path | ObjectPath, flag: str = "--output") -> None:
    """Refuse an output folder that holds files under the names webdedup publishes (OUTPUT_NAMES)
    but was not written by webdedup: publishing would replace or remove them. A folder webdedup
    wrote has its manifest.json (or a journal of a publish that did not finish)."""
    if isinstance(output_dir, ObjectPath):
        return require_bucket(output_dir, flag)
    if not output_dir.is_dir() or (output_dir / JOURNAL).exists():
        return
    try:
        manifest = json.loads((output_dir / MANIFEST).read_text(encoding="utf-8"))
        if isinstance(manifest, dict) and {"storage_root", "outputs"} <= manifest.keys():
            return
    except (OSError, ValueError):
        pass
    taken = [name for name in OUTPUT_NAMES if os.path.lexists(output_dir / name)]
    if taken:
        raise WebdedupError(
            f"{flag} {output_dir} holds {', '.join(taken)} but is not a folder webdedup wrote (no manifest.json of "
            f"webdedup): publishing would replace them; give a new or empty folder, or move those files"
        )


def report_path(store: Store, name: str) -> Path:
    """Where a stage keeps a report that is published as `name`."""
    return store.asset_dir(STAGE_REPORTS[name]) / name


def _copy_csv(con, query: str, target: Path) -> None:
    con.execute(f"COPY ({query}) TO {sql_string(str(target))} (FORMAT csv, HEADER true)")


PUBLISHED_DIR = "published"  # in the storage root: outputs built from stored files, kept for the next publish


def _publication_path(store: Store, asset: str) -> Path:
    """Where the concatenation of the asset's files as they are now is kept: named after each
    file's name, inode, size and modification time (stored files are only ever replaced, never
    written in place, so a changed file has another identity)."""
    identities = [file_identity(path) for path in store.published_files(asset)]
    digest = hashlib.sha256(json.dumps(identities, sort_keys=True).encode())
    return store.root / PUBLISHED_DIR / f"{asset}-{digest.hexdigest()[:24]}.parquet"


_in_flight: dict[Path, Future] = {}  # publications being built on a background thread of this process
_in_flight_lock = threading.Lock()


def fingerprinted_publication(store: Store) -> Path:
    """The published fingerprinted.parquet of the stored files as they are now: the kept one, the
    one a background thread of this process is building (waited for), or built here."""
    target = _publication_path(store, "fingerprinted")
    with _in_flight_lock:
        building = _in_flight.get(target)
    if building is not None:
        try:
            building.result()
        except Exception:  # noqa: BLE001 - built again below, where the error reaches the caller
            pass
    return _build_publication(store, target)


def _build_publication(store: Store, target: Path) -> Path:
    """The fingerprinted files concatenated into `target` unless it exists; the earlier
    publications removed (an output linked to one keeps its own link)."""
    if not target.exists():
        with atomic_path(target) as temp:
            publish_concatenated(store, "fingerprinted", temp, uncompressed=["signature"])
    for old in target.parent.glob("fingerprinted-*.parquet"):
        if old != target:
            old.unlink(missing_ok=True)
    return target


@contextmanager
def publication_prepared(store: Store, output_dir: Path | ObjectPath) -> Iterator[None]:
    """Build the fingerprinted publication on a background thread while the block runs (the
    global stages, after which the fingerprinted files are final), so that the publish into
    output_dir at its end only links it. The thread is waited for on the way out; a failure there
    is left to the publish, which builds it again and reports the error. Nothing is prepared
    when output_dir is on another file system (the publish copies the files there itself)."""
    try:
        target = _publication_path(store, "fingerprinted")
    except WebdedupError:  # no fingerprinted file yet: nothing to prepare, the stages report it
        target = None
    staged_in = store.root if isinstance(output_dir, ObjectPath) else output_dir  # where publish stages
    if target is None or not _same_file_system(store.root, staged_in):
        yield
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="webdedup-publication") as pool:
        with _in_flight_lock:
            _in_flight[target] = pool.submit(_build_publication, store, target)
        try:
            yield
        finally:
            with _in_flight_lock:
                building = _in_flight.pop(target, None)
            if building is not None:
                wait([building])


def _same_file_system(a: Path, b: Path) -> bool:
    """Whether a and b (or, for a folder not made yet, its nearest existing parent) share a device."""

    def device(path: Path) -> int:
        path = Path(path).resolve()
        while not path.exists() and path != path.parent:
            path = path.parent
        return os.stat(path).st_dev

    return device(a) == device(b)


def _build(store: Store, staging: Path) -> None:
    """Every output of the stored run, into `staging` (tables in a defined order)."""
    if _same_file_system(store.root, staging):  # the kept publication is linked, not copied
        link_or_copy(fingerprinted_publication(store), staging / "fingerprinted.parquet")
    else:
        publish_concatenated(store, "fingerprinted", staging / "fingerprinted.parquet", uncompressed=["signature"])
    for name in STAGE_REPORTS:
        link_or_copy(report_path(store, name), staging / name)
    # one file (linked) from the DuckDB engine; Spark's parts are concatenated in order
    publish_concatenated(store, "scored_pairs", staging / "scored_pairs.parquet")
    publish_concatenated(store, "deduped_documents", staging / "deduped_documents.parquet")
    con = connect(store)
    con.execute("SET SESSION preserve_insertion_order = true")
    try:
        _copy_csv(
            con,
            f"SELECT * FROM {store.scan_sql('duplicate_pairs')} ORDER BY left_doc_id, right_doc_id",
            staging / "duplicate_pairs.csv",
        )
        _copy_csv(
            con, f"SELECT * FROM {store.scan_sql('clusters')} ORDER BY cluster_id, doc_id", staging / "clusters.csv"
        )
        _copy_csv(con, domain_summary_sql(store), staging / "domain_summary.csv")
        _copy_csv(con, removed_sql(con, store), staging / "removed.csv")
        if store.path("rejected_records").exists():
            _copy_csv(
                con,
                f"SELECT * FROM read_parquet({sql_string(str(store.path('rejected_records')))}, "
                "hive_partitioning = false) "
                "ORDER BY warc_filename, warc_offset NULLS FIRST, warc_record_id",
                staging / "rejected_records.csv",
            )
    finally:
        con.close()


def removed_sql(con, store: Store) -> str:
    """Every removed document with the representative kept in its place, their exact Jaccard and
    why: a confirmed pair with the representative (exact or near), or chained to it through other
    members (then the Jaccard is the cohesion measurement's, when the cluster was measured)."""
    measured = read_keyed_table(store.asset_dir("deduped_documents") / MEMBER_CACHE)
    jaccards = "(SELECT NULL::VARCHAR AS doc_id, NULL::DOUBLE AS jaccard WHERE false)"
    if measured is not None and measured[1] == measured_key(store):
        con.register("measured_members", measured[0].select(["doc_id", "jaccard"]))
        jaccards = "measured_members"
    return f"""
        WITH reps AS (SELECT cluster_id, doc_id AS representative FROM {store.scan_sql("deduped_documents")}),
        parts AS (
            SELECT *, count(*) OVER (PARTITION BY cluster_id) AS cluster_size FROM {cluster_parts_sql(con, store)}),
        removed AS (
            SELECT c.doc_id, c.cluster_id, c.cluster_size, r.representative
              FROM parts c JOIN reps r USING (cluster_id)
             WHERE c.doc_id <> r.representative)
        SELECT m.doc_id, m.representative, m.cluster_id, m.cluster_size,
               COALESCE(p.exact_jaccard, j.jaccard) AS jaccard_to_representative,
               CASE WHEN p.kind IS NOT NULL THEN p.kind || ' duplicate of the representative'
                    ELSE 'chained: a duplicate of other members of the cluster, not of the representative' END
                   AS reason
          FROM removed m
          LEFT JOIN {store.scan_sql("duplicate_pairs")} p
            ON p.left_doc_id = least(m.doc_id, m.representative)
           AND p.right_doc_id = greatest(m.doc_id, m.representative)
          LEFT JOIN {jaccards} j ON j.doc_id = m.doc_id
         ORDER BY m.cluster_id, m.doc_id"""


def domain_summary_sql(store: Store) -> str:
    """Per domain: documents, representatives kept, removed, duplicate pairs it takes part in.
    Counted per domain on each side (deduped_documents' rows carry their document's domain), not
    by joining the documents with the representatives on doc_id, which is slower."""
    return f"""
        WITH docs AS (SELECT domain, count(*) AS documents FROM {store.scan_sql("documents")} GROUP BY domain),
        reps AS (SELECT domain, count(*) AS representatives FROM {store.scan_sql("deduped_documents")}
                  GROUP BY domain),
        pairs AS (
            SELECT left_domain AS domain, cross_domain FROM {store.scan_sql("duplicate_pairs")}
            UNION ALL
            SELECT right_domain, cross_domain FROM {store.scan_sql("duplicate_pairs")}),
        pair_counts AS (
            SELECT domain, count(*) AS duplicate_pair_ends,
                   count(*) FILTER (cross_domain) AS cross_domain_pair_ends
              FROM pairs GROUP BY domain)
        SELECT d.domain, d.documents,
               COALESCE(r.representatives, 0) AS representatives,
               d.documents - COALESCE(r.representatives, 0) AS removed,
               COALESCE(p.duplicate_pair_ends, 0) AS duplicate_pair_ends,
               COALESCE(p.cross_domain_pair_ends, 0) AS cross_domain_pair_ends
          FROM docs d
          LEFT JOIN reps r ON r.domain IS NOT DISTINCT FROM d.domain
          LEFT JOIN pair_counts p ON p.domain = d.domain
         ORDER BY documents DESC, d.domain"""


def publish(
    store: Store,
    output_dir: Path | ObjectPath,
    manifest: dict[str, Any],
    on_commit: Callable[[], None] | None = None,
    extra: Callable[[Path], dict[str, Any]] | None = None,
) -> dict[str, int]:
    """Export the stored run into `output_dir` as one set; returns {file: bytes} of the set.

    The caller holds the output folder's writer lock (state.writer_lock). `on_commit` is called
    once the set is staged and its journal written, before the swap: from then on a killed
    publish is completed (`recover`), not undone. `extra(staging)` builds further outputs into the
    set (the emitted shards); its figures go into the manifest under `extra_outputs`.

    An output in object storage (an ObjectPath) gets the same files, staged in the storage root
    and uploaded as a new set; `on_commit` is called once the set is uploaded, before CURRENT
    names it (storage.sets)."""
    if isinstance(output_dir, ObjectPath):
        staging = store.root / f".publish-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    else:
        output_dir.mkdir(parents=True, exist_ok=True)
        recover(output_dir)
        require_replaceable(output_dir, "output folder")
        staging = output_dir / f".publish-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    staging.mkdir()
    try:
        started = time.perf_counter()
        _build(store, staging)
        if extra is not None:
            manifest["extra_outputs"] = extra(staging)
        manifest.setdefault("timings_seconds", {})["publish"] = round(time.perf_counter() - started, 4)
        outputs = {p.name: _size(p) for p in sorted(staging.iterdir())}
        outputs[MANIFEST] = None  # listed in itself without a size
        text = json.dumps({**manifest, "outputs": outputs}, indent=2, default=str)
        write_text(staging / MANIFEST, text)
        write_text(store.asset_dir("manifest") / MANIFEST, text)
        if isinstance(output_dir, ObjectPath):
            _publish_set(staging, output_dir, lambda: _commit(store, on_commit))
            return {k: v for k, v in outputs.items() if v is not None}
        upload_at_commit(store.root)  # a storage in object storage is final before the journal
        names = sorted(n for n in outputs if n != MANIFEST) + [MANIFEST]
        stale = [n for n in OUTPUT_NAMES if n not in outputs and (output_dir / n).exists()]
        write_text(output_dir / JOURNAL, json.dumps({"staging": staging.name, "move": names, "remove": stale}))
        if on_commit is not None:
            on_commit()
        try:
            _swap(output_dir, staging, names, stale)
        except OSError as err:  # past the commit point: the journal and the staged files stay for recover
            raise WebdedupError(
                f"{output_dir}: publishing stopped half way ({err}); the next webdedup command on this folder "
                "completes it"
            ) from None
    finally:
        if not _journal_names(output_dir, staging):  # else the next command's recover moves the rest
            shutil.rmtree(staging, ignore_errors=True)
    return {k: v for k, v in outputs.items() if v is not None}


def _journal_names(output_dir: Path | ObjectPath, staging: Path) -> bool:
    """Whether a publish journal of `output_dir` names `staging`: its commit point has passed."""
    if isinstance(output_dir, ObjectPath) or not (output_dir / JOURNAL).exists():
        return False
    return json.loads((output_dir / JOURNAL).read_text()).get("staging") == staging.name


def _commit(store: Store, on_commit: Callable[[], None] | None) -> None:
    upload_at_commit(store.root)
    if on_commit is not None:
        on_commit()


def _publish_set(staging: Path, output: ObjectPath, on_commit: Callable[[], None]) -> None:
    """The staged files as a new set of an output in object storage, then CURRENT moved to it,
    then the sets older than the previous one deleted. A set that fails (or is interrupted)
    before CURRENT names it is deleted."""
    previous = sets.current_set(output)
    set_id = sets.new_set_id()
    try:
        sets.upload_set(staging, output, set_id)
        on_commit()
        sets.point_to(output, set_id)
    except BaseException:
        if sets.current_set(output) != set_id:
            sets.remove_set(output, set_id)
        raise
    sets.remove_older_sets(output, previous)


def _size(path: Path) -> int:
    """A file's bytes, or a folder's (the emitted shards) files' bytes."""
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def _swap(output_dir: Path, staging: Path, names: list[str], stale: list[str]) -> None:
    for name in names:
        source, target = staging / name, output_dir / name
        if source.exists():  # a recovery may find some already moved
            if source.is_dir() and target.is_dir():  # a folder is not replaced in one rename: the old one
                os.replace(target, staging / f".replaced-{name}")  # goes with the staging folder
            os.replace(source, target)
    for name in stale:
        target = output_dir / name
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
    (output_dir / JOURNAL).unlink(missing_ok=True)


def recover(output_dir: Path) -> str | None:
    """Complete a swap that an interrupted publish left half done: "completed", or "lost" when its
    staged files are gone (the folder may then mix two publications until the next publish);
    None when there was none. Call before anything removes the `.publish-*` leftovers."""
    journal = output_dir / JOURNAL
    if not journal.exists():
        return None
    plan = json.loads(journal.read_text())
    staging = output_dir / plan["staging"]
    if not staging.is_dir():
        journal.unlink()
        return "lost"
    _swap(output_dir, staging, plan["move"], plan["remove"])
    shutil.rmtree(staging, ignore_errors=True)
    return "completed"
