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

Modules: evaluate (this: evaluate_run, the steps in order), evaluate_common (RunInfo, CSV
tables), evaluate_labels, evaluate_reference, evaluate_clusters, evaluate_plots, evaluate_report
(the figures as a UI shows them); shingle_sets (the shingle sets of stored documents).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.minhash import candidate_probability
from ..errors import WebdedupError
from ..storage.fileio import atomic_path, make_folder
from ..storage.state import writer_lock
from ..storage.store import Store, connect
from .evaluate_clusters import cluster_diagnostics
from .evaluate_common import rounded, run_info, write_csv
from .evaluate_labels import evaluate_labels
from .evaluate_reference import MAX_PAIR_SLOTS, exact_reference

DEFAULT_THRESHOLDS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)
DEFAULT_GIANT_SIZE = 50


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
    max_pair_slots: int | None = None,
) -> dict[str, Any]:
    """Evaluate the run stored in store; write tables and plots into out_dir; return the figures."""
    started = time.perf_counter()
    info = run_info(store)
    thresholds = sorted({round(float(t), 6) for t in (thresholds or DEFAULT_THRESHOLDS)} | {info.threshold})
    for t in thresholds:
        if not 0.0 < t <= 1.0:
            raise WebdedupError(f"thresholds must lie in (0, 1], got {t}")
    out_dir = make_folder(Path(out_dir))
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
            "candidate_probability_at_threshold": rounded(candidate_probability(info.threshold, info.bands, info.rows)),
        },
        "files": {},
    }
    files = summary["files"]

    # -- labels: the run and the threshold sweep over the same scored candidates
    sweep_rows: list[dict[str, Any]] = []
    if labels_path is not None or label_column is not None:
        summary["labels"], sweep_rows = evaluate_labels(
            store,
            out_dir,
            files,
            labels_path,
            label_column,
            doc_ids,
            run_labels,
            left,
            right,
            jaccard,
            thresholds,
            info.threshold,
        )

    # -- exact reference: LSH miss rate per Jaccard bin
    sets_all = None
    reference_rows: list[dict[str, Any]] = []
    if reference:
        summary["reference"], reference_rows, reference_sweep, sets_all = exact_reference(
            store,
            out_dir,
            files,
            info,
            docs,
            left,
            right,
            jaccard,
            thresholds,
            reference_floor,
            sample,
            seed,
            labelled="labels" in summary,
            max_pair_slots=max_pair_slots or MAX_PAIR_SLOTS,
        )
        if "labels" not in summary:  # without labels the sweep is against the exact reference
            sweep_rows = reference_sweep
    summary["threshold_sweep"] = sweep_rows
    summary["jaccard_bins"] = reference_rows

    # -- cluster diagnostics
    diagnostics = cluster_diagnostics(store, info, docs, clusters, left, right, jaccard, sets_all, giant_size)
    write_csv(out_dir / "cluster_diagnostics.csv", diagnostics)
    files["cluster_diagnostics"] = str(out_dir / "cluster_diagnostics.csv")
    flagged = diagnostics.filter(pc.not_equal(diagnostics["flag"], "ok"))
    summary["clusters"] = {
        "multi_document_clusters": diagnostics.num_rows,
        "largest": int(pc.max(diagnostics["size"]).as_py() or 0) if diagnostics.num_rows else 0,
        "giant_size": giant_size,
        "giant": int(pc.sum(pc.equal(diagnostics["giant"], True)).as_py() or 0),
        "low_cohesion": int(pc.sum(pc.equal(diagnostics["low_cohesion"], True)).as_py() or 0),
        "min_jaccard_to_representative": rounded(pc.min(diagnostics["min_jaccard_to_representative"]).as_py())
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
