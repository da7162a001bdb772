"""clusters and deduped_documents on Spark.

Connected components by alternating large-star and small-star rounds (Kiveris et al.,
"Connected Components in MapReduce and Beyond", SoCC 2014) on DataFrames of doc_id edges: no
GraphFrames, no generated node ids (the labels are the doc_ids themselves, so the component's
label is its smallest doc_id and cluster_id = 'cluster-' + that doc_id, stable when unrelated
documents arrive). Each half-round's edges are materialized with a local checkpoint (the plan
stays one step deep), every CHECKPOINT_EVERY rounds with a reliable one. The loop stops when
every component is a star around its smallest member: no node is both a leaf and a centre, and
no leaf has two centres.
"""

from __future__ import annotations

import math
import shutil
import uuid
from pathlib import Path

import pyarrow as pa

from ...core.ranking import REPRESENTATIVE_POLICIES, domain_rank_sql, policy_order_by, preferred_domains
from ...errors import WebdedupError
from ...params import RepresentativeParams
from ..diagnostics import write_cluster_diagnostics
from ..publish import report_path
from ..spark.engine import SPARK, session_of
from ..spark.io import read_asset, write_asset, write_report
from ..stage import StageOutput, StageRun
from .clustering import provenance_columns, ranking_columns
from .documents import stored_extra_columns

CHECKPOINT_EVERY = 4

CLUSTER_SCHEMA = pa.schema([("doc_id", pa.string()), ("cluster_id", pa.string()), ("cluster_size", pa.int64())])


def round_limit(nodes: int) -> int:
    """Rounds allowed before the loop is declared stuck: alternating large/small-star rounds
    converge in O(log n) (the paper proves O(log^2 n) for its two-phase variant); the bound here
    is generous, 2 x log2(n) + 8, and reaching it is an error, never a silent wrong answer."""
    return 2 * math.ceil(math.log2(max(2, nodes))) + 8


def _both(edges):
    from pyspark.sql import functions as F

    return edges.select("u", "v").union(edges.select(F.col("v").alias("u"), F.col("u").alias("v")))


def _large_star(edges):
    """Each node u links every larger neighbour v to m(u), the smallest of u and its neighbours."""
    from pyspark.sql import functions as F

    both = _both(edges)
    smallest = both.groupBy("u").agg(F.min("v").alias("m")).select("u", F.least("u", "m").alias("m"))
    return (
        both.where(F.col("v") > F.col("u"))
        .join(smallest, "u")
        .select(F.col("v").alias("u"), F.col("m").alias("v"))
        .distinct()
    )


def _small_star(edges):
    """Each node u links itself and its smaller neighbours to the smallest of them."""
    from pyspark.sql import functions as F

    lower = _both(edges).where(F.col("v") < F.col("u"))
    smallest = lower.groupBy("u").agg(F.min("v").alias("m"))
    linked = lower.join(smallest, "u")
    return (
        linked.where(F.col("v") != F.col("m"))
        .select(F.col("v").alias("u"), F.col("m").alias("v"))
        .union(smallest.select("u", F.col("m").alias("v")))
        .distinct()
    )


def _is_star_forest(edges) -> bool:
    """Edges (u, v) with v < u; the components are stars around their minimum when no node is
    both a leaf (u) and a centre (v) and no leaf has two centres (one aggregation, one job)."""
    from pyspark.sql import functions as F

    roles = edges.select(F.col("u").alias("node"), F.lit(1).alias("leaf"), F.lit(0).alias("centre")).union(
        edges.select(F.col("v").alias("node"), F.lit(0).alias("leaf"), F.lit(1).alias("centre"))
    )
    bad = (
        roles.groupBy("node")
        .agg(F.sum("leaf").alias("leaf"), F.max("centre").alias("centre"))
        .where((F.col("leaf") > 1) | ((F.col("leaf") > 0) & (F.col("centre") > 0)))
    )
    return bad.isEmpty()


def components(edges, nodes: int, reliable: bool = True):
    """(u, root) for every node of an edge, root = the smallest node of its component; and the
    number of rounds taken. `edges`: columns u, v (doc_ids), any orientation. `reliable`: every
    CHECKPOINT_EVERY rounds a reliable checkpoint (else local checkpoints only: the lineage is
    cut the same way, but a lost executor fails the stage instead of recomputing from the last
    reliable one)."""
    from pyspark.sql import functions as F

    current = (
        edges.select(F.greatest("u", "v").alias("u"), F.least("u", "v").alias("v"))
        .where("u != v")
        .distinct()
        .localCheckpoint(eager=True)
    )
    limit = round_limit(nodes)
    rounds = 0
    while not _is_star_forest(current):
        if rounds >= limit:
            raise WebdedupError(f"clusters: connected components did not converge in {limit} rounds")
        rounds += 1
        # Each half-round's edges are materialized and their lineage cut (a star step joins the
        # edges with an aggregate of themselves: uncut, the plan doubles with every step).
        large = _large_star(current).localCheckpoint(eager=True)
        small = _small_star(large)
        if reliable and rounds % CHECKPOINT_EVERY == 0:
            following = small.checkpoint(eager=True)  # reliable: written to the checkpoint dir
        else:
            following = small.localCheckpoint(eager=True)
        current.unpersist()
        large.unpersist()
        current = following
    return current, rounds


