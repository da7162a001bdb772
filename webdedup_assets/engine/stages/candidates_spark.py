"""candidate_pairs on Spark: bucket sizes first (budget and hot-bucket policy exactly as the
DuckDB engine's engine/stages/candidates.py), then a skew-safe self-join of the band rows."""

from __future__ import annotations

import pyarrow as pa

from ...errors import WebdedupError
from ...params import CandidateParams
from ..publish import report_path
from ..spark.engine import SPARK, session_of
from ..spark.io import read_asset, write_asset, write_report
from ..stage import StageOutput, StageRun
from .candidates import COLLISION_TOP, budget_error, candidate_figures, pair_slot_budget, write_candidate_summary

# Buckets larger than this are joined block by block (by the document's number): the join pairs
# block with block, so no task ever holds more than BLOCK x BLOCK pairs of one bucket. Smaller
# buckets are joined whole, where the bucket sizes' shuffle left them (no shuffle of their own).
BLOCK = 1024
# Salts tried for the documents' numbers (xxhash64 of salt and doc_id) before giving up: each
# try fails only when two doc_ids share a 64-bit hash (about 3 % for 10^9 documents).
NUMBERING_SALTS = 8

CANDIDATE_SCHEMA = pa.schema(
    [
        ("left_doc_id", pa.string()),
        ("right_doc_id", pa.string()),
        ("shared_bands", pa.int32()),
        ("left_domain", pa.string()),
        ("right_domain", pa.string()),
        ("cross_domain", pa.bool_()),
    ]
)


def require_unique_doc_ids(docs) -> None:
    from pyspark.sql import functions as F

    dupes = docs.groupBy("doc_id").agg(F.count(F.lit(1)).alias("n")).where("n > 1").orderBy("doc_id").limit(5).collect()
    if dupes:
        listed = "; ".join(f"{r['doc_id']!r} x{r['n']}" for r in dupes)
        raise WebdedupError(f"doc_id must be unique across crawl days; repeated: {listed} (each on several days)")


def document_number(salt: int, doc_id="doc_id"):
    """A document's 64-bit number: its doc_id hashed with a salt (the same on every executor and
    in every task attempt, so the numbering is deterministic under retries)."""
    from pyspark.sql import functions as F

    return F.xxhash64(F.lit(salt), doc_id)


def numbering_salt(docs) -> tuple[int, int]:
    """The first salt that numbers every document apart, and the number of documents, checking in
    the same aggregation that no doc_id is repeated (a repeat is the error of require_unique_doc_ids)."""
    from pyspark.sql import functions as F

    shared_number = F.col("n") > 1
    for salt in range(NUMBERING_SALTS):
        shared = (
            docs.groupBy(document_number(salt).alias("node"))
            .agg(F.count(F.lit(1)).alias("n"), F.min("doc_id").alias("first"), F.max("doc_id").alias("last"))
            .agg(
                F.coalesce(F.sum("n"), F.lit(0)).alias("documents"),
                F.count(F.when(shared_number, 1)).alias("numbers"),
                F.count(F.when(shared_number & (F.col("first") != F.col("last")), 1)).alias("clashes"),
            )
            .first()
        )
        if shared["numbers"] > shared["clashes"]:  # a number shared by one doc_id only: a repeated doc_id
            require_unique_doc_ids(docs)
        if not shared["clashes"]:
            return salt, int(shared["documents"])
    raise WebdedupError(f"candidate_pairs: no salt of {NUMBERING_SALTS} numbers the documents apart")


