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
Of a SimHash corpus, the same for its blockings (max_hamming, key_blocks: simhash_blockings)
over the fingerprints simhash_texts computes. Nothing in the storage root is changed.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from ..core.fingerprint import fingerprint_method, fingerprint_texts, shingling, simhash_texts
from ..core.minhash import MinHashParams, band_keys, candidate_probability
from ..core.simhash import block_keys, block_values
from ..core.tuning import banded_hits, bandings, recommend
from ..engine.shingle_sets import load_shingle_sets
from ..errors import WebdedupError
from ..params import MAX_SIMHASH_KEYS
from ..storage.fileio import atomic_path, make_folder
from ..storage.state import writer_lock
from ..storage.store import Store, connect
from .evaluate_reference import MAX_REFERENCE_DOCUMENTS, exact_join

DEFAULT_NUM_PERMS = (64, 96, 120, 128, 130, 160)
DEFAULT_MAX_PAIR_SLOTS = 50_000_000
PAIR_CHUNK = 100_000


def _signatures(store: Store, ids: pa.Array, compute, width: int) -> np.ndarray:
    """compute(bodies) of the documents `ids`, in doc_id order: (n, width) values."""
    con = connect(store)
    try:
        con.register("wanted", pa.table({"doc_id": ids}))
        reader = con.sql(f"""SELECT d.doc_id, d.body FROM {store.scan_sql("documents")} d
            WHERE d.doc_id IN (SELECT doc_id FROM wanted) ORDER BY d.doc_id""").arrow(batch_size=16_384)
        parts = [compute(batch.column("body")) for batch in reader]
    finally:
        con.close()
    return np.concatenate(parts) if parts else np.zeros((0, width), np.uint64)


def minhash_signatures(store: Store, ids: pa.Array, shingle: tuple[int, str], num_perm: int, seed: int) -> np.ndarray:
    coeff_a, coeff_b = MinHashParams(num_perm, seed).coefficients()
    return _signatures(
        store, ids, lambda bodies: fingerprint_texts(bodies, shingle[0], coeff_a, coeff_b, shingle[1])[2], num_perm
    )


def count_candidates(keys: np.ndarray, max_pair_slots: int) -> tuple[int | None, int]:
    """(distinct pairs sharing one of their (n, bands) band keys, pair slots); candidates None over
    the slot budget."""
    n, bands = keys.shape
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


def measured(hits: int, candidates: int | None, slots: int, exact_pairs: int) -> dict[str, Any]:
    """The figures tune measures of one banding or blocking against the exact pairs."""
    return {
        "recall": round(hits / exact_pairs, 6) if exact_pairs else None,
        "found_pairs": hits,
        "candidates": candidates,
        "pair_slots": slots,
        "candidates_per_exact_pair": round(candidates / exact_pairs, 3)
        if candidates is not None and exact_pairs
        else None,
    }


def simhash_blockings(
    hashes: np.ndarray, ref_left: np.ndarray, ref_right: np.ndarray, max_pair_slots: int
) -> list[dict[str, Any]]:
    """Of SimHash fingerprints: for every max_hamming 0..15 and key_blocks 1..3 (at most
    MAX_SIMHASH_KEYS keys), the share of the reference pairs sharing a key (at least key_blocks
    of their blocks equal) and the candidates the keys make over all documents."""
    rows = []
    for max_hamming in range(16):
        for key_blocks in range(1, 4):
            keys = math.comb(max_hamming + key_blocks, key_blocks)
            if keys > MAX_SIMHASH_KEYS:
                continue
            hits = 0
            for begin in range(0, len(ref_left), PAIR_CHUNK):
                left, right = (
                    hashes[ref_left[begin : begin + PAIR_CHUNK]],
                    hashes[ref_right[begin : begin + PAIR_CHUNK]],
                )
                equal = block_values(left, max_hamming, key_blocks) == block_values(right, max_hamming, key_blocks)
                hits += int((equal.sum(axis=1) >= key_blocks).sum())
            candidates, slots = count_candidates(block_keys(hashes, max_hamming, key_blocks), max_pair_slots)
            rows.append(
                {
                    "max_hamming": max_hamming,
                    "key_blocks": key_blocks,
                    "keys": keys,
                    **measured(hits, candidates, slots, len(ref_left)),
                }
            )
    return rows


def recommend_blocking(rows: list[dict[str, Any]], target_recall: float) -> dict[str, Any] | None:
    """The SimHash blocking that reaches target_recall with the fewest candidates (ties: fewer
    keys, then the higher recall)."""
    eligible = [r for r in rows if r["candidates"] is not None and r["recall"] is not None]
    eligible = [r for r in eligible if r["recall"] >= target_recall]
    return min(eligible, key=lambda r: (r["candidates"], r["keys"], -r["recall"])) if eligible else None


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
    simhash = fingerprint_method(fingerprint) == "simhash"
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
    for num_perm in [] if simhash else num_perms:
        signatures = minhash_signatures(store, ids, (size, unit), num_perm, int(fingerprint["seed"]))
        for bands, r in bandings(num_perm, min_rows, max_rows):
            hits = 0
            for begin in range(0, len(ref_left), PAIR_CHUNK):
                stop = begin + PAIR_CHUNK
                hits += int(
                    banded_hits(signatures[ref_left[begin:stop]], signatures[ref_right[begin:stop]], bands, r).sum()
                )
            candidates, slots = count_candidates(band_keys(signatures, bands, r), max_pair_slots)
            rows.append(
                {
                    "num_perm": num_perm,
                    "bands": bands,
                    "rows": r,
                    "p_candidate_at_threshold": round(candidate_probability(threshold, bands, r), 6),
                    **measured(hits, candidates, slots, len(ref_left)),
                }
            )
    if simhash:
        hashes = _signatures(store, ids, lambda bodies: simhash_texts(bodies, size, unit)[2][:, None], 1)[:, 0]
        rows = simhash_blockings(hashes, ref_left, ref_right, max_pair_slots)
        best = recommend_blocking(rows, target_recall)
    else:
        best = recommend(rows, target_recall, min_probability)
    summary = {
        "fingerprint_method": fingerprint_method(fingerprint),
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
    columns = list(rows[0]) if rows else (["max_hamming", "key_blocks"] if simhash else ["num_perm", "bands", "rows"])
    table = pa.table({c: [row.get(c) for row in rows] for c in columns})
    with atomic_path(out_dir / "tune.csv") as temp:
        pacsv.write_csv(table, temp)
    with atomic_path(out_dir / "tune.json") as temp:
        temp.write_text(json.dumps(summary, indent=2))
    summary["files"] = {"table": str(out_dir / "tune.csv"), "summary": str(out_dir / "tune.json")}
    return summary
