"""scored_pairs and duplicate_pairs on Spark, with memory bounded per task whatever the length of
the pages and the number of candidates.

The candidates' documents are split into `groups` by a hash of doc_id, enough groups that one
group's bodies and shingle sets fit GROUP_BYTES and one block of pairs holds about PAIRS_PER_BLOCK;
a pair belongs to the block of its two groups. Each document's body is sent, with its signature, to
the blocks its pairs are in; a cogrouped applyInArrow then scores one block at a time: it computes
the shingle sets of the bodies of its at most two groups (core.fingerprint.shingle_sets, the
compiled kernel) and scores its pairs against them (engine.shingle_sets.ShingleSets: the exact
Jaccard DuckDB computes; the MinHash estimate or SimHash Hamming distance and the reason by
scoring.compare_signatures and decide, as DuckDB). The bodies travel rather than the sets: text
compresses in the shuffle and a set of 64-bit hashes does not. A body travels to the distinct blocks
of its pairs, not to every pair (a page with hundreds of candidates is sent at most `groups` times)
nor to every block of its group (most pages have one or two candidates: one or two copies).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from ...core.fingerprint import shingling, signature_width
from ...params import ScoringParams
from ..spark.engine import SPARK, session_of
from ..spark.io import read_asset, write_asset
from ..stage import StageOutput, StageRun
from .scoring import SCORED_SCHEMA, check_decision, duplicate_schema, scored_schema

# One group's bodies and shingle sets held by a scoring task (counted as 16 bytes a shingle: 8 of
# its hash, about as much of text); it holds two groups at most.
GROUP_BYTES = 64 << 20
# Pairs of one block held by a scoring task (strings of both doc_ids and domains: ~200 bytes each).
PAIRS_PER_BLOCK = 250_000


def scoring_groups(group_bytes: int, pairs: int) -> int:
    """Groups of candidate documents: one group's bodies and sets within GROUP_BYTES, and one
    block of two groups (about 2 * pairs / groups^2 of the pairs) within PAIRS_PER_BLOCK."""
    by_bytes = math.ceil(group_bytes / GROUP_BYTES)
    by_pairs = math.ceil(math.sqrt(2 * pairs / PAIRS_PER_BLOCK))
    return max(1, by_bytes, by_pairs)


def _large_list_values(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets) of a list<bigint> column, as one array."""
    combined = column.cast(pa.large_list(pa.int64())).combine_chunks()
    return np.asarray(combined.values.to_numpy(zero_copy_only=False)), np.asarray(combined.offsets, np.int64)


def _score_block(scoring: ScoringParams, fingerprint: dict, banding: dict | None):
    """One block: its pairs (Table) against the documents of its one or two groups (Table: doc_id,
    signature, body), whose shingle sets are computed here; scored in the columns and with the
    decisions of the DuckDB engine (compare_signatures, decide)."""
    shingle_size, unit = shingling(fingerprint)

    def score(pairs: pa.Table, documents: pa.Table) -> pa.Table:
        from ...core.fingerprint import shingle_sets
        from ..shingle_sets import ShingleSets
        from .scoring import compare_signatures, decide

        schema = scored_schema(fingerprint)
        if not pairs.num_rows:
            return schema.empty_table()
        flat, offsets = shingle_sets(documents.column("body").combine_chunks(), shingle_size, unit)
        offsets = np.asarray(offsets, np.int64)
        doc_ids = documents.column("doc_id").combine_chunks()
        known = ShingleSets(doc_ids, flat.view(np.uint64), offsets[:-1], offsets[1:])
        left, right = known.nodes(pairs.column("left_doc_id")), known.nodes(pairs.column("right_doc_id"))
        exact = known.jaccard(left, right)
        width = signature_width(fingerprint)
        signatures = _large_list_values(documents.column("signature"))[0].astype(np.uint32).reshape(-1, width)
        compared = compare_signatures(signatures[left], signatures[right], fingerprint, banding)
        columns = {
            **{name: pairs.column(name) for name in SCORED_SCHEMA.names[:6]},
            "exact_jaccard": pa.array(exact),
            **compared,
            **decide(exact, compared, scoring),
        }
        return pa.table([columns[name] for name in schema.names], names=schema.names)

    return score


