"""Evaluate a stored run: labels, an exact reference, a threshold sweep and cluster diagnostics.

Reads the stored assets of one run (documents, fingerprinted, candidate_pairs, scored_pairs,
duplicate_pairs, clusters, deduped_documents) and writes CSV tables, PNG plots and a summary
JSON into an evaluation folder. Nothing in the storage root is changed.

- With labels (a pairs file, or a cluster-label column of the documents): pairwise precision,
  recall and F1 and the adjusted Rand index of the run's clusters, and of the clusters every
  threshold of a sweep would give over the same scored candidates.
- Always (unless skipped): an exact reference, every pair with shingle Jaccard >= a floor by
  an exact similarity join (core.exact, prefix filtering; not LSH) over the whole corpus or a
  sample of documents, to measure the LSH miss rate of the run's banding per Jaccard bin and
  the recall every other banding of the same signatures would reach.
- Cluster diagnostics: per multi-document cluster its size, the minimum Jaccard of a member to
  the representative, the minimum edge Jaccard, edge density and domains; flags giant and
  low-cohesion (chained) clusters.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ..core.components import component_labels
from ..core.exact import adjusted_rand_index, cluster_pair_counts, pair_metrics, similarity_join
from ..core.fingerprint import shingle_sets
from ..core.kernel import jaccard_blocks
from ..core.minhash import candidate_probability
from ..errors import WebdedupError
from ..fileio import atomic_path
from .state import writer_lock
from .storage import Store, connect, quote_ident

DEFAULT_THRESHOLDS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)
BIN_WIDTH = 0.05
MAX_REFERENCE_DOCUMENTS = 100_000
DEFAULT_GIANT_SIZE = 50
MISSED_PAIRS_LISTED = 1000


class LabelError(WebdedupError):
    """A labels file or label column that cannot be used (named in the message)."""


@dataclass
class RunInfo:
    threshold: float
    bands: int
    rows: int
    num_perm: int
    shingle_size: int
    shingle_unit: str = "word"


@dataclass
class ShingleSets:
    """Sorted unique shingle hashes of documents, addressable by doc_id (ids sorted)."""

    doc_ids: pa.Array
    flat: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    def nodes(self, ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        found = pc.index_in(ids, value_set=self.doc_ids)
        if found.null_count:
            raise WebdedupError("internal: a document without a computed shingle set")
        return found.to_numpy(zero_copy_only=False).astype(np.int64)

    def jaccard(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        out = np.zeros(len(left), dtype=np.float64)
        if len(left):
            jaccard_blocks(self.flat, self.starts, self.ends, self.flat, self.starts, self.ends, left, right, out)
        return out


def run_info(store: Store) -> RunInfo:
    scored = store.params("scored_pairs")
    duplicates = store.params("duplicate_pairs").get("duplicates") or scored.get("scoring") or {}
    banding = store.params("candidate_pairs").get("banding") or {}
    fingerprint = store.params("fingerprinted")["fingerprint"]
    if not banding:
        raise WebdedupError("candidate_pairs stores no banding parameters; re-run the pipeline")
    return RunInfo(
        threshold=float(duplicates["threshold"]),
        bands=int(banding["bands"]),
        rows=int(banding["rows"]),
        num_perm=int(fingerprint["num_perm"]),
        shingle_size=int(fingerprint["shingle_size"]),
        shingle_unit=str(fingerprint.get("shingle_unit", "word")),
    )


def load_shingle_sets(
    store: Store, shingle_size: int, doc_ids: pa.Array | None = None, unit: str = "word"
) -> ShingleSets:
    """Shingle sets (the kernel scoring uses) of the given documents, or of all, in doc_id order;
    unit: the stored shingle_unit (core.fingerprint.shingling)."""
    con = connect(store)
    try:
        if doc_ids is not None:
            con.register("wanted", pa.table({"doc_id": doc_ids.cast(pa.string())}))
            query = f"""SELECT d.doc_id, d.body FROM {store.scan_sql("documents")} d
                         WHERE d.doc_id IN (SELECT doc_id FROM wanted) ORDER BY d.doc_id"""
        else:
            query = f"SELECT doc_id, body FROM {store.scan_sql('documents')} ORDER BY doc_id"
        ids, flats, sizes = [], [], []
        for batch in con.sql(query).arrow(batch_size=16_384):
            flat, offsets = shingle_sets(batch.column("body"), shingle_size, unit)
            ids.append(batch.column("doc_id").cast(pa.string()))
            flats.append(flat)
            sizes.append(np.diff(offsets))
    finally:
        con.close()
    flat = np.concatenate(flats) if flats else np.zeros(0, np.uint64)
    sizes_all = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
    ends = np.cumsum(sizes_all).astype(np.int64)
    all_ids = pa.concat_arrays(ids) if ids else pa.array([], pa.string())
    if len(all_ids) != len(pc.unique(all_ids)):
        raise WebdedupError("documents hold a doc_id more than once; re-run the pipeline")
    return ShingleSets(all_ids, flat, ends - sizes_all, ends)


# ---------------------------------------------------------------------------------- labels


def _to_bool(column: pa.ChunkedArray, source: str) -> np.ndarray:
    if pa.types.is_boolean(column.type):
        values = column
    elif pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
        bad = pc.invert(pc.is_in(column, value_set=pa.array([0, 1], column.type)))
        if pc.any(bad).as_py():
            raise LabelError(f"{source}: is_duplicate must be 0/1 or true/false, found {pc.filter(column, bad)[0]}")
        values = pc.equal(column, 1)
    else:
        text = pc.utf8_lower(pc.utf8_trim_whitespace(column.cast(pa.string())))
        truthy = pc.is_in(text, value_set=pa.array(["1", "true", "yes", "t", "y"]))
        falsy = pc.is_in(text, value_set=pa.array(["0", "false", "no", "f", "n"]))
        bad = pc.invert(pc.or_(truthy, falsy))
        if pc.any(bad).as_py():
            raise LabelError(f"{source}: is_duplicate must be 0/1 or true/false, found {pc.filter(column, bad)[0]!s}")
        values = truthy
    if values.null_count:
        raise LabelError(f"{source}: is_duplicate is empty in {values.null_count} row(s)")
    return values.to_numpy(zero_copy_only=False).astype(bool)


def _read_labels_file(path: Path) -> pa.Table:
    if not path.is_file():
        raise LabelError(f"labels file {path} does not exist")
    con = connect()
    try:
        reader = "read_parquet" if path.suffix.lower() == ".parquet" else "read_csv_auto"
        try:
            return con.sql(f"SELECT * FROM {reader}('{str(path).replace(chr(39), chr(39) * 2)}')").to_arrow_table()
        except Exception as err:  # duckdb raises its own error types for unreadable files
            raise LabelError(f"labels file {path} cannot be read: {str(err).splitlines()[0]}") from err
    finally:
        con.close()


def _unknown_ids(path: Path, column: str, ids: pa.ChunkedArray, found: pa.Array) -> LabelError:
    unknown = pc.unique(pc.filter(ids, pc.is_null(found))).to_pylist()
    shown = ", ".join(repr(u) for u in sorted(unknown)[:5])
    return LabelError(
        f"labels file {path}: {column} names {len(unknown)} doc_id(s) not in the run's documents: {shown}"
        + (" ..." if len(unknown) > 5 else "")
    )


def read_label_pairs(path: Path, doc_ids: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(left node, right node, is_duplicate) of a pairs file (CSV or Parquet) against the
    documents (doc_ids sorted). Raises LabelError naming missing columns, unknown doc_ids,
    self-pairs or contradicting labels."""
    path = Path(path).expanduser()
    table = _read_labels_file(path)
    required = ["left_doc_id", "right_doc_id", "is_duplicate"]
    missing = [c for c in required if c not in table.column_names]
    if missing:
        raise LabelError(
            f"labels file {path} lacks column(s) {', '.join(missing)}; it needs {', '.join(required)} "
            f"(found: {', '.join(table.column_names) or 'none'})"
        )
    if not table.num_rows:
        raise LabelError(f"labels file {path} holds no pairs")
    nodes = []
    for column in ("left_doc_id", "right_doc_id"):
        ids = table[column].cast(pa.string())
        if ids.null_count:
            raise LabelError(f"labels file {path}: {column} is empty in {ids.null_count} row(s)")
        found = pc.index_in(ids, value_set=doc_ids)
        if found.null_count:
            raise _unknown_ids(path, column, ids, found)
        nodes.append(found.to_numpy(zero_copy_only=False).astype(np.int64))
    label = _to_bool(table["is_duplicate"], f"labels file {path}")
    left, right = np.minimum(*nodes), np.maximum(*nodes)
    if (left == right).any():
        first = doc_ids[int(left[left == right][0])].as_py()
        raise LabelError(f"labels file {path} pairs a document with itself: {first!r}")
    key = left * len(doc_ids) + right
    order = np.argsort(key, kind="stable")
    key, left, right, label = key[order], left[order], right[order], label[order]
    repeat = np.flatnonzero(key[1:] == key[:-1])
    conflict = repeat[label[repeat] != label[repeat + 1]]
    if len(conflict):
        i = int(conflict[0])
        raise LabelError(
            f"labels file {path} labels the pair {doc_ids[int(left[i])].as_py()!r}, "
            f"{doc_ids[int(right[i])].as_py()!r} both as duplicate and as not duplicate"
        )
    keep = np.r_[True, key[1:] != key[:-1]]
    return left[keep], right[keep], label[keep]


