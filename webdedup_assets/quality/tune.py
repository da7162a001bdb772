"""`webdedup tune`: measure recall and candidates of bandings on the stored corpus, recommend one.

For a threshold T, the exact similarity join (core.exact) gives every pair of the corpus (or a
sample of documents) with shingle Jaccard >= T: the pairs LSH must find. For every num_perm
tried, MinHash signatures are computed from the documents with the run's seed and shingle size
(the same kernel as fingerprinted), and for every bands x rows of it:

- recall = share of those pairs with a band whose rows all agree (LSH candidacy), measured;
- candidates = distinct pairs sharing a band key over all documents of the sample, counted by
  the same global self-join candidate_pairs runs (DuckDB), unless the pair slots exceed a
  budget (then reported as over budget and never recommended).

The recommendation is the banding with the fewest candidates that reaches the target recall.
Nothing in the storage root is changed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from ..core.fingerprint import fingerprint_texts, shingling
from ..core.minhash import MinHashParams, band_keys
from ..core.tuning import banded_hits, bandings, probability_at, recommend
from ..engine.shingle_sets import load_shingle_sets
from ..errors import WebdedupError
from ..storage.fileio import atomic_path, make_folder
from ..storage.state import writer_lock
from ..storage.store import Store, connect
from .evaluate_reference import MAX_REFERENCE_DOCUMENTS, exact_join

DEFAULT_NUM_PERMS = (64, 96, 120, 128, 130, 160)
DEFAULT_MAX_PAIR_SLOTS = 50_000_000
PAIR_CHUNK = 100_000


def _signatures(store: Store, ids: pa.Array, shingle: tuple[int, str], num_perm: int, seed: int) -> np.ndarray:
    coeff_a, coeff_b = MinHashParams(num_perm, seed).coefficients()
    con = connect(store)
    try:
        con.register("wanted", pa.table({"doc_id": ids}))
        reader = con.sql(f"""SELECT d.doc_id, d.body FROM {store.scan_sql("documents")} d
            WHERE d.doc_id IN (SELECT doc_id FROM wanted) ORDER BY d.doc_id""").arrow(batch_size=16_384)
        parts = [
            fingerprint_texts(batch.column("body"), shingle[0], coeff_a, coeff_b, shingle[1])[2] for batch in reader
        ]
    finally:
        con.close()
    return np.concatenate(parts) if parts else np.zeros((0, num_perm), np.uint32)


def count_candidates(signatures: np.ndarray, bands: int, rows: int, max_pair_slots: int) -> tuple[int | None, int]:
    """(distinct pairs sharing a band key, pair slots); candidates None over the slot budget."""
    keys = band_keys(signatures, bands, rows)
    n = len(keys)
    table = pa.table(
        {
            "node": np.repeat(np.arange(n, dtype=np.int64), bands),
            "band": np.tile(np.arange(bands, dtype=np.int32), n),
            "key": keys.reshape(-1),
        }
    )
    con = connect()
    try:
        con.register("bands_raw", table)
        con.execute("""CREATE TEMP TABLE shared AS
            SELECT band, key, node FROM bands_raw
             WHERE (band, key) IN (SELECT band, key FROM bands_raw GROUP BY band, key HAVING count(*) > 1)""")
        slots = con.execute(
            "SELECT COALESCE(sum(c * (c - 1) // 2), 0) FROM (SELECT count(*) AS c FROM shared GROUP BY band, key)"
        ).fetchone()[0]
        if slots > max_pair_slots:
            return None, int(slots)
        pairs = con.execute("""SELECT count(*) FROM (SELECT DISTINCT l.node, r.node FROM shared l
            JOIN shared r ON l.band = r.band AND l.key = r.key AND l.node < r.node)""").fetchone()[0]
    finally:
        con.close()
    return int(pairs), int(slots)


def tune(store: Store, out_dir: Path, **options: Any) -> dict[str, Any]:
    """Measure and recommend (see _tune) holding the storage root's writer lock shared, like evaluate."""
    with writer_lock(store.root, exclusive=False, purpose="tune"):
        return _tune(store, out_dir, **options)


