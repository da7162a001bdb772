"""Cluster diagnostics: one row per multi-document cluster, published as cluster_diagnostics.csv.

Connected components chain (A~B and B~C put A and C together though they may share little);
these figures show where. Per cluster: its size, representative, the minimum exact Jaccard of a
member to the representative and how many members are below the threshold, the minimum edge
Jaccard (over its duplicate pairs), edges and domains. Written by the deduped_documents stage
(the representatives are known there) and shown in its asset metadata.

Bounded: member-to-representative Jaccards need the members' shingle sets, so at most
`max_members` members are measured per run (largest clusters first: engine.invariants.
member_jaccards, the same measurement as the clusters_cohesive check). A cluster of two needs
none: its one member's Jaccard to the representative is its one edge's. `members_checked` per row
and the figures `member_cap` / `clusters_unchecked` state what the cap left out; an unchecked
cluster has an empty minimum and the flag `unchecked`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from .invariants import COHESION_MAX_MEMBERS, GIANT_CLUSTER_SIZE, member_jaccards
from .preview import markdown_table
from .publish import report_path
from .storage import Store, atomic_path, connect

COLUMNS = [
    "cluster_id",
    "size",
    "representative",
    "min_jaccard_to_representative",
    "farthest_member",
    "members_below_threshold",
    "members_checked",
    "min_edge_jaccard",
    "edges",
    "domains",
    "flag",
]


def cluster_diagnostics(
    store: Store, max_members: int = COHESION_MAX_MEMBERS, giant_size: int = GIANT_CLUSTER_SIZE
) -> tuple[pa.Table, dict[str, Any]]:
    """(table, figures): the rows described above, worst first (flagged, then lowest minimum
    Jaccard to the representative, then largest), and counts for the asset metadata."""
    threshold = float((store.params("duplicate_pairs").get("duplicates") or {})["threshold"])
    con = connect(store)
    try:
        base = con.sql(f"""
            WITH multi AS (
                SELECT c.cluster_id, any_value(c.cluster_size) AS size, count(DISTINCT d.domain) AS domains
                  FROM {store.scan_sql("clusters")} c
                  JOIN (SELECT doc_id, domain FROM {store.scan_sql("documents")}) d USING (doc_id)
                 WHERE c.cluster_size > 1 GROUP BY c.cluster_id),
            edges AS (
                SELECT c.cluster_id, count(*) AS edges, min(p.exact_jaccard) AS min_edge_jaccard,
                       arg_min(CASE WHEN p.left_doc_id = r.doc_id THEN p.right_doc_id ELSE p.left_doc_id END,
                               p.exact_jaccard) AS edge_member
                  FROM {store.scan_sql("duplicate_pairs")} p
                  JOIN {store.scan_sql("clusters")} c ON c.doc_id = p.left_doc_id
                  JOIN (SELECT doc_id, cluster_id FROM {store.scan_sql("deduped_documents")}) r USING (cluster_id)
                 GROUP BY c.cluster_id)
            SELECT m.cluster_id, m.size, r.doc_id AS representative, m.domains,
                   COALESCE(e.edges, 0) AS edges, e.min_edge_jaccard, e.edge_member
              FROM multi m
              JOIN (SELECT doc_id, cluster_id FROM {store.scan_sql("deduped_documents")}) r USING (cluster_id)
              LEFT JOIN edges e USING (cluster_id)
             ORDER BY m.cluster_id""").to_arrow_table()
    finally:
        con.close()
    measured = member_jaccards(store, max_members)  # clusters of three or more, bounded
    per_cluster: dict[str, tuple[float, str, int, int]] = {}  # min, farthest, below, checked
    if measured.num_rows:
        order = pc.sort_indices(
            measured, [("cluster_id", "ascending"), ("jaccard", "ascending"), ("doc_id", "ascending")]
        )
        ordered = measured.take(order)
        cluster_ids = ordered.column("cluster_id").to_pylist()
        doc_ids = ordered.column("doc_id").to_pylist()
        jaccards = ordered.column("jaccard").to_numpy()
        for cluster, doc, j in zip(cluster_ids, doc_ids, jaccards, strict=True):
            found = per_cluster.get(cluster)
            below = int(j < threshold)
            if found is None:
                per_cluster[cluster] = (float(j), doc, below, 1)
            else:
                per_cluster[cluster] = (found[0], found[1], found[2] + below, found[3] + 1)
    rows = []
    for row in base.to_pylist():
        size = int(row["size"])
        if size == 2:  # the member's Jaccard to the representative is the one edge's
            minimum, farthest = row["min_edge_jaccard"], row["edge_member"]
            below, checked = int(minimum is not None and minimum < threshold), 1
        else:
            minimum, farthest, below, checked = per_cluster.get(row["cluster_id"], (None, None, 0, 0))
        flags = [
            f
            for f, on in (
                ("giant", size > giant_size),
                ("low_cohesion", below > 0),
                ("unchecked", checked < size - 1),
            )
            if on
        ]
        rows.append(
            {
                "cluster_id": row["cluster_id"],
                "size": size,
                "representative": row["representative"],
                "min_jaccard_to_representative": None if minimum is None else round(float(minimum), 6),
                "farthest_member": farthest,
                "members_below_threshold": below,
                "members_checked": checked,
                "min_edge_jaccard": None
                if row["min_edge_jaccard"] is None
                else round(float(row["min_edge_jaccard"]), 6),
                "edges": int(row["edges"]),
                "domains": int(row["domains"]),
                "flag": "+".join(flags) or "ok",
            }
        )
    rows.sort(
        key=lambda r: (
            r["flag"] == "ok",
            r["min_jaccard_to_representative"] if r["min_jaccard_to_representative"] is not None else np.inf,
            -r["size"],
            r["cluster_id"],
        )
    )
    table = pa.table(
        {
            "cluster_id": pa.array([r["cluster_id"] for r in rows], pa.string()),
            "size": pa.array([r["size"] for r in rows], pa.int64()),
            "representative": pa.array([r["representative"] for r in rows], pa.string()),
            "min_jaccard_to_representative": pa.array([r["min_jaccard_to_representative"] for r in rows], pa.float64()),
            "farthest_member": pa.array([r["farthest_member"] for r in rows], pa.string()),
            "members_below_threshold": pa.array([r["members_below_threshold"] for r in rows], pa.int64()),
            "members_checked": pa.array([r["members_checked"] for r in rows], pa.int64()),
            "min_edge_jaccard": pa.array([r["min_edge_jaccard"] for r in rows], pa.float64()),
            "edges": pa.array([r["edges"] for r in rows], pa.int64()),
            "domains": pa.array([r["domains"] for r in rows], pa.int64()),
            "flag": pa.array([r["flag"] for r in rows], pa.string()),
        }
    )
    figures = {
        "multi_document_clusters": len(rows),
        "low_cohesion_clusters": sum(r["members_below_threshold"] > 0 for r in rows),
        "giant_clusters": sum(r["size"] > giant_size for r in rows),
        "members_below_threshold": sum(r["members_below_threshold"] for r in rows),
        "members_checked": sum(r["members_checked"] for r in rows),
        "member_cap": int(max_members),
        "clusters_unchecked": sum(r["members_checked"] < r["size"] - 1 for r in rows),
        "largest_cluster": max((r["size"] for r in rows), default=0),
    }
    return table, figures


def worst_clusters_markdown(table: pa.Table, limit: int = 10) -> str:
    """The first rows of the diagnostics (worst first) as a Markdown table."""
    shown = ["cluster_id", "size", "min_jaccard_to_representative", "min_edge_jaccard", "domains", "flag"]
    if not table.num_rows:
        return "no cluster of two or more documents"
    head = table.slice(0, limit).select(shown).to_pylist()
    return markdown_table(shown, [tuple(r[c] for c in shown) for r in head])


REPORT = "cluster_diagnostics.csv"


def write_cluster_diagnostics(store: Store, max_members: int = COHESION_MAX_MEMBERS) -> dict[str, Any]:
    """Compute the diagnostics and keep them beside deduped_documents (published as REPORT);
    returns the figures."""
    table, figures = cluster_diagnostics(store, max_members)
    with atomic_path(report_path(store, REPORT)) as temp:
        pacsv.write_csv(table, temp)
    return figures


def diagnostics_preview(store: Store, limit: int = 10) -> str:
    """The worst clusters of the stored diagnostics as Markdown (for the asset metadata)."""
    path = report_path(store, REPORT)
    if not path.exists():
        return "no cluster diagnostics stored"
    return worst_clusters_markdown(pacsv.read_csv(path), limit)
