"""The exact reference of an evaluation: every pair above a Jaccard floor by an exact
similarity join, against which the run's LSH candidates are measured (miss rate per Jaccard bin,
recall of every banding of the same signatures, the pairs missed)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..core.exact import PairBudgetExceeded, similarity_join
from ..core.minhash import candidate_probability
from ..core.simhash import block_values, from_words
from ..engine.shingle_sets import ShingleSets, load_shingle_sets
from ..errors import WebdedupError
from ..storage.store import Store, connect
from .evaluate_common import RunInfo, rounded, rows_table, write_csv

BIN_WIDTH = 0.05
MAX_REFERENCE_DOCUMENTS = 100_000
MAX_PAIR_SLOTS = 50_000_000  # of the exact join (core.exact.similarity_join), like tune's band join
MISSED_PAIRS_LISTED = 1000


def jaccard_bin_edges(floor: float) -> np.ndarray:
    """Bin edges from the floor up to 1 in steps of BIN_WIDTH, then J = 1 alone."""
    start = np.floor(floor / BIN_WIDTH + 1e-9) * BIN_WIDTH
    return np.round(np.arange(start, 1.0 + 1e-9, BIN_WIDTH), 6)


def exact_reference(
    store: Store,
    out_dir: Path,
    files: dict[str, str],
    info: RunInfo,
    docs: pa.Table,
    left: np.ndarray,
    right: np.ndarray,
    jaccard: np.ndarray,
    thresholds: list[float],
    reference_floor: float | None,
    sample: int | None,
    seed: int,
    labelled: bool,
    max_pair_slots: int = MAX_PAIR_SLOTS,
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], ShingleSets | None]:
    """Every pair of documents (all, or `sample` of those with shingles) with exact shingle
    Jaccard >= the floor (core.exact.similarity_join, not LSH), compared with the run's scored
    candidates (left, right: document nodes in docs' doc_id order): the LSH miss rate per
    Jaccard bin, the recall of every banding of the stored signatures, the pairs missed; without
    labels, a threshold sweep of the candidates' recall. Refused over max_pair_slots (exact_join). Writes
    jaccard_bins.csv, missed_pairs.csv, banding_recall.csv and (without labels) threshold_sweep.csv, named in
    files. Returns the summary's `reference` entry, the bin rows, the sweep rows (none when
    labelled) and the shingle sets of every document when no sample was drawn (else None)."""
    doc_ids = docs["doc_id"].combine_chunks().cast(pa.string())
    n_docs = len(doc_ids)
    sets_all: ShingleSets | None = None
    reference_rows: list[dict[str, Any]] = []
    sweep_rows: list[dict[str, Any]] = []
    floor = min(thresholds[0], info.threshold) if reference_floor is None else reference_floor
    if not 0.0 < floor <= 1.0:
        raise WebdedupError(f"the reference floor must lie in (0, 1], got {floor}")
    nonempty = np.flatnonzero(docs["shingle_count"].to_numpy(zero_copy_only=False) > 0)
    if sample is not None and sample < len(nonempty):
        chosen = np.sort(np.random.default_rng(seed).choice(nonempty, size=sample, replace=False))
    elif len(nonempty) > MAX_REFERENCE_DOCUMENTS:
        raise WebdedupError(
            f"the exact reference covers at most {MAX_REFERENCE_DOCUMENTS:,} documents, the run holds "
            f"{len(nonempty):,} with shingles; give --sample N (e.g. --sample 20000)"
        )
    else:
        chosen = nonempty
    reference_started = time.perf_counter()
    sets = load_shingle_sets(store, info.shingle_size, doc_ids.take(pa.array(chosen)), info.shingle_unit)
    if sample is None or sample >= len(nonempty):
        sets_all = sets
    base = sets.nodes(doc_ids.take(pa.array(chosen)))
    sizes = sets.ends - sets.starts
    offsets = np.r_[0, np.cumsum(sizes[base])].astype(np.int64)
    flat = np.concatenate([sets.flat[sets.starts[i] : sets.ends[i]] for i in base]) if len(base) else sets.flat
    ref_a, ref_b, ref_j, compared = exact_join(flat, offsets, floor, max_pair_slots, "the exact reference")
    ref_left, ref_right = chosen[ref_a], chosen[ref_b]  # document nodes (chosen is sorted)
    candidate_key = np.sort(left * n_docs + right)
    ref_key = ref_left * n_docs + ref_right
    found = np.isin(ref_key, candidate_key, assume_unique=False)
    reference_seconds = time.perf_counter() - reference_started
    edges = jaccard_bin_edges(floor)
    bin_index = np.clip(np.searchsorted(edges, ref_j, side="right") - 1, 0, len(edges) - 1)
    for k, low in enumerate(edges):
        in_bin = bin_index == k
        high = 1.0 if low >= 1.0 else min(1.0, round(low + BIN_WIDTH, 6))
        count = int(in_bin.sum())
        hits = int(found[in_bin].sum())
        expected = (
            float(np.mean(candidate_probability(ref_j[in_bin], info.bands, info.rows)))
            if count and not info.simhash
            else None  # SimHash: no closed form of P(candidate | J)
        )
        reference_rows.append(
            {
                "jaccard_from": float(low),
                "jaccard_to": float(high),
                "exact_pairs": count,
                "lsh_candidates": hits,
                "observed_candidate_rate": rounded(hits / count) if count else None,
                "expected_candidate_rate": rounded(expected),
                "miss_rate": rounded(1 - hits / count) if count else None,
            }
        )
    at = ref_j >= info.threshold
    recall = float(found[at].mean()) if at.any() else None
    chosen_mask = np.zeros(n_docs, dtype=bool)
    chosen_mask[chosen] = True
    within = chosen_mask[left] & chosen_mask[right] & (jaccard >= info.threshold)
    outside = int(np.isin((left * n_docs + right)[within], ref_key[at], invert=True).sum())
    banding_rows = banding_recall(store, info, doc_ids, ref_left[at], ref_right[at])
    summary_reference = {
        "documents": int(len(chosen)),
        "sampled": bool(sample is not None and sample < len(nonempty)),
        "jaccard_floor": floor,
        "exact_pairs_at_floor": int(len(ref_j)),
        "exact_pairs_at_threshold": int(at.sum()),
        "found_by_lsh_at_threshold": int(found[at].sum()),
        "lsh_recall_at_threshold": rounded(recall),
        "lsh_miss_rate_at_threshold": rounded(1 - recall) if recall is not None else None,
        "run_duplicates_not_in_reference": outside,
        "pairs_verified_by_join": compared,
        "seconds": round(reference_seconds, 3),
    }
    columns = [
        "jaccard_from",
        "jaccard_to",
        "exact_pairs",
        "lsh_candidates",
        "observed_candidate_rate",
        "expected_candidate_rate",
        "miss_rate",
    ]
    write_csv(out_dir / "jaccard_bins.csv", rows_table(reference_rows, columns))
    files["jaccard_bins"] = str(out_dir / "jaccard_bins.csv")
    missed = np.flatnonzero(~found & at)
    missed = missed[np.argsort(-ref_j[missed], kind="stable")][:MISSED_PAIRS_LISTED]
    write_csv(
        out_dir / "missed_pairs.csv",
        pa.table(
            {
                "left_doc_id": doc_ids.take(pa.array(ref_left[missed])),
                "right_doc_id": doc_ids.take(pa.array(ref_right[missed])),
                "exact_jaccard": ref_j[missed],
            }
        ),
    )
    files["missed_pairs"] = str(out_dir / "missed_pairs.csv")
    if banding_rows:
        columns = [
            "num_perm",
            "bands",
            "rows",
            "p_candidate_at_threshold",
            "measured_recall_at_threshold",
            "is_run_banding",
        ]
        if info.simhash:
            columns = ["max_hamming", "blocks", "measured_recall_at_threshold", "is_run_banding"]
        write_csv(out_dir / "banding_recall.csv", rows_table(banding_rows, columns))
        files["banding_recall"] = str(out_dir / "banding_recall.csv")
        summary_reference["banding_recall"] = banding_rows
    # without labels the sweep is against the exact reference: recall of the run's candidates
    if not labelled:
        for t in thresholds:
            if t < floor:
                continue
            exact_t = ref_j >= t
            sweep_rows.append(
                {
                    "threshold": t,
                    "exact_pairs": int(exact_t.sum()),
                    "found_pairs": int(found[exact_t].sum()),
                    "recall": rounded(found[exact_t].mean()) if exact_t.any() else None,
                    "expected_recall": rounded(np.mean(candidate_probability(ref_j[exact_t], info.bands, info.rows)))
                    if exact_t.any()
                    else None,
                }
            )
        write_csv(
            out_dir / "threshold_sweep.csv",
            rows_table(sweep_rows, ["threshold", "exact_pairs", "found_pairs", "recall", "expected_recall"]),
        )
        files["threshold_sweep"] = str(out_dir / "threshold_sweep.csv")
    return summary_reference, reference_rows, sweep_rows, sets_all


def exact_join(flat: np.ndarray, offsets: np.ndarray, floor: float, max_pair_slots: int, what: str) -> tuple:
    """core.exact.similarity_join under a pair budget, failing closed with the remedies: a giant
    cluster of identical pages would make its pairs (n^2 / 2) without bound."""
    try:
        return similarity_join(flat, offsets, floor, max_pair_slots)
    except PairBudgetExceeded as over:
        raise WebdedupError(
            f"{what} would verify {over.slots:,} pair slots, over the budget of {over.budget:,} (--max-pair-slots): "
            f"{over.most_shared:,} documents share a shingle of their prefix (a cluster of identical or nearly "
            "identical pages); give --sample N, or raise --max-pair-slots"
        ) from None


def banding_recall(
    store: Store, info: RunInfo, doc_ids: pa.Array, ref_left: np.ndarray, ref_right: np.ndarray
) -> list[dict[str, Any]]:
    """Recall at the threshold that every bands x rows over the stored signatures would give:
    a pair becomes a candidate when all rows of some band agree (what equal band keys mean,
    band-key hash collisions aside)."""
    if not len(ref_left):
        return []
    nodes = np.unique(np.r_[ref_left, ref_right])
    con = connect(store)
    try:
        con.register("wanted", pa.table({"doc_id": doc_ids.take(pa.array(nodes))}))
        found = con.sql(f"""SELECT f.doc_id, f.signature FROM {store.scan_sql("fingerprinted")} f
            WHERE f.doc_id IN (SELECT doc_id FROM wanted) ORDER BY f.doc_id""").to_arrow_table()
    finally:
        con.close()
    width = 2 if info.simhash else info.num_perm
    signatures = found["signature"].combine_chunks().flatten().to_numpy().reshape(-1, width)
    position = np.searchsorted(nodes, ref_left), np.searchsorted(nodes, ref_right)
    if info.simhash:
        return blocking_recall(info, from_words(signatures[position[0]]), from_words(signatures[position[1]]))
    equal = signatures[position[0]] == signatures[position[1]]
    rows = []
    for bands in range(1, info.num_perm + 1):
        if info.num_perm % bands:
            continue
        r = info.num_perm // bands
        if r > 16 or bands > 60:
            continue
        hit = equal.reshape(len(equal), bands, r).all(axis=2).any(axis=1)
        rows.append(
            {
                "num_perm": info.num_perm,
                "bands": bands,
                "rows": r,
                "p_candidate_at_threshold": rounded(candidate_probability(info.threshold, bands, r)),
                "measured_recall_at_threshold": rounded(hit.mean()),
                "is_run_banding": bands == info.bands and r == info.rows,
            }
        )
    return rows


def blocking_recall(info: RunInfo, left: np.ndarray, right: np.ndarray) -> list[dict[str, Any]]:
    """Of SimHash fingerprints (uint64 of the reference pairs at the threshold): the recall every
    max_hamming would give with the run's key_blocks, a pair being a candidate when at least
    key_blocks of its max_hamming + key_blocks blocks are equal (what a shared key means, key
    hash collisions aside)."""
    rows = []
    for max_hamming in range(0, 16):
        equal = block_values(left, max_hamming, info.key_blocks) == block_values(right, max_hamming, info.key_blocks)
        hit = equal.sum(axis=1) >= info.key_blocks
        rows.append(
            {
                "max_hamming": max_hamming,
                "blocks": max_hamming + info.key_blocks,
                "measured_recall_at_threshold": rounded(hit.mean()),
                "is_run_banding": max_hamming == info.max_hamming,
            }
        )
    return rows
