"""Answers over a stored run: why two pages are (or are not) duplicates, what a cluster holds.

Read-only: every figure comes from the stored assets (documents, fingerprinted,
band_memberships, candidate_pairs, scored_pairs, duplicate_pairs, clusters,
deduped_documents) and their stored parameters; the exact Jaccard of the pages asked about is
recomputed from their bodies with the same kernel scoring uses (core.fingerprint.shingle_sets,
core.sets.jaccard_blocks). The caller holds the storage writer lock shared.
"""

from __future__ import annotations

import difflib
import math
from datetime import date, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from ..core.fingerprint import fingerprint_method, shingle_sets, shingling
from ..core.minhash import candidate_probability, estimate_jaccard
from ..core.normalize import text_tokens
from ..core.ranking import REPRESENTATIVE_POLICIES, domain_rank, policy_order_by, preferred_domains
from ..core.sets import jaccard_blocks
from ..core.simhash import candidate_probability_at_distance, from_words, hamming
from ..engine.invariants import cluster_parts_sql
from ..errors import WebdedupError
from ..params import BandingParams
from ..storage.serial import stored_value
from ..storage.store import Store, connect, sql_string

MAX_DIFF_HUNKS = 12  # differing stretches shown by explain
MAX_HUNK_TOKENS = 15  # words shown per side of one stretch
EXACT_DIFF_TOKENS = 20_000  # compared at most between the common beginning and end of two pages
MAX_MEMBERS = 500  # members listed (and Jaccard computed) by inspect


class UnknownId(WebdedupError):
    """A doc_id or cluster_id the stored run does not hold."""