def read_label_file_column(path: Path, column: str, doc_ids: pa.Array) -> np.ndarray:
    """True cluster label of every document (in doc_ids order) from a per-document labels file
    (doc_id and the label column, e.g. a generator's ground truth); documents the file does not
    list, or lists with an empty label, are clusters of their own."""
    path = Path(path).expanduser()
    table = _read_labels_file(path)
    missing = [c for c in ("doc_id", column) if c not in table.column_names]
    if missing:
        raise LabelError(
            f"labels file {path} lacks column(s) {', '.join(missing)}; with --label-column it needs doc_id and "
            f"{column} (found: {', '.join(table.column_names) or 'none'})"
        )
    ids = table["doc_id"].cast(pa.string())
    if ids.null_count:
        raise LabelError(f"labels file {path}: doc_id is empty in {ids.null_count} row(s)")
    found = pc.index_in(ids, value_set=doc_ids)
    if found.null_count:
        raise _unknown_ids(path, "doc_id", ids, found)
    if len(pc.unique(ids)) != len(ids):
        counts = pc.value_counts(ids)
        repeated = pc.filter(counts.field("values"), pc.greater(counts.field("counts"), 1))[0].as_py()
        raise LabelError(f"labels file {path} lists doc_id {repeated!r} more than once")
    return _labels_by_node(doc_ids, found, table[column].cast(pa.string()), f"label column {column!r}")


