"""JSON Lines input and the column mapping of every tabular input (CSV, Parquet, JSON Lines).

Every corpus here is written by the test from the fixture's documents: Dolma-style shards
(id, text, source, added, created, metadata.url) in mixed codecs, FineWeb-like Parquet, CSV with
other column names.
"""

from __future__ import annotations

import csv
import datetime
import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from webdedup_assets.cli.main import main
from webdedup_assets.engine.reading import input_days
from webdedup_assets.engine.stages.documents import stage_documents
from webdedup_assets.errors import WebdedupError
from webdedup_assets.params import ColumnParams
from webdedup_assets.storage.store import Store, read_params

from .conftest import FIXTURE

DOLMA = ColumnParams(id_column="id", text_column="text", date_column="created", url_column="metadata.url")
DOLMA_FLAGS = ["--id-column", "id", "--text-column", "text", "--date-column", "created", "--url-column", "metadata.url"]
SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json.gz", ".json.zst", ".jsonl", ".json.gz", ".jsonl.zst")


def fixture_rows() -> list[dict]:
    with open(FIXTURE, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def dolma_record(row: dict) -> dict:
    return {
        "id": row["doc_id"],
        "text": row["body"],
        "source": row["source"],
        "added": "2026-04-01",
        "created": row["crawled_at"] + "T08:00:00Z",
        "metadata": {"url": f"https://{row['domain']}/{row['doc_id']}", "length": len(row["body"])},
    }


def write_shard(path: Path, records: list[dict] | str) -> Path:
    """One JSON Lines shard, compressed as its name says."""
    text = records if isinstance(records, str) else "".join(json.dumps(r) + "\n" for r in records)
    data = text.encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    elif path.name.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def dolma_shards(folder: Path) -> Path:
    """The fixture's documents as 8 Dolma-style shards of mixed codecs."""
    rows = fixture_rows()
    for shard, suffix in enumerate(SUFFIXES):
        write_shard(folder / f"shard-{shard:02d}{suffix}", [dolma_record(r) for r in rows[shard :: len(SUFFIXES)]])
    return folder


def stored_documents(store: Store) -> list[dict]:
    rows = [r for path in store.files("documents") for r in pq.read_table(path).to_pylist()]
    return sorted(rows, key=lambda r: r["doc_id"])


def test_dolma_shards_of_mixed_codecs_give_the_duplicate_pairs_of_the_csv(tmp_path, capsys):
    shards = dolma_shards(tmp_path / "shards")
    assert main(["run", str(FIXTURE), "--output", str(tmp_path / "csv"), "--quiet"]) == 0
    assert main(["run", str(shards), "--output", str(tmp_path / "jsonl"), "--quiet", *DOLMA_FLAGS]) == 0, (
        capsys.readouterr().err
    )
    manifest = json.loads((tmp_path / "jsonl" / "manifest.json").read_text())
    assert manifest["parameters"]["documents"] == {
        "input_path": str(shards),
        "input_format": "auto",
        "id_column": "id",
        "text_column": "text",
        "date_column": "created",
        "url_column": "metadata.url",
    }
    for name in ("duplicate_pairs.csv", "clusters.csv"):
        assert (tmp_path / "jsonl" / name).read_bytes() == (tmp_path / "csv" / name).read_bytes(), name
    kept = pq.read_table(tmp_path / "jsonl" / "deduped_documents.parquet").to_pylist()
    first = next(r for r in kept if r["doc_id"] == "billing-mirror")
    # the domain is the URL's host; every other field is kept, nested ones as they are
    assert first["domain"] == "pages.copycat.example" and first["source"] == "mirror-crawl"
    assert first["title"] is None
    body = next(r["body"] for r in fixture_rows() if r["doc_id"] == "billing-mirror")
    assert first["metadata"] == {"url": "https://pages.copycat.example/billing-mirror", "length": len(body)}
    assert first["added"] == "2026-04-01"  # a JSON string stays one, however date-like
    assert "id" not in first and "text" not in first and "created" not in first


def test_a_malformed_line_names_the_file_and_the_line(tmp_path):
    good = [dolma_record(r) for r in fixture_rows()[:2]]
    lines = "".join(json.dumps(r) + "\n" for r in good) + '{"id": "broken", "text": oops}\n'
    for name in ("bad.jsonl", "bad.jsonl.gz", "bad.json.zst"):
        path = write_shard(tmp_path / name, lines)
        with pytest.raises(WebdedupError) as caught:
            stage_documents(Store(tmp_path / f"s-{name}"), str(path), mapping=DOLMA)
        assert str(caught.value) == f"{path}: line 3: malformed JSON: Expecting value at column 26"


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ('{"id": "x", "text": "a \\ud800 b"}', "a lone UTF-16 surrogate ('\\ud800') in a string: not valid Unicode"),
        ('{"id": "x", "text": "tab\there"}', "malformed JSON: Invalid control character at column 25"),
        (
            '{"id": "x", "text": "a", "text": "b", "created": "2026-03-01"}',
            "the key 'text' appears twice in one object",
        ),
    ],
)
def test_a_line_duckdb_refuses_and_python_reads_is_named_with_its_own_line(tmp_path, bad, said):
    """DuckDB refuses these lines; Python's json read the first two, so the message carried
    DuckDB's own line number (30002 for line 30001, 29972 with blank lines) and its raw text."""
    good = [json.dumps(dolma_record(r)) for r in fixture_rows()[:3]]
    path = write_shard(tmp_path / "shard.jsonl.gz", "\n\n".join([*good, bad]) + "\n")  # blank lines between
    with pytest.raises(WebdedupError) as caught:
        stage_documents(Store(tmp_path / "s"), str(path), mapping=DOLMA)
    assert str(caught.value) == f"{path}: line 7: {said}"


