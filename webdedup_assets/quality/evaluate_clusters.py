"""Cluster diagnostics of an evaluation (cluster_diagnostics.csv in the evaluation folder): per
multi-document cluster its size, the minimum Jaccard of a member to the representative, the
minimum and mean edge Jaccard, edge density and domains; flags giant and low-cohesion (chained)
clusters. (engine.diagnostics is the published report of the same name, built during a run.)"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..engine.shingle_sets import ShingleSets, load_shingle_sets
from ..storage.store import Store
from .evaluate_common import RunInfo, rows_table


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
    return rows_table(rows, columns)
