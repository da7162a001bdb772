"""Row groups of the files that hold page text (deduped_documents) are bounded in bytes as well as
rows (storage.store.row_groups), when the stage writes the file and when `webdedup add` splices
a day into it: a reader or a rewriter holds about one row group of text, whatever the pages' length
and however many days were added."""

from __future__ import annotations

import csv
import random

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from webdedup_assets.cli.main import main
from webdedup_assets.storage import store as storage
from webdedup_assets.storage.store import row_groups


@settings(max_examples=60, deadline=None)
@given(parts=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 60)), max_size=8))
def test_row_groups_keep_every_row_in_order_within_both_bounds(parts):
    """parts: (rows, length of each row's text); bounds of 10 rows and 400 bytes."""
    rows_bound, bytes_bound = 10, 400
    old = storage.ROW_GROUP_ROWS, storage.ROW_GROUP_BYTES
    storage.ROW_GROUP_ROWS, storage.ROW_GROUP_BYTES = rows_bound, bytes_bound
    try:
        tables, expected = [], []
        for p, (rows, length) in enumerate(parts):
            texts = [f"{p:02d}{i:04d}".ljust(max(6, length), "x") for i in range(rows)]
            tables.append(pa.table({"text": texts}))
            expected += texts
        groups = list(row_groups(tables))
    finally:
        storage.ROW_GROUP_ROWS, storage.ROW_GROUP_BYTES = old
    assert [t for g in groups for t in g["text"].to_pylist()] == expected
    assert all(g.num_rows for g in groups)
    widest = max((len(t) + 4 for t in expected), default=0)  # a row's text and its offset
    for group in groups:
        assert group.num_rows <= rows_bound
        assert group.nbytes <= bytes_bound + widest
    for group in groups[:-1]:  # only the last may be small
        assert group.num_rows == rows_bound or group.nbytes >= bytes_bound - widest


def _pages(day: str, prefix: str, count: int, seed: int, copy_of: list[str] | None = None) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        if copy_of is not None and i < len(copy_of):  # a mirror of an earlier page, one word changed
            words = copy_of[i].split()
            words[len(words) // 2] = f"edited{i}"
            body = " ".join(words)
        else:
            body = " ".join(f"w{rng.randrange(100_000)}" for _ in range(800))  # ~6 KB of text
        rows.append(
            {
                "doc_id": f"{prefix}{i:03d}",
                "source": "test",
                "domain": f"{prefix}{i % 3}.example",
                "crawled_at": day,
                "title": f"page {i}",
                "body": body,
            }
        )
    return rows


def _write(path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _groups(path) -> list[tuple[int, int]]:
    metadata = pq.ParquetFile(path).metadata
    return [
        (metadata.row_group(i).num_rows, metadata.row_group(i).total_byte_size) for i in range(metadata.num_row_groups)
    ]


def test_deduped_documents_row_groups_stay_bounded_through_run_and_add(tmp_path, monkeypatch):
    monkeypatch.setattr(storage, "ROW_GROUP_BYTES", 40_000)  # about six pages of ~6 KB
    first = _pages("2026-03-01", "a", 40, seed=1)
    second = _pages("2026-03-02", "b", 30, seed=2, copy_of=[r["body"] for r in first[:12]])
    _write(tmp_path / "day1.csv", first)
    _write(tmp_path / "day2.csv", second)
    out = tmp_path / "out"
    assert main(["add", str(tmp_path / "day1.csv"), "--output", str(out)]) == 0
    built = _groups(out / "deduped_documents.parquet")
    assert sum(rows for rows, _ in built) == 40 and len(built) >= 5
    assert max(size for _, size in built) <= 40_000 + 8_000  # the bound and one page

    assert main(["add", str(tmp_path / "day2.csv"), "--output", str(out)]) == 0
    added = _groups(out / "deduped_documents.parquet")
    # the 12 mirrors (newest wins) replace their day-1 pages; 18 new pages join: 58 in all
    assert sum(rows for rows, _ in added) == 58
    assert max(size for _, size in added) <= 40_000 + 8_000  # the day is not one big last group
    assert len(added) >= 7
    kept = pq.read_table(out / "deduped_documents.parquet", columns=["doc_id"])["doc_id"].to_pylist()
    assert sorted(kept) == [f"a{i:03d}" for i in range(12, 40)] + [f"b{i:03d}" for i in range(30)]


def test_publishing_parts_into_one_file_bounds_its_row_groups(tmp_path, monkeypatch):
    """publish_concatenated (Spark writes deduped_documents as parts): one file, the parts' rows in
    order, row groups bounded by bytes like the stages' own files."""
    from webdedup_assets.storage.store import Store, publish_concatenated, write_table

    monkeypatch.setattr(storage, "ROW_GROUP_BYTES", 20_000)
    store = Store(tmp_path / "storage")
    store.asset_dir("deduped_documents").mkdir(parents=True)
    expected = []
    for part in range(3):
        ids = [f"p{part}-{i:02d}" for i in range(12)]
        expected += ids
        table = pa.table({"doc_id": ids, "body": [i + " " + "x" * 2_000 for i in ids]})  # ~2 KB a page
        if part == 1:  # a part written with a NOT NULL column, as another writer may
            table = table.cast(pa.schema([pa.field("doc_id", pa.string(), nullable=False), ("body", pa.string())]))
        write_table(store.asset_dir("deduped_documents") / f"part-{part:05d}.parquet", table, {"p": 1})
    target = tmp_path / "deduped_documents.parquet"
    assert publish_concatenated(store, "deduped_documents", target) == 36
    assert pq.read_table(target, columns=["doc_id"])["doc_id"].to_pylist() == expected
    groups = _groups(target)
    # ~2,030 bytes a row in memory: 9 rows make 18.3 KB, the tenth reaches the bound
    assert [rows for rows, _ in groups] == [10, 10, 10, 6]