def test_a_line_that_is_not_an_object_is_named(tmp_path):
    path = write_shard(tmp_path / "array.jsonl", json.dumps(dolma_record(fixture_rows()[0])) + "\n[1, 2]\n")
    with pytest.raises(WebdedupError) as caught:
        stage_documents(Store(tmp_path / "s"), str(path), mapping=DOLMA)
    assert str(caught.value) == f"{path}: line 2: a JSON array, not an object; each line must be one object"
    # DuckDB reads a `null` line as a record of NULLs: it was "1 row(s) have an empty doc_id", no line
    path = write_shard(tmp_path / "null.jsonl", json.dumps(dolma_record(fixture_rows()[0])) + "\nnull\n")
    with pytest.raises(WebdedupError) as caught:
        stage_documents(Store(tmp_path / "t"), str(path), mapping=DOLMA)
    assert str(caught.value) == f"{path}: line 2: a JSON null, not an object; each line must be one object"


def test_a_missing_mapped_field_names_the_field_and_the_file(tmp_path):
    path = write_shard(tmp_path / "a.jsonl", [dolma_record(r) for r in fixture_rows()[:3]])
    mapping = DOLMA.model_copy(update={"text_column": "content"})
    with pytest.raises(WebdedupError) as caught:
        stage_documents(Store(tmp_path / "s"), str(path), mapping=mapping)
    assert str(caught.value) == (
        f"{path}: missing required column(s) content (as body); found columns: id, text, source, added, created, "
        "metadata"
    )
    mapping = DOLMA.model_copy(update={"url_column": "metadata.link"})
    with pytest.raises(WebdedupError, match=r"missing required column\(s\) metadata.link \(as URL\)"):
        stage_documents(Store(tmp_path / "s2"), str(path), mapping=mapping)


MARCH_1 = int(datetime.datetime(2026, 3, 1, tzinfo=datetime.UTC).timestamp())


def test_epoch_seconds_and_the_default_date(tmp_path):
    records = [
        {"id": "a", "text": "alpha beta gamma", "ts": MARCH_1, "metadata": {"url": "https://A.example/x"}},
        {"id": "b", "text": "delta epsilon", "ts": MARCH_1 + 86399.5, "metadata": {"url": "http://b.example:8080/y"}},
        {"id": "c", "text": "zeta eta theta", "ts": None, "metadata": {"url": "https://c.example"}},
        {"id": "d", "text": "iota kappa", "metadata": {"url": "https://d.example/"}},
    ]
    path = write_shard(tmp_path / "epoch.jsonl.zst", records)
    mapping = ColumnParams(id_column="id", text_column="text", date_column="ts", url_column="metadata.url")
    with pytest.raises(WebdedupError) as caught:
        stage_documents(Store(tmp_path / "s"), str(path), mapping=mapping)
    assert str(caught.value).startswith(
        f"crawled_at is missing for 2 document(s), first doc_id(s): 'c', 'd' (in {path}, field ts); every "
        "document needs its crawl date"
    )
    assert str(caught.value).endswith("or set a default date for them (default_date; CLI: --default-date)")
    mapping = mapping.model_copy(update={"default_date": "2026-02-01"})
    assert input_days(str(path), mapping=mapping) == ["2026-02-01", "2026-03-01"]
    store = Store(tmp_path / "s2")
    figures = stage_documents(store, str(path), months=["2026-02", "2026-03"], mapping=mapping)
    assert figures["documents_given_default_date"] == 2
    rows = {r["doc_id"]: (str(r["crawled_at"]), r["domain"]) for r in stored_documents(store)}
    assert rows == {
        "a": ("2026-03-01", "a.example"),
        "b": ("2026-03-01", "b.example"),
        "c": ("2026-02-01", "c.example"),
        "d": ("2026-02-01", "d.example"),
    }


