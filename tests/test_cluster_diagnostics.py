"""cluster_diagnostics.csv (engine.diagnostics): one row per multi-document cluster, published with
the run, bounded by a member cap stated in the output, shown in deduped_documents' metadata."""

from __future__ import annotations

import csv
import json
import random

import pytest

from webdedup_assets.cli.main import main
from webdedup_assets.engine.diagnostics import cluster_diagnostics, diagnostics_preview
from webdedup_assets.storage.store import Store

from .conftest import FIXTURE


def chain_bodies(links: int, seed: int = 11) -> list[str]:
    """links+1 pages of 300 words, each 7 words away from the previous (shingle Jaccard ~0.79 to
    its neighbour, ~0.62 two steps away, lower further): one cluster only by chaining."""
    rng = random.Random(seed)
    words = [f"w{rng.randrange(5000)}x" for _ in range(300)]
    bodies = [" ".join(words)]
    positions = list(range(3, 297, 6))
    rng.shuffle(positions)
    for step in range(links):
        for p in positions[step * 7 : step * 7 + 7]:
            words[p] = f"edit{step}{p}"
        bodies.append(" ".join(words))
    return bodies


def write_corpus(path, bodies: list[str], prefix: str = "chain") -> None:
    with open(FIXTURE, newline="") as handle:
        rows = list(csv.DictReader(handle))
    for i, body in enumerate(bodies):
        rows.append(
            {
                "doc_id": f"{prefix}-{i}",
                "source": "chain-crawl",
                "domain": f"chain{i % 2}.example",
                "crawled_at": f"2026-03-{10 + i:02d}",
                "title": f"Chain {i}",
                "body": body,
            }
        )
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


@pytest.fixture(scope="module")
def chain_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("diagnostics")
    write_corpus(root / "corpus.csv", chain_bodies(4))
    out = root / "out"
    assert main(["run", str(root / "corpus.csv"), "--output", str(out), "--quiet", "--json"]) in (0, 1)
    return out


def _rows(out) -> dict[str, dict[str, str]]:
    with open(out / "cluster_diagnostics.csv", newline="") as handle:
        return {row["cluster_id"]: row for row in csv.DictReader(handle)}


def test_published_diagnostics_flag_the_chain_and_keep_the_fixture_clusters(chain_run):
    rows = _rows(chain_run)
    manifest = json.loads((chain_run / "manifest.json").read_text())
    assert "cluster_diagnostics.csv" in manifest["outputs"]
    chain = rows["cluster-chain-0"]
    # newest crawled_at is the representative: chain-4, the far end of the chain
    assert chain["size"] == "5" and chain["representative"] == "chain-4" and chain["domains"] == "2"
    assert chain["members_checked"] == "4" and chain["flag"] == "low_cohesion"
    assert chain["farthest_member"] == "chain-0" and int(chain["members_below_threshold"]) >= 2
    assert float(chain["min_jaccard_to_representative"]) < 0.5 <= 0.7 <= float(chain["min_edge_jaccard"])
    assert chain["edges"] == "4"  # only neighbours are duplicates
    assert list(rows)[0] == "cluster-chain-0"  # worst first
    billing = rows["cluster-billing-canonical"]
    assert billing["flag"] == "ok" and billing["domains"] == "3" and billing["edges"] == "3"
    assert float(billing["min_jaccard_to_representative"]) >= 0.7
    # every multi-document cluster of the fixture (6) plus the chain, no singletons
    assert len(rows) == 7 and all(int(r["size"]) > 1 for r in rows.values())


def test_the_member_cap_is_stated(chain_run):
    store = Store(chain_run / "_storage")
    table, figures = cluster_diagnostics(store, max_members=2)
    rows = {r["cluster_id"]: r for r in table.to_pylist()}
    chain = rows["cluster-chain-0"]  # the largest cluster is measured first: 2 of its 4 members
    assert chain["members_checked"] == 2 and "unchecked" in chain["flag"]
    assert figures["member_cap"] == 2 and figures["clusters_unchecked"] >= 1
    full, figures = cluster_diagnostics(store)
    assert figures["clusters_unchecked"] == 0 and figures["low_cohesion_clusters"] == 1
    assert figures["multi_document_clusters"] == 7 and figures["largest_cluster"] == 5
    preview = diagnostics_preview(store, limit=3)
    assert preview.splitlines()[0].startswith("| cluster_id | size | min_jaccard_to_representative")
    assert "cluster-chain-0" in preview.splitlines()[2] and len(preview.splitlines()) == 5


