"""The scored_pairs and duplicate_pairs stages: exact shingle Jaccard decides.

Shingle sets are recomputed from the documents for the candidates only, a chunk of pairs
at a time, so memory holds the shingles of one chunk's documents, never the whole corpus.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.fingerprint import shingle_sets
from ..core.kernel import jaccard_pairs
from ..core.minhash import estimate_jaccard
from .errors import WebdedupError
from .storage import Store, connect, scalar, write_batches, write_csv, write_parquet_copy, write_relation

PAIRS_PER_CHUNK = 200_000

SCORED_SCHEMA = pa.schema(
    [
        ("left_doc_id", pa.string()),
        ("right_doc_id", pa.string()),
        ("left_domain", pa.string()),
        ("right_domain", pa.string()),
        ("cross_domain", pa.bool_()),
        ("shared_bands", pa.int32()),
        ("exact_jaccard", pa.float64()),
        ("minhash_estimate", pa.float64()),
        ("is_duplicate", pa.bool_()),
        ("reason", pa.string()),
    ]
)


def check_threshold(threshold: float) -> None:
    if not 0.0 < threshold <= 1.0:
        raise WebdedupError(f"threshold must be in (0, 1], got {threshold}")


def reasons(exact: np.ndarray, estimate: np.ndarray, threshold: float) -> np.ndarray:
    """jaccard_and_minhash | jaccard_match | minhash_only_rejected | below_jaccard_threshold."""
    exact_ok = exact >= threshold
    estimate_ok = estimate >= threshold
    return np.where(
        exact_ok,
        np.where(estimate_ok, "jaccard_and_minhash", "jaccard_match"),
        np.where(estimate_ok, "minhash_only_rejected", "below_jaccard_threshold"),
    )


def _require_same_lineage(store: Store, asset: str, key: str, expected: dict) -> None:
    found = store.params(asset).get(key)
    if found != expected:
        raise WebdedupError(
            f"{asset} was built with {key} {found} but fingerprinted now holds {expected}; "
            f"re-materialize {asset} (and the assets between) before scoring"
        )


def stage_scored_pairs(store: Store, threshold: float, output_dir: Path | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    check_threshold(threshold)
    fingerprint = store.params("fingerprinted")["fingerprint"]
    _require_same_lineage(store, "candidate_pairs", "fingerprint", fingerprint)
    shingle_size = fingerprint["shingle_size"]
    con = connect(store)
    candidates = store.scan_sql("candidate_pairs")
    total = scalar(con, f"SELECT count(*) FROM {candidates}")

    def batches():
        for start in range(0, total, PAIRS_PER_CHUNK):
            con.execute(f"""CREATE OR REPLACE TEMP TABLE chunk AS
                SELECT * FROM {candidates} ORDER BY left_doc_id, right_doc_id
                LIMIT {PAIRS_PER_CHUNK} OFFSET {start}""")
            members = con.sql(f"""
                WITH ids AS (SELECT left_doc_id AS doc_id FROM chunk UNION SELECT right_doc_id FROM chunk)
                SELECT d.doc_id, d.body, f.signature
                  FROM {store.scan_sql("documents")} d
                  JOIN ids USING (doc_id)
                  JOIN {store.scan_sql("fingerprinted")} f USING (doc_id)
                 ORDER BY d.doc_id""").to_arrow_table()
            pairs = con.sql("SELECT * FROM chunk").to_arrow_table()
            ids = members.column("doc_id")
            left = pc.index_in(pairs.column("left_doc_id"), value_set=ids).to_numpy()
            right = pc.index_in(pairs.column("right_doc_id"), value_set=ids).to_numpy()
            flat, offsets = shingle_sets(members.column("body"), shingle_size)
            exact = jaccard_pairs(flat, offsets, left.astype(np.int64), right.astype(np.int64))
            signatures = members.column("signature").combine_chunks().flatten().to_numpy().reshape(len(ids), -1)
            estimate = estimate_jaccard(signatures[left], signatures[right])
            yield pa.record_batch(
                [
                    pairs.column("left_doc_id").combine_chunks(),
                    pairs.column("right_doc_id").combine_chunks(),
                    pairs.column("left_domain").combine_chunks(),
                    pairs.column("right_domain").combine_chunks(),
                    pairs.column("cross_domain").combine_chunks(),
                    pairs.column("shared_bands").combine_chunks(),
                    pa.array(exact),
                    pa.array(estimate),
                    pa.array(exact >= threshold),
                    pa.array(reasons(exact, estimate, threshold)),
                ],
                schema=SCORED_SCHEMA,
            )

    params = {
        "stage": "scored_pairs",
        "fingerprint": fingerprint,
        "banding": store.params("candidate_pairs").get("banding"),
        "scoring": {"threshold": threshold},
    }
    rows = write_batches(store.path("scored_pairs"), SCORED_SCHEMA, batches(), params)
    scored = store.scan_sql("scored_pairs")
    by_reason = dict(con.execute(f"SELECT reason, count(*) FROM {scored} GROUP BY reason").fetchall())
    stats = {
        "rows": rows,
        "duplicates": scalar(con, f"SELECT count(*) FROM {scored} WHERE is_duplicate"),
        "reasons": by_reason,
        "seconds": round(time.perf_counter() - started, 4),
    }
    store.write_stats("scored_pairs", None, stats)
    if output_dir is not None:
        write_parquet_copy(output_dir / "scored_pairs.parquet", con.sql(f"SELECT * FROM {scored}"))
    con.close()
    return {**params, **stats}


def stage_duplicate_pairs(store: Store, threshold: float, output_dir: Path | None = None) -> dict[str, Any]:
    """Scored pairs whose exact Jaccard reaches this stage's threshold (re-runnable alone)."""
    started = time.perf_counter()
    check_threshold(threshold)
    upstream = store.params("scored_pairs")
    con = connect(store)
    relation = con.sql(f"""
        SELECT left_doc_id, right_doc_id, left_domain, right_domain, cross_domain, shared_bands,
               exact_jaccard, minhash_estimate,
               CASE WHEN exact_jaccard >= 1.0 THEN 'exact' ELSE 'near' END AS kind
          FROM {store.scan_sql("scored_pairs")}
         WHERE exact_jaccard >= {threshold!r}
         ORDER BY left_doc_id, right_doc_id""")
    params = {
        "stage": "duplicate_pairs",
        "fingerprint": upstream["fingerprint"],
        "banding": upstream.get("banding"),
        "duplicates": {"threshold": threshold},
    }
    rows = write_relation(store.path("duplicate_pairs"), relation, params)
    dup = store.scan_sql("duplicate_pairs")
    exact, cross = con.execute(
        f"SELECT count(*) FILTER (kind = 'exact'), count(*) FILTER (cross_domain) FROM {dup}"
    ).fetchall()[0]
    stats = {
        "rows": rows,
        "exact_duplicate_pairs": exact,
        "near_duplicate_pairs": rows - exact,
        "cross_domain_duplicates": cross,
        "same_domain_duplicates": rows - cross,
        "seconds": round(time.perf_counter() - started, 4),
    }
    store.write_stats("duplicate_pairs", None, stats)
    if output_dir is not None:
        write_csv(output_dir / "duplicate_pairs.csv", con.sql(f"SELECT * FROM {dup}"))
    con.close()
    return {**params, **stats}