def test_an_empty_shard_holds_no_document(tmp_path):
    dolma_shards(tmp_path / "shards")
    write_shard(tmp_path / "shards" / "shard-99.jsonl.gz", "")
    store = Store(tmp_path / "s")
    figures = stage_documents(store, str(tmp_path / "shards"), months=["2026-03"], mapping=DOLMA)
    assert figures["rows"] == len(fixture_rows())
    assert len(figures["input_files"]) == 9


def test_fineweb_like_parquet_is_read_through_the_mapping(tmp_path):
    rows = fixture_rows()[:4]
    table = pa.table(
        {
            "text": [r["body"] for r in rows],
            "id": [f"<urn:uuid:{i}>" for i in range(len(rows))],
            "dump": ["CC-MAIN-2026-09"] * len(rows),
            "url": [f"https://{r['domain']}/page" for r in rows],
            "date": [r["crawled_at"] + "T10:11:12Z" for r in rows],
            "language": ["en"] * len(rows),
            "language_score": [0.97] * len(rows),
            "token_count": [len(r["body"].split()) for r in rows],
        }
    )
    path = tmp_path / "000_00000.parquet"
    pq.write_table(table, path)
    mapping = ColumnParams(
        id_column="id", text_column="text", date_column="date", url_column="url", source_column="dump"
    )
    store = Store(tmp_path / "s")
    stage_documents(store, str(path), months=["2026-03"], mapping=mapping)
    stored = stored_documents(store)
    assert [(r["doc_id"], r["source"], r["domain"], str(r["crawled_at"])) for r in stored] == [
        (f"<urn:uuid:{i}>", "CC-MAIN-2026-09", r["domain"], r["crawled_at"]) for i, r in enumerate(rows)
    ]
    assert [r["url"] for r in stored] == [f"https://{r['domain']}/page" for r in rows]
    assert stored[0]["language_score"] == 0.97 and "dump" not in stored[0]
    # deduped_documents adds its own token_count: the input's is kept beside it
    assert [r["input_token_count"] for r in stored] == [len(r["body"].split()) for r in rows]
    assert read_params(store.files("documents")[0])["input"]["source_column"] == "dump"


def test_csv_with_other_column_names(tmp_path):
    rows = fixture_rows()
    path = tmp_path / "pages.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["page", "site", "fetched", "headline", "content", "lang"])
        writer.writerows([r["doc_id"], r["domain"], r["crawled_at"], r["title"], r["body"], "en"] for r in rows)
    mapping = ColumnParams(
        id_column="page",
        domain_column="site",
        date_column="fetched",
        title_column="headline",
        text_column="content",
        source_column="",
    )
    store = Store(tmp_path / "s")
    stage_documents(store, str(path), months=["2026-03"], mapping=mapping)
    stored = stored_documents(store)
    expected = sorted(rows, key=lambda r: r["doc_id"])
    assert [(r["doc_id"], r["domain"], str(r["crawled_at"]), r["title"], r["body"]) for r in stored] == [
        (r["doc_id"], r["domain"], r["crawled_at"], r["title"], r["body"]) for r in expected
    ]
    assert {r["source"] for r in stored} == {None} and {r["lang"] for r in stored} == {"en"}


def test_a_field_named_like_a_contract_column_but_not_mapped_is_refused(tmp_path):
    records = [{**dolma_record(r), "body": "another text"} for r in fixture_rows()[:2]]
    path = write_shard(tmp_path / "a.jsonl", records)
    with pytest.raises(WebdedupError) as caught:
        stage_documents(Store(tmp_path / "s"), str(path), mapping=DOLMA)
    assert str(caught.value) == (
        f"{path}: field(s) body (the body column is read from text (as body)) would be kept beside the column of "
        "the same name; map them or rename them"
    )


