"""domain_summary.csv's rows (engine.publish.domain_summary_sql): per domain, its documents, the
representatives kept, the removed, and the ends of duplicate pairs it takes part in; a document
without a domain counts in a group of its own, with no pair ends (NULL matches no pair's domain)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from webdedup_assets.engine.publish import domain_summary_sql
from webdedup_assets.storage.store import Store, connect


def _put(store: Store, asset: str, table: pa.Table) -> None:
    path = store.path(asset)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def test_domain_summary_counts_documents_representatives_and_pair_ends(tmp_path):
    store = Store(tmp_path)
    documents = {
        "a1": "a.example",
        "a2": "a.example",
        "a3": "a.example",
        "b1": "b.example",
        "b2": "b.example",
        "n1": None,
        "n2": None,
        "c1": "c.example",
    }
    _put(store, "documents", pa.table({"doc_id": list(documents), "domain": pa.array(list(documents.values()))}))
    kept = ["a1", "b1", "n1", "c1"]  # a2, a3 duplicate a1 / b1; b2 duplicates a1; n2 duplicates n1
    _put(store, "deduped_documents", pa.table({"doc_id": kept, "domain": pa.array([documents[d] for d in kept])}))
    pairs = [("a1", "a2"), ("a1", "a3"), ("a1", "b2"), ("b1", "a3"), ("n1", "n2")]
    _put(
        store,
        "duplicate_pairs",
        pa.table(
            {
                "left_doc_id": [p[0] for p in pairs],
                "right_doc_id": [p[1] for p in pairs],
                "left_domain": pa.array([documents[p[0]] for p in pairs]),
                "right_domain": pa.array([documents[p[1]] for p in pairs]),
                "cross_domain": [documents[p[0]] != documents[p[1]] for p in pairs],
            }
        ),
    )
    con = connect()
    rows = con.sql(domain_summary_sql(store)).fetchall()
    con.close()
    # (domain, documents, representatives, removed, duplicate pair ends, cross-domain pair ends)
    assert rows == [
        ("a.example", 3, 1, 2, 6, 2),
        ("b.example", 2, 1, 1, 2, 2),
        (None, 2, 1, 1, 0, 0),
        ("c.example", 1, 1, 0, 0, 0),
    ]