def _labels_by_node(doc_ids: pa.Array, nodes: pa.Array, values: pa.ChunkedArray, what: str) -> np.ndarray:
    labels = np.array([f"\x00{d}" for d in doc_ids.to_pylist()], dtype=object)  # own cluster by default
    values = values.to_numpy(zero_copy_only=False)
    present = np.array([v is not None and v != "" for v in values], dtype=bool)
    if not present.any():
        raise LabelError(f"{what} is empty for every document")
    nodes = np.asarray(nodes.to_numpy(zero_copy_only=False))
    labels[nodes[present].astype(np.int64)] = values[present]
    return labels


def read_label_column(store: Store, column: str, doc_ids: pa.Array) -> np.ndarray:
    """True cluster label of every document (in doc_ids order) from a documents column; a
    document with an empty label is a cluster of its own."""
    con = connect(store)
    try:
        columns = con.sql(f"SELECT * FROM {store.scan_sql('documents')} LIMIT 0").columns
        if column not in columns:
            raise LabelError(f"label column {column!r} is not in the stored documents (columns: {', '.join(columns)})")
        table = con.sql(
            f"SELECT doc_id, CAST({quote_ident(column)} AS VARCHAR) AS label FROM {store.scan_sql('documents')}"
        ).to_arrow_table()
    finally:
        con.close()
    nodes = pc.index_in(table["doc_id"].cast(pa.string()), value_set=doc_ids)
    return _labels_by_node(doc_ids, nodes, table["label"], f"label column {column!r}")


