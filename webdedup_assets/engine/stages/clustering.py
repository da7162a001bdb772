"""The clusters and deduped_documents stages."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...core.components import component_labels
from ...core.ranking import policy_order_by
from ...errors import WebdedupError
from ...params import RepresentativeParams
from ...storage import parquet_splice
from ...storage.store import (
    Store,
    atomic_path,
    connect,
    quote_ident,
    row_groups,
    scalar,
    sql_string,
    with_params,
    write_csv,
    write_table,
)
from ...threads import ordered_map, prefetch, thread_count
from ..diagnostics import measured_alongside
from ..invariants import SPLIT_MEMBERS, measured_key, write_keyed_table
from ..publish import report_path
from ..stage import DUCKDB, StageOutput, StageResult, StageRun
from .documents import stored_extra_columns


def stage_clusters(store: Store) -> StageResult:
    """Clusters through the contract (no parameters of its own)."""
    return DUCKDB.run("clusters", store)


@DUCKDB.implements("clusters")
def clusters(run: StageRun) -> StageOutput:
    """Connected components over duplicate pairs; every document in exactly one cluster.

    Documents are numbered in doc_id order and union-find keeps the smallest number as the
    root, so cluster_id = 'cluster-' + the smallest doc_id of the component.
    """
    store = run.store
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
    table = cluster_assignment(ids, edge_left, edge_right)
    rows = write_table(store.path("clusters"), table, run.parameters)
    figures = cluster_figures(con, store.scan_sql("clusters"), int(edge_left.size))
    con.close()
    return StageOutput(rows, figures)


def cluster_figures(con, clusters: str, edges: int) -> dict[str, int]:
    """The clusters asset's figures, of the table expression `clusters` (a row per document)."""
    n_clusters, dup_clusters, singletons, largest = con.execute(f"""
        SELECT count(DISTINCT cluster_id), count(DISTINCT cluster_id) FILTER (cluster_size > 1),
               count(*) FILTER (cluster_size = 1), COALESCE(max(cluster_size), 0) FROM {clusters}""").fetchall()[0]
    return {
        "clusters": n_clusters,
        "duplicate_clusters": dup_clusters,
        "singletons": singletons,
        "max_cluster_size": largest,
        "edges": edges,
    }


def cluster_assignment(ids: pa.Array, left: np.ndarray, right: np.ndarray) -> pa.Table:
    """(doc_id, cluster_id, cluster_size) of documents `ids` (node i = ids[i], sorted by doc_id)
    joined by the edges (left[k], right[k]): cluster_id = 'cluster-' + the smallest doc_id."""
    labels = component_labels(len(ids), left, right)  # each node's smallest node
    sizes = np.bincount(labels, minlength=len(ids))[labels] if len(ids) else np.zeros(0, np.int64)
    cluster_ids = (
        pa.compute.binary_join_element_wise(pa.scalar("cluster-"), ids.take(pa.array(labels)), "")
        if len(ids)
        else pa.array([], pa.string())
    )
    return pa.table({"doc_id": ids, "cluster_id": cluster_ids, "cluster_size": pa.array(sizes, pa.int64())})


def stage_deduped_documents(store: Store, params: RepresentativeParams | None = None) -> StageResult:
    """Representatives through the contract (default policy when no parameters are given)."""
    return DUCKDB.run("deduped_documents", store, params)


