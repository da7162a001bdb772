"""The body index (engine.incremental.bodies): the bodies an update and `check` read by doc_id are
the stored ones, byte for byte, whether a file is read through its index or scanned; a replaced
file's index is never used and is rebuilt by the next sync."""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pyarrow.parquet as pq

from webdedup_assets.engine.incremental import bodies
from webdedup_assets.storage.rows import fetch_rows
from webdedup_assets.storage.store import Store, connect


def _write(store: Store, partition: str, rows: list[tuple[str, str | None]]) -> None:
    path = store.path("documents", partition)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(".tmp.parquet")
    table = pa.table({"doc_id": [r[0] for r in rows], "body": pa.array([r[1] for r in rows], pa.string())})
    pq.write_table(table, temp, row_group_size=50)
    os.replace(temp, path)  # as the store replaces files: a new inode


def _corpus(seed: int) -> dict[str, list[tuple[str, str | None]]]:
    rng = random.Random(seed)
    words = ["page", "crawl", "näher", "日本語", "текст", "🙂", "a", ""]
    parts = {}
    for month in ("2026-01", "2026-02"):
        rows = []
        for i in range(400):
            size = rng.choice([0, 1, 30, 300, 3000])
            rows.append((f"{month}-d{i:04d}", " ".join(rng.choice(words) for _ in range(size))))
        rows[7] = (rows[7][0], None)  # a NULL body
        rows[8] = (rows[8][0], "x" * 70_000)  # a body larger than a block
        parts[month] = rows
    return parts


def _read(store: Store, wanted: list[str], via_index: bool) -> dict[str, str | None]:
    con = connect()
    try:
        con.register("wanted_arrow", pa.table({"doc_id": pa.array(wanted, pa.string())}))
        con.execute("CREATE TEMP TABLE wanted AS SELECT * FROM wanted_arrow")
        if via_index:
            table = bodies.bodies_of(con, store, "wanted")
        else:
            table = fetch_rows(con, store.data_files("documents"), "wanted", ["doc_id", "body"])
    finally:
        con.close()
    return dict(zip(table.column("doc_id").to_pylist(), table.column("body").to_pylist()))


def test_bodies_through_the_index_are_the_stored_bodies(tmp_path):
    store = Store(tmp_path)
    corpus = _corpus(1)
    for month, rows in corpus.items():
        _write(store, month, rows)
    assert bodies.sync(store) == 2
    assert bodies.sync(store) == 0  # current indexes are kept
    stored = {doc_id: body for rows in corpus.values() for doc_id, body in rows}
    wanted = random.Random(2).sample(sorted(stored), 300) + ["2026-01-d0007", "2026-02-d0008", "no-such-doc"]
    got = _read(store, wanted, via_index=True)
    assert got == {d: stored[d] for d in wanted if d in stored}
    assert got["2026-01-d0007"] is None and got["2026-02-d0008"] == "x" * 70_000
    assert got == _read(store, wanted, via_index=False)
    names = sorted(p.name for p in bodies.bodies_dir(store).iterdir())
    assert len(names) == 4 and sum(n.endswith(".index.parquet") for n in names) == 2


def test_a_replaced_file_is_scanned_until_indexed_again(tmp_path):
    store = Store(tmp_path)
    corpus = _corpus(3)
    for month, rows in corpus.items():
        _write(store, month, rows)
    bodies.sync(store)
    changed = [(doc_id, f"changed {doc_id}") for doc_id, _ in corpus["2026-02"][:100]]
    _write(store, "2026-02", changed)
    wanted = [doc_id for doc_id, _ in changed[:20]] + [doc_id for doc_id, _ in corpus["2026-01"][:20]]
    expected = {**dict(corpus["2026-01"][:20]), **dict(changed[:20])}
    assert _read(store, wanted, via_index=True) == expected  # the stale index is not used
    assert bodies.sync(store) == 1
    assert _read(store, wanted, via_index=True) == expected
    names = [p.name for p in bodies.bodies_dir(store).iterdir()]
    assert len(names) == 4  # the stale index and blocks were removed
    store.remove("documents", "2026-02")
    assert bodies.sync(store) == 0
    assert len(list(bodies.bodies_dir(store).iterdir())) == 2
    assert _read(store, wanted, via_index=True) == dict(corpus["2026-01"][:20])


def test_a_damaged_index_is_scanned_around_with_a_warning(tmp_path, caplog):
    """A .blocks file cut short (or an index damaged by hand): the bodies come from the documents
    files, equal to the stored ones, and a warning names the folder and the remedy."""
    store = Store(tmp_path)
    corpus = _corpus(5)
    for month, rows in corpus.items():
        _write(store, month, rows)
    bodies.sync(store)
    stored = {doc_id: body for rows in corpus.values() for doc_id, body in rows}
    wanted = sorted(stored)[::7]
    (blocks,) = [p for p in bodies.bodies_dir(store).glob("*.blocks") if p.name.startswith("part-2026-02")]
    with blocks.open("r+b") as handle:
        handle.truncate(blocks.stat().st_size // 2)
    with caplog.at_level("WARNING", logger="webdedup"):
        got = _read(store, wanted, via_index=True)
    assert got == {d: stored[d] for d in wanted}
    (record,) = [r for r in caplog.records if r.name == "webdedup"]
    message = record.getMessage()
    assert "could not be read" in message and str(bodies.bodies_dir(store)) in message
    assert "scanned instead" in message and "webdedup add" in message
