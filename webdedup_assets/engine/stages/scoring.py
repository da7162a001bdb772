"""The scored_pairs and duplicate_pairs stages: exact shingle Jaccard decides.

Shingle sets are recomputed from the documents for the candidates' documents only, a
bounded group of documents at a time (see stage_scored_pairs), never the whole corpus.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...core.fingerprint import fingerprint_method, shingle_sets_into, shingling, signature_width
from ...core.minhash import estimate_jaccard
from ...core.sets import jaccard_blocks
from ...core.simhash import from_words, hamming
from ...errors import WebdedupError
from ...params import BandingParams, ScoringParams
from ...progress import Task
from ...storage.serial import stored_value
from ...storage.store import Store, connect, scalar, write_batches, write_relation
from ...threads import ordered_map, prefetch, thread_count
from ..stage import DUCKDB, StageOutput, StageResult, StageRun

PAIRS_PER_CHUNK = 200_000
# Shingle sets of candidate members held at once while scoring (all in one group when they
# fit, else groups of half this, two at a time).
SCORING_MEMORY_BYTES = 2 << 30

SCORED_SCHEMA = pa.schema(
    [
        ("left_doc_id", pa.string()),
        ("right_doc_id", pa.string()),
        ("left_domain", pa.string()),
        ("right_domain", pa.string()),
        ("cross_domain", pa.bool_()),
        ("shared_bands", pa.int32()),
        ("exact_jaccard", pa.float64()),
        ("minhash_estimate", pa.float64()),
        ("is_duplicate", pa.bool_()),
        ("reason", pa.string()),
    ]
)


# duplicate_pairs: the scored pair's columns, is_duplicate and reason replaced by kind (exact | near)
DUPLICATE_SCHEMA = pa.schema(
    [*(f for f in SCORED_SCHEMA if f.name not in ("is_duplicate", "reason")), ("kind", pa.string())]
)
# Of SimHash fingerprints: minhash_estimate is null and the Hamming distance of the two fingerprints
# is one more column, the last of scored_pairs and before kind in duplicate_pairs (the MinHash
# path's files keep their columns, and their bytes).
HAMMING = pa.field("hamming_distance", pa.int32())


def scored_schema(fingerprint: dict) -> pa.Schema:
    return SCORED_SCHEMA.append(HAMMING) if fingerprint_method(fingerprint) == "simhash" else SCORED_SCHEMA


def duplicate_schema(fingerprint: dict) -> pa.Schema:
    if fingerprint_method(fingerprint) != "simhash":
        return DUPLICATE_SCHEMA
    return DUPLICATE_SCHEMA.insert(DUPLICATE_SCHEMA.get_field_index("kind"), HAMMING)


def compare_signatures(left: np.ndarray, right: np.ndarray, fingerprint: dict, banding: dict | None) -> dict:
    """What the fingerprints say of pairs of (n, signature_width) signatures: {minhash_estimate,
    and for SimHash hamming_distance} as Arrow arrays, and `agrees` (the estimate reaches the
    threshold, or the Hamming distance is within max_hamming), for the reason."""
    if fingerprint_method(fingerprint) != "simhash":
        estimate = estimate_jaccard(left, right)
        return {"minhash_estimate": pa.array(estimate), "estimate": estimate}
    distance = hamming(from_words(left), from_words(right))
    within = distance <= stored_value(BandingParams, banding, "max_hamming")
    return {
        "minhash_estimate": pa.nulls(len(distance), pa.float64()),
        "hamming_distance": pa.array(distance, pa.int32()),
        "agrees": within,
    }


def check_decision(fingerprint: dict, scoring: ScoringParams) -> None:
    """Before scoring: verify hamming needs SimHash fingerprints to decide by."""
    if scoring.verify == "hamming" and fingerprint_method(fingerprint) != "simhash":
        raise WebdedupError(
            "scored_pairs: verify hamming decides by SimHash fingerprints and fingerprinted holds MinHash "
            "signatures; re-materialize fingerprinted (and the assets after it) with fingerprint_method simhash, "
            "or use verify jaccard"
        )


def decide(exact: np.ndarray, compared: dict, scoring: ScoringParams) -> dict[str, pa.Array]:
    """is_duplicate and reason of scored pairs: the exact Jaccard reaching the threshold decides, or
    with verify hamming the SimHash fingerprints lying within max_hamming bits."""
    if scoring.verify == "hamming":
        exact_ok, within = exact >= scoring.threshold, compared["agrees"]
        reason = np.where(
            within,
            np.where(exact_ok, "jaccard_and_simhash", "simhash_match"),
            np.where(exact_ok, "jaccard_only_rejected", "beyond_max_hamming"),
        )
        return {"is_duplicate": pa.array(within), "reason": pa.array(reason, pa.string())}
    return {
        "is_duplicate": pa.array(exact >= scoring.threshold),
        "reason": pa.array(reasons_of(exact, compared, scoring.threshold), pa.string()),
    }


def reasons_of(exact: np.ndarray, compared: dict, threshold: float) -> np.ndarray:
    """reasons() of a compare_signatures result; of SimHash: jaccard_and_simhash | jaccard_match |
    simhash_only_rejected | below_jaccard_threshold (simhash: within max_hamming bits)."""
    if "estimate" in compared:
        return reasons(exact, compared["estimate"], threshold)
    exact_ok, within = exact >= threshold, compared["agrees"]
    return np.where(
        exact_ok,
        np.where(within, "jaccard_and_simhash", "jaccard_match"),
        np.where(within, "simhash_only_rejected", "below_jaccard_threshold"),
    )


def reasons(exact: np.ndarray, estimate: np.ndarray, threshold: float) -> np.ndarray:
    """jaccard_and_minhash | jaccard_match | minhash_only_rejected | below_jaccard_threshold."""
    exact_ok = exact >= threshold
    estimate_ok = estimate >= threshold
    return np.where(
        exact_ok,
        np.where(estimate_ok, "jaccard_and_minhash", "jaccard_match"),
        np.where(estimate_ok, "minhash_only_rejected", "below_jaccard_threshold"),
    )


def _member_groups(shingle_counts: np.ndarray, budget_bytes: int) -> np.ndarray:
    """Split member nodes (in doc_id order) into consecutive groups; returns the group bounds.

    When every member's shingle set fits the budget, one group (one pass over the documents).
    Otherwise groups of at most budget_bytes / 2 each, since two groups are in memory at once."""
    cost = np.cumsum(shingle_counts.astype(np.int64) * 8 + 16)
    if not len(cost) or cost[-1] <= budget_bytes:
        return np.array([0, len(cost)], dtype=np.int64)
    half = max(1, budget_bytes // 2)
    bounds = [0]
    while bounds[-1] < len(cost):
        start = bounds[-1]
        base = cost[start - 1] if start else 0
        bounds.append(max(start + 1, int(np.searchsorted(cost, base + half, side="right"))))
    return np.array(bounds, dtype=np.int64)


def _load_sets(con, store: Store, first: int, stop: int, shingle: tuple[int, str], threads: int, counts: np.ndarray):
    """Shingle sets of member nodes first..stop-1: one streamed pass over the documents (DuckDB
    hash-joins them to the `scoring_members` table once), kernel on `threads` threads. `counts`: the
    members' shingle window counts (fingerprinted), an upper bound of their set sizes; each
    batch is given its place in one array of their sum before it is hashed, and the kernel
    writes its sets there: no copy of the sets, and each page of that array is touched once
    (faulting in fresh memory is costly, and the sets are the largest array of the stage).
    Returns (flat, starts, ends) indexed by node - first; flat may hold unused slots between sets."""
    starts = np.zeros(stop - first, dtype=np.int64)
    ends = np.zeros(stop - first, dtype=np.int64)
    flat = np.empty(int(counts[first:stop].sum()), dtype=np.uint64)
    reader = con.sql(f"""
        SELECT m.node, d.body FROM {store.scan_sql("documents")} d JOIN scoring_members m USING (doc_id)
         WHERE m.node >= {first} AND m.node < {stop}""").arrow(batch_size=16_384)

    def placed():  # each batch with its place in flat, in stream order
        cursor = 0
        for batch in reader:
            nodes = batch.column("node").to_numpy()
            room = int(counts[nodes].sum())
            yield batch, nodes - first, cursor, cursor + room
            cursor += room

    def compute(item):
        batch, local, begin, end = item
        offsets = shingle_sets_into(batch.column("body"), *shingle, flat[begin:end])
        if offsets is None:
            raise WebdedupError(
                "scored_pairs: the documents give more shingles than fingerprinted counted; "
                "re-materialize fingerprinted (the documents changed since)"
            )
        starts[local] = offsets[:-1] + begin
        ends[local] = offsets[1:] + begin
        return len(local)

    shown = Task("shingle sets", stop - first, "docs")  # the documents of the candidates, read for scoring
    for done in ordered_map(compute, prefetch(placed(), depth=threads + 1), threads):
        shown.advance(done)
    shown.close()
    return flat, starts, ends


class _SetsAside:
    """The shingle sets of the members of pairs across two groups, copied aside as each group is
    loaded: with them every group is loaded once (a sweep over the groups), instead of once for
    each pair of groups that shares a pair. Without them the few pairs across far groups (random
    band collisions) make the number of passes over the documents grow with the square of the
    groups (at 10M pages 38 passes over the documents instead of 16)."""

    def __init__(self, nodes: np.ndarray, counts: np.ndarray, left, right, left_group, right_group, crossing):
        self.nodes, self.counts = nodes, counts  # the crossing pairs' members (sorted); every member's count
        self.flat = np.empty(int(counts[nodes].sum()), dtype=np.uint64)
        self.starts = np.zeros(len(nodes), dtype=np.int64)
        self.ends = np.zeros(len(nodes), dtype=np.int64)
        self.left, self.right, self.crossing = left, right, crossing
        self.left_group, self.right_group = left_group, right_group

    def score(self, con, store: Store, bounds: np.ndarray, shingle, workers: int, exact: np.ndarray, shown) -> int:
        """Scores every pair into `exact`; returns the passes over the documents."""
        left, right, passes, cursor = self.left, self.right, 0, 0
        for g in range(len(bounds) - 1):
            first, stop = int(bounds[g]), int(bounds[g + 1])
            block = np.flatnonzero((self.left_group == g) & (self.right_group == g))
            here = np.searchsorted(self.nodes, [first, stop])
            if not len(block) and here[0] == here[1]:
                continue
            flat, starts, ends = sets = _load_sets(con, store, first, stop, shingle, workers, self.counts)
            passes += 1
            if len(block):
                exact[block] = _parallel_jaccard(sets, sets, left[block] - first, right[block] - first, workers)
                shown.advance(len(block))
            local = self.nodes[here[0] : here[1]] - first
            lengths = ends[local] - starts[local]
            offsets = np.cumsum(lengths) - lengths
            total = int(lengths.sum())
            gather = np.repeat(starts[local] - offsets, lengths) + np.arange(total)
            self.flat[cursor : cursor + total] = flat[gather]
            self.starts[here[0] : here[1]] = cursor + offsets
            self.ends[here[0] : here[1]] = cursor + offsets + lengths
            cursor += total
            del flat, starts, ends, sets, gather
        crossing = self.crossing
        sets = (self.flat, self.starts, self.ends)
        a, b = np.searchsorted(self.nodes, left[crossing]), np.searchsorted(self.nodes, right[crossing])
        exact[crossing] = _parallel_jaccard(sets, sets, a, b, workers)
        shown.advance(len(crossing))
        return passes


def _sets_aside(counts, left, right, left_group, right_group, budget_bytes: int) -> _SetsAside | None:
    """A _SetsAside when some pairs cross two groups and their members' sets fit half the budget
    (beside one group, which holds at most the other half), else None (the pairs of groups)."""
    crossing = np.flatnonzero(left_group != right_group)
    if not len(crossing):
        return None
    nodes = np.unique(np.concatenate([left[crossing], right[crossing]]))
    if int((counts[nodes] * 8 + 16).sum()) > budget_bytes // 2:
        return None
    return _SetsAside(nodes, counts, left, right, left_group, right_group, crossing)


def _parallel_jaccard(set_a, set_b, left: np.ndarray, right: np.ndarray, threads: int) -> np.ndarray:
    out = np.zeros(len(left), dtype=np.float64)
    parts = np.array_split(np.arange(len(left)), max(1, min(threads, len(left) // 10_000 + 1)))

    def run(idx: np.ndarray) -> None:
        if len(idx):
            view = np.empty(len(idx), dtype=np.float64)
            jaccard_blocks(*set_a, *set_b, left[idx], right[idx], view)
            out[idx] = view

    list(ordered_map(run, parts, threads))
    return out


@dataclass
class MemberScores:
    """score_members' result: each pair's member nodes, exact Jaccard and the members' signatures."""

    left: np.ndarray
    right: np.ndarray
    exact: np.ndarray
    signatures: np.ndarray  # by node
    members: int
    passes: int  # over the documents