@DUCKDB.implements("deduped_documents")
def deduped_documents(run: StageRun) -> StageOutput:
    """One representative per cluster, chosen by the policy (default: newest crawled_at,
    then most tokens, then smallest doc_id); every input column is kept."""
    store = run.store
    try:
        order_by = policy_order_by(run.params.representative_policy, run.params.prefer_domains)
    except ValueError as err:
        raise WebdedupError(str(err)) from None
    run.derive(order_by=order_by)
    con = connect(store)
    extra = stored_extra_columns(store)
    # Rank on narrow columns only (no bodies in the window sort); each document is located by
    # its file and row number, so the winners' full rows are then read straight from the files.
    files = store.require("documents")
    listing = ", ".join(sql_string(str(f)) for f in files)
    located = (
        f"read_parquet([{listing}], union_by_name = true, filename = true, file_row_number = true, "
        "hive_partitioning = false)"
    )
    con.execute(ranked_sql(store, order_by, documents=located, located=True))
    split_off = _verify_against_representative(con, store, order_by) if run.params.verify_against_representative else 0
    winners = con.sql(
        "SELECT filename, file_row_number, cluster_id, cluster_size, token_count FROM ranked "
        "WHERE rank = 1 ORDER BY filename, file_row_number"
    ).to_arrow_table()
    doc_schema = con.sql(f"SELECT * FROM {store.scan_sql('documents')} LIMIT 0").arrow().schema
    schema = pa.schema(
        [*doc_schema, ("cluster_id", pa.string()), ("cluster_size", pa.int64()), ("token_count", pa.int32())]
    )
    chosen = con.sql("SELECT doc_id, cluster_id FROM ranked WHERE rank = 1").to_arrow_table()
    # the cluster diagnostics (bounded: see engine.diagnostics) are measured with the file: the
    # winners' rows are read and put together on background threads while this one encodes the
    # previous batch (all release the GIL most of the time), and the pages the diagnostics
    # compare are shingled as the reader threads pass them
    with measured_alongside(store, chosen) as diagnostics:
        con.register("needed_arrow", pa.table({"doc_id": diagnostics.needed}))
        needed = con.sql(
            "SELECT filename, file_row_number FROM ranked SEMI JOIN needed_arrow USING (doc_id) "
            "ORDER BY filename, file_row_number"
        ).to_arrow_table()
        con.unregister("needed_arrow")
        representatives = prefetch(representative_rows(files, winners, schema, needed, diagnostics.add), depth=1)
        # the body in small PLAIN pages: an incremental update copies the pages it keeps; row
        # groups encoded on all cores (one pyarrow writer would encode all the representatives'
        # text on one) and written in order
        with atomic_path(store.path("deduped_documents")) as temp:
            rows, _ = parquet_splice.rewrite(
                None,
                temp,
                with_params(schema, run.parameters),
                "body",
                (parquet_splice.Encode(table) for table in representatives),
                deduped_layout(schema),
            )
        split_members = store.asset_dir("deduped_documents") / SPLIT_MEMBERS
        if run.params.verify_against_representative:  # removed.csv names each member's part
            moved = con.sql(f"""SELECT r.doc_id, r.cluster_id FROM ranked r
                JOIN {store.scan_sql("clusters")} c USING (doc_id) WHERE r.cluster_id <> c.cluster_id""")
            write_keyed_table(split_members, moved.to_arrow_table(), measured_key(store))
        else:
            split_members.unlink(missing_ok=True)
        documents = scalar(con, "SELECT count(*) FROM ranked")
        con.execute("SET SESSION preserve_insertion_order = true")
        write_csv(report_path(store, "cluster_inspection.csv"), cluster_inspection(con, store, extra))
        con.close()
    figures = {
        "documents": documents,
        "removed": documents - rows,
        "retained_ratio": round(rows / documents, 4) if documents else 0.0,
    }
    if run.params.verify_against_representative:
        figures["members_split_off"] = split_off
    figures.update(diagnostics.figures)
    return StageOutput(rows, figures)


RANK_COLUMNS = ("cluster_id", "cluster_size", "token_count")


def deduped_layout(schema: pa.Schema) -> dict:
    """deduped_documents' writer options, for the full stage and an update's rewrite alike: the
    body in small pages (parquet_splice.layout), no dictionary for the per-document columns."""
    return parquet_splice.layout(schema, "body", distinct=("doc_id", "title", "cluster_id"))


SPLIT_MARK = "~"  # cluster_id of a part split off a component: <component's cluster_id>~<its smallest doc_id>


