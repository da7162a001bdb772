"""storage.parquet_concat: Parquet files put together by copying their column chunks, and the
footer codec it rests on; publish_concatenated uses it for day-partitioned assets."""

from __future__ import annotations

import json
import struct
from datetime import date

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from webdedup_assets.storage import parquet_concat
from webdedup_assets.storage.store import Store, publish_concatenated, write_table


def _part(start: int, rows: int) -> pa.Table:
    """Every kind of column a stored asset holds: strings with nulls, a list of uint32 (signatures),
    dates, booleans, doubles, a low-cardinality (dictionary-encoded) string."""
    return pa.table(
        {
            "doc_id": [f"d{start + i:05d}" for i in range(rows)],
            "domain": [f"site{(start + i) % 3}.example" for i in range(rows)],
            "body": [None if (start + i) % 7 == 0 else f"text {start + i} " * (i % 5 + 1) for i in range(rows)],
            "signature": pa.array([[start + i, i, 7] for i in range(rows)], pa.list_(pa.uint32())),
            "crawled_at": pa.array([date(2026, 3, 1 + (start + i) % 28) for i in range(rows)], pa.date32()),
            "is_duplicate": [(start + i) % 2 == 0 for i in range(rows)],
            "jaccard": [((start + i) % 100) / 100 for i in range(rows)],
        }
    )


def _footer_bytes(path) -> bytes:
    data = path.read_bytes()
    length = struct.unpack("<I", data[-8:-4])[0]
    return data[-8 - length : -8]


@pytest.mark.parametrize("options", [{}, {"use_dictionary": False}, {"compression": "none"}, {"row_group_size": 7}])
def test_the_footer_codec_round_trips_pyarrow_footers_byte_for_byte(tmp_path, options):
    path = tmp_path / "part.parquet"
    pq.write_table(_part(0, 40).replace_schema_metadata({"webdedup": "{}"}), path, **options)
    raw = _footer_bytes(path)
    fields = parquet_concat.decode_footer(raw)
    assert parquet_concat.encode_footer(fields) == raw
    assert parquet_concat.thrift_field(fields, parquet_concat.FMD_NUM_ROWS) == 40


def test_files_are_concatenated_without_reencoding_and_read_back_equal(tmp_path):
    parts = [_part(0, 30), _part(30, 1), _part(31, 50)]
    files = []
    for i, (table, group) in enumerate(zip(parts, [8, 5, 20], strict=True)):
        files.append(tmp_path / f"day-{i}.parquet")
        pq.write_table(table, files[-1], row_group_size=group, compression="zstd")
    schema = parts[0].schema.with_metadata({"webdedup": json.dumps({"p": 1})})
    plan = parquet_concat.plan(files)
    assert plan is not None and plan.rows == 81
    target = tmp_path / "all.parquet"
    assert parquet_concat.write(plan, target, schema) == 81
    expected = pa.concat_tables(parts)
    assert pq.read_table(target).equals(expected.replace_schema_metadata(schema.metadata))
    assert pq.read_schema(target).metadata == {b"webdedup": b'{"p": 1}'}
    metadata = pq.ParquetFile(target).metadata
    assert metadata.num_row_groups == 4 + 1 + 3  # the parts' row groups, as they were
    # the column chunks are the parts' own bytes: same compressed sizes, moved offsets
    first = pq.ParquetFile(files[2]).metadata.row_group(0).column(2)
    moved = metadata.row_group(5).column(2)
    assert moved.total_compressed_size == first.total_compressed_size
    assert moved.data_page_offset > first.data_page_offset
    # another reader follows the offsets too
    [rows] = duckdb.sql(f"SELECT count(*), count(body), sum(len(signature)) FROM '{target}'").fetchall()
    assert rows == (81, 81 - len([i for i in range(81) if i % 7 == 0]), 243)
    assert duckdb.sql(f"SELECT doc_id FROM '{target}' WHERE doc_id = 'd00077'").fetchall() == [("d00077",)]


def _write(path, table: pa.Table, **options) -> None:
    pq.write_table(table, path, **options)


def test_what_cannot_be_concatenated_is_refused_before_anything_is_written(tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    _write(a, _part(0, 10))
    # a NOT NULL column is another Parquet schema (repetition REQUIRED)
    strict = _part(10, 10).cast(_part(10, 10).schema.set(0, pa.field("doc_id", pa.string(), nullable=False)))
    _write(b, strict)
    assert parquet_concat.plan([a, b]) is None
    # a page index locates pages by absolute offsets of its own: not moved, so refused
    _write(b, _part(10, 10), write_page_index=True)
    assert parquet_concat.plan([a, b]) is None
    # not Parquet, or a footer cut short
    b.write_bytes(b"PAR1 not really")
    assert parquet_concat.plan([a, b]) is None
    _write(b, _part(10, 10))
    data = b.read_bytes()
    b.write_bytes(data[:-20] + data[-8:])
    assert parquet_concat.plan([a, b]) is None
    # row groups of fewer rows than asked for, on average
    _write(b, _part(10, 10), row_group_size=2)
    assert parquet_concat.plan([a, b], min_rows_per_group=5) is None
    assert parquet_concat.plan([a, b], min_rows_per_group=2) is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.parquet", "b.parquet"]


def test_a_day_partitioned_asset_is_published_by_concatenation(tmp_path, monkeypatch):
    """publish_concatenated copies the days' column chunks when it can (the row groups stay the
    days' own), and streams the rows into a new file when it cannot: the same rows either way."""
    from webdedup_assets.storage import store as storage

    monkeypatch.setattr(storage, "CONCATENATED_MIN_GROUP_ROWS", 5)
    store = Store(tmp_path / "storage")
    folder = store.asset_dir("fingerprinted")
    folder.mkdir(parents=True)
    days = [_part(0, 20), _part(20, 20), _part(40, 20)]
    for i, table in enumerate(days):
        write_table(folder / f"part-2026-03.2026-03-0{i + 1}.parquet", table, {"fingerprint": {"num_perm": 3}})
    target = tmp_path / "fingerprinted.parquet"
    assert publish_concatenated(store, "fingerprinted", target) == 60
    published = pq.read_table(target)
    assert published.replace_schema_metadata(None).equals(pa.concat_tables(days))
    assert json.loads(published.schema.metadata[b"webdedup"])["fingerprint"] == {"num_perm": 3}
    copied = pq.ParquetFile(target).metadata
    assert copied.num_row_groups == 3 and copied.row_group(1).column(0).total_compressed_size == (
        pq.ParquetFile(folder / "part-2026-03.2026-03-02.parquet").metadata.row_group(0).column(0).total_compressed_size
    )
    # row groups below the bound: the rows are streamed into new row groups instead, same content
    monkeypatch.setattr(storage, "CONCATENATED_MIN_GROUP_ROWS", 100)
    assert publish_concatenated(store, "fingerprinted", target) == 60
    assert pq.read_table(target).replace_schema_metadata(None).equals(pa.concat_tables(days))
    assert pq.ParquetFile(target).metadata.num_row_groups == 1


def test_every_truncation_of_a_footer_is_a_thrift_error():
    sink = pa.BufferOutputStream()
    pq.write_table(_part(0, 3), sink)
    data = sink.getvalue().to_pybytes()
    raw = data[-8 - struct.unpack("<I", data[-8:-4])[0] : -8]
    for cut in range(len(raw)):
        with pytest.raises(parquet_concat.ThriftError):
            parquet_concat.decode_footer(raw[:cut])