def score_members(
    con, store: Store, pairs: pa.Table, fingerprint: dict, workers: int, memory_budget_bytes: int
) -> MemberScores:
    """The exact Jaccard of every pair (left_doc_id, right_doc_id) of `pairs` and the signatures of
    their members, within the memory budget (see scored_pairs). The members are numbered in doc_id
    order (the temp table `scoring_members` of `con`, dropped at the end)."""
    shingle = shingling(fingerprint)  # (size, unit)
    # unique per column first: the columns themselves may hold more than 2 GB of ids, over what one
    # Arrow string array can (its offsets are 32-bit)
    members = pc.unique(pa.concat_arrays([pc.unique(pairs[side]) for side in ("left_doc_id", "right_doc_id")]))
    members = members.take(pc.sort_indices(members))
    left = pc.index_in(pairs["left_doc_id"], value_set=members).to_numpy().astype(np.int64)
    right = pc.index_in(pairs["right_doc_id"], value_set=members).to_numpy().astype(np.int64)
    con.register("member_ids", pa.table({"doc_id": members, "node": np.arange(len(members), dtype=np.int64)}))
    con.execute("CREATE OR REPLACE TEMP TABLE scoring_members AS SELECT * FROM member_ids")
    con.unregister("member_ids")
    # Shingle counts of the members, placed by node (no sort needed); their signatures are read
    # after the exact Jaccard, so that the two are never in memory together (at 10M pages the
    # members' signatures alone are ~2.8 GB).
    fingerprinted = store.scan_sql("fingerprinted")
    found = con.sql(f"SELECT m.node, f.shingle_count FROM {fingerprinted} f JOIN scoring_members m USING (doc_id)")
    found = found.to_arrow_table()
    shingle_counts = np.zeros(len(members), dtype=np.int64)
    shingle_counts[found.column("node").to_numpy()] = found.column("shingle_count").to_numpy()
    del found

    exact = np.zeros(len(left), dtype=np.float64)
    bounds = _member_groups(shingle_counts, memory_budget_bytes)
    group_of = np.searchsorted(bounds, np.arange(len(members)), side="right") - 1
    left_group, right_group = group_of[left], group_of[right]  # left < right, so left_group <= right_group
    passes = 0
    shown = Task("scored_pairs", len(left), "pairs")
    aside = _sets_aside(shingle_counts, left, right, left_group, right_group, memory_budget_bytes)
    if aside is not None:  # one sweep over the groups
        passes = aside.score(con, store, bounds, shingle, workers, exact, shown)
    loaded: dict[int, tuple] = {}  # at most two groups (the memory budget)

    def group(g: int, keep: int):
        nonlocal passes
        if g not in loaded:
            for other in [k for k in loaded if k != keep]:
                del loaded[other]
            first, stop = int(bounds[g]), int(bounds[g + 1])
            loaded[g] = _load_sets(con, store, first, stop, shingle, workers, shingle_counts)
            passes += 1
        return loaded[g]

    for g1 in range(len(bounds) - 1 if aside is None else 0):  # else every pair is scored
        in_g1 = np.flatnonzero(left_group == g1)
        if not len(in_g1):
            continue
        set_a = group(g1, keep=-1)
        for g2 in np.unique(right_group[in_g1]):
            block = in_g1[right_group[in_g1] == g2]
            set_b = group(int(g2), keep=g1)
            exact[block] = _parallel_jaccard(set_a, set_b, left[block] - bounds[g1], right[block] - bounds[g2], workers)
            shown.advance(len(block))
    shown.close()
    loaded.clear()

    num_perm = signature_width(fingerprint)
    signatures = np.zeros((len(members), num_perm), dtype=np.uint32)
    for batch in con.sql(
        f"SELECT m.node, f.signature FROM {fingerprinted} f JOIN scoring_members m USING (doc_id)"
    ).arrow(batch_size=65_536):
        if batch.num_rows:
            node = batch.column("node").to_numpy()
            signatures[node] = batch.column("signature").flatten().to_numpy().reshape(-1, num_perm)

    con.execute("DROP TABLE scoring_members")
    return MemberScores(left, right, exact, signatures, len(members), passes)


