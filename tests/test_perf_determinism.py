"""Signatures are identical across runs, thread counts and processes."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq

from webdedup_assets.core.fingerprint import fingerprint_texts
from webdedup_assets.core.minhash import MinHashParams
from webdedup_assets.engine import Store, stage_documents, stage_fingerprinted
from webdedup_assets.engine.stages import fingerprint as engine_fingerprint
from webdedup_assets.params import FingerprintParams

TEXTS = ["Plain ASCII text about near duplicates.", "Ünïcödé ΣΟΦΙΑ 日本語のテキスト 한국어", "", "x"] * 50


def test_fingerprinted_is_identical_for_any_thread_count_and_batch_size(tmp_path, monkeypatch):
    n = len(TEXTS)
    pq.write_table(
        pa.table(
            {
                "doc_id": [f"d{i:04d}" for i in range(n)],
                "source": ["s"] * n,
                "domain": ["x.org"] * n,
                "crawled_at": pa.array([dt.date(2026, 3, 2)] * n, pa.date32()),
                "title": ["t"] * n,
                "body": [f"{t} {i % 5}" for i, t in enumerate(TEXTS)],
            }
        ),
        tmp_path / "in.parquet",
    )
    store = Store(tmp_path / "store")
    stage_documents(store, str(tmp_path / "in.parquet"))
    tables = []
    monkeypatch.setattr(engine_fingerprint, "BATCH_ROWS", 7)  # many batches in flight
    for threads in (1, 2, 3, 1):
        stage_fingerprinted(store, FingerprintParams(shingle_size=5, num_perm=24, seed=3), threads=threads)
        tables.append(pq.read_table(store.path("fingerprinted")))
    assert all(t.equals(tables[0]) for t in tables[1:])
    assert tables[0].column("doc_id").to_pylist() == pq.read_table(store.path("documents")).column("doc_id").to_pylist()


def test_signatures_are_identical_in_another_process():
    a, b = MinHashParams(16, 11).coefficients()
    here = fingerprint_texts(pa.array(TEXTS[:4]), 5, a, b)[2].tolist()
    code = (
        "import json, pyarrow as pa; from webdedup_assets.core.fingerprint import fingerprint_texts;"
        "from webdedup_assets.core.minhash import MinHashParams; a, b = MinHashParams(16, 11).coefficients();"
        f"print(json.dumps(fingerprint_texts(pa.array({TEXTS[:4]!r}), 5, a, b)[2].tolist()))"
    )
    there = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout)
    assert there == here
