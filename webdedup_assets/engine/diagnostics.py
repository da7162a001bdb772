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

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ..storage.store import Store, atomic_path, connect
from .invariants import (
    GIANT_CLUSTER_SIZE,
    cohesion_cap,
    keep_member_jaccards,
    measured_key,
    member_jaccards,
    members_to_measure,
    read_keyed_table,
    representatives_relation,
    with_jaccards,
    write_keyed_table,
)
from .preview import markdown_table
from .publish import report_path

if TYPE_CHECKING:
    from .shingle_sets import ShingleSets

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
    store: Store,
    max_members: int | None = None,
    giant_size: int = GIANT_CLUSTER_SIZE,
    previous: pa.Table | None = None,
    changed_clusters: pa.Array | None = None,
    previous_key: str | None = None,
    known_sets: ShingleSets | None = None,
    representatives: pa.Table | None = None,
    measured: pa.Table | None = None,
    base: pa.Table | None = None,
) -> tuple[pa.Table, dict[str, Any]]:
    """(table, figures): the rows described above, worst first (flagged, then lowest minimum
    Jaccard to the representative, then largest), and counts for the asset metadata.

    previous, changed_clusters and previous_key (an incremental update): the table as it was, the
    cluster ids, old and new, whose members, edges or representative changed, and the key it was
    measured under (invariants.measured_key); only those clusters' rows (and those of clusters
    whose measured members moved with the cap) are computed again. known_sets: shingle sets
    already computed (an update's verified pages and their clusters), see member_jaccards.
    representatives (doc_id, cluster_id) and measured: the representatives deduped_documents is
    about to hold and member_jaccards(..., representatives=) of them (a full build measuring while
    it writes the file, see measured_alongside); base: _base_rows of those representatives, if
    already computed."""
    threshold = float((store.params("duplicate_pairs").get("duplicates") or {})["threshold"])
    max_members = cohesion_cap(max_members)
    incremental = previous is not None and changed_clusters is not None
    if measured is None:
        measured = member_jaccards(
            store,
            max_members,
            changed_clusters=changed_clusters if incremental else None,
            previous_key=previous_key,
            known_sets=known_sets,
            representatives=representatives,
        )
    recompute = None
    if incremental:
        # clusters whose count of measured members changed (the cap moved over them) too
        checked = measured.group_by("cluster_id").aggregate([("doc_id", "count")])
        old_checked = previous.filter(pc.greater(previous["size"], 2)).select(["cluster_id", "members_checked"])
        joined = checked.join(old_checked, "cluster_id", join_type="full outer")
        same = pc.equal(
            pc.fill_null(joined["doc_id_count"], 0), pc.fill_null(joined["members_checked"].cast(pa.int64()), -1)
        )
        moved = joined.filter(pc.invert(same))
        recompute = pc.unique(
            pa.concat_arrays([changed_clusters.cast(pa.string()), moved["cluster_id"].combine_chunks()])
        )
        measured = measured.filter(pc.is_in(measured["cluster_id"], value_set=recompute))
    if base is None:
        base = _base_rows(store, recompute, representatives)
    table = _table(_rows(base, measured, threshold, giant_size), previous, recompute)
    return table, _figures(table, max_members, giant_size)