def shared_checkpoints(spark, root: Path) -> tuple[Path | None, bool]:
    """Where the reliable checkpoints go: (a folder made here for them, to remove after the
    stage, or None; whether there are reliable checkpoints at all).

    On a cluster they must be where every executor and the driver see them: unless
    spark.checkpoint.dir is set, a folder under the storage root (which the engine already
    requires to be shared). Local masters keep the session's local folder. Spark Connect has no
    SparkContext on this side and a client cannot set the server's checkpoint directory: the
    server's spark.checkpoint.dir if it has one, else no reliable checkpoints (local ones only)."""
    from ..spark.session import connect_mode

    if connect_mode(spark):
        return None, bool(spark.conf.get("spark.checkpoint.dir", None))
    context = spark.sparkContext
    if context.master.startswith("local") or context.getConf().get("spark.checkpoint.dir"):
        return None, True
    folder = root / f".spark-checkpoints-{uuid.uuid4().hex}"
    context.setCheckpointDir(str(folder))
    return folder, True


@SPARK.implements("clusters")
def clusters(run: StageRun) -> StageOutput:
    """Connected components over duplicate pairs; every document in exactly one cluster,
    cluster_id = 'cluster-' + the smallest doc_id of the component."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spark = session_of(run)
    store = run.store
    ids = read_asset(spark, store, "documents", ["doc_id"]).distinct()
    pairs = read_asset(spark, store, "duplicate_pairs", ["left_doc_id", "right_doc_id"])
    known = ids.select(F.col("doc_id").alias("d"))
    unknown = (
        pairs.join(known.withColumnRenamed("d", "left_doc_id"), "left_doc_id", "left_anti")
        .union(
            pairs.join(known.withColumnRenamed("d", "right_doc_id"), "right_doc_id", "left_anti").select(
                "left_doc_id", "right_doc_id"
            )
        )
        .distinct()
        .count()
    )
    if unknown:
        raise WebdedupError(
            f"{unknown} duplicate pair(s) name documents that are no longer in documents; "
            f"re-materialize the stages from fingerprinted on"
        )
    edges = pairs.select(F.col("left_doc_id").alias("u"), F.col("right_doc_id").alias("v"))
    n_edges = edges.count()
    checkpoints, reliable = shared_checkpoints(spark, store.root)
    try:  # the folder made for the checkpoints goes once nothing reads them, whatever happens
        stars, rounds = components(edges, max(2, 2 * n_edges), reliable=reliable)
        labelled = (
            ids.join(stars.select(F.col("u").alias("doc_id"), F.col("v").alias("root")), "doc_id", "left")
            .withColumn("cluster_id", F.concat(F.lit("cluster-"), F.coalesce("root", "doc_id")))
            .withColumn("cluster_size", F.count(F.lit(1)).over(Window.partitionBy("cluster_id")))
            .select("doc_id", "cluster_id", "cluster_size")
            .orderBy("doc_id")
            .persist()
        )
        rows = write_asset(labelled, store, "clusters", CLUSTER_SCHEMA, run.parameters)
        stars.unpersist()
        totals = labelled.agg(
            F.countDistinct("cluster_id").alias("clusters"),
            F.countDistinct(F.when(F.col("cluster_size") > 1, F.col("cluster_id"))).alias("dup"),
            F.count(F.when(F.col("cluster_size") == 1, 1)).alias("singletons"),
            F.coalesce(F.max("cluster_size"), F.lit(0)).alias("largest"),
        ).first()
        labelled.unpersist()
    finally:
        if checkpoints is not None:
            shutil.rmtree(checkpoints, ignore_errors=True)
    figures = {
        "clusters": int(totals["clusters"]),
        "duplicate_clusters": int(totals["dup"]),
        "singletons": int(totals["singletons"]),
        "max_cluster_size": int(totals["largest"]),
        "edges": n_edges,
        "rounds": rounds,
        "reliable_checkpoints": reliable,
    }
    return StageOutput(rows, figures)


def _order_columns(policy: str, prefer_domains: str = ""):
    from pyspark.sql import functions as F

    domains = preferred_domains(prefer_domains)
    columns = [F.expr(domain_rank_sql(domains)).asc()] if domains else []
    for name, direction in REPRESENTATIVE_POLICIES[policy]:
        # DuckDB's default: NULLS LAST for both directions
        columns.append(F.col(name).asc_nulls_last() if direction == "ASC" else F.col(name).desc_nulls_last())
    return columns


def require_on_spark(params: RepresentativeParams) -> None:
    """What the Spark engine does not implement is refused, never ignored."""
    if params.verify_against_representative:
        raise WebdedupError(
            "--verify-against-representative is implemented by the DuckDB engine only: run without --engine spark"
        )


@SPARK.implements("deduped_documents")
def deduped_documents(run: StageRun) -> StageOutput:
    """One representative per cluster: row_number over the cluster in the policy's order
    (newest crawled_at, most tokens, smallest doc_id by default), every input column kept."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    require_on_spark(run.params)
    spark = session_of(run)
    store = run.store
    try:
        order_by = policy_order_by(run.params.representative_policy, run.params.prefer_domains)
    except ValueError as err:
        raise WebdedupError(str(err)) from None
    run.derive(order_by=order_by)
    from ...storage.store import connect

    con = connect()
    doc_schema = con.sql(f"SELECT * FROM {store.scan_sql('documents')} LIMIT 0").arrow().schema
    con.close()
    schema = pa.schema(
        [*doc_schema, ("cluster_id", pa.string()), ("cluster_size", pa.int64()), ("token_count", pa.int32())]
    )
    extra = stored_extra_columns(store)
    # Ranked on the narrow columns; the bodies are read once, by the winners' join below.
    ranked = (
        read_asset(spark, store, "documents", ranking_columns(extra))
        .join(read_asset(spark, store, "clusters"), "doc_id")
        .join(read_asset(spark, store, "fingerprinted", ["doc_id", "token_count"]), "doc_id")
        .withColumn(
            "rank",
            F.row_number().over(
                Window.partitionBy("cluster_id").orderBy(
                    *_order_columns(run.params.representative_policy, run.params.prefer_domains)
                )
            ),
        )
        .persist()
    )
    winners = (
        read_asset(spark, store, "documents")
        .join(ranked.where("rank = 1").select("doc_id", "cluster_id", "cluster_size", "token_count"), "doc_id")
        .orderBy("doc_id")
    )
    for field in doc_schema:
        if field.name not in winners.columns:
            winners = winners.withColumn(field.name, F.lit(None))
    rows = write_asset(winners, store, "deduped_documents", schema, run.parameters)
    documents = ranked.count()
    figures = {
        "documents": documents,
        "removed": documents - rows,
        "retained_ratio": round(rows / documents, 4) if documents else 0.0,
    }
    write_report(
        cluster_inspection(spark, store, ranked, extra),
        report_path(store, "cluster_inspection.csv"),
        store.asset_dir("deduped_documents"),
    )
    ranked.unpersist()
    # cluster_diagnostics.csv, published with the run like the DuckDB engine's: computed by DuckDB
    # on the driver over the stored files, as the clusters_cohesive check is (bounded by its member
    # cap, see engine.diagnostics); not yet a Spark job.
    figures.update(write_cluster_diagnostics(store))
    return StageOutput(rows, figures)