# ------------------------------------------------------------------------------ evaluation


def _write_csv(path: Path, table: pa.Table) -> None:
    with atomic_path(path) as temp:
        pacsv.write_csv(table, temp)


def _rows_table(rows: list[dict[str, Any]], columns: list[str]) -> pa.Table:
    return pa.table({c: [r.get(c) for r in rows] for c in columns})


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(float(value), digits)


def _sweep(
    n_docs: int,
    pair_left: np.ndarray,
    pair_right: np.ndarray,
    pair_jaccard: np.ndarray,
    thresholds: list[float],
    evaluate_partition,
) -> list[dict[str, Any]]:
    rows = []
    for t in thresholds:
        keep = pair_jaccard >= t
        labels = component_labels(n_docs, pair_left[keep], pair_right[keep])
        rows.append({"threshold": t, "duplicate_pairs": int(keep.sum()), **evaluate_partition(labels)})
    return rows


def _labelled_metrics(label_left, label_right, label_dup, true_labels):
    """A function partition -> metrics against the labels (pairs, or a label column)."""

    def from_pairs(labels: np.ndarray) -> dict[str, Any]:
        together = labels[label_left] == labels[label_right]
        metrics = pair_metrics(int((together & label_dup).sum()), int(together.sum()), int(label_dup.sum()))
        return {**metrics, "ari": _round(adjusted_rand_index(labels, true_labels))}

    def from_column(labels: np.ndarray) -> dict[str, Any]:
        both, predicted, actual, _ = cluster_pair_counts(labels, true_labels)
        return {**pair_metrics(both, predicted, actual), "ari": _round(adjusted_rand_index(labels, true_labels))}

    return from_pairs if label_left is not None else from_column


def _bins(floor: float) -> np.ndarray:
    """Bin edges from the floor up to 1 in steps of BIN_WIDTH, then J = 1 alone."""
    start = np.floor(floor / BIN_WIDTH + 1e-9) * BIN_WIDTH
    return np.round(np.arange(start, 1.0 + 1e-9, BIN_WIDTH), 6)


def evaluate_run(store: Store, out_dir: Path, **options: Any) -> dict[str, Any]:
    """Evaluate the run stored in store (see _evaluate_run for the options) while holding the
    storage root's writer lock shared: a running `webdedup run` on it makes this fail naming the
    holder, and no writer can replace assets while they are read."""
    with writer_lock(store.root, exclusive=False, purpose="evaluate"):
        return _evaluate_run(store, out_dir, **options)


