"""scored_pairs and duplicate_pairs on Spark: shingle sets recomputed in the executors from the
documents (core.fingerprint.shingle_sets, the same compiled kernel), exact Jaccard by
core.sets.jaccard_blocks, MinHash estimate by core.minhash.estimate_jaccard."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ...core.fingerprint import shingling
from ..scoring import DUPLICATE_SCHEMA, SCORED_SCHEMA
from ..stage import StageOutput, StageRun
from . import SPARK, session_of
from .io import read_asset, write_asset


def _shingles(shingle_size: int, unit: str):
    def compute(batches):
        from ...core.fingerprint import shingle_sets

        for batch in batches:
            flat, offsets = shingle_sets(batch.column("body"), shingle_size, unit)
            sets = pa.LargeListArray.from_arrays(pa.array(np.asarray(offsets, np.int64)), pa.array(flat.view(np.int64)))
            yield pa.record_batch(
                [batch.column("doc_id"), sets.cast(pa.list_(pa.int64()))], names=["doc_id", "shingles"]
            )

    return compute


def _flat_sets(column: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    column = column.cast(pa.large_list(pa.int64()))
    offsets = np.asarray(column.offsets, dtype=np.int64)
    flat = np.asarray(column.values.to_numpy(zero_copy_only=False), dtype=np.int64).view(np.uint64)
    return flat, offsets[:-1].copy(), offsets[1:].copy()


def _score(threshold: float, num_perm: int):
    def compute(batches):
        from ...core.minhash import estimate_jaccard
        from ...core.sets import jaccard_blocks
        from ..scoring import reasons

        for batch in batches:
            n = batch.num_rows
            if not n:
                continue
            index = np.arange(n, dtype=np.int64)
            exact = np.zeros(n, dtype=np.float64)
            jaccard_blocks(
                *_flat_sets(batch.column("left_shingles")),
                *_flat_sets(batch.column("right_shingles")),
                index,
                index,
                exact,
            )
            signatures = [
                np.asarray(batch.column(c).cast(pa.large_list(pa.int64())).values.to_numpy(zero_copy_only=False))
                .astype(np.uint32)
                .reshape(n, num_perm)
                for c in ("left_signature", "right_signature")
            ]
            estimate = estimate_jaccard(*signatures)
            yield pa.record_batch(
                [
                    batch.column("left_doc_id"),
                    batch.column("right_doc_id"),
                    batch.column("left_domain"),
                    batch.column("right_domain"),
                    batch.column("cross_domain"),
                    batch.column("shared_bands"),
                    pa.array(exact),
                    pa.array(estimate),
                    pa.array(exact >= threshold),
                    pa.array(reasons(exact, estimate, threshold)),
                ],
                names=SCORED_SCHEMA.names,
            )

    return compute


SCORED_DDL = (
    "left_doc_id string, right_doc_id string, left_domain string, right_domain string, cross_domain boolean, "
    "shared_bands int, exact_jaccard double, minhash_estimate double, is_duplicate boolean, reason string"
)


@SPARK.implements("scored_pairs")
def scored_pairs(run: StageRun) -> StageOutput:
    """Exact shingle Jaccard and MinHash estimate for every candidate pair. The candidates'
    documents are shingled once each in the executors; each pair meets the two sets (and the
    two signatures) through joins, and is scored in Arrow batches."""
    from pyspark.sql import functions as F

    spark = session_of(run)
    store, threshold = run.store, run.params.threshold
    fingerprint = run.upstream["fingerprinted"]["fingerprint"]
    (shingle_size, unit), num_perm = shingling(fingerprint), fingerprint["num_perm"]
    pairs = read_asset(spark, store, "candidate_pairs")
    members = (
        pairs.select(F.col("left_doc_id").alias("doc_id"))
        .union(pairs.select(F.col("right_doc_id").alias("doc_id")))
        .distinct()
    )
    docs = read_asset(spark, store, "documents", ["doc_id", "body"])
    sets = members.join(docs, "doc_id").mapInArrow(
        _shingles(shingle_size, unit), "doc_id string, shingles array<bigint>"
    )
    sigs = read_asset(spark, store, "fingerprinted", ["doc_id", "signature"]).join(members, "doc_id")
    side = {}
    for name in ("left", "right"):
        side[name] = sets.join(sigs, "doc_id").select(
            F.col("doc_id").alias(f"{name}_doc_id"),
            F.col("shingles").alias(f"{name}_shingles"),
            F.col("signature").alias(f"{name}_signature"),
        )
    joined = pairs.join(side["left"], "left_doc_id").join(side["right"], "right_doc_id")
    scored = joined.mapInArrow(_score(threshold, num_perm), SCORED_DDL).orderBy("left_doc_id", "right_doc_id")
    scored = scored.persist()
    rows = write_asset(scored, store, "scored_pairs", SCORED_SCHEMA, run.parameters)
    by_reason = {r["reason"]: r["n"] for r in scored.groupBy("reason").agg(F.count(F.lit(1)).alias("n")).collect()}
    figures = {
        "duplicates": scored.where("is_duplicate").count(),
        "reasons": by_reason,
        "member_documents": members.count(),
    }
    scored.unpersist()
    return StageOutput(rows, figures)


@SPARK.implements("duplicate_pairs")
def duplicate_pairs(run: StageRun) -> StageOutput:
    """Scored pairs whose exact Jaccard reaches the one threshold (as on DuckDB)."""
    from pyspark.sql import functions as F

    spark = session_of(run)
    store, threshold = run.store, float(run.params.threshold)
    duplicates = (
        read_asset(spark, store, "scored_pairs")
        .where(F.col("exact_jaccard") >= F.lit(threshold))
        .withColumn("kind", F.when(F.col("exact_jaccard") >= 1.0, "exact").otherwise("near"))
        .select(*DUPLICATE_SCHEMA.names)
        .orderBy("left_doc_id", "right_doc_id")
        .persist()
    )
    rows = write_asset(duplicates, store, "duplicate_pairs", DUPLICATE_SCHEMA, run.parameters)
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
