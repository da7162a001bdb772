"""Labels of an evaluation: reading a pairs file, a per-document labels file or a documents
column, and the pairwise precision, recall, F1 and adjusted Rand index of the run's clusters and
of every threshold of a sweep over the same scored pairs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.components import component_labels
from ..core.exact import adjusted_rand_index, cluster_pair_counts, pair_metrics
from ..errors import WebdedupError
from ..storage.store import Store, connect, quote_ident
from .evaluate_common import rounded, rows_table, write_csv


class LabelError(WebdedupError):
    """A labels file or label column that cannot be used (named in the message)."""


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
            quoted = str(path).replace(chr(39), chr(39) * 2)
            return con.sql(f"SELECT * FROM {reader}('{quoted}', hive_partitioning = false)").to_arrow_table()
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


def sweep(
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


def labelled_metrics(label_left, label_right, label_dup, true_labels):
    """A function partition -> metrics against the labels (pairs, or a label column)."""

    def from_pairs(labels: np.ndarray) -> dict[str, Any]:
        together = labels[label_left] == labels[label_right]
        metrics = pair_metrics(int((together & label_dup).sum()), int(together.sum()), int(label_dup.sum()))
        return {**metrics, "ari": rounded(adjusted_rand_index(labels, true_labels))}

    def from_column(labels: np.ndarray) -> dict[str, Any]:
        both, predicted, actual, _ = cluster_pair_counts(labels, true_labels)
        return {**pair_metrics(both, predicted, actual), "ari": rounded(adjusted_rand_index(labels, true_labels))}

    return from_pairs if label_left is not None else from_column


def evaluate_labels(
    store: Store,
    out_dir: Path,
    files: dict[str, str],
    labels_path: Path | None,
    label_column: str | None,
    doc_ids: pa.Array,
    run_labels: np.ndarray,
    left: np.ndarray,
    right: np.ndarray,
    jaccard: np.ndarray,
    thresholds: list[float],
    threshold: float,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The labelled part of an evaluation: the run's clusters (labels: their partition of the
    documents, doc_ids sorted) and those of every threshold of the sweep over the same scored
    pairs (left, right: document nodes; jaccard) against the labels (a pairs file, a
    per-document labels file with label_column, or a documents column); with a pairs file also
    the edge-level metrics. Writes threshold_sweep.csv (named in files); returns the summary's
    `labels` entry and the sweep rows."""
    n_docs = len(doc_ids)
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
    metrics_of = labelled_metrics(label_left, label_right, label_dup, true_labels)
    current = metrics_of(run_labels)
    sweep_rows = sweep(n_docs, left, right, jaccard, thresholds, metrics_of)
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

        current.update(edge(threshold))
        for row in sweep_rows:
            row.update(edge(row["threshold"]))
    best = max(sweep_rows, key=lambda r: (r["f1"] or 0.0, r["threshold"]))
    labels = {
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
    write_csv(out_dir / "threshold_sweep.csv", rows_table(sweep_rows, columns))
    files["threshold_sweep"] = str(out_dir / "threshold_sweep.csv")
    return labels, sweep_rows