def _base_rows(store: Store, clusters: pa.Array | None, representatives: pa.Table | None = None) -> pa.Table:
    """Per multi-document cluster (all, or those in `clusters`): size, representative, domains,
    edges, the minimum edge Jaccard and that edge's other end (of the edges tied at the minimum,
    the first by doc_ids: the same file on every run). representatives (doc_id, cluster_id):
    instead of those stored in deduped_documents."""
    con = connect(store)
    try:
        only = ""
        if clusters is not None:
            con.register("only_arrow", pa.table({"cluster_id": clusters}))
            only = "AND cluster_id IN (SELECT cluster_id FROM only_arrow)"
        reps = representatives_relation(con, store, representatives)
        return con.sql(f"""
            WITH cl AS (SELECT doc_id, cluster_id, cluster_size FROM {store.scan_sql("clusters")}
                         WHERE cluster_size > 1 {only}),
            reps AS (SELECT doc_id, cluster_id FROM {reps} WHERE true {only}),
            multi AS (
                SELECT c.cluster_id, any_value(c.cluster_size) AS size, count(DISTINCT d.domain) AS domains
                  FROM cl c JOIN (SELECT doc_id, domain FROM {store.scan_sql("documents")}) d USING (doc_id)
                 GROUP BY c.cluster_id),
            edges AS (
                SELECT c.cluster_id, count(*) AS edges, min(p.exact_jaccard) AS min_edge_jaccard,
                       arg_min(CASE WHEN p.left_doc_id = r.doc_id THEN p.right_doc_id ELSE p.left_doc_id END,
                               (p.exact_jaccard, p.left_doc_id, p.right_doc_id)) AS edge_member
                  FROM {store.scan_sql("duplicate_pairs")} p
                  JOIN cl c ON c.doc_id = p.left_doc_id
                  JOIN reps r USING (cluster_id)
                 GROUP BY c.cluster_id)
            SELECT m.cluster_id, m.size, r.doc_id AS representative, m.domains,
                   COALESCE(e.edges, 0) AS edges, e.min_edge_jaccard, e.edge_member
              FROM multi m
              JOIN reps r USING (cluster_id)
              LEFT JOIN edges e USING (cluster_id)
             ORDER BY m.cluster_id""").to_arrow_table()
    finally:
        con.close()


def _rows(base: pa.Table, measured: pa.Table, threshold: float, giant_size: int) -> pa.Table:
    """The diagnostics of `base`'s clusters (SCHEMA, in base's order), from the measured members
    (cluster_id, doc_id, jaccard). Arrow and numpy over all clusters at once: a full build has
    hundreds of thousands of multi-document clusters at a million pages, and a Python loop over
    them would hold the GIL beside the thread encoding deduped_documents."""
    rows = base.num_rows
    size = base["size"].to_numpy(zero_copy_only=False).astype(np.int64)
    minimum = np.full(rows, np.nan)
    has_minimum = np.zeros(rows, bool)
    below = np.zeros(rows, np.int64)
    checked = np.zeros(rows, np.int64)
    farthest = pa.nulls(rows, pa.string())
    if measured.num_rows and rows:
        # per cluster: its lowest Jaccard and that member (ties: smallest doc_id), members below, checked
        order = pc.sort_indices(
            measured, [("cluster_id", "ascending"), ("jaccard", "ascending"), ("doc_id", "ascending")]
        )
        ordered = measured.take(order)
        ids = ordered["cluster_id"].combine_chunks()
        jaccard = ordered["jaccard"].to_numpy(zero_copy_only=False).astype(np.float64)
        changes = pc.not_equal(ids.slice(1), ids.slice(0, len(ids) - 1)).to_numpy(zero_copy_only=False)
        starts = np.flatnonzero(np.concatenate([[True], changes]))
        group = pc.index_in(base["cluster_id"], value_set=ids.take(pa.array(starts)))
        found = group.is_valid().to_numpy(zero_copy_only=False)
        first = starts[pc.fill_null(group, 0).to_numpy(zero_copy_only=False)]
        ends = np.append(starts[1:], len(jaccard))
        below_per_group = np.add.reduceat((jaccard < threshold).astype(np.int64), starts)
        at = np.searchsorted(starts, first)
        minimum = np.where(found, jaccard[first], np.nan)
        has_minimum = found
        below = np.where(found, below_per_group[at], 0)
        checked = np.where(found, (ends - starts)[at], 0)
        farthest = pc.if_else(pa.array(found), ordered["doc_id"].combine_chunks().take(pa.array(first)), farthest)
    # a cluster of two: the member's Jaccard to the representative is the one edge's
    pair = size == 2
    edge = base["min_edge_jaccard"].combine_chunks() if rows else pa.array([], pa.float64())
    edge_valid = edge.is_valid().to_numpy(zero_copy_only=False)
    edge_value = pc.fill_null(edge, np.nan).to_numpy(zero_copy_only=False).astype(np.float64)
    minimum = np.where(pair, edge_value, minimum)
    has_minimum = np.where(pair, edge_valid, has_minimum)
    below = np.where(pair, (edge_valid & (edge_value < threshold)).astype(np.int64), below)
    checked = np.where(pair, 1, checked)
    farthest = pc.if_else(pa.array(pair), base["edge_member"].combine_chunks().cast(pa.string()), farthest)
    # flags: giant, low_cohesion, unchecked, joined by "+" ("ok" for none), chosen by a 3-bit code
    names = []
    for code in range(8):
        on = [f for bit, f in ((4, "giant"), (2, "low_cohesion"), (1, "unchecked")) if code & bit]
        names.append("+".join(on) or "ok")
    code = 4 * (size > giant_size) + 2 * (below > 0) + (checked < size - 1)
    return pa.table(
        {
            "cluster_id": base["cluster_id"].cast(pa.string()),
            "size": pa.array(size),
            "representative": base["representative"].cast(pa.string()),
            "min_jaccard_to_representative": _rounded(minimum, has_minimum),
            "farthest_member": farthest,
            "members_below_threshold": pa.array(below, pa.int64()),
            "members_checked": pa.array(checked, pa.int64()),
            "min_edge_jaccard": _rounded(edge_value, edge_valid),
            "edges": base["edges"].cast(pa.int64()),
            "domains": base["domains"].cast(pa.int64()),
            "flag": pa.array(names, pa.string()).take(pa.array(code.astype(np.int64))),
        },
        schema=SCHEMA,
    )