def stage_scored_pairs(
    store: Store,
    params: ScoringParams | None = None,
    threads: int | None = None,
    memory_budget_bytes: int = SCORING_MEMORY_BYTES,
) -> StageResult:
    """Scored pairs through the contract (options: kernel threads, the shingle-set memory budget)."""
    return DUCKDB.run("scored_pairs", store, params, threads=threads, memory_budget_bytes=memory_budget_bytes)


@DUCKDB.implements("scored_pairs")
def scored_pairs(run: StageRun) -> StageOutput:
    """Exact shingle Jaccard and MinHash estimate for every candidate pair.

    Candidate pairs are read once, in their stored (left_doc_id, right_doc_id) order. Their
    member documents are numbered in doc_id order and split into consecutive groups whose
    shingle sets fit half the memory budget; the sets are computed from the documents in one
    streamed pass per group (compiled kernel on all threads). The groups are swept once, each
    scoring its own pairs, while the sets of the members of pairs across two groups are copied
    aside (_SetsAside) when they fit half the budget; otherwise each pair of groups holding
    candidates is loaded and scored in turn. On a typical corpus all members fit in one group:
    one pass over the documents, no re-sorting, no LIMIT/OFFSET. The members' signatures (for
    the estimate) are read after the exact Jaccard, never beside the sets.
    """
    store = run.store
    memory_budget_bytes = run.options.get("memory_budget_bytes", SCORING_MEMORY_BYTES)
    fingerprint = run.upstream["fingerprinted"]["fingerprint"]
    check_decision(fingerprint, run.params)
    workers = thread_count(run.options.get("threads"))
    pairs = pa.concat_tables(pq.read_table(p) for p in store.require("candidate_pairs"))
    pairs = pairs.cast(pa.schema([SCORED_SCHEMA.field(n) for n in pairs.column_names if n in SCORED_SCHEMA.names]))
    con = connect(store)
    members = score_members(con, store, pairs, fingerprint, workers, memory_budget_bytes)
    left, right, exact, signatures = members.left, members.right, members.exact, members.signatures
    schema = scored_schema(fingerprint)
    banding = run.upstream["candidate_pairs"].get("banding")

    def batches():
        for begin in range(0, len(left), PAIRS_PER_CHUNK):
            stop = min(begin + PAIRS_PER_CHUNK, len(left))
            chunk = pairs.slice(begin, stop - begin)
            score = exact[begin:stop]
            compared = compare_signatures(
                signatures[left[begin:stop]], signatures[right[begin:stop]], fingerprint, banding
            )
            columns = {
                **{name: chunk.column(name).combine_chunks() for name in SCORED_SCHEMA.names[:6]},
                "exact_jaccard": pa.array(score),
                **compared,
                **decide(score, compared, run.params),
            }
            yield pa.record_batch([columns[name] for name in schema.names], schema=schema)

    rows = write_batches(store.path("scored_pairs"), schema, batches(), run.parameters)
    scored = store.scan_sql("scored_pairs")
    by_reason = dict(con.execute(f"SELECT reason, count(*) FROM {scored} GROUP BY reason").fetchall())
    figures = {
        "duplicates": scalar(con, f"SELECT count(*) FROM {scored} WHERE is_duplicate"),
        "reasons": by_reason,
        "member_documents": members.members,
        "document_passes": members.passes,
        "threads": workers,
    }
    con.close()
    return StageOutput(rows, figures)


