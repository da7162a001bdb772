"""Daily or monthly Parquet exports already in the stored form are adopted as byte copies (segments
of their month), not re-encoded.

Only a file whose days lie in one crawl month and are held by no other file, in the stored column
order and types, with no NULL body and valid UTF-8 text, is copied; every other input goes through
the validating copy, and both give the same documents and the same results.
"""

from __future__ import annotations

import csv
import datetime
import json
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from webdedup_assets.engine.stages.documents import stage_documents, stored_input
from webdedup_assets.errors import WebdedupError
from webdedup_assets.ingest.contract import CONTRACT_SCHEMA
from webdedup_assets.storage.store import Store, params_sidecar, read_params

from .conftest import FIXTURE, failure_messages, run_job

MONTHS = ["2026-03"]  # the fixture's crawl month


def fixture_rows() -> list[dict]:
    with open(FIXTURE, newline="") as handle:
        return list(csv.DictReader(handle))


def contract_table(rows: list[dict]) -> pa.Table:
    columns = {name: [row[name] for row in rows] for name in CONTRACT_SCHEMA.names}
    columns["crawled_at"] = [datetime.date.fromisoformat(d) for d in columns["crawled_at"]]
    return pa.table(columns, schema=CONTRACT_SCHEMA)


def write_daily_parquet(folder: Path) -> dict[str, Path]:
    """The fixture as one contract Parquet file per crawl day (what a daily export looks like)."""
    folder.mkdir(parents=True, exist_ok=True)
    by_day: dict[str, list[dict]] = {}
    for row in fixture_rows():
        by_day.setdefault(row["crawled_at"], []).append(row)
    paths = {}
    for day, rows in by_day.items():
        paths[day] = folder / f"{day}.parquet"
        pq.write_table(contract_table(rows), paths[day])
    return paths


def documents_of(store: Store) -> list[tuple]:
    con = duckdb.connect()
    return con.execute(f"SELECT * FROM {store.scan_sql('documents')} ORDER BY doc_id").fetchall()


def test_a_daily_export_is_stored_as_a_byte_copy_with_its_parameters_beside_it(tmp_path):
    paths = write_daily_parquet(tmp_path / "input")
    days = sorted(paths)
    store = Store(tmp_path / "store")
    stats = stage_documents(store, str(tmp_path / "input"), months=MONTHS)
    assert stats["files_adopted"] == len(days) == stats["days_with_documents"]
    assert store.partition_files("documents", "2026-03") == [
        store.segment_path("documents", "2026-03", d) for d in days
    ]
    assert not store.path("documents", "2026-03").exists()  # nothing left to re-encode
    for day in days:
        stored = store.segment_path("documents", "2026-03", day)
        assert stored.read_bytes() == paths[day].read_bytes()
        assert read_params(stored)["stage"] == "documents"
    assert json.loads(store.stats_path("documents", "2026-03").read_text())["segments_adopted"] == len(days)
    files, checksum = stored_input(store)
    assert sorted(Path(f["path"]).name for f in files) == sorted(p.name for p in paths.values())
    assert checksum is not None
    # the same rows as the validating copy of the same pages from CSV
    csv_store = Store(tmp_path / "csv-store")
    stage_documents(csv_store, str(FIXTURE), months=MONTHS)
    assert documents_of(store) == documents_of(csv_store)
    assert len(documents_of(store)) == 24


def test_files_sharing_a_day_or_spanning_months_are_copied_by_duckdb(tmp_path):
    rows = fixture_rows()
    days = sorted({r["crawled_at"] for r in rows})
    folder = tmp_path / "input"
    folder.mkdir()
    shared = next(d for d in days if sum(r["crawled_at"] == d for r in rows) == 2)
    pair = [r for r in rows if r["crawled_at"] == shared]
    rest = [r for r in rows if r["crawled_at"] != shared]
    april = {**rest[-1], "crawled_at": "2026-04-01"}
    # two files share one day; a third holds every other day of March and one day of April
    pq.write_table(contract_table(pair[:1]), folder / "a.parquet")
    pq.write_table(contract_table(pair[1:]), folder / "b.parquet")
    pq.write_table(contract_table([*rest[:-1], april]), folder / "c.parquet")
    store = Store(tmp_path / "store")
    stats = stage_documents(store, str(folder), months=["2026-03", "2026-04"])
    assert stats["files_adopted"] == 0
    assert not list(store.asset_dir("documents").glob("*.params.json"))
    assert store.partitions("documents") == ["2026-03", "2026-04"]
    assert len(documents_of(store)) == 24
    # without the April page, c.parquet is one month on days of its own: adopted; a and b are copied
    pq.write_table(contract_table(rest), folder / "c.parquet")
    stats = stage_documents(store, str(folder), months=["2026-03", "2026-04"])
    assert stats["files_adopted"] == 1 and store.partitions("documents") == ["2026-03"]
    # beside the adopted file, the copied rows are a segment named by their first day too
    assert [p.name for p in store.partition_files("documents", "2026-03")] == sorted(
        [f"part-2026-03.{rest[0]['crawled_at']}.parquet", f"part-2026-03.{shared}.parquet"]
    )
    assert len(documents_of(store)) == 24