def _tune(
    store: Store,
    out_dir: Path,
    threshold: float | None = None,
    target_recall: float = 0.99,
    num_perms: list[int] | None = None,
    sample: int | None = None,
    seed: int = 0,
    max_pair_slots: int = DEFAULT_MAX_PAIR_SLOTS,
    min_rows: int = 3,
    max_rows: int = 16,
    min_probability: float = 0.0,
) -> dict[str, Any]:
    started = time.perf_counter()
    out_dir = make_folder(Path(out_dir))  # before the work: a folder that cannot be made is said at once
    fingerprint = store.params("fingerprinted")["fingerprint"]
    if fingerprint.get("fingerprint_method") == "simhash":
        raise WebdedupError(
            "tune measures MinHash bandings and this corpus is fingerprinted with simhash: `webdedup evaluate` "
            "writes the recall of each max_hamming (banding_recall.csv)"
        )
    if threshold is None:
        threshold = float((store.params("duplicate_pairs").get("duplicates") or {})["threshold"])
    if not 0.0 < threshold <= 1.0:
        raise WebdedupError(f"threshold must be in (0, 1], got {threshold}")
    if not 0.0 < target_recall <= 1.0:
        raise WebdedupError(f"target recall must be in (0, 1], got {target_recall}")
    num_perms = sorted(set(num_perms or DEFAULT_NUM_PERMS))
    if any(p < 1 for p in num_perms):
        raise WebdedupError(f"num_perm values must be >= 1, got {num_perms}")
    con = connect(store)
    try:
        docs = con.sql(
            f"SELECT doc_id FROM {store.scan_sql('fingerprinted')} WHERE shingle_count > 0 ORDER BY doc_id"
        ).to_arrow_table()
    finally:
        con.close()
    ids = docs["doc_id"].combine_chunks().cast(pa.string())
    sampled = sample is not None and sample < len(ids)
    if sampled:
        ids = ids.take(pa.array(np.sort(np.random.default_rng(seed).choice(len(ids), size=sample, replace=False))))
    elif len(ids) > MAX_REFERENCE_DOCUMENTS:
        raise WebdedupError(
            f"tune covers at most {MAX_REFERENCE_DOCUMENTS:,} documents, the run holds {len(ids):,} with shingles; "
            f"give --sample N (e.g. --sample 20000)"
        )
    size, unit = shingling(fingerprint)
    sets = load_shingle_sets(store, size, ids, unit)
    if not sets.doc_ids.equals(ids):
        raise WebdedupError("documents and fingerprinted hold different doc_ids; re-run the pipeline")
    offsets = np.r_[0, sets.ends].astype(np.int64)  # sets of ids, contiguous in doc_id order
    ref_left, ref_right, _, _ = exact_join(sets.flat, offsets, threshold, max_pair_slots, "tune's exact join")
    rows: list[dict[str, Any]] = []
    for num_perm in num_perms:
        signatures = _signatures(store, ids, (size, unit), num_perm, int(fingerprint["seed"]))
        for bands, r in bandings(num_perm, min_rows, max_rows):
            hits = 0
            for begin in range(0, len(ref_left), PAIR_CHUNK):
                stop = begin + PAIR_CHUNK
                hits += int(
                    banded_hits(signatures[ref_left[begin:stop]], signatures[ref_right[begin:stop]], bands, r).sum()
                )
            candidates, slots = count_candidates(signatures, bands, r, max_pair_slots)
            rows.append(
                {
                    "num_perm": num_perm,
                    "bands": bands,
                    "rows": r,
                    "p_candidate_at_threshold": round(probability_at(threshold, bands, r), 6),
                    "recall": round(hits / len(ref_left), 6) if len(ref_left) else None,
                    "found_pairs": hits,
                    "candidates": candidates,
                    "pair_slots": slots,
                    "candidates_per_exact_pair": round(candidates / len(ref_left), 3)
                    if candidates is not None and len(ref_left)
                    else None,
                }
            )
    best = recommend(rows, target_recall, min_probability)
    summary = {
        "storage_root": str(store.root),
        "threshold": threshold,
        "target_recall": target_recall,
        "min_probability": min_probability,
        "documents": len(ids),
        "sampled": sampled,
        "exact_pairs_at_threshold": int(len(ref_left)),
        "max_pair_slots": max_pair_slots,
        "recommended": best,
        "bandings": rows,
        "seconds": round(time.perf_counter() - started, 3),
    }
    columns = list(rows[0]) if rows else ["num_perm", "bands", "rows"]
    table = pa.table({c: [row.get(c) for row in rows] for c in columns})
    with atomic_path(out_dir / "tune.csv") as temp:
        pacsv.write_csv(table, temp)
    with atomic_path(out_dir / "tune.json") as temp:
        temp.write_text(json.dumps(summary, indent=2))
    summary["files"] = {"table": str(out_dir / "tune.csv"), "summary": str(out_dir / "tune.json")}
    return summary
