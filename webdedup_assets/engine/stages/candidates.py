"""The candidate_pairs stage: one global self-join of band keys (grouped by domain only when
candidate_scope is `domain`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import WebdedupError
from ...params import CandidateParams, ParamAdvice
from ...storage.fileio import write_text
from ...storage.store import Store, connect, file_identity, save_table, scalar, write_csv, write_relation
from ..publish import report_path
from ..stage import DUCKDB, StageOutput, StageResult, StageRun


def bucket_sizes_sql(bm: str, with_hub: bool = True) -> str:
    """Buckets of two or more documents; the hub (first doc_id, for the star policy) costs a
    string aggregate over every band row, so it is left out when no policy needs it."""
    hub = ", min(doc_id) AS hub" if with_hub else ""
    return (
        f"SELECT band_index, band_hash, count(*) AS size{hub} FROM {bm} "
        f"GROUP BY band_index, band_hash HAVING count(*) > 1"
    )


COLLISION_TOP = 10_000  # collision_buckets.csv lists this many buckets (an update keeps them too)
# What an update extends, kept by the full stage in a folder of candidate_pairs' (not beside its
# files: readers take every <asset>/*.parquet), for engine.incremental to take into its state
# instead of grouping the band rows again: the bucket figures, the largest buckets and members.
KEPT_DIR = "kept"
BUCKET_SUMMARY = "bucket_summary.json"
COLLISION_TOP_FILE = "collision_top.parquet"
MIN_PAIR_SLOTS = 1_000_000  # the scaled budget never goes below this (small corpora, small clusters)


def bucket_totals(con, sizes: str, hot_bucket_size: int) -> dict[str, int]:
    """The bucket figures of the table expression `sizes` (column size: buckets of two or more):
    all pairs' slots, the star slots of the buckets over hot_bucket_size, the slots of the others,
    the buckets and the largest size."""
    hot = int(hot_bucket_size)
    values = con.execute(f"""
        SELECT COALESCE(sum(size * (size - 1) // 2), 0),
               COALESCE(sum(CASE WHEN size > {hot} THEN size - 1 END), 0),
               COALESCE(sum(CASE WHEN size <= {hot} THEN size * (size - 1) // 2 END), 0),
               count(*), COALESCE(max(size), 0)
          FROM {sizes}""").fetchall()[0]
    names = ("all_pairs_slots", "star_slots", "small_slots", "collision_buckets", "max_bucket_size")
    return dict(zip(names, values))


def create_collision_top(con, bands: str, sizes: str | None = None) -> None:
    """Temp table `top`: the COLLISION_TOP largest buckets of the band table expression `bands`
    with their members (collision_buckets.csv's rows); `sizes`: a table of the buckets' sizes
    (band_index, band_hash, size) when there is one, else they are counted from `bands`."""
    sizes = sizes or f"({bucket_sizes_sql(bands, with_hub=False)})"
    con.execute(f"""CREATE TEMP TABLE top AS
        WITH largest AS (SELECT band_index, band_hash, size FROM {sizes}
                          ORDER BY size DESC, band_index, band_hash LIMIT {COLLISION_TOP})
        SELECT s.band_index, s.band_hash, s.size, string_agg(m.doc_id, ';' ORDER BY m.doc_id) AS doc_ids
          FROM largest s JOIN {bands} m USING (band_index, band_hash)
         GROUP BY s.band_index, s.band_hash, s.size
         ORDER BY s.size DESC, s.band_index, s.band_hash""")  # the stored file's bytes do not vary by run


def kept_dir(store: Store) -> Path:
    return store.asset_dir("candidate_pairs") / KEPT_DIR


def kept_bucket_summary(store: Store, hot_bucket_size: int) -> dict[str, int] | None:
    """The bucket figures the full stage kept next to the candidate_pairs file now stored, for
    this hot_bucket_size; None when there are none or they belong to another file."""
    try:
        kept = json.loads((kept_dir(store) / BUCKET_SUMMARY).read_text())
        current = file_identity(store.path("candidate_pairs"))
    except (OSError, ValueError):
        return None
    if kept.get("candidate_pairs") != current or kept.get("hot_bucket_size") != hot_bucket_size:
        return None
    return kept["figures"]


def pair_slot_budget(max_pair_slots: int, pair_slots_per_document: int, documents: int) -> int:
    """max_pair_slots when set, else pair_slots_per_document x documents, at least MIN_PAIR_SLOTS."""
    return max_pair_slots or max(MIN_PAIR_SLOTS, pair_slots_per_document * documents)


# The parameters a budget refusal names ({p0}...): by config field, or by flag on the command line.
BUDGET_PARAMS = ("max_pair_slots", "pair_slots_per_document", "bucket_policy", "hot_bucket_size")


def budget_advice(sizes: list[tuple[int, int]], budget: int, params: CandidateParams) -> str:
    """What brings a band join over its budget within it, from the histogram (bucket size, number of
    buckets) of the buckets of two or more, as a template naming BUDGET_PARAMS. The star policy
    links only buckets over hot_bucket_size to their first member (size - 1 slots); below it a
    bucket still makes all its pairs, so many buckets of a few hundred documents overrun the budget
    under star too: the advice names the largest hot_bucket_size that fits."""
    size = np.array([s for s, _ in sizes] or [2], dtype=np.int64)
    count = np.array([n for _, n in sizes] or [0], dtype=np.int64)
    order = np.argsort(size)
    size, count = size[order], count[order]
    all_pairs, star = count * (size * (size - 1) // 2), count * (size - 1)
    # hot_bucket_size from size[i] up to size[i + 1] - 1: buckets up to size[i] make all their pairs,
    # the larger ones star edges (the first entry: every bucket starred)
    slots = np.r_[star.sum(), np.cumsum(all_pairs) + (star.sum() - np.cumsum(star))]
    highest = np.r_[size - 1, max(params.hot_bucket_size, int(size[-1]))]
    rest = "strip the shared boilerplate from the input, or raise the budget ({p0})"
    if slots[0] > budget:
        return f"Even {{p2}}='star' with {{p3}} 2 exceeds the budget: {rest}"
    hot = max(2, int(highest[slots <= budget].max()))
    if params.bucket_policy != "star" and hot >= params.hot_bucket_size:
        return f"Set {{p2}}='star' to link hot buckets to their first member, {rest}"
    return (
        f"{{p2}}='star' links only buckets over {{p3}} ({params.hot_bucket_size}) to their first member: set "
        f"{{p2}}='star' with {{p3}} {hot}, {rest}"
    )


def budget_error(
    slots: int,
    budget: int,
    params: CandidateParams,
    documents: int,
    largest: str,
    sizes: list[tuple[int, int]],
    then: str = "",
) -> ParamAdvice:
    """The refusal of a band join over its budget, one for every engine and the update: `largest`
    says what the largest bucket holds (its size, and its key and first members where known),
    `then` what follows the advice."""
    how = (
        "{p0}"
        if params.max_pair_slots
        else f"{params.pair_slots_per_document:,} per document x {documents:,} documents ({{p1}})"
    )
    return ParamAdvice(
        BUDGET_PARAMS,
        f"candidate join would create {slots:,} pair slots, over the budget of {budget:,} ({how}); the largest "
        "bucket holds {largest}: text they all share, such as boilerplate. "
        f"{budget_advice(sizes, budget, params)}{{then}}",
        largest=largest,  # (doc_ids, given as they are)
        then=then,
    )


def stage_candidate_pairs(store: Store, params: CandidateParams | None = None) -> StageResult:
    """Candidate pairs through the contract (default parameters when none are given)."""
    return DUCKDB.run("candidate_pairs", store, params)


@DUCKDB.implements("candidate_pairs")
def candidate_pairs(run: StageRun) -> StageOutput:
    """Pairs of documents sharing at least one band key, left_doc_id < right_doc_id.

    Before joining, the pair slots every bucket would create are counted. With the `fail`
    policy a total over the budget (max_pair_slots, or when 0 pair_slots_per_document x
    documents, see pair_slot_budget) stops the stage before the join. With `star`, buckets
    larger than hot_bucket_size link each member to the bucket's first doc_id only (linear in
    the bucket; the exact Jaccard still verifies every edge), and the budget applies to the
    slots that remain.
    """
    store, params = run.store, run.params
    max_pair_slots, pair_slots_per_document = params.max_pair_slots, params.pair_slots_per_document
    bucket_policy, hot_bucket_size = params.bucket_policy, params.hot_bucket_size
    require_unique_doc_ids(store)
    con = connect(store)
    bm = store.scan_sql("band_memberships")
    docs = store.scan_sql("documents")
    if params.candidate_scope == "domain":
        # A band key per domain: the key mixed with the page's domain, so buckets (and their
        # budget and policies) never hold two domains; pairs are filtered on the domain as well.
        con.execute(f"""CREATE TEMP VIEW scoped_bands AS
            SELECT m.doc_id, m.band_index, CAST(hash(m.band_hash, d.domain) >> 1 AS BIGINT) AS band_hash
              FROM {bm} m JOIN (SELECT doc_id, domain FROM {docs}) d USING (doc_id)""")
        bm = "scoped_bands"
    hot_limit = hot_bucket_size if bucket_policy == "star" else None
    con.execute(f"CREATE TEMP TABLE buckets AS {bucket_sizes_sql(bm, with_hub=hot_limit is not None)}")
    totals = bucket_totals(con, "buckets", hot_bucket_size)
    slots = totals["all_pairs_slots"] if hot_limit is None else totals["star_slots"] + totals["small_slots"]
    documents = scalar(con, f"SELECT count(*) FROM {docs}")
    budget = pair_slot_budget(max_pair_slots, pair_slots_per_document, documents)
    if slots > budget:
        band, key, sample = con.execute(f"""
            WITH largest AS (SELECT band_index, band_hash FROM buckets
                              ORDER BY size DESC, band_index, band_hash LIMIT 1)
            SELECT l.band_index, l.band_hash, list(m.doc_id ORDER BY m.doc_id)[1:3]
              FROM largest l JOIN {bm} m USING (band_index, band_hash)
             GROUP BY l.band_index, l.band_hash""").fetchall()[0]
        largest = f"{totals['max_bucket_size']:,} documents (band {band}, key {key}; e.g. {', '.join(sample)})"
        sizes = con.execute("SELECT size, count(*) FROM buckets GROUP BY size").fetchall()
        raise budget_error(slots, budget, params, documents, largest, sizes)
    # The join runs over document numbers, not doc_ids: each document of a shared bucket is
    # numbered in doc_id order, so that a pair of numbers orders as its pair of doc_ids, and the
    # links and their GROUP BY hold two integers instead of two strings (the stage's memory and
    # spill volume at millions of pages); the doc_ids and domains are joined back once per pair.
    con.execute(f"""CREATE TEMP TABLE shared AS  -- band rows in buckets of two or more
        SELECT m.doc_id, m.band_index, m.band_hash FROM {bm} m
          SEMI JOIN buckets k ON m.band_index = k.band_index AND m.band_hash = k.band_hash""")
    con.execute(f"""CREATE TEMP TABLE numbered AS
        SELECT s.doc_id, d.domain, CAST(row_number() OVER (ORDER BY s.doc_id) AS INTEGER) AS node
          FROM (SELECT DISTINCT doc_id FROM shared) s JOIN (SELECT doc_id, domain FROM {docs}) d USING (doc_id)""")
    con.execute("""CREATE TEMP TABLE shared_nodes AS
        SELECT n.node, s.band_index, s.band_hash FROM shared s JOIN numbered n USING (doc_id)""")
    con.execute("DROP TABLE shared")
    star_edges = ""
    small_filter = ""
    if hot_limit is not None:
        small_filter = (
            f"AND NOT EXISTS (SELECT 1 FROM buckets h WHERE h.size > {hot_limit} "
            "AND h.band_index = a.band_index AND h.band_hash = a.band_hash)"
        )
        star_edges = f"""UNION ALL
            SELECT hub.node, m.node FROM shared_nodes m JOIN buckets h
              ON m.band_index = h.band_index AND m.band_hash = h.band_hash
              JOIN numbered hub ON hub.doc_id = h.hub
             WHERE h.size > {hot_limit} AND m.node > hub.node"""
    con.execute(f"""CREATE TEMP TABLE pairs AS
        WITH links AS (
            SELECT a.node AS left_node, b.node AS right_node
              FROM shared_nodes a JOIN shared_nodes b
                ON a.band_index = b.band_index AND a.band_hash = b.band_hash AND a.node < b.node
             WHERE true {small_filter}
            {star_edges})
        SELECT left_node, right_node, CAST(count(*) AS INTEGER) AS shared_bands
          FROM links GROUP BY left_node, right_node""")
    relation = con.sql(f"""
        SELECT l.doc_id AS left_doc_id, r.doc_id AS right_doc_id, p.shared_bands,
               l.domain AS left_domain, r.domain AS right_domain,
               l.domain IS DISTINCT FROM r.domain AS cross_domain
          FROM pairs p JOIN numbered l ON l.node = p.left_node
                       JOIN numbered r ON r.node = p.right_node
         {"WHERE l.domain IS NOT DISTINCT FROM r.domain" if params.candidate_scope == "domain" else ""}
         ORDER BY p.left_node, p.right_node""")
    run.derive(budget=budget)
    rows = write_relation(store.path("candidate_pairs"), relation, run.parameters)
    cross = scalar(con, f"SELECT count(*) FROM {store.scan_sql('candidate_pairs')} WHERE cross_domain")
    stats = candidate_figures(rows, documents, cross, slots, totals)
    write_candidate_summary(store, rows, stats)
    con.execute("SET SESSION preserve_insertion_order = true")  # the files keep the queries' ORDER BY
    create_collision_top(con, bm, sizes="buckets")
    write_csv(
        report_path(store, "collision_buckets.csv"),
        con.sql("SELECT band_index, band_hash, size, doc_ids FROM top ORDER BY size DESC, band_index, band_hash"),
    )
    if params.candidate_scope == "global":  # the state counts the band rows' own buckets, not domain-scoped ones
        folder = kept_dir(store)
        save_table(con, "top", folder / COLLISION_TOP_FILE)
        summary = {"candidate_pairs": file_identity(store.path("candidate_pairs")), "hot_bucket_size": hot_bucket_size}
        write_text(folder / BUCKET_SUMMARY, json.dumps({**summary, "figures": totals}, sort_keys=True))
    con.close()
    return StageOutput(rows, stats)


def candidate_figures(rows: int, documents: int, cross: int, slots: int, totals: dict[str, int]) -> dict[str, Any]:
    """candidate_pairs' figures (every engine and the update): `totals` as bucket_totals gives them."""
    possible = documents * (documents - 1) // 2
    return {
        "documents": documents,
        "possible_pairs": possible,
        "candidate_reduction_ratio": round(1 - rows / possible, 4) if possible else 0.0,
        "cross_domain_candidates": cross,
        "same_domain_candidates": rows - cross,
        "collision_buckets": totals["collision_buckets"],
        "max_bucket_size": totals["max_bucket_size"],
        "pair_slots": slots,
        "all_pairs_slots": totals["all_pairs_slots"],
    }


def write_candidate_summary(store: Store, rows: int, figures: dict[str, Any]) -> None:
    """candidate_summary.csv, published with the run (engine.publish): figures only, no timings,
    so that the same input gives the same file."""
    con = connect()
    try:
        con.execute("SET SESSION preserve_insertion_order = true")
        summary = ", ".join(f"('{k}', '{v}')" for k, v in {"rows": rows, **figures}.items())
        write_csv(
            report_path(store, "candidate_summary.csv"), con.sql(f"SELECT * FROM (VALUES {summary}) t(metric, value)")
        )
    finally:
        con.close()


def require_unique_doc_ids(store: Store, con=None, documents: str | None = None) -> None:
    """Each day is validated alone, so a doc_id repeated on two days is caught here. `documents`:
    a table of `con` holding every stored document's doc_id (default: the documents files)."""
    own = con is None
    con = connect() if own else con
    day = "CAST(crawled_at AS VARCHAR)"
    dupes = con.execute(f"""SELECT doc_id, string_agg(DISTINCT {day}, ', ' ORDER BY {day})
        FROM {documents or store.scan_sql("documents")} GROUP BY doc_id HAVING count(*) > 1 ORDER BY doc_id LIMIT 5
        """).fetchall()
    if own:
        con.close()
    if dupes:
        listed = "; ".join(f"{d!r} on {days}" for d, days in dupes)
        raise WebdedupError(f"doc_id must be unique across crawl days; repeated: {listed}")
