"""The clusters and deduped_documents stages."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..core.components import component_labels
from ..core.ranking import policy_order_by
from .documents import stored_extra_columns
from .errors import WebdedupError
from .storage import Store, connect, publish_asset_file, quote_ident, scalar, write_csv, write_relation, write_table


def stage_clusters(store: Store, output_dir: Path | None = None) -> dict[str, Any]:
    """Connected components over duplicate pairs; every document in exactly one cluster.

    Documents are numbered in doc_id order and union-find keeps the smallest number as the
    root, so cluster_id = 'cluster-' + the smallest doc_id of the component.
    """
    started = time.perf_counter()
    upstream = store.params("duplicate_pairs")
    con = connect(store)
    con.execute(f"""CREATE TEMP TABLE ids AS
        SELECT doc_id, CAST(row_number() OVER (ORDER BY doc_id) - 1 AS BIGINT) AS node
          FROM (SELECT DISTINCT doc_id FROM {store.scan_sql("documents")})""")
    edges = con.execute(f"""
        SELECT l.node, r.node FROM {store.scan_sql("duplicate_pairs")} p
          JOIN ids l ON l.doc_id = p.left_doc_id JOIN ids r ON r.doc_id = p.right_doc_id""").fetchnumpy()
    edge_left, edge_right = (np.asarray(v, dtype=np.int64) for v in edges.values())
    unknown = scalar(
        con,
        f"""SELECT count(*) FROM {store.scan_sql("duplicate_pairs")} p
        WHERE p.left_doc_id NOT IN (SELECT doc_id FROM ids) OR p.right_doc_id NOT IN (SELECT doc_id FROM ids)""",
    )
    if unknown:
        raise WebdedupError(
            f"{unknown} duplicate pair(s) name documents that are no longer in documents; "
            f"re-materialize the stages from fingerprinted on"
        )
    ids = con.sql("SELECT doc_id FROM ids ORDER BY node").to_arrow_table().column("doc_id").combine_chunks()
    labels = component_labels(len(ids), edge_left, edge_right)
    sizes = np.bincount(labels, minlength=len(ids))[labels] if len(ids) else np.zeros(0, np.int64)
    cluster_ids = (
        pa.compute.binary_join_element_wise(pa.scalar("cluster-"), ids.take(pa.array(labels)), "")
        if len(ids)
        else pa.array([], pa.string())
    )
    table = pa.table({"doc_id": ids, "cluster_id": cluster_ids, "cluster_size": pa.array(sizes, pa.int64())})
    params = {"stage": "clusters", "fingerprint": upstream["fingerprint"], "duplicates": upstream.get("duplicates")}
    rows = write_table(store.path("clusters"), table, params)
    clusters_sql = store.scan_sql("clusters")
    n_clusters, dup_clusters, singletons, largest = con.execute(f"""
        SELECT count(DISTINCT cluster_id), count(DISTINCT cluster_id) FILTER (cluster_size > 1),
               count(*) FILTER (cluster_size = 1), COALESCE(max(cluster_size), 0) FROM {clusters_sql}""").fetchall()[0]
    stats = {
        "rows": rows,
        "clusters": n_clusters,
        "duplicate_clusters": dup_clusters,
        "singletons": singletons,
        "max_cluster_size": largest,
        "edges": int(edge_left.size),
        "seconds": round(time.perf_counter() - started, 4),
    }
    store.write_stats("clusters", None, stats)
    if output_dir is not None:
        write_csv(output_dir / "clusters.csv", con.sql(f"SELECT * FROM {clusters_sql} ORDER BY cluster_id, doc_id"))
    con.close()
    return {**params, **stats}


def stage_deduped_documents(store: Store, representative_policy: str, output_dir: Path | None = None) -> dict[str, Any]:
    """One representative per cluster, chosen by the policy (default: newest crawled_at,
    then most tokens, then smallest doc_id); every input column is kept."""
    started = time.perf_counter()
    try:
        order_by = policy_order_by(representative_policy)
    except ValueError as err:
        raise WebdedupError(str(err)) from None
    upstream = store.params("clusters")
    con = connect(store)
    extra = stored_extra_columns(store)
    doc_cols = ", ".join(
        f"d.{quote_ident(c)}" for c in ["doc_id", "source", "domain", "crawled_at", "title", "body", *extra]
    )
    # Rank on narrow columns only (no bodies in the window sort), then join the winners back
    # to their full rows.
    provenance = [c for c in extra if c.startswith("warc_") or c == "capture_url"]
    narrow = ", ".join(quote_ident(c) for c in ["doc_id", "domain", "crawled_at", *provenance])
    con.execute(f"""CREATE TEMP TABLE ranked AS
        SELECT d.*, c.cluster_id, c.cluster_size, f.token_count,
               row_number() OVER (PARTITION BY c.cluster_id ORDER BY {order_by}) AS rank
          FROM (SELECT {narrow} FROM {store.scan_sql("documents")}) d
          JOIN {store.scan_sql("clusters")} c USING (doc_id)
          JOIN (SELECT doc_id, token_count FROM {store.scan_sql("fingerprinted")}) f USING (doc_id)""")
    # Winners join their full rows with documents as the probe side and insertion order kept:
    # the output is in documents order, deterministic, with no global sort over page bodies.
    con.execute("SET preserve_insertion_order = true")
    relation = con.sql(f"""
        SELECT {doc_cols}, r.cluster_id, r.cluster_size, r.token_count
          FROM {store.scan_sql("documents")} d
          JOIN (SELECT * FROM ranked WHERE rank = 1) r USING (doc_id)""")
    params = {
        "stage": "deduped_documents",
        "fingerprint": upstream["fingerprint"],
        "representatives": {"representative_policy": representative_policy, "order_by": order_by},
    }
    rows = write_relation(store.path("deduped_documents"), relation, params)
    documents = scalar(con, "SELECT count(*) FROM ranked")
    stats = {
        "rows": rows,
        "documents": documents,
        "removed": documents - rows,
        "retained_ratio": round(rows / documents, 4) if documents else 0.0,
        "seconds": round(time.perf_counter() - started, 4),
    }
    store.write_stats("deduped_documents", None, stats)
    if output_dir is not None:
        publish_asset_file(store, "deduped_documents", output_dir / "deduped_documents.parquet")
        write_csv(output_dir / "cluster_inspection.csv", cluster_inspection(con, store, extra))
    con.close()
    return {**params, **stats}


def cluster_inspection(con, store: Store, extra: list[str]):
    """One row per multi-member cluster: representative, members, domains, Jaccard range."""
    provenance = [c for c in extra if c.startswith("warc_") or c == "capture_url"]
    rep_cols = "".join(f", r.{quote_ident(c)} AS representative_{c}" for c in provenance)
    return con.sql(f"""
        WITH members AS (
            SELECT cluster_id, string_agg(doc_id, ';' ORDER BY doc_id) AS member_doc_ids,
                   string_agg(DISTINCT domain, ';' ORDER BY domain) AS domains
              FROM ranked WHERE cluster_size > 1 GROUP BY cluster_id),
        scores AS (
            SELECT c.cluster_id, min(p.exact_jaccard) AS min_jaccard, max(p.exact_jaccard) AS max_jaccard
              FROM {store.scan_sql("duplicate_pairs")} p
              JOIN {store.scan_sql("clusters")} c ON c.doc_id = p.left_doc_id
             GROUP BY c.cluster_id)
        SELECT r.cluster_id, r.cluster_size, r.doc_id AS representative_doc_id,
               r.domain AS representative_domain, r.crawled_at AS representative_crawled_at,
               r.token_count AS representative_token_count{rep_cols},
               m.member_doc_ids, m.domains, s.min_jaccard, s.max_jaccard
          FROM ranked r JOIN members m USING (cluster_id) JOIN scores s USING (cluster_id)
         WHERE r.rank = 1 AND r.cluster_size > 1
         ORDER BY r.cluster_id""")
