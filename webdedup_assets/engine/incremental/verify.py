"""Verification: exact Jaccard of the new and changed candidate pairs; scored_pairs and duplicate_pairs."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ...core.fingerprint import fingerprint_method, shingling, signature_width, signatures_of
from ...core.kernel import minhash_sets
from ...core.minhash import MinHashParams
from ...errors import WebdedupError
from ...storage.store import scalar
from ...threads import thread_count
from ..invariants import cohesion_cap
from ..shingle_sets import ShingleSets, shingle_sets_of
from ..stages.scoring import (
    SCORED_SCHEMA,
    SCORING_MEMORY_BYTES,
    check_decision,
    compare_signatures,
    decide,
    score_members,
    scored_schema,
)
from .bodies import bodies_of

# memory of scoring at hand (bodies as bytes, joined, as Arrow, and the sets) over the sets alone:
# an add of 1M generated pages onto one page peaked 7.6 GB over its start for 1.8 GB of sets
AT_HAND_COST = 4


class VerifyStep:
    """Mixed into the updater (engine.incremental.update._Updater): uses its con, store, parameters and report."""

    def _score(self) -> None:
        con, store = self.con, self.store
        fingerprint = self.upstream["fingerprinted"]["fingerprint"]
        check_decision(fingerprint, self.scoring)
        pairs = con.sql(
            "SELECT left_doc_id, right_doc_id FROM rescore ORDER BY left_doc_id, right_doc_id"
        ).to_arrow_table()
        self.report.pairs_scored = pairs.num_rows
        passes, threads = 1, 1
        if self._sets_fit():
            signatures_left, signatures_right, exact = self._score_at_hand(pairs, fingerprint)
        else:  # an add of many pages: scored as the full stage scores, within its memory budget
            self.shingle_sets = None  # (the diagnostics read what they measure)
            threads = thread_count()
            scored = score_members(con, store, pairs, fingerprint, threads, SCORING_MEMORY_BYTES)
            exact, passes = scored.exact, scored.passes
            signatures_left, signatures_right = scored.signatures[scored.left], scored.signatures[scored.right]
        banding = self.upstream["candidate_pairs"].get("banding")
        compared = compare_signatures(signatures_left, signatures_right, fingerprint, banding)
        schema = scored_schema(fingerprint)
        extra = [name for name in schema.names if name not in SCORED_SCHEMA.names]  # hamming_distance of SimHash
        con.register(
            "fresh_arrow",
            pa.table(
                {
                    "left_doc_id": pairs["left_doc_id"],
                    "right_doc_id": pairs["right_doc_id"],
                    "exact_jaccard": pa.array(exact),
                    "minhash_estimate": compared["minhash_estimate"],
                    **{name: compared[name] for name in extra},
                    **decide(exact, compared, self.scoring),
                }
            ),
        )
        con.execute("CREATE TEMP TABLE fresh AS SELECT * FROM fresh_arrow")
        con.unregister("fresh_arrow")
        scored = store.scan_sql("scored_pairs")
        cols = ", ".join(schema.names)
        kept = "".join(f"COALESCE(f.{name}, s.{name}) AS {name}, " for name in extra)
        con.execute(f"""CREATE TEMP TABLE new_scored AS
            SELECT c.left_doc_id, c.right_doc_id, c.left_domain, c.right_domain, c.cross_domain, c.shared_bands,
                   COALESCE(f.exact_jaccard, s.exact_jaccard) AS exact_jaccard,
                   COALESCE(f.minhash_estimate, s.minhash_estimate) AS minhash_estimate, {kept}
                   COALESCE(f.is_duplicate, s.is_duplicate) AS is_duplicate,
                   COALESCE(f.reason, s.reason) AS reason
              FROM new_cand c
              LEFT JOIN fresh f ON f.left_doc_id = c.left_doc_id AND f.right_doc_id = c.right_doc_id
              LEFT JOIN {scored} s ON f.left_doc_id IS NULL AND s.left_doc_id = c.left_doc_id
                                  AND s.right_doc_id = c.right_doc_id
             ORDER BY c.left_doc_id, c.right_doc_id""")
        missing = scalar(con, "SELECT count(*) FROM new_scored WHERE exact_jaccard IS NULL")
        if missing:
            raise WebdedupError(f"incremental update: {missing} candidate pair(s) have no score; run with full_rebuild")
        rows = scalar(con, "SELECT count(*) FROM new_scored")
        by_reason = dict(con.execute("SELECT reason, count(*) FROM new_scored GROUP BY reason").fetchall())
        members = scalar(
            con,
            "SELECT count(DISTINCT d) FROM (SELECT left_doc_id AS d FROM new_scored "
            "UNION ALL SELECT right_doc_id FROM new_scored)",
        )
        run = self._stage_run("scored_pairs", self.scoring)
        figures = {
            "duplicates": scalar(con, "SELECT count(*) FROM new_scored WHERE is_duplicate"),
            "reasons": by_reason,
            "member_documents": members,
            "document_passes": passes,
            "threads": threads,
        }
        self._write("scored_pairs", f"SELECT {cols} FROM new_scored", run.parameters, rows, figures, schema=schema)
        self.upstream["scored_pairs"] = run.parameters
        self.extra_columns = extra

    def _sets_fit(self) -> bool:
        """Whether the pages to verify (the table `need`) can be scored at hand within scoring's
        memory budget: their bodies and shingle sets held at once cost about AT_HAND_COST times the
        sets alone."""
        counted = scalar(
            self.con,
            f"""SELECT sum(f.shingle_count * 8 + 16) FROM {self.store.scan_sql("fingerprinted")} f
                 WHERE f.doc_id IN (SELECT doc_id FROM need)""",
        )
        return (counted or 0) * AT_HAND_COST <= SCORING_MEMORY_BYTES

    def _score_at_hand(self, pairs: pa.Table, fingerprint: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Signatures of the pairs' left and right pages and their exact Jaccard, from the shingle
        sets of their bodies read through the body index."""
        con, store = self.con, self.store
        shingle_size, unit = shingling(fingerprint)
        # The bodies are spread over every documents file (a scan where a file has no body index:
        # engine.incremental.bodies), so read here, with the pages to verify, those the cluster
        # diagnostics will measure after the update too (the members of the stored clusters that hold one of them,
        # largest clusters first and no more than the diagnostics measure in a run, so that a
        # giant cluster does not bring all its pages), and keep their shingle sets for it
        # (self.shingle_sets; what they lack is read then).
        clusters = store.scan_sql("clusters")
        con.execute(f"""CREATE TEMP TABLE need_sets AS
            SELECT doc_id FROM need
            UNION
            SELECT doc_id FROM (
              SELECT c.doc_id FROM {clusters} c
               WHERE c.cluster_id IN (SELECT cluster_id FROM {clusters} SEMI JOIN need USING (doc_id))
               ORDER BY c.cluster_size DESC, c.cluster_id, c.doc_id LIMIT {cohesion_cap(None)})""")
        docs = bodies_of(con, store, "need_sets")
        self.shingle_sets = None
        if docs is not None:
            self.shingle_sets = shingle_sets_of(
                docs.column("doc_id").combine_chunks(), docs.column("body").combine_chunks(), shingle_size, unit
            )
        if not pairs.num_rows:
            empty = np.zeros((0, signature_width(fingerprint)), np.uint32)
            return empty, empty, np.zeros(0, np.float64)
        sets = self.shingle_sets
        left, right = sets.nodes(pairs["left_doc_id"]), sets.nodes(pairs["right_doc_id"])
        signatures_left, signatures_right = _signatures(sets, left, right, docs, pairs, fingerprint)
        return signatures_left, signatures_right, sets.jaccard(left, right)

    def _duplicates(self) -> None:
        """duplicate_pairs: the scored pairs scored_pairs decided are duplicates."""
        con, store, extra = self.con, self.store, self.extra_columns
        con.execute(
            f"CREATE TEMP TABLE old_dup AS SELECT left_doc_id, right_doc_id FROM {store.scan_sql('duplicate_pairs')}"
        )
        con.execute(f"""CREATE TEMP TABLE new_dup AS
            SELECT left_doc_id, right_doc_id, left_domain, right_domain, cross_domain, shared_bands,
                   exact_jaccard, minhash_estimate, {"".join(name + ", " for name in extra)}
                   CASE WHEN exact_jaccard >= 1.0 THEN 'exact' ELSE 'near' END AS kind
              FROM new_scored WHERE is_duplicate ORDER BY left_doc_id, right_doc_id""")
        dup_rows = scalar(con, "SELECT count(*) FROM new_dup")
        exact_n, cross_n = con.execute(
            "SELECT count(*) FILTER (kind = 'exact'), count(*) FILTER (cross_domain) FROM new_dup"
        ).fetchall()[0]
        run = self._stage_run("duplicate_pairs", self.scoring)
        figures = {
            "exact_duplicate_pairs": exact_n,
            "near_duplicate_pairs": dup_rows - exact_n,
            "cross_domain_duplicates": cross_n,
            "same_domain_duplicates": dup_rows - cross_n,
        }
        self._write("duplicate_pairs", "SELECT * FROM new_dup", run.parameters, dup_rows, figures)
        self.upstream["duplicate_pairs"] = run.parameters

    # -- clusters --------------------------------------------------------------------------