def _plain(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _rows(con, query: str) -> list[dict[str, Any]]:
    rel = con.sql(query)
    names = rel.columns
    return [{n: _plain(v) for n, v in zip(names, row, strict=True)} for row in rel.fetchall()]


def _documents(con, store: Store, doc_ids: list[str]) -> dict[str, dict[str, Any]]:
    listing = ", ".join(sql_string(d) for d in doc_ids)
    found = _rows(
        con,
        f"""SELECT d.doc_id, d.domain, d.crawled_at, d.body, f.token_count, f.shingle_count, f.signature
              FROM {store.scan_sql("documents")} d LEFT JOIN {store.scan_sql("fingerprinted")} f USING (doc_id)
             WHERE d.doc_id IN ({listing})""",
    )
    by_id = {row["doc_id"]: row for row in found}
    missing = [d for d in doc_ids if d not in by_id]
    if missing:
        raise UnknownId(f"unknown doc_id {missing[0]!r}: not in the documents stored under {store.root}")
    return by_id


def exact_jaccards(
    bodies: list[str | None], shingle_size: int, pairs: list[tuple[int, int]], unit: str = "word"
) -> list[float]:
    """Exact shingle Jaccard of the given (i, j) pairs of `bodies`, as scored_pairs computes it."""
    flat, offsets = shingle_sets(pa.array([b or "" for b in bodies], pa.large_string()), shingle_size, unit)
    starts, ends = offsets[:-1].astype(np.int64), offsets[1:].astype(np.int64)
    left = np.array([p[0] for p in pairs], dtype=np.int64)
    right = np.array([p[1] for p in pairs], dtype=np.int64)
    out = np.zeros(len(pairs), dtype=np.float64)
    if len(pairs):
        jaccard_blocks(flat, starts, ends, flat, starts, ends, left, right, out)
    return [float(x) for x in out]


def _shared_shingles(bodies: list[str | None], shingle_size: int, unit: str) -> tuple[list[int], int]:
    flat, offsets = shingle_sets(pa.array([b or "" for b in bodies], pa.large_string()), shingle_size, unit)
    a = flat[offsets[0] : offsets[1]]
    b = flat[offsets[1] : offsets[2]]
    return [len(a), len(b)], int(np.intersect1d(a, b, assume_unique=True).size)


def word_diff(left: str | None, right: str | None) -> dict[str, Any]:
    """The normalized tokens that differ, side by side (bounded: MAX_DIFF_HUNKS stretches).

    The common beginning and end are matched first, so two long pages that differ in a few places
    diff only what lies between. Of a longer part between them (difflib's time grows with the
    square of its length), the first EXACT_DIFF_TOKENS / 2 words of each page are compared, and
    `compared` says where the comparison stopped (None: the whole pages)."""
    a, b = text_tokens(left), text_tokens(right)
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    middle_a, middle_b = a[start : len(a) - end], b[start : len(b) - end]
    compared = None
    if len(middle_a) + len(middle_b) > EXACT_DIFF_TOKENS:
        middle_a, middle_b = middle_a[: EXACT_DIFF_TOKENS // 2], middle_b[: EXACT_DIFF_TOKENS // 2]
        compared, end = start + EXACT_DIFF_TOKENS // 2, 0
    matcher = difflib.SequenceMatcher(a=middle_a, b=middle_b, autojunk=False)
    hunks = []
    changed = 0
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        i1, i2, j1, j2 = i1 + start, i2 + start, j1 + start, j2 + start
        changed += 1
        if len(hunks) < MAX_DIFF_HUNKS:

            def cut(words: list[str]) -> str:
                shown = " ".join(words[:MAX_HUNK_TOKENS])
                return shown + (f" ... (+{len(words) - MAX_HUNK_TOKENS} words)" if len(words) > MAX_HUNK_TOKENS else "")

            hunks.append(
                {
                    "op": tag,
                    "left_position": i1,
                    "right_position": j1,
                    "left": cut(a[i1:i2]),
                    "right": cut(b[j1:j2]),
                }
            )
    return {
        "left_tokens": len(a),
        "right_tokens": len(b),
        "matching_tokens": start + end + sum(block.size for block in matcher.get_matching_blocks()),
        "differing_stretches": changed,
        "compared": compared,
        "shown": hunks,
    }


def explain_pair(store: Store, left_id: str, right_id: str) -> dict[str, Any]:
    """Everything the run decided about one pair of documents, and why."""
    if left_id == right_id:
        raise WebdedupError(f"explain needs two different doc_ids, got {left_id!r} twice")
    left_id, right_id = sorted([left_id, right_id])  # pairs are stored with left_doc_id < right_doc_id
    fingerprint = store.params("fingerprinted")["fingerprint"]
    banding = store.params("band_memberships")["banding"]
    scored_params = store.params("scored_pairs")
    threshold = (scored_params.get("scoring") or {}).get("threshold")
    con = connect(store)
    try:
        docs = _documents(con, store, [left_id, right_id])
        left, right = docs[left_id], docs[right_id]
        shingle_size, unit = shingling(fingerprint)
        bodies = [left["body"], right["body"]]
        (left_shingles, right_shingles), shared = _shared_shingles(bodies, shingle_size, unit)
        (jaccard,) = exact_jaccards(bodies, shingle_size, [(0, 1)], unit)
        signatures = [np.asarray(d["signature"] or [], dtype=np.uint32) for d in (left, right)]
        # a page without a shingle has no signature to compare (its stored one is a placeholder)
        comparable = left_shingles and right_shingles and signatures[0].size == signatures[1].size > 0
        simhash = fingerprint_method(fingerprint) == "simhash"
        estimate = (
            float(estimate_jaccard(signatures[0][None, :], signatures[1][None, :])[0])
            if comparable and not simhash
            else None
        )
        distance = (
            int(hamming(from_words(signatures[0]), from_words(signatures[1]))[0]) if comparable and simhash else None
        )
        bm = store.scan_sql("band_memberships")
        shared_bands = [
            r["band_index"]
            for r in _rows(
                con,
                f"""SELECT a.band_index FROM {bm} a JOIN {bm} b USING (band_index, band_hash)
                     WHERE a.doc_id = {sql_string(left_id)} AND b.doc_id = {sql_string(right_id)}
                     ORDER BY a.band_index""",
            )
        ]
        where = f"left_doc_id = {sql_string(left_id)} AND right_doc_id = {sql_string(right_id)}"
        candidate = bool(_rows(con, f"SELECT 1 AS x FROM {store.scan_sql('candidate_pairs')} WHERE {where}"))
        scored = _rows(
            con,
            f"SELECT exact_jaccard, minhash_estimate, is_duplicate, reason FROM {store.scan_sql('scored_pairs')} "
            f"WHERE {where}",
        )
        duplicate = _rows(con, f"SELECT kind FROM {store.scan_sql('duplicate_pairs')} WHERE {where}")
        clusters = {
            r["doc_id"]: r["cluster_id"]
            for r in _rows(
                con,
                f"SELECT doc_id, cluster_id FROM {store.scan_sql('clusters')} "
                f"WHERE doc_id IN ({sql_string(left_id)}, {sql_string(right_id)})",
            )
        }
    finally:
        con.close()

    bands, rows = banding["bands"], banding["rows"]
    key = "block" if simhash else "band"
    if simhash:  # blocks of the 64 bits instead of bands; P(candidate) given the distance
        max_hamming = stored_value(BandingParams, banding, "max_hamming")
        key_blocks = stored_value(BandingParams, banding, "key_blocks")
        fingerprint_parameters = {
            "fingerprint_method": "simhash",
            "max_hamming": max_hamming,
            "key_blocks": key_blocks,
            "blocks": max_hamming + key_blocks,
            "keys": math.comb(max_hamming + key_blocks, key_blocks),
        }
        probability = None if distance is None else candidate_probability_at_distance(distance, max_hamming, key_blocks)
    else:
        fingerprint_parameters = {"num_perm": fingerprint["num_perm"], "bands": bands, "rows": rows}
        probability = candidate_probability(jaccard, bands, rows)
    if scored:
        row = scored[0]
        verdict = "duplicate" if row["is_duplicate"] else "not a duplicate"
        reason = row["reason"]
        if duplicate:
            reason += f" ({duplicate[0]['kind']} duplicate)"
    elif candidate:
        verdict, reason = "not scored", "a candidate pair that scored_pairs does not hold (re-materialize scored_pairs)"
    elif shared_bands:
        verdict = "not a candidate"
        reason = f"shares a {key}, but candidate_pairs left the pair out (a hot bucket's bounded policy)"
    else:
        verdict, reason = "not a candidate", f"never shared a {key}, so never scored"
    same_cluster = left_id in clusters and clusters.get(left_id) == clusters.get(right_id)
    if not scored and same_cluster:
        reason += "; in one cluster through other duplicates"

    def page(doc: dict[str, Any], shingles: int) -> dict[str, Any]:
        return {
            "doc_id": doc["doc_id"],
            "domain": doc["domain"],
            "crawled_at": doc["crawled_at"],
            "token_count": doc["token_count"],
            "shingle_count": shingles,
            "cluster_id": clusters.get(doc["doc_id"]),
        }

    return {
        "left": page(left, left_shingles),
        "right": page(right, right_shingles),
        "parameters": {
            "shingle_size": shingle_size,
            "shingle_unit": unit,
            **fingerprint_parameters,
            "threshold": threshold,
        },
        "shared_shingles": shared,
        "exact_jaccard": jaccard,
        "stored_exact_jaccard": scored[0]["exact_jaccard"] if scored else None,
        "minhash_estimate": estimate,
        **({"hamming_distance": distance} if simhash else {}),
        "shared_bands": shared_bands,
        "candidate": candidate,
        "candidate_probability": probability,
        "verdict": verdict,
        "reason": reason,
        "same_cluster": same_cluster,
        "diff": word_diff(left["body"], right["body"]),
    }


def _why_first(
    policy: str, winner: dict[str, Any], runner_up: dict[str, Any] | None, domains: list[str]
) -> dict[str, Any]:
    keys = REPRESENTATIVE_POLICIES[policy]
    if runner_up is None:
        return {"key": None, "text": "the only member of its cluster"}
    ranks = domain_rank(winner.get("domain"), domains), domain_rank(runner_up.get("domain"), domains)
    if ranks[0] != ranks[1]:
        return {
            "key": "domain",
            "direction": "preferred",
            "text": f"preferred domain: {winner.get('domain')} is listed in prefer_domains before "
            f"{runner_up.get('domain')} of the next member, {runner_up['doc_id']}",
        }
    for column, direction in keys:
        a, b = winner.get(column), runner_up.get(column)
        if a != b:
            word = {"crawled_at": ("newest", "oldest"), "token_count": ("most tokens", "fewest tokens")}.get(
                column, ("largest " + column, "smallest " + column)
            )[0 if direction == "DESC" else 1]
            return {
                "key": column,
                "direction": direction,
                "text": f"{word}: {column} {a} against {b} of the next member, {runner_up['doc_id']}",
            }
    return {"key": "doc_id", "direction": "ASC", "text": "tie on every key"}


def inspect_cluster(store: Store, ident: str) -> dict[str, Any]:
    """A cluster (by cluster_id, or the cluster of a doc_id): members and why its representative won."""
    rep_params = store.params("deduped_documents").get("representatives") or {}
    policy = rep_params.get("representative_policy", "newest")
    domains = preferred_domains(rep_params.get("prefer_domains", ""))
    order_by = rep_params.get("order_by") or policy_order_by(policy)
    fingerprint = store.params("fingerprinted")["fingerprint"]
    con = connect(store)
    try:
        cl = cluster_parts_sql(con, store)  # (a part split off its component is a cluster of its own)
        found = _rows(con, f"SELECT cluster_id FROM {cl} WHERE cluster_id = {sql_string(ident)} LIMIT 1")
        if not found:
            found = _rows(con, f"SELECT cluster_id FROM {cl} WHERE doc_id = {sql_string(ident)}")
        if not found:
            raise UnknownId(f"unknown cluster_id or doc_id {ident!r}: not in the clusters stored under {store.root}")
        cluster_id = found[0]["cluster_id"]
        members = _rows(
            con,
            f"""SELECT d.doc_id, d.domain, d.crawled_at, f.token_count, d.body
                  FROM {cl} c JOIN {store.scan_sql("documents")} d USING (doc_id)
                  JOIN (SELECT doc_id, token_count FROM {store.scan_sql("fingerprinted")}) f USING (doc_id)
                 WHERE c.cluster_id = {sql_string(cluster_id)}
                 ORDER BY {order_by} LIMIT {MAX_MEMBERS + 1}""",
        )
        size = _rows(con, f"SELECT count(*) AS n FROM {cl} WHERE cluster_id = {sql_string(cluster_id)}")[0]["n"]
        kept = _rows(
            con,
            f"SELECT doc_id FROM {store.scan_sql('deduped_documents')} WHERE cluster_id = {sql_string(cluster_id)}",
        )
    finally:
        con.close()
    representative = kept[0]["doc_id"] if kept else members[0]["doc_id"]
    members = members[:MAX_MEMBERS]
    index = {m["doc_id"]: i for i, m in enumerate(members)}
    rep_at = index.get(representative, 0)
    jaccards = exact_jaccards(
        [m["body"] for m in members],
        shingling(fingerprint)[0],
        [(rep_at, i) for i in range(len(members))],
        shingling(fingerprint)[1],
    )
    listed = []
    for i, (member, jaccard) in enumerate(zip(members, jaccards, strict=True)):
        listed.append(
            {
                "doc_id": member["doc_id"],
                "domain": member["domain"],
                "crawled_at": member["crawled_at"],
                "token_count": member["token_count"],
                "jaccard_to_representative": 1.0 if i == rep_at else jaccard,
                "representative": member["doc_id"] == representative,
            }
        )
    runner_up = next((m for m in listed if not m["representative"]), None)
    return {
        "cluster_id": cluster_id,
        "size": size,
        "representative": representative,
        "policy": policy,
        "order_by": order_by,
        "why": _why_first(policy, listed[rep_at], runner_up, domains),
        "members": listed,
        "members_shown": len(listed),
    }