def _verify_against_representative(con, store: Store, order_by: str) -> int:
    """The far-member policy (verify_against_representative) over the `ranked` table: every member
    of a cluster of three or more whose exact Jaccard to the cluster's representative (rank 1) is
    below the threshold leaves it; the members that left one cluster are clustered again among
    themselves (connected components over their duplicate pairs), each part named
    <cluster_id>~<its smallest doc_id>, ranked by the same policy, and verified again, until no
    member is below its representative. Deterministic: the result depends only on the stored
    assets. Returns how many members left their component. A cluster of two never splits (its one
    edge reaches the threshold)."""
    from ...core.fingerprint import shingling
    from ..shingle_sets import load_shingle_sets

    threshold = float((store.params("duplicate_pairs").get("duplicates") or {})["threshold"])
    size, unit = shingling(store.params("fingerprinted")["fingerprint"])
    moved: set[str] = set()
    sets = None
    while True:
        members = con.sql("""
            SELECT m.doc_id, m.cluster_id, r.doc_id AS representative FROM ranked m
              JOIN (SELECT cluster_id, doc_id FROM ranked WHERE rank = 1) r USING (cluster_id)
             WHERE m.cluster_size >= 3 AND m.rank > 1 ORDER BY m.doc_id""").to_arrow_table()
        if not members.num_rows:
            return len(moved)
        if sets is None:  # the members of the components to verify: their sets once
            ids = pa.concat_arrays([members.column(c).combine_chunks() for c in ("doc_id", "representative")])
            sets = load_shingle_sets(store, size, pa.compute.unique(ids), unit)
        jaccard = sets.jaccard(sets.nodes(members.column("doc_id")), sets.nodes(members.column("representative")))
        far = members.filter(pa.array(jaccard < threshold))
        if not far.num_rows:
            return len(moved)
        moved.update(far.column("doc_id").to_pylist())
        # the far members of each cluster, clustered again among themselves over their duplicate pairs
        con.register("far", far.select(["doc_id", "cluster_id"]))
        ids = con.sql("SELECT doc_id, cluster_id FROM far ORDER BY doc_id").to_arrow_table()
        node = {d: i for i, d in enumerate(ids.column("doc_id").to_pylist())}
        edges = con.execute(f"""
            SELECT p.left_doc_id, p.right_doc_id FROM {store.scan_sql("duplicate_pairs")} p
              JOIN far l ON l.doc_id = p.left_doc_id JOIN far r ON r.doc_id = p.right_doc_id
             WHERE l.cluster_id = r.cluster_id""").fetchall()
        con.unregister("far")
        left = np.array([node[a] for a, _ in edges], dtype=np.int64)
        right = np.array([node[b] for _, b in edges], dtype=np.int64)
        labels = component_labels(len(node), left, right)  # smallest node = smallest doc_id
        doc_ids = ids.column("doc_id").to_pylist()
        old = ids.column("cluster_id").to_pylist()
        new_ids = [f"{old[i]}{SPLIT_MARK}{doc_ids[labels[i]]}" for i in range(len(doc_ids))]
        con.register("moves", pa.table({"doc_id": doc_ids, "new_cluster_id": new_ids}))
        con.execute(
            """CREATE OR REPLACE TEMP TABLE ranked AS
            SELECT * EXCLUDE (cluster_id, cluster_size, rank), cluster_id,
                   count(*) OVER (PARTITION BY cluster_id) AS cluster_size,
                   row_number() OVER (PARTITION BY cluster_id ORDER BY """
            + order_by
            + """) AS rank
              FROM (SELECT r.* EXCLUDE (cluster_id), COALESCE(m.new_cluster_id, r.cluster_id) AS cluster_id
                      FROM ranked r LEFT JOIN moves m USING (doc_id))"""
        )
        con.unregister("moves")


def representative_rows(
    files: list[Path],
    winners: pa.Table,
    schema: pa.Schema,
    needed: pa.Table | None = None,
    on_needed: Callable[[pa.Table], None] | None = None,
):
    """The winners' full rows, read file by file in stored order (the output order is the
    documents' order: the same for every run of the same input, with no sort over bodies).
    Files are read on all cores, results taken in file order and put together into row groups
    bounded in rows and bytes (one row group per small crawl day would make the file slow to
    write and read; one per 64k long pages would hold gigabytes in every reader).
    needed (filename, file_row_number, sorted like winners): other rows whose doc_id and body are
    given to on_needed (on the reader threads, in any order) as their row groups are read."""
    needed = needed if needed is not None else winners.slice(0, 0).select(["filename", "file_row_number"])
    wanted = {"winners": winners, "needed": needed}
    names = {k: t.column("filename").to_numpy(zero_copy_only=False) for k, t in wanted.items()}
    row_numbers = {k: t.column("file_row_number").to_numpy() for k, t in wanted.items()}
    spans = []  # (file, row group, its first row, {which: (first, end) of its rows there}) of every row group read
    for path in files:
        ranges = {k: _file_range(names[k], str(path)) for k in wanted}
        if all(start == stop for start, stop in ranges.values()):
            continue
        metadata = pq.ParquetFile(path).metadata
        group_start = 0
        for group in range(metadata.num_row_groups):
            group_end = group_start + metadata.row_group(group).num_rows
            found = {}
            for k, (start, stop) in ranges.items():
                end = start + int(np.searchsorted(row_numbers[k][start:stop], group_end, side="left"))
                found[k] = (start, end)
                ranges[k] = (end, stop)
            if any(end > start for start, end in found.values()):
                spans.append((path, group, group_start, found))
            group_start = group_end

    def read(span) -> pa.Table:
        # one row group at a time: memory stays bounded by the row group, not the crawl day
        path, group, group_start, found = span
        start, stop = found["winners"]
        columns = None if stop > start else ["doc_id", "body"]  # a group of needed rows only
        rows = pq.ParquetFile(path).read_row_group(group, columns=columns, use_threads=False)
        first, last = found["needed"]
        if last > first and on_needed is not None:
            on_needed(rows.select(["doc_id", "body"]).take(pa.array(row_numbers["needed"][first:last] - group_start)))
        if columns is not None:
            return schema.empty_table()
        rows = rows.take(pa.array(row_numbers["winners"][start:stop] - group_start))
        ranks = winners.slice(start, stop - start)
        columns = [
            (rows if f.name in rows.schema.names else ranks).column(f.name).cast(f.type)
            if f.name in rows.schema.names or f.name in RANK_COLUMNS
            else pa.nulls(rows.num_rows, f.type)  # an extra column this day does not have
            for f in schema
        ]
        return pa.Table.from_arrays(columns, schema=schema)

    return row_groups(t for t in ordered_map(read, spans, thread_count()) if t.num_rows)