def test_a_null_body_or_another_column_order_is_not_adopted(tmp_path):
    rows = [r for r in fixture_rows() if r["crawled_at"] == fixture_rows()[0]["crawled_at"]]
    day = rows[0]["crawled_at"]
    table = contract_table(rows)
    with_null = table.set_column(5, "body", pa.array([None] + [r["body"] for r in rows[1:]], pa.string()))
    (tmp_path / "nulls").mkdir()
    pq.write_table(with_null, tmp_path / "nulls" / f"{day}.parquet")
    store = Store(tmp_path / "s1")
    assert stage_documents(store, str(tmp_path / "nulls"), months=MONTHS)["files_adopted"] == 0
    bodies = dict((r[0], r[5]) for r in documents_of(store))
    assert bodies[rows[0]["doc_id"]] == ""  # stored as the empty string, as the contract says

    (tmp_path / "order").mkdir()
    pq.write_table(table.select(["body", *CONTRACT_SCHEMA.names[:5]]), tmp_path / "order" / f"{day}.parquet")
    assert stage_documents(Store(tmp_path / "s2"), str(tmp_path / "order"), months=MONTHS)["files_adopted"] == 0


def parquet_with_bad_utf8(path: Path, day: datetime.date) -> None:
    data = b"a fine page body" + b"bad \xff\xfe bytes"
    offsets = np.array([0, 16, len(data)], dtype=np.int32)
    body = pa.Array.from_buffers(pa.string(), 2, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data)])
    table = pa.table(
        {
            "doc_id": ["good", "broken"],
            "source": ["https://a.example/1", "https://a.example/2"],
            "domain": ["a.example", "a.example"],
            "crawled_at": [day, day],
            "title": ["t", "t"],
            "body": body,
        },
        schema=CONTRACT_SCHEMA,
    )
    pq.write_table(table, path)


def test_invalid_utf8_in_a_parquet_body_is_refused_naming_the_doc_id(tmp_path):
    day = datetime.date(2026, 3, 1)
    (tmp_path / "in").mkdir()
    bad = tmp_path / "in" / "2026-03-01.parquet"
    parquet_with_bad_utf8(bad, day)
    with pytest.raises(WebdedupError, match=r"2026-03-01.parquet: column body of doc_id 'broken' is not valid UTF-8"):
        stage_documents(Store(tmp_path / "s1"), str(tmp_path / "in"), months=MONTHS)
    # the same file beside another one holding the same day: the DuckDB copy path refuses it too
    pq.write_table(
        contract_table([{**fixture_rows()[0], "crawled_at": "2026-03-01"}]), tmp_path / "in" / "other.parquet"
    )
    with pytest.raises(WebdedupError, match=r"cannot read the input: .*2026-03-01.parquet.*not valid UTF8"):
        stage_documents(Store(tmp_path / "s2"), str(tmp_path / "in"), months=MONTHS)


def test_a_second_run_does_not_read_held_copies_again_but_checks_a_replaced_file(tmp_path, monkeypatch):
    """A daily job re-running over the same exports: a file the store already holds as an adopted
    copy (same size and sha256) is not decoded again for the UTF-8 check; a replaced file is."""
    import webdedup_assets.storage.adopt as adopt

    paths = write_daily_parquet(tmp_path / "input")
    days = sorted(paths)
    store = Store(tmp_path / "store")
    first = stage_documents(store, str(tmp_path / "input"), months=MONTHS)
    segments = [store.segment_path("documents", "2026-03", d) for d in days]
    before = [(p.read_bytes(), p.stat().st_mtime_ns) for p in segments]
    checked: list[str] = []
    real_check = adopt._text_is_clean

    def counting_check(path, schema):
        checked.append(Path(path).name)
        return real_check(path, schema)

    monkeypatch.setattr(adopt, "_text_is_clean", counting_check)
    second = stage_documents(store, str(tmp_path / "input"), months=MONTHS)
    assert checked == []
    assert second["files_adopted"] == first["files_adopted"] == len(days)
    assert [(p.read_bytes(), p.stat().st_mtime_ns) for p in segments] == before
    # one export replaced by a file with a body that is not UTF-8: checked, and refused
    parquet_with_bad_utf8(paths[days[0]], datetime.date.fromisoformat(days[0]))
    with pytest.raises(WebdedupError, match=rf"{days[0]}.parquet: column body of doc_id 'broken' is not valid UTF-8"):
        stage_documents(store, str(tmp_path / "input"), months=MONTHS)
    assert checked == [f"{days[0]}.parquet"]