@SPARK.implements("candidate_pairs")
def candidate_pairs(run: StageRun) -> StageOutput:
    """Pairs of documents sharing at least one band key, left_doc_id < right_doc_id (see the
    DuckDB implementation for the budget and the policies: the same figures decide here).

    With candidate_scope=domain the bucket key is (band_index, band_hash, domain) instead of
    DuckDB's band_hash mixed with the domain by DuckDB's hash(): the same buckets and pairs,
    but the keys named in errors and collision_buckets.csv are the unmixed band hashes."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spark = session_of(run)
    store, params = run.store, run.params
    assert isinstance(params, CandidateParams)
    docs = read_asset(spark, store, "documents", ["doc_id", "domain"])
    salt, documents = numbering_salt(docs)
    bm = read_asset(spark, store, "band_memberships", ["doc_id", "band_index", "band_hash"])
    # band_hash first: the sorts of the window and the joins below compare a prefix of their first
    # key column, which band_hash's random 64 bits decide at once and band_index's 26 values do not.
    key = ["band_hash", "band_index"]
    if params.candidate_scope == "domain":
        bm = bm.join(docs, "doc_id").select(
            "doc_id", "band_index", "band_hash", F.coalesce("domain", F.lit("")).alias("scope")
        )
        key = ["band_hash", "band_index", "scope"]
    star = params.bucket_policy == "star"
    hot_limit = params.hot_bucket_size if star else None
    # The band rows of buckets of two or more, each with its bucket's size, over document numbers
    # (the star policy's hub, the bucket's first doc_id, is the only string it carries): one
    # shuffle of the band rows, whose partitioning the join of the buckets' members below reuses.
    bucket = Window.partitionBy(*key)
    by_bucket = [F.count(F.lit(1)).over(bucket).alias("size"), F.min("node").over(bucket).alias("first")]
    if star:
        by_bucket.append(document_number(salt, F.min("doc_id").over(bucket)).alias("hub"))
    sized = bm.withColumn("node", document_number(salt)).select(*key, "node", *by_bucket).where("size > 1").persist()
    buckets = sized.where(F.col("node") == F.col("first")).select(*key, "size")  # one row per bucket
    slots_expr = F.expr("size * (size - 1) div 2")
    totals = buckets.agg(
        F.coalesce(F.sum(slots_expr), F.lit(0)).alias("all_pairs"),
        F.coalesce(F.max("size"), F.lit(0)).alias("max_bucket"),
        F.count(F.lit(1)).alias("buckets"),
        F.coalesce(F.sum(F.when(F.col("size") > (hot_limit or 0), F.col("size") - 1)), F.lit(0)).alias("star"),
        F.coalesce(F.sum(F.when(F.col("size") <= (hot_limit or 0), slots_expr)), F.lit(0)).alias("small"),
    ).first()
    all_pairs_slots, max_bucket, n_buckets = int(totals["all_pairs"]), int(totals["max_bucket"]), int(totals["buckets"])
    slots = all_pairs_slots if hot_limit is None else int(totals["star"]) + int(totals["small"])
    budget = pair_slot_budget(params.max_pair_slots, params.pair_slots_per_document, documents)
    if slots > budget:
        largest = buckets.orderBy(F.desc("size"), "band_index", "band_hash").limit(1).first()
        match = bm
        for column in key:
            match = match.where(F.col(column) == largest[column])
        sample = [r["doc_id"] for r in match.select("doc_id").orderBy("doc_id").limit(3).collect()]
        sizes = [(r["size"], r["count"]) for r in buckets.groupBy("size").count().collect()]  # one row per size
        sized.unpersist()
        band, key_value = largest["band_index"], largest["band_hash"]
        largest = f"{max_bucket:,} documents (band {band}, key {key_value}; e.g. {', '.join(sample)})"
        raise budget_error(slots, budget, params, documents, largest, sizes)

    small = sized.where(F.col("size") <= hot_limit) if hot_limit is not None else sized
    # A bucket of at most BLOCK members: every two of them meet in the task holding the bucket.
    whole = small.where(F.col("size") <= BLOCK)
    links = (
        whole.select(*key, F.col("node").alias("left_node"))
        .join(whole.select(*key, F.col("node").alias("right_node")), key)
        .where(F.col("left_node") < F.col("right_node"))
        .select("left_node", "right_node")
    )
    # A larger bucket's members are spread over its blocks by their number. Block p meets block q
    # (p <= q) at key (p, q): the left side goes to every q >= p, the right side to every p <= q;
    # so every two members of a bucket meet in one task.
    large = small.where(F.col("size") > BLOCK).withColumn("blocks", F.ceil(F.col("size") / BLOCK).cast("int"))
    large = large.withColumn("block", F.pmod(F.col("node"), F.col("blocks")).cast("int"))
    left = large.select(
        *key,
        F.col("node").alias("left_node"),
        F.col("block").alias("p"),
        F.explode(F.sequence(F.col("block"), F.col("blocks") - 1)).alias("q"),
    )
    right = large.select(
        *key,
        F.col("node").alias("right_node"),
        F.explode(F.sequence(F.lit(0), F.col("block"))).alias("p"),
        F.col("block").alias("q"),
    )
    # Across two blocks a pair meets once in either orientation, within a block twice: keep one.
    blocked = (
        left.join(right, [*key, "p", "q"])
        .where(
            ((F.col("p") < F.col("q")) & (F.col("left_node") != F.col("right_node")))
            | (F.col("left_node") < F.col("right_node"))
        )
        .select(
            F.least("left_node", "right_node").alias("left_node"),
            F.greatest("left_node", "right_node").alias("right_node"),
        )
    )
    links = links.unionByName(blocked)
    if hot_limit is not None:
        hubs = (
            sized.where(F.col("size") > hot_limit)
            .where(F.col("node") != F.col("hub"))
            .select(F.least("hub", "node").alias("left_node"), F.greatest("hub", "node").alias("right_node"))
        )
        links = links.unionByName(hubs)
    pairs = links.groupBy("left_node", "right_node").agg(F.count(F.lit(1)).cast("int").alias("shared_bands"))
    # The doc_ids and domains joined back once per pair, each pair in doc_id order.
    numbered = docs.select(document_number(salt).alias("node"), "doc_id", "domain")
    one = numbered.select(
        F.col("node").alias("left_node"), F.col("doc_id").alias("a_id"), F.col("domain").alias("a_domain")
    )
    other = numbered.select(
        F.col("node").alias("right_node"), F.col("doc_id").alias("b_id"), F.col("domain").alias("b_domain")
    )
    a_first = F.col("a_id") < F.col("b_id")
    result = (
        pairs.join(one, "left_node")
        .join(other, "right_node")
        .select(
            F.least("a_id", "b_id").alias("left_doc_id"),
            F.greatest("a_id", "b_id").alias("right_doc_id"),
            "shared_bands",
            F.when(a_first, F.col("a_domain")).otherwise(F.col("b_domain")).alias("left_domain"),
            F.when(a_first, F.col("b_domain")).otherwise(F.col("a_domain")).alias("right_domain"),
            (~F.col("a_domain").eqNullSafe(F.col("b_domain"))).alias("cross_domain"),
        )
    )
    if params.candidate_scope == "domain":
        result = result.where(~F.col("cross_domain"))
    run.derive(budget=budget)
    result = result.orderBy("left_doc_id", "right_doc_id").persist()
    rows = write_asset(result, store, "candidate_pairs", CANDIDATE_SCHEMA, run.parameters)
    cross = result.where("cross_domain").count()
    result.unpersist()
    totals = {"collision_buckets": n_buckets, "max_bucket_size": max_bucket, "all_pairs_slots": all_pairs_slots}
    figures = candidate_figures(rows, documents, cross, slots, totals)
    write_candidate_summary(store, rows, figures)  # the reports as the DuckDB engine writes them
    top = buckets.orderBy(F.desc("size"), "band_index", "band_hash").limit(COLLISION_TOP)
    members = (
        bm.join(F.broadcast(top.select(*key)), key)
        .groupBy(*key)
        .agg(F.array_join(F.array_sort(F.collect_list("doc_id")), ";").alias("doc_ids"))
    )
    report = (
        top.join(members, key)
        .select("band_index", "band_hash", "size", "doc_ids")
        .orderBy(F.desc("size"), "band_index", "band_hash")
        .coalesce(1)
        .sortWithinPartitions(F.desc("size"), "band_index", "band_hash")
    )
    write_report(report, report_path(store, "collision_buckets.csv"), store.asset_dir("candidate_pairs"))
    sized.unpersist()
    return StageOutput(rows, figures)