@SPARK.implements("scored_pairs")
def scored_pairs(run: StageRun) -> StageOutput:
    """Exact shingle Jaccard and the MinHash estimate (of SimHash: the Hamming distance) for every
    candidate pair, block by block (see the module's docstring)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    fingerprint = run.upstream["fingerprinted"]["fingerprint"]
    banding = run.upstream["candidate_pairs"].get("banding")
    schema = scored_schema(fingerprint)
    check_decision(fingerprint, run.params)
    spark = session_of(run)
    store = run.store
    pairs = read_asset(spark, store, "candidate_pairs", SCORED_SCHEMA.names[:6])
    members = (
        pairs.select(F.col("left_doc_id").alias("doc_id"))
        .union(pairs.select(F.col("right_doc_id").alias("doc_id")))
        .distinct()
    )
    fingerprints = read_asset(spark, store, "fingerprinted", ["doc_id", "shingle_count", "signature"])
    member_fingerprints = members.join(fingerprints, "doc_id").persist()
    sized = member_fingerprints.agg(
        F.count(F.lit(1)).alias("members"), F.coalesce(F.sum("shingle_count"), F.lit(0)).alias("shingles")
    ).first()
    groups = scoring_groups(16 * int(sized["shingles"]), pairs.count())

    def group_of(column: str):
        return F.pmod(F.xxhash64(column), F.lit(groups)).cast("int")

    def block_of(first, second):  # the block of two groups, in either order
        return F.least(first, second) * groups + F.greatest(first, second)

    blocked_pairs = pairs.withColumn("block", block_of(group_of("left_doc_id"), group_of("right_doc_id")))
    # Each member's set goes to the blocks its own pairs are in, not to all of its group's blocks:
    # at most `groups` copies for a page with many candidates, one or two for most pages.
    needed_in = (
        blocked_pairs.select(F.col("left_doc_id").alias("doc_id"), "block")
        .union(blocked_pairs.select(F.col("right_doc_id").alias("doc_id"), "block"))
        .groupBy("doc_id")
        .agg(F.array_distinct(F.collect_list("block")).alias("blocks"))
    )
    docs = read_asset(spark, store, "documents", ["doc_id", "body"])
    bodies = (
        member_fingerprints.select("doc_id", "signature")
        .join(needed_in, "doc_id")
        .join(docs, "doc_id")
        .select(F.explode("blocks").alias("block"), "doc_id", "signature", "body")
    )
    scored = (
        blocked_pairs.groupBy("block")
        .cogroup(bodies.groupBy("block"))
        .applyInArrow(_score_block(run.params, fingerprint, banding), from_arrow_schema(schema))
        .persist()  # scored once: the sort samples its input before it reads it
    )
    ordered = scored.orderBy("left_doc_id", "right_doc_id")
    rows = write_asset(ordered, store, "scored_pairs", schema, run.parameters)
    by_reason = {r["reason"]: r["n"] for r in scored.groupBy("reason").agg(F.count(F.lit(1)).alias("n")).collect()}
    figures = {
        "duplicates": scored.where("is_duplicate").count(),
        "reasons": by_reason,
        "member_documents": int(sized["members"]),
        "groups": groups,
    }
    scored.unpersist()
    member_fingerprints.unpersist()
    return StageOutput(rows, figures)


@SPARK.implements("duplicate_pairs")
def duplicate_pairs(run: StageRun) -> StageOutput:
    """The scored pairs scored_pairs decided are duplicates (as on DuckDB)."""
    from pyspark.sql import functions as F

    spark = session_of(run)
    store = run.store
    schema = duplicate_schema(run.upstream["scored_pairs"]["fingerprint"])
    duplicates = (
        read_asset(spark, store, "scored_pairs")
        .where(F.col("is_duplicate"))
        .withColumn("kind", F.when(F.col("exact_jaccard") >= 1.0, "exact").otherwise("near"))
        .select(*schema.names)
        .orderBy("left_doc_id", "right_doc_id")
        .persist()
    )
    rows = write_asset(duplicates, store, "duplicate_pairs", schema, run.parameters)
    counts = duplicates.agg(
        F.count(F.when(F.col("kind") == "exact", 1)).alias("exact"),
        F.count(F.when(F.col("cross_domain"), 1)).alias("cross"),
    ).first()
    duplicates.unpersist()
    exact, cross = int(counts["exact"]), int(counts["cross"])
    figures = {
        "exact_duplicate_pairs": exact,
        "near_duplicate_pairs": rows - exact,
        "cross_domain_duplicates": cross,
        "same_domain_duplicates": rows - cross,
    }
    return StageOutput(rows, figures)