def cluster_inspection(spark, store, ranked, extra: list[str]):
    """One row per multi-member cluster, as the DuckDB engine's report (same columns, order)."""
    from pyspark.sql import functions as F

    provenance = provenance_columns(extra)
    multi = ranked.where("cluster_size > 1")
    members = multi.groupBy("cluster_id").agg(
        F.array_join(F.array_sort(F.collect_list("doc_id")), ";").alias("member_doc_ids"),
        F.array_join(F.array_sort(F.collect_set("domain")), ";").alias("domains"),
    )
    pairs = read_asset(spark, store, "duplicate_pairs", ["left_doc_id", "exact_jaccard"])
    clusters = read_asset(spark, store, "clusters", ["doc_id", "cluster_id"])
    scores = (
        pairs.join(clusters.withColumnRenamed("doc_id", "left_doc_id"), "left_doc_id")
        .groupBy("cluster_id")
        .agg(F.min("exact_jaccard").alias("min_jaccard"), F.max("exact_jaccard").alias("max_jaccard"))
    )
    representative = multi.where("rank = 1").select(
        "cluster_id",
        "cluster_size",
        F.col("doc_id").alias("representative_doc_id"),
        F.col("domain").alias("representative_domain"),
        F.col("crawled_at").alias("representative_crawled_at"),
        F.col("token_count").alias("representative_token_count"),
        *[F.col(c).alias(f"representative_{c}") for c in provenance],
    )
    return (
        representative.join(members, "cluster_id")
        .join(scores, "cluster_id")
        .select(*representative.columns, "member_doc_ids", "domains", "min_jaccard", "max_jaccard")
        .orderBy("cluster_id")
        .coalesce(1)
        .sortWithinPartitions("cluster_id")
    )