def test_one_file_over_months_is_split_in_input_order_and_a_late_bad_value_leaves_nothing(tmp_path, monkeypatch):
    """The split path (one file spanning months, not adoptable): each month's file holds its rows
    in input order; invalid UTF-8 met while the input streams (after months were begun) fails
    with DuckDB's message naming the file, and no month file or staging folder is left."""
    import webdedup_assets.engine.stages.documents as documents

    monkeypatch.setattr(documents, "SPLIT_BATCH_ROWS", 64)  # many batches: the bad value comes mid-stream
    n = 20_000
    texts = [f"page {i} about topic {i % 97} " * 4 for i in range(n)]
    offsets = np.zeros(n + 1, np.int32)
    offsets[1:] = np.cumsum([len(t) for t in texts])
    days = [datetime.date(2026, 1 + i % 3, 1 + i % 28) for i in range(n)]

    def table(data: bytes) -> pa.Table:
        body = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data)])
        return pa.table(
            {
                "doc_id": [f"d{i:05d}" for i in range(n)],
                "source": [f"https://a.example/{i}" for i in range(n)],
                "domain": ["a.example"] * n,
                "crawled_at": pa.array(days, pa.date32()),
                "title": ["t"] * n,
                "body": body,
            },
            schema=CONTRACT_SCHEMA,
        )

    good = "".join(texts).encode()
    (tmp_path / "in").mkdir()
    pq.write_table(table(good), tmp_path / "in" / "corpus.parquet", row_group_size=1_000)
    store = Store(tmp_path / "s1")
    months = ["2026-01", "2026-02", "2026-03"]
    assert stage_documents(store, str(tmp_path / "in"), months=months)["files_adopted"] == 0
    for k, month in enumerate(months):
        stored = pq.read_table(store.path("documents", month))
        assert stored.column("doc_id").to_pylist() == [f"d{i:05d}" for i in range(k, n, 3)]
        assert stored.column("body").to_pylist() == texts[k::3]

    bad = bytearray(good)
    bad[int(offsets[n - 5])] = 0xFF
    pq.write_table(table(bytes(bad)), tmp_path / "in" / "corpus.parquet", row_group_size=1_000)
    with pytest.raises(WebdedupError, match=r"cannot read the input: .*corpus.parquet.*not valid UTF8"):
        stage_documents(Store(tmp_path / "s2"), str(tmp_path / "in"), months=months)
    assert not list((tmp_path / "s2" / "documents").glob("*.parquet"))
    assert not list((tmp_path / "s2" / "documents").glob(".staging*"))


