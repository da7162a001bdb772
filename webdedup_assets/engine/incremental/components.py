"""Connected components again over the touched clusters only."""

from __future__ import annotations

import numpy as np

from ...errors import WebdedupError
from ...storage.store import scalar
from ..stages.clustering import cluster_assignment, cluster_figures


class ComponentsStep:
    """Mixed into the updater (engine.incremental.update._Updater): uses its con, store, parameters and report."""

    def _clusters(self) -> None:
        con, store = self.con, self.store
        con.execute(f"CREATE TEMP TABLE old_clusters AS SELECT * FROM {store.scan_sql('clusters')}")
        # Documents whose edges changed: the added and removed ones, and both ends of every
        # duplicate edge that appeared or vanished.
        con.execute("""CREATE TEMP TABLE affected AS SELECT DISTINCT doc_id FROM (
            SELECT doc_id FROM added UNION ALL SELECT doc_id FROM removed
            UNION ALL SELECT left_doc_id FROM (SELECT left_doc_id, right_doc_id FROM old_dup
                                               EXCEPT SELECT left_doc_id, right_doc_id FROM new_dup)
            UNION ALL SELECT right_doc_id FROM (SELECT left_doc_id, right_doc_id FROM old_dup
                                                EXCEPT SELECT left_doc_id, right_doc_id FROM new_dup)
            UNION ALL SELECT left_doc_id FROM (SELECT left_doc_id, right_doc_id FROM new_dup
                                               EXCEPT SELECT left_doc_id, right_doc_id FROM old_dup)
            UNION ALL SELECT right_doc_id FROM (SELECT left_doc_id, right_doc_id FROM new_dup
                                                EXCEPT SELECT left_doc_id, right_doc_id FROM old_dup))""")
        con.execute("""CREATE TEMP TABLE touched_old AS
            SELECT DISTINCT c.cluster_id FROM old_clusters c SEMI JOIN affected a ON a.doc_id = c.doc_id""")
        # The members to cluster again: old members of touched clusters still held, and the added.
        con.execute("""CREATE TEMP TABLE regroup AS
            SELECT doc_id, CAST(row_number() OVER (ORDER BY doc_id) - 1 AS BIGINT) AS node FROM (
              SELECT c.doc_id FROM old_clusters c SEMI JOIN touched_old t ON t.cluster_id = c.cluster_id
               WHERE c.doc_id NOT IN (SELECT doc_id FROM removed)
              UNION SELECT doc_id FROM added)""")
        edges = con.execute("""
            SELECT l.node, r.node FROM new_dup p JOIN regroup l ON l.doc_id = p.left_doc_id
              JOIN regroup r ON r.doc_id = p.right_doc_id""").fetchnumpy()
        left, right = (np.asarray(v, dtype=np.int64) for v in edges.values())
        ids = con.sql("SELECT doc_id FROM regroup ORDER BY node").to_arrow_table().column("doc_id").combine_chunks()
        con.register("regrouped_arrow", cluster_assignment(ids, left, right))
        con.execute("CREATE TEMP TABLE regrouped AS SELECT * FROM regrouped_arrow")
        con.unregister("regrouped_arrow")
        self.report.clusters_touched = scalar(con, "SELECT count(DISTINCT cluster_id) FROM regrouped")
        con.execute("""CREATE TEMP TABLE new_clusters AS
            SELECT * FROM (
              SELECT c.* FROM old_clusters c WHERE c.cluster_id NOT IN (SELECT cluster_id FROM touched_old)
                 AND c.doc_id NOT IN (SELECT doc_id FROM removed)
              UNION ALL SELECT * FROM regrouped) ORDER BY doc_id""")
        rows = scalar(con, "SELECT count(*) FROM new_clusters")
        figures = cluster_figures(con, "new_clusters", scalar(con, "SELECT count(*) FROM new_dup"))
        if rows != self.documents:
            raise WebdedupError(
                f"incremental update: clusters would hold {rows} documents but the corpus holds {self.documents}; "
                "run with full_rebuild"
            )
        run = self._stage_run("clusters", None)
        self._write("clusters", "SELECT * FROM new_clusters", run.parameters, rows, figures)
        self.upstream["clusters"] = run.parameters

    # -- representatives -------------------------------------------------------------------