def _file_range(names: np.ndarray, path: str) -> tuple[int, int]:
    """Where rows of the file `path` are in `names` (sorted)."""
    return int(np.searchsorted(names, path, side="left")), int(np.searchsorted(names, path, side="right"))


def provenance_columns(extra: list[str]) -> list[str]:
    """The extra columns of the documents that say where a page was captured (WARC record,
    capture URL): ranking and cluster_inspection carry them."""
    return [c for c in extra if c.startswith("warc_") or c == "capture_url"]


def ranked_sql(
    store: Store,
    order_by: str,
    members: str | None = None,
    clusters: str | None = None,
    documents: str | None = None,
    located: bool = False,
) -> str:
    """The `ranked` table of deduped_documents (narrow columns, rank per cluster), for the
    clusters of the doc_ids in the temp table `members` only when given (their clusters from the
    table `clusters`, default the stored clusters asset; the documents' narrow columns from the
    table `documents`, default the documents files). located: `documents` has each row's
    filename and file_row_number, which ranked keeps."""
    columns = [quote_ident(c) for c in ranking_columns(stored_extra_columns(store))]
    narrow = ", ".join(columns + (["filename", "file_row_number"] if located else []))
    scope = f"SEMI JOIN {members} s ON s.doc_id = d.doc_id" if members else ""
    tokens_scope = scope.replace("d.doc_id", "f.doc_id")
    return f"""CREATE TEMP TABLE ranked AS
        SELECT d.*, c.cluster_id, c.cluster_size, f.token_count,
               row_number() OVER (PARTITION BY c.cluster_id ORDER BY {order_by}) AS rank
          FROM (SELECT {narrow} FROM {documents or store.scan_sql("documents")} d {scope}) d
          JOIN {clusters or store.scan_sql("clusters")} c USING (doc_id)
          JOIN (SELECT doc_id, token_count FROM {store.scan_sql("fingerprinted")} f {tokens_scope}) f
            USING (doc_id)"""


def ranking_columns(extra: list[str]) -> list[str]:
    """The documents' narrow columns the representatives are ranked with (engine.incremental
    reads the same ones)."""
    return ["doc_id", "domain", "crawled_at", *provenance_columns(extra)]


def cluster_inspection(con, store: Store, extra: list[str], pairs: str | None = None, clusters: str | None = None):
    """One row per multi-member cluster of the table `ranked`: representative, members, domains,
    Jaccard range. `pairs` and `clusters` (default: the stored duplicate_pairs and clusters) may
    be narrower tables holding the ranked clusters' own rows (an incremental update's)."""
    rep_cols = "".join(f", r.{quote_ident(c)} AS representative_{c}" for c in provenance_columns(extra))
    return con.sql(f"""
        WITH members AS (
            SELECT cluster_id, string_agg(doc_id, ';' ORDER BY doc_id) AS member_doc_ids,
                   string_agg(DISTINCT domain, ';' ORDER BY domain) AS domains
              FROM ranked WHERE cluster_size > 1 GROUP BY cluster_id),
        scores AS (
            SELECT c.cluster_id, min(p.exact_jaccard) AS min_jaccard, max(p.exact_jaccard) AS max_jaccard
              FROM {pairs or store.scan_sql("duplicate_pairs")} p
              JOIN {clusters or store.scan_sql("clusters")} c ON c.doc_id = p.left_doc_id
             GROUP BY c.cluster_id)
        SELECT r.cluster_id, r.cluster_size, r.doc_id AS representative_doc_id,
               r.domain AS representative_domain, r.crawled_at AS representative_crawled_at,
               r.token_count AS representative_token_count{rep_cols},
               m.member_doc_ids, m.domains, s.min_jaccard, s.max_jaccard
          FROM ranked r JOIN members m USING (cluster_id) JOIN scores s USING (cluster_id)
         WHERE r.rank = 1 AND r.cluster_size > 1
         ORDER BY r.cluster_id""")