def test_deduped_documents_materialization_shows_the_diagnostics(tmp_path):
    from .conftest import run_job

    write_corpus(tmp_path / "corpus.csv", chain_bodies(3))
    events, store = run_job(tmp_path, tmp_path / "corpus.csv")
    assert events.success
    [materialization] = [
        e.event_specific_data.materialization
        for e in events.all_events
        if e.event_type_value == "ASSET_MATERIALIZATION" and e.asset_key.to_user_string() == "deduped_documents"
    ]
    metadata = materialization.metadata
    assert metadata["diagnostics/multi_document_clusters"].value == 7
    assert metadata["diagnostics/low_cohesion_clusters"].value == 1
    assert metadata["diagnostics/largest_cluster"].value == 4
    assert metadata["diagnostics/member_cap"].value == 100_000
    worst = metadata["worst_clusters"].value.splitlines()
    assert worst[0].startswith("| cluster_id |") and "cluster-chain-0" in worst[2] and "low_cohesion" in worst[2]
    assert metadata["cluster_diagnostics"].value.endswith("cluster_diagnostics.csv")


def test_the_measurement_made_while_writing_equals_one_from_the_stored_files(chain_run):
    """The stage measures member Jaccards on the representatives it is about to write, on a
    second thread; what it keeps must be what a measurement from the written files gives, under
    the key of those files (so the clusters_cohesive check reuses it)."""
    from webdedup_assets.engine import invariants
    from webdedup_assets.engine.diagnostics import TABLE, measured_key, read_keyed_table

    store = Store(chain_run / "_storage")
    kept, key = read_keyed_table(store.asset_dir("deduped_documents") / invariants.MEMBER_CACHE)
    assert key == measured_key(store)
    fresh = invariants._measure_member_jaccards(store, invariants.cohesion_cap(None), 3)
    assert kept.num_rows == 16 and kept.to_pylist() == fresh.to_pylist()  # 4 chain members, 12 of the fixture
    table, key = read_keyed_table(store.asset_dir("deduped_documents") / TABLE)
    assert key == measured_key(store)
    recomputed, _ = cluster_diagnostics(store, measured=fresh)
    assert table.to_pylist() == recomputed.to_pylist()


def test_the_weakest_edge_member_is_chosen_the_same_way_on_every_run(tmp_path):
    """Two edges of a cluster tie at its minimum Jaccard: edge_member is the other end of the first
    by doc_ids, whatever order the files list them in (DuckDB's arg_min alone kept whichever row its
    threads met first: on the 1M benchmark's storage one run in five picked another member)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from webdedup_assets.engine.diagnostics import _base_rows

    store = Store(tmp_path)

    def put(asset: str, columns: dict) -> None:
        path = store.path(asset)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(columns), path)

    members = ["rep", "m-z", "m-a", "m-q"]  # listed with the later member of the tie first
    put("documents", {"doc_id": members, "domain": ["x.example"] * 4})
    put("clusters", {"doc_id": members, "cluster_id": ["cluster-rep"] * 4, "cluster_size": [4] * 4})
    put("deduped_documents", {"doc_id": ["rep"], "cluster_id": ["cluster-rep"]})
    put(
        "duplicate_pairs",
        {  # the pairs file too
            "left_doc_id": ["m-z", "m-a", "m-q"],
            "right_doc_id": ["rep", "rep", "rep"],
            "exact_jaccard": [0.75, 0.75, 0.9],
        },
    )
    (row,) = _base_rows(store, None).to_pylist()
    assert (row["edges"], row["min_edge_jaccard"], row["edge_member"]) == (3, 0.75, "m-a")


def testrepresentative_rows_give_the_needed_pages_of_row_groups_without_a_winner(tmp_path):
    """The full stage shingles the pages its diagnostics compare as it reads the winners' row
    groups; a needed page in a row group that holds no winner is read too (doc_id and body only)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from webdedup_assets.engine.stages.clustering import representative_rows

    path = tmp_path / "part.parquet"
    docs = pa.table({"doc_id": [f"d{i}" for i in range(6)], "body": [f"text {i}" for i in range(6)]})
    pq.write_table(docs, path, row_group_size=3)  # row groups [d0 d1 d2] [d3 d4 d5]
    winners = pa.table(
        {
            "filename": [str(path)] * 2,
            "file_row_number": pa.array([0, 2], pa.int64()),
            "cluster_id": ["c0", "c2"],
            "cluster_size": pa.array([2, 1], pa.int64()),
            "token_count": pa.array([2, 2], pa.int32()),
        }
    )
    needed = pa.table({"filename": [str(path)] * 3, "file_row_number": pa.array([1, 4, 5], pa.int64())})
    schema = pa.schema(
        [*docs.schema, ("cluster_id", pa.string()), ("cluster_size", pa.int64()), ("token_count", pa.int32())]
    )
    given = []
    written = pa.concat_tables(representative_rows([path], winners, schema, needed, given.append))
    assert written.column("doc_id").to_pylist() == ["d0", "d2"]
    assert written.column("cluster_id").to_pylist() == ["c0", "c2"]
    pages = pa.concat_tables(given).sort_by("doc_id")
    assert pages.column("doc_id").to_pylist() == ["d1", "d4", "d5"]
    assert pages.column("body").to_pylist() == ["text 1", "text 4", "text 5"]