def stage_duplicate_pairs(store: Store, params: ScoringParams | None = None) -> StageResult:
    """Duplicate pairs through the contract; without parameters, scored_pairs' threshold."""
    return DUCKDB.run("duplicate_pairs", store, params)


@DUCKDB.implements("duplicate_pairs")
def duplicate_pairs(run: StageRun) -> StageOutput:
    """The scored pairs scored_pairs decided are duplicates (is_duplicate).

    There is one decision: this stage takes scored_pairs' threshold and verify mode (the
    contract refuses a threshold other than scored_pairs')."""
    store = run.store
    hamming_column = (
        ", hamming_distance"
        if HAMMING.name in duplicate_schema(run.upstream["scored_pairs"]["fingerprint"]).names
        else ""
    )
    con = connect(store)
    relation = con.sql(f"""
        SELECT left_doc_id, right_doc_id, left_domain, right_domain, cross_domain, shared_bands,
               exact_jaccard, minhash_estimate{hamming_column},
               CASE WHEN exact_jaccard >= 1.0 THEN 'exact' ELSE 'near' END AS kind
          FROM {store.scan_sql("scored_pairs")}
         WHERE is_duplicate
         ORDER BY left_doc_id, right_doc_id""")
    rows = write_relation(store.path("duplicate_pairs"), relation, run.parameters)
    dup = store.scan_sql("duplicate_pairs")
    exact, cross = con.execute(
        f"SELECT count(*) FILTER (kind = 'exact'), count(*) FILTER (cross_domain) FROM {dup}"
    ).fetchall()[0]
    figures = {
        "exact_duplicate_pairs": exact,
        "near_duplicate_pairs": rows - exact,
        "cross_domain_duplicates": cross,
        "same_domain_duplicates": rows - cross,
    }
    con.close()
    return StageOutput(rows, figures)