def _signatures(
    sets: ShingleSets, left: np.ndarray, right: np.ndarray, docs: pa.Table, pairs: pa.Table, fingerprint: dict
) -> tuple[np.ndarray, np.ndarray]:
    """The signatures of the pairs' left and right documents (nodes of `sets`): the values
    fingerprinted holds, without scanning every fingerprinted file for a few thousand rows.
    MinHash signatures come from the shingle sets at hand (kernel.minhash_sets); a SimHash counts
    repeated shingles, which the sets do not keep, so it is computed again from the bodies."""
    if fingerprint_method(fingerprint) == "minhash":
        nodes = np.unique(np.concatenate([left, right]))
        params = MinHashParams(int(fingerprint["num_perm"]), int(fingerprint["seed"]))
        signatures = minhash_sets(sets.flat, sets.starts, sets.ends, nodes, *params.coefficients())
        return signatures[np.searchsorted(nodes, left)], signatures[np.searchsorted(nodes, right)]
    ids = docs.column("doc_id").combine_chunks()
    wanted = pa.concat_arrays([pairs[c].combine_chunks() for c in ("left_doc_id", "right_doc_id")])
    chosen = docs.filter(pa.compute.is_in(ids, value_set=wanted))
    _, _, signatures = signatures_of(chosen.column("body").combine_chunks(), fingerprint)
    chosen_ids = chosen.column("doc_id").combine_chunks()
    at = [pa.compute.index_in(pairs[c], value_set=chosen_ids).to_numpy().astype(np.int64) for c in pairs.column_names]
    return signatures[at[0]], signatures[at[1]]