def test_rewriting_an_adopted_day_through_the_copy_path_drops_its_sidecar(tmp_path):
    paths = write_daily_parquet(tmp_path / "input")
    day = sorted(paths)[0]
    store = Store(tmp_path / "store")
    for other in sorted(paths)[1:]:  # one day left in March
        paths[other].unlink()
    stage_documents(store, str(tmp_path / "input"), months=MONTHS)
    stored = store.segment_path("documents", "2026-03", day)
    assert params_sidecar(stored).exists()
    paths[day].unlink()  # the day is now re-exported as CSV
    rows = [r for r in fixture_rows() if r["crawled_at"] == day]
    with open(tmp_path / "input" / f"{day}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert stage_documents(store, str(tmp_path / "input"), months=MONTHS)["files_adopted"] == 0
    assert not stored.exists() and not params_sidecar(stored).exists()
    main = store.path("documents", "2026-03")
    assert store.partition_files("documents", "2026-03") == [main]
    assert [Path(f["path"]).suffix for f in read_params(main)["input"]["input_files"]] == [".csv"]


def test_the_whole_pipeline_on_daily_parquet_gives_the_fixture_results(tmp_path):
    write_daily_parquet(tmp_path / "input")
    result, store = run_job(tmp_path / "parquet", tmp_path / "input")
    assert result.success, failure_messages(result)
    manifest = json.loads((tmp_path / "parquet" / "output" / "manifest.json").read_text())
    counts = manifest["counts"]
    assert (counts["candidate_pairs"], counts["representatives"]) == (18, 12)


def test_input_days_of_parquet_come_from_the_footer_or_the_column(tmp_path):
    from webdedup_assets.engine.reading import days_from_statistics, input_days
    from webdedup_assets.ingest.inputs import resolve_input

    rows = fixture_rows()
    expected = sorted({r["crawled_at"] for r in rows})
    assert input_days(str(FIXTURE)) == expected  # CSV: read from the column
    one_day_groups = tmp_path / "groups.parquet"
    pq.write_table(contract_table(sorted(rows, key=lambda r: r["crawled_at"])), one_day_groups, row_group_size=1)
    (parquet,) = resolve_input(str(one_day_groups))
    assert sorted(days_from_statistics(parquet)) == expected
    assert input_days(str(one_day_groups)) == expected
    spanning = tmp_path / "spanning.parquet"
    pq.write_table(contract_table(rows), spanning)  # one row group over every day
    (parquet,) = resolve_input(str(spanning))
    assert days_from_statistics(parquet) is None
    assert input_days(str(spanning)) == expected


def test_a_new_daily_export_in_a_held_month_is_the_only_file_fingerprinted_again(tmp_path):
    """Derived files mirror the documents files of a month: re-running the month after one more
    daily export arrived copies and fingerprints that export alone; the others stay as they were."""
    from webdedup_assets.cli.main import main

    paths = write_daily_parquet(tmp_path / "all")
    days = sorted(paths)
    (tmp_path / "input").mkdir()
    for day in days[:-1]:
        paths[day].rename(tmp_path / "input" / paths[day].name)
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "input"), "--output", str(out), "--quiet"]) == 0
    store = Store(out / "_storage")
    derived = {
        asset: {p.name: p.stat().st_mtime_ns for p in store.partition_files(asset, "2026-03")}
        for asset in ("documents", "fingerprinted", "band_memberships")
    }
    assert len(derived["fingerprinted"]) == len(days) - 1  # one file per documents segment
    paths[days[-1]].rename(tmp_path / "input" / paths[days[-1]].name)
    assert main(["run", str(tmp_path / "input"), "--output", str(out), "--quiet"]) == 0
    for asset, before in derived.items():
        after = {p.name: p.stat().st_mtime_ns for p in store.partition_files(asset, "2026-03")}
        assert set(after) == set(before) | {f"part-2026-03.{days[-1]}.parquet"}, asset
        assert {name: after[name] for name in before} == before, asset  # untouched
    stats = json.loads(store.stats_path("fingerprinted", "2026-03").read_text())
    new_rows = sum(1 for r in fixture_rows() if r["crawled_at"] == days[-1])
    assert stats["files_reused"] == len(days) - 1 and stats["documents"] == new_rows
    assert stats["rows"] == 24
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert (counts["candidate_pairs"], counts["representatives"]) == (18, 12)
    # new parameters: nothing is reused
    assert main(["run", str(tmp_path / "input"), "--output", str(out), "--quiet", "--shingle-size", "4"]) == 0
    stats = json.loads(store.stats_path("fingerprinted", "2026-03").read_text())
    assert stats["files_reused"] == 0 and stats["documents"] == 24


def test_webdedup_add_of_one_day_leaves_the_months_other_files_untouched(tmp_path, capsys):
    """`webdedup add` of a day in a held month: the month's stored files that hold none of the
    input's days stay as they are (neither re-encoded nor fingerprinted again); a CSV day is
    written as a segment of its own beside them; the results equal a run over everything."""
    from webdedup_assets.cli.main import main

    paths = write_daily_parquet(tmp_path / "all")
    days = sorted(paths)
    (tmp_path / "held").mkdir()
    for day in days[:-1]:
        paths[day].rename(tmp_path / "held" / paths[day].name)
    last = [r for r in fixture_rows() if r["crawled_at"] == days[-1]]
    new_day = tmp_path / "new.csv"
    with open(new_day, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(last[0]))
        writer.writeheader()
        writer.writerows(last)
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "held"), "--output", str(out), "--quiet"]) == 0
    store = Store(out / "_storage")
    before = {
        asset: {p.name: p.stat().st_mtime_ns for p in store.partition_files(asset, "2026-03")}
        for asset in ("documents", "fingerprinted", "band_memberships")
    }
    assert main(["add", str(new_day), "--output", str(out)]) == 0
    capsys.readouterr()
    for asset, old in before.items():
        now = {p.name: p.stat().st_mtime_ns for p in store.partition_files(asset, "2026-03")}
        assert set(now) == set(old) | {f"part-2026-03.{days[-1]}.parquet"}, asset
        assert {name: now[name] for name in old} == old, asset
    stats = json.loads(store.stats_path("fingerprinted", "2026-03").read_text())
    assert stats["documents"] == len(last) and stats["rows"] == 24
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert (counts["documents"], counts["candidate_pairs"], counts["representatives"]) == (24, 18, 12)
    # a doc_id the corpus already holds on another day is refused, naming it
    with open(new_day, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(last[0]))
        writer.writeheader()
        writer.writerow({**fixture_rows()[0], "crawled_at": "2026-03-30"})
    assert main(["add", str(new_day), "--output", str(out)]) == 2
    assert f"already holds on other days, first: {fixture_rows()[0]['doc_id']!r}" in capsys.readouterr().err
