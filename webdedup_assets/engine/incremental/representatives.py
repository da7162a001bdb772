"""Representatives re-chosen for the touched clusters; deduped_documents and cluster_inspection."""

from __future__ import annotations

import pyarrow as pa

from ...core.ranking import policy_order_by
from ..clustering import cluster_inspection
from ..documents import stored_extra_columns
from ..publish import report_path
from ..storage import quote_ident, scalar, sql_string, write_csv
from .layout import data_files, duck_type, fetch_rows, incremental_dir, save_table
from .rebuild import ranked_sql


class RepresentativesStep:
    """Mixed into the updater (engine.incremental.update._Updater): uses its con, store, parameters and report."""

    def _representatives(self) -> None:
        con, store = self.con, self.store
        order_by = policy_order_by(self.representative.representative_policy)
        con.execute("CREATE TEMP TABLE touched_new AS SELECT DISTINCT cluster_id FROM regrouped")
        con.execute("CREATE TEMP TABLE members AS SELECT doc_id FROM regrouped")
        con.execute("DROP TABLE IF EXISTS ranked")
        con.execute(ranked_sql(store, self.representative, "members"))
        con.execute(
            "CREATE TEMP TABLE winners AS "
            "SELECT doc_id, cluster_id, cluster_size, token_count FROM ranked WHERE rank = 1"
        )
        files = data_files(store, "documents")
        doc_schema = con.sql(f"SELECT * FROM {store.scan_sql('documents')} LIMIT 0").arrow().schema
        winner_rows = fetch_rows(con, files, "winners", doc_schema.names)
        schema = pa.schema(
            [*doc_schema, ("cluster_id", pa.string()), ("cluster_size", pa.int64()), ("token_count", pa.int32())]
        )
        if winner_rows is None:
            winner_rows = doc_schema.empty_table()
        con.register("winner_rows_arrow", winner_rows)
        select = ", ".join(
            f"CAST(w.{quote_ident(f.name)} AS {duck_type(con, f)}) AS {quote_ident(f.name)}"
            if f.name in winner_rows.column_names
            else f"CAST(NULL AS {duck_type(con, f)}) AS {quote_ident(f.name)}"
            for f in doc_schema
        )
        con.execute(f"""CREATE TEMP TABLE new_reps AS
            SELECT {select}, k.cluster_id, k.cluster_size, k.token_count
              FROM winner_rows_arrow w JOIN winners k ON k.doc_id = w.doc_id""")
        con.unregister("winner_rows_arrow")
        old = store.scan_sql("deduped_documents")
        names = ", ".join(quote_ident(f.name) for f in schema)
        con.execute(f"""CREATE TEMP TABLE new_dedup AS
            SELECT {names} FROM (
              SELECT * FROM {old} o WHERE o.cluster_id NOT IN (SELECT cluster_id FROM touched_old)
              UNION ALL BY NAME SELECT * FROM new_reps)
             ORDER BY doc_id""")
        rows = scalar(con, "SELECT count(*) FROM new_dedup")
        documents = self.documents
        figures = {
            "documents": documents,
            "removed": documents - rows,
            "retained_ratio": round(rows / documents, 4) if documents else 0.0,
        }
        run = self._stage_run("deduped_documents", self.representative, order_by=order_by)
        self._write("deduped_documents", "SELECT * FROM new_dedup", run.parameters, rows, figures, schema=schema)
        # cluster_inspection.csv: rows of untouched clusters kept, touched ones recomputed
        inspection_path = incremental_dir(store) / "cluster_inspection.parquet"
        fresh = cluster_inspection(con, store, stored_extra_columns(store))
        con.execute(f"""CREATE TEMP TABLE inspection AS
            SELECT * FROM (
              SELECT * FROM read_parquet({sql_string(str(inspection_path))}) i
               WHERE i.cluster_id NOT IN (SELECT cluster_id FROM touched_old)
              UNION ALL BY NAME SELECT * FROM ({fresh.sql_query()}))
             ORDER BY cluster_id""")
        save_table(con, "inspection", inspection_path)
        write_csv(report_path(store, "cluster_inspection.csv"), con.sql("SELECT * FROM inspection ORDER BY cluster_id"))