def test_add_with_another_mapping_is_refused_naming_both(tmp_path, capsys):
    shards = dolma_shards(tmp_path / "shards")
    out = tmp_path / "out"
    assert main(["run", str(shards), "--output", str(out), "--quiet", *DOLMA_FLAGS]) == 0
    capsys.readouterr()
    more = tmp_path / "more"
    write_shard(
        more / "extra.jsonl",
        [{**dolma_record(fixture_rows()[0]), "id": "late-copy", "created": "2026-03-25T00:00:00Z"}],
    )
    other = [*DOLMA_FLAGS[:-1], "url"]  # --url-column url
    assert main(["add", str(more), "--output", str(out), *other]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (  # after the notice that nothing was changed
        f"webdedup: error: the 22 crawl day(s) held in {out / '_storage'} were read with --id-column='id', "
        "--text-column='text', --date-column='created', --url-column='metadata.url', this input with "
        "--id-column='id', --text-column='text', --date-column='created', --url-column='url': one corpus is read "
        "with one column mapping; give the held one, or `webdedup run` the whole input with the new one"
    )
    # a field given its default name is named too where it differs (`--text-column body` was left out)
    assert main(["add", str(more), "--output", str(out), *DOLMA_FLAGS[:3], "body", *DOLMA_FLAGS[4:]]) == 2
    assert (
        "--text-column='text', --date-column='created', --url-column='metadata.url', this input with "
        "--id-column='id', --text-column='body', --date-column='created'" in capsys.readouterr().err
    )
    # a shard without the held mapping's fields is named by add, before anything changes
    bare = write_shard(tmp_path / "bare" / "x.jsonl", [{"id": "x", "body": "words", "created": "2026-03-25"}])
    assert main(["add", str(bare), "--output", str(out)]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"webdedup: error: {bare}: missing required column(s) metadata.url (as URL), text (as body); found "
        "columns: id, body, created"
    )
    # without mapping flags, add reads the new input as the corpus was read
    assert main(["add", str(more), "--output", str(out), "--json"]) == 0, capsys.readouterr().err
    summary = json.loads(capsys.readouterr().out)
    assert summary["counts"]["documents"] == len(fixture_rows()) + 1
    # check reads its input with the corpus' mapping too: the late copy duplicates the corpus
    copy = write_shard(tmp_path / "check" / "copy.jsonl.gz", [{**dolma_record(fixture_rows()[0]), "id": "new-copy"}])
    report = tmp_path / "check.parquet"
    args = ["check", str(copy), "--against", str(out / "_storage"), "--report", str(report), "--json"]
    assert main(args) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["duplicates"] == 1


def test_the_mapping_flags_and_the_dagster_config(capsys):
    from webdedup_assets.defs.config import DocumentsConfig

    assert DocumentsConfig(id_column="id", url_column="metadata.url").mapping() == ColumnParams(
        id_column="id", url_column="metadata.url"
    )
    assert main(["run", str(FIXTURE), "--default-date", "2026-02-30"]) == 2
    assert capsys.readouterr().err.strip() == "webdedup: error: --default-date '2026-02-30': not a calendar date"


def test_a_glob_of_shards(tmp_path):
    dolma_shards(tmp_path / "shards")
    days = input_days(str(tmp_path / "shards" / "*.json.*"), mapping=DOLMA)  # .json.gz and .json.zst: 3 shards
    rows = [r for shard in (3, 4, 6) for r in fixture_rows()[shard :: len(SUFFIXES)]]
    assert days == sorted({r["crawled_at"] for r in rows})


def test_fields_of_mixed_types_are_read_as_text(tmp_path):
    records = [
        {"id": 1, "text": "a b c", "created": "2026-03-01", "meta": {"url": "https://x.example/1"}},
        {"id": "two", "text": "d e f", "created": "2026-03-02", "meta": {"url": "https://y.example/", "n": [1]}},
        {"id": "three", "text": "g h", "created": 1772409600, "meta": "not an object"},
    ]
    path = write_shard(tmp_path / "mixed.jsonl", records)
    mapping = ColumnParams(id_column="id", text_column="text", date_column="created", url_column="meta.url")
    store = Store(tmp_path / "s")
    stage_documents(store, str(path), months=["2026-03"], mapping=mapping)
    stored = {r["doc_id"]: (r["domain"], str(r["crawled_at"]), r["meta"]) for r in stored_documents(store)}
    assert stored == {
        "1": ("x.example", "2026-03-01", '{"url":"https://x.example/1"}'),
        "two": ("y.example", "2026-03-02", '{"url":"https://y.example/","n":[1]}'),
        "three": (None, "2026-03-02", '"not an object"'),
    }


def test_an_extra_field_of_other_types_in_other_shards_is_kept_as_json(tmp_path):
    """The shards of one input disagree on an extra field's type (a number in one, an object in
    another): kept as JSON, as within one file; text beside dates stays text. The run stopped
    with DuckDB's "Unimplemented type for cast (BIGINT -> STRUCT(a BIGINT))", naming no file."""

    def shard(name: str, values: list) -> None:
        records = [
            {
                "id": f"{name}{n}",
                "text": f"page {name} {n}",
                "created": "2026-03-01",
                "url": "https://a.example/",
                "extra": value,
                "when": when,
            }
            for n, (value, when) in enumerate(values)
        ]
        write_shard(tmp_path / "in" / f"{name}.jsonl", records)

    shard("a", [(5, "2026-01-01"), (6, "2026-01-02")])
    shard("b", [({"a": 1}, "unknown"), ({"a": 2}, "2026-01-03")])
    shard("c", [(7.5, None)])
    mapping = ColumnParams(id_column="id", text_column="text", date_column="created", url_column="url")
    store = Store(tmp_path / "s")
    stage_documents(store, str(tmp_path / "in"), months=["2026-03"], mapping=mapping)
    stored = {r["doc_id"]: (r["extra"], r["when"] and str(r["when"])) for r in stored_documents(store)}
    assert stored == {
        "a0": ("5", "2026-01-01"),
        "a1": ("6", "2026-01-02"),
        "b0": ('{"a":1}', "unknown"),
        "b1": ('{"a":2}', "2026-01-03"),
        "c0": ("7.5", None),
    }


def test_invalid_utf8_and_a_cut_compressed_stream_are_named(tmp_path):
    good = json.dumps(dolma_record(fixture_rows()[0])).encode() + b"\n"
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(good + b'{"id": "b", "text": "caf\xe9", "created": "2026-03-01"}\n')
    with pytest.raises(WebdedupError) as caught:
        stage_documents(Store(tmp_path / "s"), str(path), mapping=DOLMA)
    assert str(caught.value) == f"{path}: line 2: invalid UTF-8 at byte 24 of the line"
    whole = gzip.compress(good * 2000)
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(WebdedupError) as caught:
        stage_documents(Store(tmp_path / "s2"), str(path), mapping=DOLMA)
    assert str(caught.value) == f"{path}: cannot decompress: Truncated compressed stream"
    # DuckDB read a .zst cut after a block of whole lines as if the file ended there: records lost
    path = tmp_path / "cut.jsonl.zst"
    records = [json.dumps({**dolma_record(r), "id": f"r{n}"}).encode() + b"\n" for n, r in enumerate(fixture_rows())]
    with open(path, "wb") as raw:
        streamed = zstandard.ZstdCompressor().stream_writer(raw, closefd=False)
        streamed.write(b"".join(records[:12]))
        streamed.flush(zstandard.FLUSH_BLOCK)
        cut = raw.tell()
        streamed.write(b"".join(records[12:]))
        streamed.close()
    path.write_bytes(path.read_bytes()[:cut])
    with pytest.raises(WebdedupError) as caught:
        stage_documents(Store(tmp_path / "s3"), str(path), mapping=DOLMA)
    assert str(caught.value) == f"{path}: cannot decompress: Truncated compressed stream"


def test_a_month_read_with_another_mapping_beside_held_months_is_refused(tmp_path):
    """A Dagster run of one crawl month must read it as the held months were read."""
    rows = fixture_rows()
    records = [{**dolma_record(r), "url": "https://elsewhere.example/"} for r in rows]
    records.append({**records[0], "id": "feb", "created": "2026-02-10T00:00:00Z"})
    path = write_shard(tmp_path / "pages.jsonl", records)
    store = Store(tmp_path / "s")
    stage_documents(store, str(path), months=["2026-03"], mapping=DOLMA)
    # the same month again with another mapping: it replaces what was held
    stage_documents(store, str(path), months=["2026-03"], mapping=DOLMA.model_copy(update={"title_column": ""}))
    with pytest.raises(WebdedupError) as caught:
        stage_documents(store, str(path), months=["2026-02"], mapping=DOLMA.model_copy(update={"url_column": "url"}))
    assert str(caught.value) == (
        f"the 22 crawl day(s) held in {store.root} were read with id_column='id', text_column='text', "
        "date_column='created', url_column='metadata.url', title_column='', this input with id_column='id', "
        "text_column='text', date_column='created', url_column='url', title_column='title': one corpus is read "
        "with one column mapping; give the held one, or `webdedup run` the whole input with the new one"
    )


def test_the_default_date_of_a_parquet_file_with_undated_rows(tmp_path):
    """A Parquet footer does not see the rows a default date is given to: the column is read."""
    path = tmp_path / "dated.parquet"
    day = datetime.date(2026, 3, 1)
    table = pa.table(
        {
            "doc_id": ["a", "b"],
            "source": ["s", "s"],
            "domain": ["a.example", "b.example"],
            "crawled_at": pa.array([day, None], pa.date32()),
            "title": ["t", "t"],
            "body": ["alpha beta", "gamma delta"],
        }
    )
    pq.write_table(table, path)
    assert input_days(str(path)) == ["2026-03-01"]
    assert input_days(str(path), mapping=ColumnParams(default_date="2026-02-01")) == ["2026-02-01", "2026-03-01"]


def test_an_add_keeps_a_nested_field_that_is_always_null(tmp_path, capsys):
    """{"meta": {"x": 1, "y": null}} on every record (a field always null, as real feeds have):
    adds of later days equal one run of all. The add failed in deduped_documents with pyarrow's
    "Struct child array #1 has length smaller than expected" (a slice of such a struct, cast)."""
    days = {"2025-01-01": "a", "2024-12-01": "b", "2024-12-02": "c"}
    for n, (day, name) in enumerate(days.items()):
        records = [
            {"doc_id": f"{name}{k}", "domain": "x.example", "crawled_at": day, "body": f"page {name} {k} " * 9}
            | {"meta": {"x": n * 2 + k, "y": None}}
            for k in range(2)
        ]
        write_shard(tmp_path / "in" / f"{day}.jsonl", records)
        write_shard(tmp_path / name / f"{day}.jsonl", records)
    assert main(["run", str(tmp_path / "a"), "--output", str(tmp_path / "added"), "--quiet"]) == 0
    for name in ("b", "c"):
        assert main(["add", str(tmp_path / name), "--output", str(tmp_path / "added"), "--quiet"]) == 0
    assert main(["run", str(tmp_path / "in"), "--output", str(tmp_path / "ran"), "--quiet"]) == 0
    added, ran = (pq.read_table(tmp_path / out / "deduped_documents.parquet") for out in ("added", "ran"))
    assert added.equals(ran) and added.num_rows == 6
    assert added.column("meta").to_pylist()[0] == {"x": 2, "y": None}


def test_conform_casts_a_slice_of_a_struct_with_a_null_child():
    from webdedup_assets.storage.parquet_splice import conform

    meta = pa.array([{"x": k, "y": None} for k in range(4)], pa.struct([("x", pa.int64()), ("y", pa.null())]))
    table = pa.table({"meta": meta}).slice(2, 2)
    for x in (pa.int64(), pa.int32()):  # the same type (the case that failed) and another
        wanted = pa.schema([("meta", pa.struct([("x", x), ("y", pa.null())]))])
        conformed = conform(table, wanted)
        conformed.validate(full=True)
        assert conformed.column("meta").to_pylist() == [{"x": 2, "y": None}, {"x": 3, "y": None}]


def test_a_field_that_is_text_in_one_file_and_a_number_in_another_is_text_either_way(tmp_path):
    """A CSV's nwords "59" beside a JSON Lines nwords 41: the text 59 and 41 in one run, and the
    same when the files are given to a run and an add (the CSV's value was stored JSON-quoted,
    '"59"', in one run)."""
    csv_day = tmp_path / "in" / "a.csv"
    csv_day.parent.mkdir()
    csv_day.write_text(
        "doc_id,source,domain,crawled_at,title,body,nwords\n"
        "c1,s,a.example,2026-03-01,t,alpha beta gamma delta epsilon zeta eta theta,59\n"
    )
    record = {"doc_id": "j1", "source": "s", "domain": "b.example", "crawled_at": "2026-03-02", "title": "t"}
    write_shard(tmp_path / "in" / "b.jsonl", [record | {"body": "one two three four five six", "nwords": 41}])
    write_shard(tmp_path / "j" / "b.jsonl", [record | {"body": "one two three four five six", "nwords": 41}])
    assert main(["run", str(tmp_path / "in"), "--output", str(tmp_path / "ran"), "--quiet"]) == 0
    assert main(["run", str(tmp_path / "j"), "--output", str(tmp_path / "added"), "--quiet"]) == 0
    assert main(["add", str(csv_day), "--output", str(tmp_path / "added"), "--quiet"]) == 0
    for out in ("ran", "added"):
        table = pq.read_table(tmp_path / out / "deduped_documents.parquet")
        assert {r["doc_id"]: r["nwords"] for r in table.to_pylist()} == {"c1": "59", "j1": "41"}, out


def test_an_add_into_a_storage_copied_without_its_links_equals_one_into_the_original(tmp_path):
    """A storage copied file by file (cp -r, rsync without -H) compares every documents file with
    its snapshot; the months' nested fields differ (a struct of other fields, a record without it):
    DuckDB's hash over their union failed with 'INTERNAL Error: ... flat vector'."""
    import random
    import shutil

    flags = ["--id-column", "id", "--text-column", "text", "--date-column", "created", "--url-column", "metadata.url"]
    rng = random.Random(1)
    words = "river stone lamp glass paper window cloud orange violin garden".split()

    def text() -> str:
        return " ".join(rng.choice(words) + str(rng.randint(0, 50)) for _ in range(40))

    for day in range(1, 32):
        records = []
        for i in range(6):
            record = {"id": f"a{day}-{i}", "text": text(), "created": f"2024-01-{day:02d}"}
            url, tags = f"https://s{i}.example/{day}", ["x"] * (i % 3)
            record["metadata"] = {"url": url, "lang": "en", "tags": tags, "score": rng.random(), "nested": {"depth": 2}}
            records.append(record)
        write_shard(tmp_path / "a" / f"2024-01-{day:02d}.jsonl", records)
    write_shard(
        tmp_path / "b" / "2024-02-03.jsonl",
        [
            {"id": "n1", "text": text(), "created": "2024-02-03", "metadata": {"url": "https://site1.example/p1"}},
            {"id": "n2", "text": text(), "created": "2024-02-03"},
            {"id": "n3", "text": text(), "created": "2024-02-03", "metadata": {"url": "https://site0.example/p3"}},
        ],
    )
    assert main(["run", str(tmp_path / "a"), "--output", str(tmp_path / "out"), "--quiet", *flags]) == 0
    shutil.copytree(tmp_path / "out", tmp_path / "copy")
    for out in ("copy", "out"):
        assert main(["add", str(tmp_path / "b"), "--output", str(tmp_path / out), "--quiet"]) == 0
    for name in ("clusters.csv", "removed.csv", "duplicate_pairs.csv"):
        assert (tmp_path / "copy" / name).read_bytes() == (tmp_path / "out" / name).read_bytes()
    copied, original = (pq.read_table(tmp_path / o / "deduped_documents.parquet") for o in ("copy", "out"))
    assert copied.equals(original) and copied.num_rows == 189


def test_add_takes_its_own_default_date_with_the_held_mapping(tmp_path, capsys):
    """--default-date is the input's own: an add of undated records gives it alone (the held
    mapping's other fields kept); it was refused as 'another column mapping'."""
    shards = dolma_shards(tmp_path / "shards")
    out = tmp_path / "out"
    assert main(["run", str(shards), "--output", str(out), "--quiet", *DOLMA_FLAGS]) == 0
    undated = {**dolma_record(fixture_rows()[0]), "id": "undated-copy", "created": None}
    day = write_shard(tmp_path / "late" / "undated.jsonl", [undated])
    assert main(["add", str(day), "--output", str(out), "--default-date", "2026-03-26", "--quiet"]) == 0
    kept = pq.read_table(out / "_storage" / "documents" / "part-2026-03.2026-03-26.parquet").to_pylist()
    assert [(r["doc_id"], str(r["crawled_at"])) for r in kept] == [("undated-copy", "2026-03-26")]
    other = ["--default-date", "2026-03-27", "--id-column", "text"]  # another field still is another mapping
    assert main(["add", str(day), "--output", str(out), *other]) == 2
    err = capsys.readouterr().err
    assert "one corpus is read with one column mapping" in err and "default_date" not in err
    # the date was that add's own: a later add without one does not take it (it replaced that day's pages)
    later = write_shard(tmp_path / "later" / "undated.jsonl", [{**undated, "id": "later-copy"}])
    assert main(["add", str(later), "--output", str(out), "--quiet"]) == 2
    assert f"{later}: no crawl day found in the input" in capsys.readouterr().err


def _days_of(tmp_path, name: str, days: dict[str, list[dict]]) -> None:
    for day, extras in days.items():
        records = [
            {"doc_id": f"{day}-{n}", "domain": "x.example", "crawled_at": day, "body": f"page {day} {n} " * 8} | extra
            for n, extra in enumerate(extras)
        ]
        write_shard(tmp_path / name / f"{day}.jsonl", records)
        write_shard(tmp_path / "all" / f"{day}.jsonl", records)


def _run_then_adds(tmp_path, days: list[str]) -> tuple[pa.Table, pa.Table]:
    """deduped_documents of one run of every day, and of a run of the first day then adds."""
    assert main(["run", str(tmp_path / "all"), "--output", str(tmp_path / "ran"), "--quiet"]) == 0
    assert main(["run", str(tmp_path / days[0]), "--output", str(tmp_path / "added"), "--quiet"]) == 0
    for day in days[1:]:
        assert main(["add", str(tmp_path / day), "--output", str(tmp_path / "added"), "--quiet"]) == 0
    return tuple(pq.read_table(tmp_path / out / "deduped_documents.parquet") for out in ("ran", "added"))


def test_a_nested_field_has_one_type_however_the_days_are_split(tmp_path):
    """Lists of objects on one day, only empty lists on another (DuckDB types those JSON[]); an
    object that gains a field: stored as one run of one file stores them (a list of structs, a
    struct with every field), by one run of the daily files and by a run then adds alike (one run
    of the files kept them as JSON text, the adds as structs)."""
    _days_of(tmp_path, "d1", {"2026-03-01": [{"links": [{"k": "x", "v": 1}], "meta": {"x": 1}}]})
    _days_of(tmp_path, "d2", {"2026-04-02": [{"links": [], "meta": {"x": 2, "y": "new"}}]})
    ran, added = _run_then_adds(tmp_path, ["d1", "d2"])
    assert ran.equals(added)
    assert ran.schema.field("links").type == pa.list_(pa.struct([("k", pa.string()), ("v", pa.int64())]))
    assert ran.schema.field("meta").type == pa.struct([("x", pa.int64()), ("y", pa.string())])
    assert ran.column("links").to_pylist() == [[{"k": "x", "v": 1}], []]
    assert ran.column("meta").to_pylist() == [{"x": 1, "y": None}, {"x": 2, "y": "new"}]


def test_a_field_of_empty_lists_on_the_first_day_takes_the_type_of_a_later_days_lists(tmp_path):
    """Only empty lists on the first day, lists of numbers on the next: a run then an add keeps the
    numbers as numbers, as one run does (the held empty lists were stored as lists of text, and the
    added numbers became text: [1, 2] -> ['1', '2']). A corpus of empty lists alone stores them as
    lists of NULL, the type that says nothing of their values."""
    _days_of(tmp_path, "d1", {"2026-03-01": [{"tags": []}, {"tags": []}]})
    _days_of(tmp_path, "d2", {"2026-03-02": [{"tags": [1, 2]}]})
    ran, added = _run_then_adds(tmp_path, ["d1", "d2"])
    assert ran.equals(added)
    assert ran.schema.field("tags").type == pa.list_(pa.int64())
    assert ran.column("tags").to_pylist() == [[], [], [1, 2]]
    assert main(["run", str(tmp_path / "d1"), "--output", str(tmp_path / "first"), "--quiet"]) == 0
    first = pq.read_table(tmp_path / "first" / "deduped_documents.parquet")
    assert first.schema.field("tags").type == pa.list_(pa.null())
    assert first.column("tags").to_pylist() == [[], []]


def test_strings_that_look_like_uuids_dates_or_times_stay_the_text_they_were(tmp_path):
    """DuckDB's JSON reader types such strings UUID, DATE, TIME or TIMESTAMP: a UUID doc_id and a
    date-like title were refused as a UUID or DATE column, and an extra field came back rewritten
    ("2026-03-01T10:00:00" as "2026-03-01 10:00:00", or JSON-quoted beside other text)."""
    uuid = "123e4567-e89b-12d3-a456-426614174000"
    _days_of(
        tmp_path,
        "d1",
        {"2026-03-01": [{"doc_id": uuid, "title": "2026-03-01", "seen": "2026-03-01T10:00:00", "at": "10:01:00"}]},
    )
    _days_of(tmp_path, "d2", {"2026-03-02": [{"seen": "yesterday", "at": "noon"}]})
    ran, added = _run_then_adds(tmp_path, ["d1", "d2"])
    assert ran.equals(added)
    assert ran.select(["doc_id", "title", "seen"]).to_pylist() == [
        {"doc_id": uuid, "title": "2026-03-01", "seen": "2026-03-01T10:00:00"},
        {"doc_id": "2026-03-02-0", "title": None, "seen": "yesterday"},
    ]
    assert ran.column("at").to_pylist() == ["10:01:00", "noon"]


def test_an_object_gaining_fields_keeps_them_in_the_order_one_run_gives(tmp_path):
    """{"a": 1} on one day, {"b": "s"} on the next: struct<a, b> by one run and by a run then an add
    (the add stored struct<b, a>)."""
    _days_of(tmp_path, "d1", {"2026-03-01": [{"x": {"a": 1}}]})
    _days_of(tmp_path, "d2", {"2026-03-02": [{"x": {"b": "s"}}]})
    ran, added = _run_then_adds(tmp_path, ["d1", "d2"])
    assert ran.equals(added)
    assert ran.schema.field("x").type == pa.struct([("a", pa.int64()), ("b", pa.string())])


def test_an_add_whose_field_cannot_join_the_held_nested_one_is_refused_naming_it(tmp_path, capsys):
    """Held as an object, given as a string: the held files cannot keep it nested beside a string
    (a run of both keeps it as JSON text); refused in one line naming the field and both types,
    where DuckDB's cast error named a storage file."""
    _days_of(tmp_path, "d1", {"2026-03-01": [{"meta": {"k": "v"}}]})
    _days_of(tmp_path, "d2", {"2026-04-02": [{"meta": "plain string"}]})
    assert main(["run", str(tmp_path / "d1"), "--output", str(tmp_path / "out"), "--quiet"]) == 0
    assert main(["add", str(tmp_path / "d2"), "--output", str(tmp_path / "out"), "--quiet"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "webdedup: error: field 'meta' is STRUCT(k VARCHAR) in the held corpus but VARCHAR in this input: a field "
        "keeps one type in a corpus; `webdedup run` the whole input (a field of several types is kept as JSON text)"
    )
    assert main(["run", str(tmp_path / "all"), "--output", str(tmp_path / "ran"), "--quiet"]) == 0
    kept = pq.read_table(tmp_path / "ran" / "deduped_documents.parquet").column("meta").to_pylist()
    assert kept == ['{"k":"v"}', '"plain string"']


def test_maps_of_numbers_of_other_widths_widen_as_lists_and_structs_do(tmp_path):
    """Parquet shards with a map of int32 and one of int64: one map of int64 in one run and in a run
    then an add (one run kept it as JSON text, the add was refused as another type)."""
    for day, value_type in (("2026-03-01", pa.int32()), ("2026-03-05", pa.int64())):
        table = pa.table(
            {
                "doc_id": [f"{day}-0"],
                "domain": ["x.example"],
                "crawled_at": [day],
                "body": [f"page {day} " * 8],
                "mp": pa.array([[("k", 1)]], pa.map_(pa.string(), value_type)),
            }
        )
        for folder in (day, "all"):
            (tmp_path / folder).mkdir(exist_ok=True)
            pq.write_table(table, tmp_path / folder / f"{day}.parquet")
    ran, added = _run_then_adds(tmp_path, ["2026-03-01", "2026-03-05"])
    assert ran.equals(added)
    assert ran.schema.field("mp").type == pa.map_(pa.string(), pa.int64())
