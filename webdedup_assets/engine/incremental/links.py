"""Candidate links: the change in band links of the touched buckets, the budget, collision_buckets.csv."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from ...errors import WebdedupError
from ...storage.rows import listing
from ...storage.store import save_table, scalar, sql_string, write_csv
from ..publish import report_path
from ..stages.candidates import (
    COLLISION_TOP,
    budget_error,
    candidate_figures,
    create_collision_top,
    pair_slot_budget,
    write_candidate_summary,
)
from .layout import (
    bucket_rows,
    incremental_dir,
    snapshot_dir,
)


class LinksStep:
    """Mixed into the updater (engine.incremental.update._Updater): uses its con, store, parameters and report."""

    def _links(self) -> None:
        con, store, params = self.con, self.store, self.candidates
        snap_bands = sorted(snapshot_dir(store, "band_memberships").glob("*.parquet"))
        new_bands = self.changes.current["band_memberships"]
        old_bands = self.changes.previous["band_memberships"]
        empty = "SELECT NULL::VARCHAR AS doc_id, NULL::SMALLINT AS band_index, NULL::BIGINT AS band_hash WHERE false"

        def rows(files: list[Path], ids: str) -> str:
            if not files:
                return empty
            return (
                f"SELECT m.doc_id, m.band_index, m.band_hash "
                f"FROM read_parquet({listing(files)}, hive_partitioning = false) m "
                f"SEMI JOIN {ids} i ON i.doc_id = m.doc_id"
            )

        con.execute(f"CREATE TEMP TABLE add_rows AS {rows(new_bands, 'added')}")
        con.execute(f"CREATE TEMP TABLE rem_rows AS {rows(old_bands, 'removed')}")
        # Each touched bucket's new members counted once: most touched buckets are a band key of
        # one page, and the counts say which buckets hold two or more without grouping every row again.
        con.execute(
            "CREATE TEMP TABLE add_keys AS SELECT band_index, band_hash, count(*) AS added FROM add_rows GROUP BY ALL"
        )
        con.execute("""CREATE TEMP TABLE touched AS
            SELECT band_index, band_hash FROM add_keys
            UNION ALL SELECT DISTINCT band_index, band_hash FROM rem_rows
                       ANTI JOIN add_keys USING (band_index, band_hash)""")
        self.report.touched_buckets = scalar(con, "SELECT count(*) FROM touched")
        index = (
            bucket_rows(f"read_parquet({listing(snap_bands)}, hive_partitioning = false)", "touched")
            if snap_bands
            else empty
        )
        con.execute(f"CREATE TEMP TABLE old_all AS {index}")
        con.execute("DROP TABLE touched")
        # Only a bucket of two or more documents, before or after, links anything, or counts in the
        # figures: the others are left out before the bucket figures and the joins, which carry doc_ids.
        con.execute("""CREATE TEMP TABLE shared_keys AS
            WITH old_keys AS (SELECT band_index, band_hash, count(*) AS held,
                                     count(*) FILTER (doc_id NOT IN (SELECT doc_id FROM removed)) AS kept
                                FROM old_all GROUP BY ALL)
            SELECT band_index, band_hash FROM add_keys WHERE added > 1
            UNION SELECT o.band_index, o.band_hash FROM old_keys o LEFT JOIN add_keys a USING (band_index, band_hash)
                   WHERE o.held > 1 OR o.kept + COALESCE(a.added, 0) > 1""")
        con.execute("DROP TABLE add_keys")
        con.execute(
            "CREATE TEMP TABLE old_m AS SELECT * FROM old_all SEMI JOIN shared_keys USING (band_index, band_hash)"
        )
        con.execute("""CREATE TEMP TABLE new_m AS
            SELECT doc_id, band_index, band_hash, false AS is_new FROM old_m
             WHERE doc_id NOT IN (SELECT doc_id FROM removed)
            UNION ALL SELECT doc_id, band_index, band_hash, true FROM add_rows
                       SEMI JOIN shared_keys USING (band_index, band_hash)""")
        for table in ("add_rows", "rem_rows", "old_all"):
            con.execute(f"DROP TABLE {table}")
        # The links join document numbers, not doc_ids, as the full stage does: the documents of
        # the shared buckets numbered in doc_id order (a pair of numbers orders as its doc_ids, the
        # smallest number is the smallest doc_id), joined back to doc_ids once per changed link.
        con.execute("""CREATE TEMP TABLE numbered AS
            SELECT doc_id, CAST(row_number() OVER (ORDER BY doc_id) AS INTEGER) AS node
              FROM (SELECT doc_id FROM old_m UNION SELECT doc_id FROM new_m)""")
        con.execute("""CREATE TEMP TABLE old_n AS
            SELECT n.node, o.band_index, o.band_hash, o.doc_id IN (SELECT doc_id FROM removed) AS lost
              FROM old_m o JOIN numbered n USING (doc_id)""")
        con.execute("""CREATE TEMP TABLE new_n AS
            SELECT n.node, m.band_index, m.band_hash, m.is_new FROM new_m m JOIN numbered n USING (doc_id)""")
        con.execute("DROP TABLE old_m")
        hot = params.hot_bucket_size if params.bucket_policy == "star" else None
        hot_sql = (lambda size: f"({size} > {hot})") if hot is not None else (lambda size: "false")
        # a bucket's hub (its smallest document) is only read in hot buckets: none without the star policy
        hub = "min(node)" if hot is not None else "CAST(NULL AS INTEGER)"
        con.execute(f"""CREATE TEMP TABLE bstats AS
            WITH o AS (SELECT band_index, band_hash, count(*) AS size, {hub} AS hub, count(*) FILTER (lost) AS lost
                         FROM old_n GROUP BY ALL),
                 n AS (SELECT band_index, band_hash, count(*) AS size, {hub} AS hub FROM new_n GROUP BY ALL),
                 s AS (SELECT t.band_index, t.band_hash, COALESCE(o.size, 0) AS old_size, o.hub AS old_hub,
                              COALESCE(n.size, 0) AS new_size, n.hub AS new_hub, COALESCE(o.lost, 0) AS lost
                         FROM shared_keys t LEFT JOIN o USING (band_index, band_hash)
                              LEFT JOIN n USING (band_index, band_hash)),
                 h AS (SELECT *, {hot_sql("old_size")} AS old_hot, {hot_sql("new_size")} AS new_hot FROM s)
            SELECT *, lost = 0 AND ((NOT old_hot AND NOT new_hot)
                                    OR (old_hot AND new_hot AND old_hub = new_hub)) AS simple
              FROM h""")
        self._budget()
        key = "a.band_index = b.band_index AND a.band_hash = b.band_hash"

        def links(members: str, where: str) -> str:
            """Links of the buckets in `members` (all pairs of a small bucket, star edges of a hot one)."""
            return f"""
                SELECT a.node AS l, b.node AS r FROM {members} a JOIN {members} b ON {key} AND a.node < b.node
                  JOIN bstats s ON s.band_index = a.band_index AND s.band_hash = a.band_hash
                 WHERE {where}"""

        con.execute(f"""CREATE TEMP TABLE delta_nodes AS
            SELECT l, r, CAST(sum(w) AS BIGINT) AS w FROM (
              -- simple small buckets: the links of the new members only
              SELECT l, r, 1 AS w FROM ({links("new_n", "s.simple AND NOT s.new_hot AND (a.is_new OR b.is_new)")})
              UNION ALL  -- simple hot buckets (same hub): star edges of the new members
              SELECT s.new_hub, m.node, 1 FROM new_n m JOIN bstats s USING (band_index, band_hash)
               WHERE s.simple AND s.new_hot AND m.is_new AND m.node > s.new_hub
              UNION ALL  -- other buckets: every link, new minus old
              SELECT l, r, 1 FROM ({links("new_n", "NOT s.simple AND NOT s.new_hot")})
              UNION ALL
              SELECT s.new_hub, m.node, 1 FROM new_n m JOIN bstats s USING (band_index, band_hash)
               WHERE NOT s.simple AND s.new_hot AND m.node > s.new_hub
              UNION ALL
              SELECT l, r, -1 FROM ({links("old_n", "NOT s.simple AND NOT s.old_hot")})
              UNION ALL
              SELECT s.old_hub, m.node, -1 FROM old_n m JOIN bstats s USING (band_index, band_hash)
               WHERE NOT s.simple AND s.old_hot AND m.node > s.old_hub)
            GROUP BY l, r HAVING sum(w) <> 0""")
        con.execute("""CREATE TEMP TABLE delta AS
            SELECT a.doc_id AS l, b.doc_id AS r, d.w FROM delta_nodes d
              JOIN numbered a ON a.node = d.l JOIN numbered b ON b.node = d.r""")
        for table in ("delta_nodes", "old_n", "new_n", "numbered"):
            con.execute(f"DROP TABLE {table}")
        cand = store.scan_sql("candidate_pairs")
        con.execute(f"CREATE TEMP TABLE old_cand AS SELECT * FROM {cand}")
        con.execute("""CREATE TEMP TABLE counts AS
            SELECT COALESCE(c.left_doc_id, d.l) AS left_doc_id, COALESCE(c.right_doc_id, d.r) AS right_doc_id,
                   COALESCE(c.shared_bands, 0) + COALESCE(d.w, 0) AS shared_bands,
                   c.left_doc_id IS NULL AS is_new_pair
              FROM old_cand c FULL OUTER JOIN delta d ON c.left_doc_id = d.l AND c.right_doc_id = d.r""")
        bad = scalar(con, "SELECT count(*) FROM counts WHERE shared_bands < 0")
        if bad:
            raise WebdedupError(
                f"incremental update: {bad} pair(s) would share a negative number of bands; run with full_rebuild"
            )
        # Domains: kept for pairs of unchanged documents, looked up for the others.
        con.execute("""CREATE TEMP TABLE rescore AS
            SELECT left_doc_id, right_doc_id FROM counts
             WHERE shared_bands > 0 AND (is_new_pair OR left_doc_id IN (SELECT doc_id FROM added)
                                         OR right_doc_id IN (SELECT doc_id FROM added))""")
        con.execute("""CREATE TEMP TABLE need AS SELECT DISTINCT doc_id FROM
            (SELECT left_doc_id AS doc_id FROM rescore UNION ALL SELECT right_doc_id FROM rescore)""")
        con.execute("""CREATE TEMP TABLE need_domains AS
            SELECT doc_id, domain FROM docs WHERE doc_id IN (SELECT doc_id FROM need)""")
        con.execute("""CREATE TEMP TABLE new_cand AS
            SELECT k.left_doc_id, k.right_doc_id, CAST(k.shared_bands AS INTEGER) AS shared_bands,
                   COALESCE(l.domain, c.left_domain) AS left_domain, COALESCE(r.domain, c.right_domain) AS right_domain,
                   COALESCE(l.domain, c.left_domain) IS DISTINCT FROM COALESCE(r.domain, c.right_domain) AS cross_domain
              FROM counts k
              LEFT JOIN old_cand c ON c.left_doc_id = k.left_doc_id AND c.right_doc_id = k.right_doc_id
              LEFT JOIN need_domains l ON l.doc_id = k.left_doc_id
              LEFT JOIN need_domains r ON r.doc_id = k.right_doc_id
             WHERE k.shared_bands > 0
             ORDER BY k.left_doc_id, k.right_doc_id""")
        self._collision_report()
        rows = scalar(con, "SELECT count(*) FROM new_cand")
        cross = scalar(con, "SELECT count(*) FROM new_cand WHERE cross_domain")
        stats = candidate_figures(rows, self.documents, cross, self.slots, self.figures)
        run = self._stage_run("candidate_pairs", self.candidates, budget=self.budget)
        self._write("candidate_pairs", "SELECT * FROM new_cand", run.parameters, rows, stats)
        self.upstream["candidate_pairs"] = run.parameters
        write_candidate_summary(store, rows, stats)

    def _budget(self) -> None:
        """Pair slots, collision buckets and the largest bucket, updated by the touched
        buckets' size changes; the same budget check as candidate_pairs."""
        con, params, figures = self.con, self.candidates, self.figures
        hot = params.hot_bucket_size

        def sums(size: str) -> str:
            return (
                f"COALESCE(sum(CASE WHEN {size} > 1 THEN {size} * ({size} - 1) // 2 ELSE 0 END), 0), "
                f"COALESCE(sum(CASE WHEN {size} > {hot} THEN {size} - 1 ELSE 0 END), 0), "
                f"COALESCE(sum(CASE WHEN {size} > 1 AND {size} <= {hot} "
                f"THEN {size} * ({size} - 1) // 2 ELSE 0 END), 0), "
                f"count(*) FILTER ({size} > 1)"
            )

        old = con.execute(f"SELECT {sums('old_size')} FROM bstats").fetchall()[0]
        new = con.execute(f"SELECT {sums('new_size')} FROM bstats").fetchall()[0]
        for key, before, after in zip(("all_pairs_slots", "star_slots", "small_slots", "collision_buckets"), old, new):
            figures[key] = int(figures[key] - before + after)
        shrunk_max = scalar(
            con, f"SELECT count(*) FROM bstats WHERE old_size = {figures['max_bucket_size']} AND new_size < old_size"
        )
        grown = scalar(con, "SELECT COALESCE(max(new_size), 0) FROM bstats")
        if shrunk_max:  # the largest bucket lost members: look the largest up again
            figures["max_bucket_size"] = None
        else:
            figures["max_bucket_size"] = max(figures["max_bucket_size"], grown if grown > 1 else 0)
        self.documents = int(sum(pq.read_metadata(f).num_rows for f in self.store.data_files("documents")))
        if params.bucket_policy == "star":
            self.slots = figures["star_slots"] + figures["small_slots"]
        else:
            self.slots = figures["all_pairs_slots"]
        self.budget = pair_slot_budget(params.max_pair_slots, params.pair_slots_per_document, self.documents)
        if self.slots > self.budget:
            bands = self.store.scan_sql("band_memberships")
            sizes = con.execute(f"""SELECT size, count(*) FROM (SELECT count(*) AS size FROM {bands}
                GROUP BY band_index, band_hash HAVING count(*) > 1) GROUP BY size""").fetchall()
            most = figures["max_bucket_size"]
            largest = f"{most or 'many'} documents"
            raise budget_error(
                self.slots, self.budget, params, self.documents, largest, sizes, " (the corpus was left unchanged)"
            )

    def _collision_report(self) -> None:
        """collision_buckets.csv: the largest buckets (size, then key) with their members: the
        kept list updated by the touched buckets; looked up again when a listed bucket shrank."""
        con, store = self.con, self.store
        top_path = incremental_dir(store) / "collision_top.parquet"
        con.execute(
            "CREATE TEMP TABLE old_top AS "
            f"SELECT * FROM read_parquet({sql_string(str(top_path))}, hive_partitioning = false)"
        )
        listed_shrank = scalar(
            con,
            "SELECT count(*) FROM old_top o JOIN bstats s USING (band_index, band_hash) WHERE s.new_size < s.old_size",
        )
        bands = store.scan_sql("band_memberships")
        if listed_shrank or self.figures["max_bucket_size"] is None:
            create_collision_top(con, bands)
            if self.figures["max_bucket_size"] is None:
                self.figures["max_bucket_size"] = scalar(con, "SELECT COALESCE(max(size), 0) FROM top")
        else:
            # a touched bucket smaller than the smallest listed one cannot enter a full list (the
            # listed buckets it would displace are untouched or grew): its members are not gathered
            listed, smallest = con.execute("SELECT count(*), COALESCE(min(size), 2) FROM old_top").fetchone()
            least = smallest if listed >= COLLISION_TOP else 2  # listed buckets hold 2 or more
            # the members are gathered for the buckets that make the list only
            con.execute(f"""CREATE TEMP TABLE top AS
                WITH kept AS (SELECT * FROM old_top o WHERE NOT EXISTS (SELECT 1 FROM bstats s
                                  WHERE s.band_index = o.band_index AND s.band_hash = o.band_hash)),
                     grown AS (SELECT band_index, band_hash, new_size AS size FROM bstats WHERE new_size >= {least}),
                     chosen AS (SELECT * FROM (SELECT band_index, band_hash, size FROM kept UNION ALL
                                               SELECT * FROM grown)
                                 ORDER BY size DESC, band_index, band_hash LIMIT {COLLISION_TOP})
                SELECT * FROM (
                  SELECT k.* FROM kept k SEMI JOIN chosen c USING (band_index, band_hash)
                  UNION ALL
                  SELECT c.band_index, c.band_hash, c.size, string_agg(m.doc_id, ';' ORDER BY m.doc_id) AS doc_ids
                    FROM chosen c SEMI JOIN grown g USING (band_index, band_hash)
                    JOIN new_m m USING (band_index, band_hash)
                   GROUP BY c.band_index, c.band_hash, c.size)
                ORDER BY size DESC, band_index, band_hash""")
        save_table(con, "top", top_path)
        write_csv(
            report_path(store, "collision_buckets.csv"),
            con.sql("SELECT band_index, band_hash, size, doc_ids FROM top ORDER BY size DESC, band_index, band_hash"),
        )

    # -- scoring ---------------------------------------------------------------------------
