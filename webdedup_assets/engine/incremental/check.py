"""check: new documents against the held corpus; nothing in the corpus changes."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...core.fingerprint import shingling, signatures_of
from ...core.simhash import from_words, hamming
from ...errors import WebdedupError
from ...params import BandingParams, CandidateParams, ColumnParams, FingerprintParams, ScoringParams
from ...storage.rows import listing
from ...storage.serial import from_stored, stored_value
from ...storage.state import months_of
from ...storage.store import Store, connect, scalar, sql_string, write_batches
from ..shingle_sets import shingle_sets_of
from .bodies import bodies_of
from .layout import bucket_rows, load_state, snapshot_dir

CHECK_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("is_duplicate", pa.bool_()),
        ("matched_doc_id", pa.string()),
        ("matched_cluster_id", pa.string()),
        ("nearest_doc_id", pa.string()),  # the best candidate whatever the verdict (exact_jaccard is its)
        ("exact_jaccard", pa.float64()),
        ("candidates", pa.int64()),
    ]
)


def check_against(store: Store, new: Store, target: Path) -> dict[str, Any]:
    """For every document of `new` (its daily assets built with the corpus' fingerprint and
    banding parameters), whether it duplicates a document of the corpus held in `store`: the
    best match by exact Jaccard (ties: smallest doc_id; with verify hamming, by the Hamming distance
    of the SimHash fingerprints, within max_hamming), its cluster, the Jaccard, the number of
    candidates verified. Candidates come from the corpus' band index (the snapshot of the last
    update, else band_memberships), with the hot-bucket policy of the last update: a bucket
    over hot_bucket_size under `star` links the new document to its first member only. Writes
    `target` (Parquet); reads the corpus only."""
    started = time.perf_counter()
    state = load_state(store)
    held = {
        "fingerprint": store.params("fingerprinted").get("fingerprint"),
        "banding": store.params("band_memberships").get("banding"),
    }
    for key, value in held.items():
        given = new.params("fingerprinted" if key == "fingerprint" else "band_memberships").get(key)
        if given != value:
            raise WebdedupError(f"check: the corpus was built with {key}={value} but the new data with {key}={given}")
    candidates = from_stored(CandidateParams, state["parameters"]["candidates"]) if state else CandidateParams()
    scoring = from_stored(ScoringParams, state["parameters"]["scoring"]) if state else ScoringParams()
    con = connect(new)  # DuckDB spills under the new data's storage, never under the corpus'

    try:
        snap = sorted(snapshot_dir(store, "band_memberships").glob("*.parquet")) if state else []
        index = (
            f"read_parquet({listing(snap)}, hive_partitioning = false)" if snap else store.scan_sql("band_memberships")
        )
        con.execute(
            f"CREATE TEMP TABLE probe AS SELECT doc_id, band_index, band_hash FROM {new.scan_sql('band_memberships')}"
        )
        con.execute(f"CREATE TEMP TABLE hits AS {bucket_rows(index, 'probe')}")
        hot = candidates.hot_bucket_size if candidates.bucket_policy == "star" else None
        con.execute("""CREATE TEMP TABLE bucket AS SELECT band_index, band_hash, count(*) AS size,
            min(doc_id) AS hub FROM hits GROUP BY ALL""")
        hot_filter = f"b.size <= {hot} OR h.doc_id = b.hub" if hot is not None else "true"
        con.execute(f"""CREATE TEMP TABLE pairs AS
            SELECT p.doc_id AS new_id, h.doc_id AS old_id, count(*) AS shared FROM probe p
              JOIN hits h ON h.band_index = p.band_index AND h.band_hash = p.band_hash
              JOIN bucket b ON b.band_index = p.band_index AND b.band_hash = p.band_hash
             WHERE {hot_filter} GROUP BY ALL ORDER BY new_id, old_id""")
        pairs = con.sql("SELECT new_id, old_id FROM pairs").to_arrow_table()
        con.execute("CREATE TEMP TABLE need AS SELECT DISTINCT old_id AS doc_id FROM pairs")
        by_hamming = scoring.verify == "hamming"
        exact, distance = _score_pairs(con, store, new, pairs, held["fingerprint"], by_hamming)
        con.register(
            "scored_arrow",
            pa.table(
                {
                    "new_id": pairs["new_id"],
                    "old_id": pairs["old_id"],
                    "exact_jaccard": pa.array(exact),
                    "hamming_distance": pa.array(distance),
                }
            ),
        )
        if by_hamming:  # the nearest fingerprint decides (ties: the highest Jaccard, then the smallest doc_id)
            max_hamming = stored_value(BandingParams, held["banding"], "max_hamming")
            rank, decided = "(hamming_distance, -exact_jaccard, old_id)", f"b.hamming_distance <= {max_hamming}"
        else:
            rank, decided = "(-exact_jaccard, old_id)", f"b.exact_jaccard >= {scoring.threshold!r}"
        clusters = store.scan_sql("clusters") if store.files("clusters") else None
        cluster_join = (
            f"LEFT JOIN (SELECT doc_id, cluster_id FROM {clusters} SEMI JOIN need n USING (doc_id)) c "
            "ON c.doc_id = b.old_id"
            if clusters
            else "LEFT JOIN (SELECT NULL::VARCHAR AS doc_id, NULL::VARCHAR AS cluster_id) c ON false"
        )
        relation = con.sql(f"""
            WITH best AS (
                SELECT new_id, arg_min(old_id, {rank}) AS old_id, arg_min(exact_jaccard, {rank}) AS exact_jaccard,
                       arg_min(hamming_distance, {rank}) AS hamming_distance, count(*) AS candidates
                  FROM scored_arrow GROUP BY new_id)
            SELECT d.doc_id, COALESCE({decided}, false) AS is_duplicate,
                   CASE WHEN {decided} THEN b.old_id END AS matched_doc_id,
                   CASE WHEN {decided} THEN c.cluster_id END AS matched_cluster_id,
                   b.old_id AS nearest_doc_id, b.exact_jaccard, COALESCE(b.candidates, 0) AS candidates
              FROM (SELECT doc_id FROM {new.scan_sql("documents")}) d
              LEFT JOIN best b ON b.new_id = d.doc_id {cluster_join}
             ORDER BY d.doc_id""")
        reader = relation.arrow(batch_size=65_536)
        rows = write_batches(target, CHECK_SCHEMA, reader, {"stage": "check", "scoring": scoring.model_dump()})
        duplicates = scalar(
            con,
            f"SELECT count(*) FROM read_parquet({sql_string(str(target))}, hive_partitioning = false) "
            "WHERE is_duplicate",
        )
    finally:
        con.close()
    return {
        "documents": rows,
        "duplicates": duplicates,
        "candidate_pairs": pairs.num_rows,
        "threshold": scoring.threshold,
        "decided_by": f"SimHash within {max_hamming} bits" if by_hamming else f"exact Jaccard >= {scoring.threshold}",
        "seconds": round(time.perf_counter() - started, 4),
    }


CHECK_BATCH_PAGES = 131_072  # new pages (with the corpus pages paired with them) shingled at a time


def _score_pairs(con, store: Store, new: Store, pairs: pa.Table, fingerprint: dict, by_hamming: bool):
    """The exact Jaccard of every pair (new_id, old_id) of `pairs` (sorted), and with `by_hamming`
    the Hamming distance of the pages' SimHash fingerprints (else zeros): the new pages are read
    once, in stored order, CHECK_BATCH_PAGES at a time, each batch with the corpus pages paired with
    it (through the body index), so that memory follows a batch, not the input."""
    exact = np.zeros(pairs.num_rows, np.float64)
    distance = np.zeros(pairs.num_rows, np.int32)
    if not pairs.num_rows:
        return exact, distance
    pages = connect(new)  # its own connection: the batches stream while `con` fetches the corpus pages
    pages.register("new_ids", pa.table({"doc_id": pc.unique(pairs["new_id"])}))
    reader = pages.sql(f"""SELECT doc_id, body FROM {new.scan_sql("documents")}
        SEMI JOIN new_ids USING (doc_id)""").arrow(batch_size=CHECK_BATCH_PAGES)
    try:
        _score_batches(con, store, reader, pairs, fingerprint, by_hamming, exact, distance)
    finally:
        pages.close()
    return exact, distance


def _score_batches(con, store: Store, reader, pairs: pa.Table, fingerprint: dict, by_hamming: bool, exact, distance):
    """_score_pairs' batches, written into `exact` and `distance` at their pairs' places."""
    shingle_size, unit = shingling(fingerprint)
    for batch in reader:
        new_ids, bodies = batch.column("doc_id"), batch.column("body")
        at = np.flatnonzero(pc.is_in(pairs["new_id"], value_set=new_ids).to_numpy(zero_copy_only=False))
        if not len(at):
            continue
        chosen = pairs.take(at)
        con.register("batch_old", pa.table({"doc_id": pc.unique(chosen["old_id"])}))
        old = bodies_of(con, store, "batch_old")
        con.unregister("batch_old")
        old_ids, old_bodies = old.column("doc_id").combine_chunks(), old.column("body").combine_chunks()
        new_sets = shingle_sets_of(new_ids, bodies, shingle_size, unit)
        old_sets = shingle_sets_of(old_ids, old_bodies, shingle_size, unit)
        exact[at] = new_sets.jaccard(new_sets.nodes(chosen["new_id"]), old_sets.nodes(chosen["old_id"]), old_sets)
        if by_hamming:  # the fingerprints again from the bodies at hand (see verify's _signatures)
            distance[at] = hamming(
                _fingerprints(chosen["new_id"], new_ids, bodies, fingerprint),
                _fingerprints(chosen["old_id"], old_ids, old_bodies, fingerprint),
            )


def _fingerprints(wanted: pa.ChunkedArray, ids: pa.Array, bodies: pa.Array, fingerprint: dict) -> np.ndarray:
    """The SimHash fingerprints of the pages `wanted`, from the pages (ids, bodies) at hand."""
    places = pc.index_in(wanted, value_set=ids).to_numpy().astype(np.int64)
    return from_words(signatures_of(bodies, fingerprint)[2])[places]


PREVIEW_ROWS = 10


def held_daily_params(store: Store) -> tuple[FingerprintParams, BandingParams]:
    """The fingerprint and banding parameters of the corpus held in `store`."""
    if not store.files("band_memberships") or not store.files("fingerprinted"):
        raise WebdedupError(f"{store.root} holds no corpus (run `webdedup run` or `webdedup add` first)")
    fingerprint = store.params("fingerprinted")["fingerprint"]
    banding = store.params("band_memberships")["banding"]
    return (
        FingerprintParams.checked({k: v for k, v in fingerprint.items() if k in FingerprintParams.model_fields}),
        BandingParams.checked({k: v for k, v in banding.items() if k in BandingParams.model_fields}),
    )


def check_input(
    store: Store, input_path: str, input_format: str, report: Path, default_date: str | None = None
) -> dict[str, Any]:
    """`webdedup check`: stage the documents, fingerprints and band memberships of `input_path`
    with the corpus' parameters in a scratch storage (removed afterwards), then `check_against`
    the corpus held in `store`, writing one row per new document to `report` (Parquet).
    Nothing under the storage root changes: a report path inside it is refused.

    `default_date`: the crawl date of a new page without one (else the corpus' mapping's).

    Returns check_against's summary plus the input's crawl days, the report path and the first
    duplicates (`preview`: up to PREVIEW_ROWS rows, by doc_id)."""
    from ..columns import held_mapping
    from ..reading import input_days, no_days_error
    from ..stages.documents import stage_documents
    from ..stages.fingerprint import stage_band_memberships, stage_fingerprinted

    report = Path(report).expanduser().resolve()
    root = Path(store.root).expanduser().resolve()
    if report == root or root in report.parents:
        raise WebdedupError(f"check: the report {report} would be written inside the corpus storage {root}")
    fingerprint, banding = held_daily_params(store)
    scratch = Path(tempfile.mkdtemp(prefix="webdedup-check-"))
    try:
        new = Store(scratch)
        mapping = held_mapping(store)  # the new input is read as the corpus was
        if default_date is not None:
            mapping = ColumnParams.checked({**mapping.model_dump(), "default_date": default_date})
        days = input_days(input_path, input_format, store=new, mapping=mapping, explain=True)
        if not days:
            raise no_days_error(input_path, input_format)
        months = months_of(days)
        stage_documents(new, input_path, input_format, months=months, mapping=mapping)
        stage_fingerprinted(new, fingerprint, months)
        stage_band_memberships(new, banding, months)
        summary = check_against(store, new, report)
        summary["held_doc_ids"] = held_doc_ids(store, new)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    con = connect()
    try:
        preview = (
            con.sql(f"""SELECT doc_id, matched_doc_id, matched_cluster_id, exact_jaccard
            FROM read_parquet({sql_string(str(report))}, hive_partitioning = false) WHERE is_duplicate ORDER BY doc_id
            LIMIT {PREVIEW_ROWS}""")
            .to_arrow_table()
            .to_pylist()
        )
    finally:
        con.close()
    return {**summary, "input_days": days, "report": str(report), "preview": preview}


def held_doc_ids(store: Store, new: Store) -> dict[str, Any]:
    """The new pages whose doc_ids the corpus holds already (their count and the first three): their
    answers compare two pages of one doc_id, which an add of them on another day would refuse."""
    con = connect()
    try:
        count, first = con.execute(f"""SELECT count(*), COALESCE(list(doc_id ORDER BY doc_id)[1:3], [])
            FROM (SELECT doc_id FROM {new.scan_sql("documents")}
                  SEMI JOIN (SELECT doc_id FROM {store.scan_sql("documents")}) USING (doc_id))""").fetchone()
    finally:
        con.close()
    return {"count": count, "first": first}