def _rounded(values: np.ndarray, valid: np.ndarray) -> pa.Array:
    """values to 6 decimals as Python's round() gives them (the CSV shows these), NULL where not valid."""
    return pa.array([round(v, 6) if ok else None for v, ok in zip(values.tolist(), valid.tolist())], pa.float64())


SCHEMA = pa.schema(
    [
        ("cluster_id", pa.string()),
        ("size", pa.int64()),
        ("representative", pa.string()),
        ("min_jaccard_to_representative", pa.float64()),
        ("farthest_member", pa.string()),
        ("members_below_threshold", pa.int64()),
        ("members_checked", pa.int64()),
        ("min_edge_jaccard", pa.float64()),
        ("edges", pa.int64()),
        ("domains", pa.int64()),
        ("flag", pa.string()),
    ]
)
assert SCHEMA.names == COLUMNS


def _table(table: pa.Table, previous: pa.Table | None, recompute: pa.Array | None) -> pa.Table:
    """`table`'s rows (with the rows of `previous` outside `recompute`), worst first."""
    if previous is not None and recompute is not None:
        kept = previous.filter(pc.invert(pc.is_in(previous["cluster_id"], value_set=recompute)))
        table = pa.concat_tables([kept.cast(SCHEMA), table])
    # worst first: flagged, lowest minimum Jaccard to the representative (none last), largest, id
    order = pc.sort_indices(
        pa.table(
            {
                "ok": pc.equal(table["flag"], "ok"),
                "min": pc.fill_null(table["min_jaccard_to_representative"], np.inf),
                "size": pc.negate(table["size"]),
                "cluster_id": table["cluster_id"],
            }
        ),
        [("ok", "ascending"), ("min", "ascending"), ("size", "ascending"), ("cluster_id", "ascending")],
    )
    return table.take(order)


def _figures(table: pa.Table, max_members: int, giant_size: int) -> dict[str, Any]:
    size = table["size"]
    below = table["members_below_threshold"]
    return {
        "multi_document_clusters": table.num_rows,
        "low_cohesion_clusters": int(pc.sum(pc.greater(below, 0)).as_py() or 0),
        "giant_clusters": int(pc.sum(pc.greater(size, giant_size)).as_py() or 0),
        "members_below_threshold": int(pc.sum(below).as_py() or 0),
        "members_checked": int(pc.sum(table["members_checked"]).as_py() or 0),
        "member_cap": int(max_members),
        "clusters_unchecked": int(pc.sum(pc.less(table["members_checked"], pc.subtract(size, 1))).as_py() or 0),
        "largest_cluster": int(pc.max(size).as_py() or 0) if table.num_rows else 0,
    }


def worst_clusters_markdown(table: pa.Table, limit: int = 10) -> str:
    """The first rows of the diagnostics (worst first) as a Markdown table."""
    shown = ["cluster_id", "size", "min_jaccard_to_representative", "min_edge_jaccard", "domains", "flag"]
    if not table.num_rows:
        return "no cluster of two or more documents"
    head = table.slice(0, limit).select(shown).to_pylist()
    return markdown_table(shown, [tuple(r[c] for c in shown) for r in head])


