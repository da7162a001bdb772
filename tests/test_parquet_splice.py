"""parquet_splice: a file rewritten without some rows (and with new row groups) reads back as
exactly those rows, whichever pages were copied; pages were really copied when they could be."""

from __future__ import annotations

import random

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from webdedup_assets.storage.parquet_splice import Encode, Keep, layout, rewrite

SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("domain", pa.string()),
        ("crawled_at", pa.timestamp("us", tz="UTC")),
        ("body", pa.string()),
        ("cluster_size", pa.int64()),
    ]
)


def _table(rng: random.Random, n: int, prefix: str) -> pa.Table:
    words = ["web", "page", "näher", "日本語", "текст", "🙂", "a"]
    bodies = []
    for i in range(n):
        if i % 97 == 5:
            bodies.append(None)
        elif i % 89 == 3:
            bodies.append("")
        else:
            bodies.append(" ".join(rng.choice(words) for _ in range(rng.choice([1, 50, 500, 3000]))))
    return pa.table(
        {
            "doc_id": [f"{prefix}{i:05d}" for i in range(n)],
            "domain": [f"site{i % 7}.example" for i in range(n)],
            "crawled_at": pa.array([1_700_000_000_000_000 + i for i in range(n)], pa.timestamp("us", tz="UTC")),
            "body": pa.array(bodies, pa.string()),
            "cluster_size": pa.array([i % 5 + 1 for i in range(n)], pa.int64()),
        },
        schema=SCHEMA,
    )


def _write(path, table: pa.Table, group_rows: int, options: dict) -> None:
    with pq.ParquetWriter(path, SCHEMA, **options) as writer:
        for start in range(0, table.num_rows, group_rows):
            writer.write_table(table.slice(start, group_rows), row_group_size=group_rows)


@pytest.mark.parametrize("spliceable", [True, False])
def test_rewrite_keeps_exactly_the_rows_asked_for(tmp_path, spliceable):
    rng = random.Random(7)
    old = _table(rng, 1200, "d")
    source, target = tmp_path / "old.parquet", tmp_path / "new.parquet"
    # the other layout: pyarrow's defaults (a dictionary-encoded body): every group is re-encoded
    _write(source, old, 400, layout(SCHEMA, "body") if spliceable else {"compression": "zstd"})
    keep = [
        np.arange(400),  # every row: all pages copied
        np.array(sorted(rng.sample(range(400), 380))),  # a few rows dropped
        np.array([], np.int64),  # the whole group dropped
    ]
    inserted = _table(rng, 30, "n")
    parts = [Keep(0, keep[0]), Encode(inserted), Keep(1, keep[1]), Keep(2, keep[2]), Encode(_table(rng, 5, "t"))]
    schema = SCHEMA.with_metadata({b"webdedup": b'{"stage": "test"}'})
    rows, figures = rewrite(source, target, schema, "body", parts, layout(SCHEMA, "body"))
    expected = pa.concat_tables([old.slice(0, 400), inserted, old.slice(400, 400).take(keep[1]), parts[-1].table])
    assert rows == expected.num_rows == 400 + 30 + 380 + 5
    written = pq.read_table(target)
    assert written.equals(expected)
    assert pq.read_schema(target).metadata[b"webdedup"] == b'{"stage": "test"}'
    # a second reader agrees, row for row and in order
    con = duckdb.connect()
    through_duckdb = con.sql(f"SELECT * FROM read_parquet('{target}')").to_arrow_table()
    assert through_duckdb.column("body").to_pylist() == expected.column("body").to_pylist()
    assert through_duckdb.column("doc_id").to_pylist() == expected.column("doc_id").to_pylist()
    metadata = pq.read_metadata(target)
    assert metadata.num_row_groups == 4
    if spliceable:
        assert figures.groups_spliced == 2 and figures.groups_encoded == 2
        assert figures.pages_copied > figures.pages_encoded > 0
    else:
        assert figures.groups_spliced == 0 and figures.groups_encoded == 4 and figures.pages_copied == 0


def test_a_required_wide_column_and_uncompressed_pages(tmp_path):
    schema = pa.schema([("doc_id", pa.string(), False), ("body", pa.string(), False)])
    table = pa.table(
        {"doc_id": [f"d{i}" for i in range(300)], "body": ["x" * (i * 37 % 5000) for i in range(300)]}, schema=schema
    )
    source, target = tmp_path / "old.parquet", tmp_path / "new.parquet"
    options = {**layout(schema, "body"), "compression": "none"}
    pq.write_table(table, source, row_group_size=300, **options)
    kept = np.array([i for i in range(300) if i % 11])
    rows, figures = rewrite(source, target, schema, "body", [Keep(0, kept)], options)
    assert pq.read_table(target).equals(table.take(kept))
    assert figures.groups_spliced == 1 and figures.pages_encoded > 0


def test_without_a_source_the_row_groups_are_encoded_on_threads_into_a_new_file(tmp_path):
    """The full deduped_documents stage writes through rewrite(None, ...): one row group per
    table, in order, the rows and the file's metadata as a pyarrow writer gives them, and a file
    the next update can splice."""
    rng = random.Random(5)
    tables = [_table(rng, n, f"g{i}-") for i, n in enumerate([300, 1, 257, 40])]
    schema = SCHEMA.with_metadata({b"webdedup": b"{}"})
    target = tmp_path / "new.parquet"
    rows, figures = rewrite(None, target, schema, "body", (Encode(t) for t in tables), layout(SCHEMA, "body"), 2)
    assert rows == 598 and figures.groups_encoded == 4 and figures.groups_spliced == 0
    written = pq.ParquetFile(target)
    assert [written.metadata.row_group(i).num_rows for i in range(4)] == [300, 1, 257, 40]
    assert written.schema_arrow.metadata[b"webdedup"] == b"{}"
    assert written.read().replace_schema_metadata(None).equals(pa.concat_tables(tables))
    [(count,)] = duckdb.sql(f"SELECT count(DISTINCT doc_id) FROM read_parquet('{target}')").fetchall()
    assert count == 598
    again = tmp_path / "again.parquet"
    keep = [Keep(0, np.arange(0, 300, 2)), Keep(2, np.arange(257))]
    rows, figures = rewrite(target, again, schema, "body", keep, layout(SCHEMA, "body"))
    assert rows == 150 + 257 and figures.groups_spliced == 2 and figures.pages_copied > 0