def _evaluate_run(
    store: Store,
    out_dir: Path,
    labels_path: Path | None = None,
    label_column: str | None = None,
    thresholds: list[float] | None = None,
    sample: int | None = None,
    reference: bool = True,
    reference_floor: float | None = None,
    giant_size: int = DEFAULT_GIANT_SIZE,
    seed: int = 0,
    plots: bool = True,
) -> dict[str, Any]:
    """Evaluate the run stored in store; write tables and plots into out_dir; return the figures."""
    started = time.perf_counter()
    info = run_info(store)
    thresholds = sorted({round(float(t), 6) for t in (thresholds or DEFAULT_THRESHOLDS)} | {info.threshold})
    for t in thresholds:
        if not 0.0 < t <= 1.0:
            raise WebdedupError(f"thresholds must lie in (0, 1], got {t}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    con = connect(store)
    try:
        docs = con.sql(f"""SELECT f.doc_id, f.shingle_count, d.domain
            FROM {store.scan_sql("fingerprinted")} f JOIN {store.scan_sql("documents")} d USING (doc_id)
            ORDER BY f.doc_id""").to_arrow_table()
        scored = con.sql(
            f"SELECT left_doc_id, right_doc_id, exact_jaccard, is_duplicate FROM {store.scan_sql('scored_pairs')}"
        ).to_arrow_table()
        clusters = con.sql(f"""SELECT c.doc_id, c.cluster_id, c.cluster_size, r.doc_id AS representative
            FROM {store.scan_sql("clusters")} c
            LEFT JOIN (SELECT cluster_id, doc_id FROM {store.scan_sql("deduped_documents")}) r USING (cluster_id)
            ORDER BY c.doc_id""").to_arrow_table()
    finally:
        con.close()
    doc_ids = docs["doc_id"].combine_chunks().cast(pa.string())
    n_docs = len(doc_ids)
    if n_docs != clusters.num_rows:
        raise WebdedupError(
            f"clusters hold {clusters.num_rows} documents but fingerprinted {n_docs}; re-run the pipeline"
        )
    left = pc.index_in(scored["left_doc_id"], value_set=doc_ids).to_numpy(zero_copy_only=False)
    right = pc.index_in(scored["right_doc_id"], value_set=doc_ids).to_numpy(zero_copy_only=False)
    left, right = left.astype(np.int64), right.astype(np.int64)
    jaccard = scored["exact_jaccard"].to_numpy()
    run_labels = pc.index_in(clusters["cluster_id"], value_set=pc.unique(clusters["cluster_id"]))
    run_labels = run_labels.to_numpy(zero_copy_only=False).astype(np.int64)

    summary: dict[str, Any] = {
        "storage_root": str(store.root),
        "evaluation_dir": str(out_dir),
        "run": {
            "documents": n_docs,
            "threshold": info.threshold,
            "bands": info.bands,
            "rows": info.rows,
            "num_perm": info.num_perm,
            "shingle_size": info.shingle_size,
            "shingle_unit": info.shingle_unit,
            "candidate_pairs": int(len(jaccard)),
            "duplicate_pairs": int((jaccard >= info.threshold).sum()),
            "candidate_probability_at_threshold": _round(candidate_probability(info.threshold, info.bands, info.rows)),
        },
        "files": {},
    }
    files = summary["files"]

    # -- labels: the run and the threshold sweep over the same scored candidates
    sweep_rows: list[dict[str, Any]] = []
    if labels_path is not None or label_column is not None:
        if labels_path is not None and label_column is not None:
            label_left = label_right = label_dup = None
            true_labels = read_label_file_column(labels_path, label_column, doc_ids)
            source = {
                "labels_file": str(labels_path),
                "label_column": label_column,
                "true_clusters": int(len(set(true_labels.tolist()))),
            }
        elif labels_path is not None:
            label_left, label_right, label_dup = read_label_pairs(labels_path, doc_ids)
            true_labels = component_labels(n_docs, label_left[label_dup], label_right[label_dup])
            source = {
                "labels_file": str(labels_path),
                "labelled_pairs": int(len(label_dup)),
                "positive_pairs": int(label_dup.sum()),
            }
        else:
            label_left = label_right = label_dup = None
            true_labels = read_label_column(store, label_column, doc_ids)
            source = {"label_column": label_column, "true_clusters": int(len(set(true_labels.tolist())))}
        metrics_of = _labelled_metrics(label_left, label_right, label_dup, true_labels)
        current = metrics_of(run_labels)
        sweep_rows = _sweep(n_docs, left, right, jaccard, thresholds, metrics_of)
        if label_left is not None:
            # edge level: the labelled pair itself is a duplicate pair (a candidate at J >= t),
            # without the pairs clusters add by chaining
            scored_key = left * n_docs + right
            order = np.argsort(scored_key)
            label_key = label_left * n_docs + label_right
            at = np.clip(np.searchsorted(scored_key[order], label_key), 0, max(len(order) - 1, 0))
            label_j = np.full(len(label_key), -1.0)
            if len(order):
                hit = scored_key[order][at] == label_key
                label_j[hit] = jaccard[order][at][hit]

            def edge(t: float) -> dict[str, Any]:
                predicted = label_j >= t
                m = pair_metrics(int((predicted & label_dup).sum()), int(predicted.sum()), int(label_dup.sum()))
                return {"edge_precision": m["precision"], "edge_recall": m["recall"], "edge_f1": m["f1"]}

            current.update(edge(info.threshold))
            for row in sweep_rows:
                row.update(edge(row["threshold"]))
        best = max(sweep_rows, key=lambda r: (r["f1"] or 0.0, r["threshold"]))
        summary["labels"] = {
            **source,
            "current_run": current,
            "best_f1_threshold": best["threshold"],
            "best_f1": best["f1"],
        }
        columns = [
            "threshold",
            "duplicate_pairs",
            "true_positives",
            "false_positives",
            "false_negatives",
            "precision",
            "recall",
            "f1",
            "ari",
        ] + (["edge_precision", "edge_recall", "edge_f1"] if label_left is not None else [])
        _write_csv(out_dir / "threshold_sweep.csv", _rows_table(sweep_rows, columns))
        files["threshold_sweep"] = str(out_dir / "threshold_sweep.csv")

    # -- exact reference: LSH miss rate per Jaccard bin
    sets_all: ShingleSets | None = None
    reference_rows: list[dict[str, Any]] = []
    if reference:
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
        ref_a, ref_b, ref_j, compared = similarity_join(flat, offsets, floor)
        ref_left, ref_right = chosen[ref_a], chosen[ref_b]  # document nodes (chosen is sorted)
        candidate_key = np.sort(left * n_docs + right)
        ref_key = ref_left * n_docs + ref_right
        found = np.isin(ref_key, candidate_key, assume_unique=False)
        reference_seconds = time.perf_counter() - reference_started
        edges = _bins(floor)
        bin_index = np.clip(np.searchsorted(edges, ref_j, side="right") - 1, 0, len(edges) - 1)
        for k, low in enumerate(edges):
            in_bin = bin_index == k
            high = 1.0 if low >= 1.0 else min(1.0, round(low + BIN_WIDTH, 6))
            count = int(in_bin.sum())
            hits = int(found[in_bin].sum())
            expected = float(np.mean(candidate_probability(ref_j[in_bin], info.bands, info.rows))) if count else None
            reference_rows.append(
                {
                    "jaccard_from": float(low),
                    "jaccard_to": float(high),
                    "exact_pairs": count,
                    "lsh_candidates": hits,
                    "observed_candidate_rate": _round(hits / count) if count else None,
                    "expected_candidate_rate": _round(expected),
                    "miss_rate": _round(1 - hits / count) if count else None,
                }
            )
        at = ref_j >= info.threshold
        recall = float(found[at].mean()) if at.any() else None
        chosen_mask = np.zeros(n_docs, dtype=bool)
        chosen_mask[chosen] = True
        within = chosen_mask[left] & chosen_mask[right] & (jaccard >= info.threshold)
        outside = int(np.isin((left * n_docs + right)[within], ref_key[at], invert=True).sum())
        banding_rows = _banding_recall(store, info, doc_ids, ref_left[at], ref_right[at])
        summary["reference"] = {
            "documents": int(len(chosen)),
            "sampled": bool(sample is not None and sample < len(nonempty)),
            "jaccard_floor": floor,
            "exact_pairs_at_floor": int(len(ref_j)),
            "exact_pairs_at_threshold": int(at.sum()),
            "found_by_lsh_at_threshold": int(found[at].sum()),
            "lsh_recall_at_threshold": _round(recall),
            "lsh_miss_rate_at_threshold": _round(1 - recall) if recall is not None else None,
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
        _write_csv(out_dir / "jaccard_bins.csv", _rows_table(reference_rows, columns))
        files["jaccard_bins"] = str(out_dir / "jaccard_bins.csv")
        missed = np.flatnonzero(~found & at)
        missed = missed[np.argsort(-ref_j[missed], kind="stable")][:MISSED_PAIRS_LISTED]
        _write_csv(
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
            _write_csv(out_dir / "banding_recall.csv", _rows_table(banding_rows, columns))
            files["banding_recall"] = str(out_dir / "banding_recall.csv")
            summary["reference"]["banding_recall"] = banding_rows
        # without labels the sweep is against the exact reference: recall of the run's candidates
        if not sweep_rows:
            for t in thresholds:
                if t < floor:
                    continue
                exact_t = ref_j >= t
                sweep_rows.append(
                    {
                        "threshold": t,
                        "exact_pairs": int(exact_t.sum()),
                        "found_pairs": int(found[exact_t].sum()),
                        "recall": _round(found[exact_t].mean()) if exact_t.any() else None,
                        "expected_recall": _round(np.mean(candidate_probability(ref_j[exact_t], info.bands, info.rows)))
                        if exact_t.any()
                        else None,
                    }
                )
            _write_csv(
                out_dir / "threshold_sweep.csv",
                _rows_table(sweep_rows, ["threshold", "exact_pairs", "found_pairs", "recall", "expected_recall"]),
            )
            files["threshold_sweep"] = str(out_dir / "threshold_sweep.csv")
    summary["threshold_sweep"] = sweep_rows
    summary["jaccard_bins"] = reference_rows

    # -- cluster diagnostics
    diagnostics = cluster_diagnostics(store, info, docs, clusters, left, right, jaccard, sets_all, giant_size)
    _write_csv(out_dir / "cluster_diagnostics.csv", diagnostics)
    files["cluster_diagnostics"] = str(out_dir / "cluster_diagnostics.csv")
    flagged = diagnostics.filter(pc.not_equal(diagnostics["flag"], "ok"))
    summary["clusters"] = {
        "multi_document_clusters": diagnostics.num_rows,
        "largest": int(pc.max(diagnostics["size"]).as_py() or 0) if diagnostics.num_rows else 0,
        "giant_size": giant_size,
        "giant": int(pc.sum(pc.equal(diagnostics["giant"], True)).as_py() or 0),
        "low_cohesion": int(pc.sum(pc.equal(diagnostics["low_cohesion"], True)).as_py() or 0),
        "min_jaccard_to_representative": _round(pc.min(diagnostics["min_jaccard_to_representative"]).as_py())
        if diagnostics.num_rows
        else None,
        "flagged_examples": flagged.slice(0, 5)
        .select(["cluster_id", "size", "min_jaccard_to_representative", "flag"])
        .to_pylist(),
    }

    if plots:
        from . import evaluate_plots

        files.update(
            evaluate_plots.draw_all(out_dir, info, jaccard, reference_rows, sweep_rows, labelled="labels" in summary)
        )
    summary["seconds"] = round(time.perf_counter() - started, 3)
    with atomic_path(out_dir / "summary.json") as temp:
        temp.write_text(json.dumps(summary, indent=2, default=str))
    files["summary"] = str(out_dir / "summary.json")
    return summary


def _banding_recall(
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
    signatures = found["signature"].combine_chunks().flatten().to_numpy().reshape(-1, info.num_perm)
    position = np.searchsorted(nodes, ref_left), np.searchsorted(nodes, ref_right)
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
                "p_candidate_at_threshold": _round(candidate_probability(info.threshold, bands, r)),
                "measured_recall_at_threshold": _round(hit.mean()),
                "is_run_banding": bands == info.bands and r == info.rows,
            }
        )
    return rows


def cluster_diagnostics(
    store: Store,
    info: RunInfo,
    docs: pa.Table,
    clusters: pa.Table,
    left: np.ndarray,
    right: np.ndarray,
    jaccard: np.ndarray,
    sets: ShingleSets | None,
    giant_size: int,
) -> pa.Table:
    """One row per multi-document cluster: size, representative, minimum member-representative
    Jaccard, minimum and mean edge Jaccard, edge density, domains, and the flags giant (size >=
    giant_size) and low_cohesion (some member below the threshold to its representative: it
    joined by chaining A~B~C)."""
    cluster_of = pc.index_in(clusters["cluster_id"], value_set=pc.unique(clusters["cluster_id"]))
    cluster_of = cluster_of.to_numpy(zero_copy_only=False).astype(np.int64)
    size = clusters["cluster_size"].to_numpy()
    multi = np.flatnonzero(size > 1)
    columns = [
        "cluster_id",
        "size",
        "representative",
        "min_jaccard_to_representative",
        "members_below_threshold",
        "min_edge_jaccard",
        "mean_edge_jaccard",
        "edges",
        "edge_density",
        "domains",
        "giant",
        "low_cohesion",
        "flag",
    ]
    if not len(multi):
        return pa.table(
            {
                c: pa.array(
                    [],
                    pa.string()
                    if c in ("cluster_id", "representative", "flag")
                    else (pa.bool_() if c in ("giant", "low_cohesion") else pa.float64()),
                )
                for c in columns
            }
        )
    doc_ids = docs["doc_id"].combine_chunks().cast(pa.string())
    rep_node = pc.index_in(clusters["representative"].cast(pa.string()), value_set=doc_ids)
    rep_node = rep_node.to_numpy(zero_copy_only=False)
    if sets is None:
        sets = load_shingle_sets(store, info.shingle_size, doc_ids.take(pa.array(multi)), info.shingle_unit)
    member_nodes = sets.nodes(doc_ids.take(pa.array(multi)))
    rep_set_nodes = sets.nodes(doc_ids.take(pa.array(rep_node[multi].astype(np.int64))))
    to_rep = sets.jaccard(member_nodes, rep_set_nodes)
    cl = cluster_of[multi]
    n_clusters = int(cluster_of.max()) + 1
    min_rep = np.full(n_clusters, np.inf)
    np.minimum.at(min_rep, cl, to_rep)
    below = np.bincount(cl, weights=(to_rep < info.threshold).astype(np.float64), minlength=n_clusters)
    # duplicate edges (scored pairs at the threshold) inside each cluster
    dup = jaccard >= info.threshold
    edge_cluster = cluster_of[left[dup]]
    edge_j = jaccard[dup]
    edges = np.bincount(edge_cluster, minlength=n_clusters)
    min_edge = np.full(n_clusters, np.inf)
    np.minimum.at(min_edge, edge_cluster, edge_j)
    sum_edge = np.bincount(edge_cluster, weights=edge_j, minlength=n_clusters)
    domains_all = docs["domain"].combine_chunks().cast(pa.string()).fill_null("")
    domain_codes = pc.index_in(domains_all, value_set=pc.unique(domains_all)).to_numpy(zero_copy_only=False)
    pairs = np.unique(cl * (int(domain_codes.max()) + 1) + domain_codes[multi])
    domains = np.bincount(pairs // (int(domain_codes.max()) + 1), minlength=n_clusters)
    first_member = {}
    for node in multi:
        first_member.setdefault(int(cluster_of[node]), int(node))
    ids = sorted(first_member)
    sizes = np.bincount(cl, minlength=n_clusters)
    rows = []
    for c in ids:
        node = first_member[c]
        n = int(sizes[c])
        giant = n >= giant_size
        low = bool(below[c] > 0)
        rows.append(
            {
                "cluster_id": clusters["cluster_id"][node].as_py(),
                "size": n,
                "representative": clusters["representative"][node].as_py(),
                "min_jaccard_to_representative": round(float(min_rep[c]), 6),
                "members_below_threshold": int(below[c]),
                "min_edge_jaccard": round(float(min_edge[c]), 6) if edges[c] else None,
                "mean_edge_jaccard": round(float(sum_edge[c] / edges[c]), 6) if edges[c] else None,
                "edges": int(edges[c]),
                "edge_density": round(float(edges[c]) / (n * (n - 1) / 2), 6),
                "domains": int(domains[c]),
                "giant": giant,
                "low_cohesion": low,
                "flag": "+".join(f for f, on in (("giant", giant), ("low_cohesion", low)) if on) or "ok",
            }
        )
    rows.sort(key=lambda r: (r["flag"] == "ok", r["min_jaccard_to_representative"], -r["size"], r["cluster_id"]))
    return _rows_table(rows, columns)