REPORT = "cluster_diagnostics.csv"
TABLE = "cluster_diagnostics.arrow"  # the same rows, typed: what an incremental update starts from


def write_cluster_diagnostics(
    store: Store,
    max_members: int | None = None,
    changed_clusters: pa.Array | None = None,
    previous_key: str | None = None,
    known_sets: ShingleSets | None = None,
) -> dict[str, Any]:
    """Compute the diagnostics and keep them beside deduped_documents (published as REPORT);
    returns the figures. changed_clusters, previous_key: an incremental update (see
    cluster_diagnostics); the kept table is its starting point if it was made under
    previous_key, else everything is computed."""
    max_members = cohesion_cap(max_members)
    kept = store.asset_dir("deduped_documents") / TABLE
    previous = None
    if changed_clusters is not None and previous_key is not None:
        found = read_keyed_table(kept)
        if found is not None and found[1] == previous_key:
            previous = found[0]
    table, figures = cluster_diagnostics(
        store,
        max_members,
        previous=previous,
        changed_clusters=changed_clusters if previous is not None else None,
        previous_key=previous_key,
        known_sets=known_sets,
    )
    _keep(store, table, max_members)
    return figures


def _keep(store: Store, table: pa.Table, max_members: int) -> None:
    write_keyed_table(store.asset_dir("deduped_documents") / TABLE, table, measured_key(store, max_members) or "")
    with atomic_path(report_path(store, REPORT)) as temp:
        pacsv.write_csv(table, temp)


class Alongside:
    """What a full build's diagnostics need from the pass writing deduped_documents: the pages
    of `needed` (the members to measure and their representatives), given to `add` (doc_id and
    body) from the reader threads as their rows go by, which shingles them there."""

    def __init__(self, store: Store, members: pa.Table) -> None:
        from ..core.fingerprint import shingling

        self.store = store
        self.shingling = shingling(store.params("fingerprinted")["fingerprint"])  # (size, unit)
        self.members = members
        self.needed = pc.unique(
            pa.concat_arrays([members.column(c).combine_chunks() for c in ("doc_id", "representative")])
        )
        self.figures: dict[str, Any] = {}
        self._parts: list[ShingleSets] = []

    def add(self, rows: pa.Table) -> None:
        from .shingle_sets import shingle_sets_of

        ids, bodies = (rows.column(c).combine_chunks() for c in ("doc_id", "body"))
        # list.append is atomic: called from several reader threads
        self._parts.append(shingle_sets_of(ids, bodies, *self.shingling))

    def sets(self) -> ShingleSets:
        """The sets of the pages given to `add`, with any needed one they lack read from the store."""
        from .shingle_sets import concat_sets

        return concat_sets(self._parts).covering(self.store, self.shingling[0], self.needed, self.shingling[1])


@contextmanager
def measured_alongside(store: Store, representatives: pa.Table) -> Iterator[Alongside]:
    """The diagnostics of a full build, made while the body writes deduped_documents with these
    representatives (doc_id, cluster_id). The body reads the documents' rows anyway: it gives
    the pages in `needed` of the yielded object to its `add` (a
    separate read of their bodies would decompress all the corpus' text again), while a
    background thread computes the per-cluster rows that need no sets. Once the
    body is done (the file is written), the member Jaccards are measured and they and the
    diagnostics are kept under the key of the new files, as write_cluster_diagnostics keeps them;
    the yielded object's figures receive the figures. If the body fails, nothing is kept."""
    max_members = cohesion_cap(None)
    along = Alongside(store, members_to_measure(store, max_members, 3, representatives))
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="webdedup-diagnostics") as pool:
        base = pool.submit(_base_rows, store, None, representatives)
        yield along
        base_rows = base.result()
    measured = with_jaccards(along.members, along.sets())
    table, found = cluster_diagnostics(
        store, max_members, representatives=representatives, measured=measured, base=base_rows
    )
    keep_member_jaccards(store, measured, max_members)
    _keep(store, table, max_members)
    along.figures.update(found)


def diagnostics_preview(store: Store, limit: int = 10) -> str:
    """The worst clusters of the stored diagnostics as Markdown (for the asset metadata)."""
    path = report_path(store, REPORT)
    if not path.exists():
        return "no cluster diagnostics stored"
    return worst_clusters_markdown(pacsv.read_csv(path), limit)
