"""The stage contract (engine.stage): declared once, one upstream check, one serializer, stats and
timing by the contract, and a second engine implementing a stage over the same storage."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from webdedup_assets.engine import DUCKDB, STAGES, Store, WebdedupError, stage_documents
from webdedup_assets.engine.stage import Engine, StageOutput, StageRun, check_upstream
from webdedup_assets.params import BandingParams, FingerprintParams, ScoringParams
from webdedup_assets.storage.serial import decode, encode, from_stored, to_stored
from webdedup_assets.storage.store import read_params, write_table

from .conftest import FIXTURE


def test_every_declared_stage_has_a_duckdb_implementation_and_known_upstream():
    assert set(DUCKDB.stages) == set(STAGES)
    for stage in STAGES.values():
        for group, source in stage.inherits:
            assert source in stage.upstream, (stage.name, group)
        for need in stage.needs:
            assert need.upstream in stage.upstream
    assert [s.name for s in STAGES.values() if s.daily] == ["documents", "fingerprinted", "band_memberships"]
    # every stage runs through the contract: the nine assets but rejected_records (written by documents)
    assert set(STAGES) == {
        "documents",
        "fingerprinted",
        "band_memberships",
        "candidate_pairs",
        "scored_pairs",
        "duplicate_pairs",
        "clusters",
        "deduped_documents",
        "manifest",
    }
    assert STAGES["documents"].upstream == () and "deduped_documents" in STAGES["manifest"].upstream


def test_parameters_round_trip_through_the_one_serializer():
    params = FingerprintParams(shingle_size=3, num_perm=64, seed=7)
    stored = to_stored(params, version=2)
    assert stored == {"shingle_size": 3, "shingle_unit": "word", "num_perm": 64, "seed": 7, "version": 2}
    assert decode(encode({"fingerprint": stored})) == {"fingerprint": stored}
    assert encode({"b": 1, "a": 2}) == encode({"a": 2, "b": 1})  # one text per dict
    assert from_stored(FingerprintParams, stored) == params  # derived keys left out


def test_the_upstream_check_names_stage_upstream_and_both_values():
    stage = STAGES["band_memberships"]
    upstream = {"fingerprinted": {"fingerprint": {"num_perm": 64}}}
    check_upstream(stage, BandingParams(bands=16, rows=4), upstream)  # 64 = 16 x 4
    with pytest.raises(WebdedupError) as err:
        check_upstream(stage, BandingParams(bands=26, rows=5), upstream)
    assert str(err.value).startswith(
        "band_memberships: fingerprinted was built with num_perm=64 but band_memberships needs num_perm=130 "
        "(bands=26 x rows=5 = 130); re-materialize"
    )
    duplicates = STAGES["duplicate_pairs"]
    scored = {"scored_pairs": {"scoring": {"threshold": 0.7}}}
    check_upstream(duplicates, None, scored)  # no threshold given: scored_pairs' is used
    with pytest.raises(WebdedupError, match="scored_pairs was built with threshold=0.7 but duplicate_pairs needs"):
        check_upstream(duplicates, ScoringParams(threshold=0.9), scored)


@pytest.fixture
def fingerprinted(tmp_path) -> Store:
    store = Store(tmp_path / "store")
    stage_documents(store, str(FIXTURE))
    return store


def test_the_contract_times_checks_and_writes_stats_of_a_stage(fingerprinted):
    store = fingerprinted
    result = DUCKDB.run("fingerprinted", store, FingerprintParams(num_perm=16))
    assert result.stage == "fingerprinted" and result.rows == pq.read_metadata(store.path("documents")).num_rows
    assert result.parameters == {
        "stage": "fingerprinted",
        "fingerprint": {
            "shingle_size": 5,
            "shingle_unit": "word",
            "num_perm": 16,
            "seed": 1,
            "version": result.parameters["fingerprint"]["version"],
        },
    }
    assert read_params(store.path("fingerprinted")) == {**result.parameters, "partition": None}
    stats = json.loads(store.stats_path("fingerprinted").read_text())
    assert stats["rows"] == result.rows and stats["documents"] == result.figures["documents"]
    assert stats["seconds"] >= 0
    with pytest.raises(WebdedupError, match="needs num_perm=130"):
        DUCKDB.run("band_memberships", store, BandingParams())  # 26 x 5 on 16-value signatures
    assert not store.files("band_memberships")
    with pytest.raises(TypeError, match="band_memberships takes BandingParams, got ScoringParams"):
        DUCKDB.run("band_memberships", store, ScoringParams())


def test_a_second_engine_implements_a_stage_over_the_same_storage(fingerprinted):
    """A toy engine's clusters stage (every document alone) runs through the same contract:
    same upstream reading, stored parameters and stats, readable by the DuckDB engine's stages."""
    store = fingerprinted
    doc_ids = pq.read_table(store.path("documents"), columns=["doc_id"]).column("doc_id")
    write_table(
        store.path("duplicate_pairs"),
        pa.table({"left_doc_id": pa.array([], pa.string()), "right_doc_id": pa.array([], pa.string())}),
        {"stage": "duplicate_pairs", "fingerprint": {"num_perm": 16}, "duplicates": {"threshold": 0.7}},
    )
    other = Engine("toy")
    assert "clusters" not in other.stages
    with pytest.raises(WebdedupError, match="the toy engine does not implement stage clusters"):
        other.run("clusters", store)

    @other.implements("clusters")
    def singletons(run: StageRun) -> StageOutput:
        ids = sorted(doc_ids.to_pylist())
        table = pa.table({"doc_id": ids, "cluster_id": [f"cluster-{d}" for d in ids], "cluster_size": [1] * len(ids)})
        return StageOutput(write_table(run.store.path("clusters"), table, run.parameters), {"clusters": len(ids)})

    result = other.run("clusters", store)
    assert result.parameters == {
        "stage": "clusters",
        "fingerprint": {"num_perm": 16},
        "duplicates": {"threshold": 0.7},
    }
    assert read_params(store.path("clusters")) == result.parameters
    assert json.loads(store.stats_path("clusters").read_text())["clusters"] == len(doc_ids)
    duckdb = DUCKDB.run("clusters", store)  # the same files, rebuilt by the default engine
    assert duckdb.rows == result.rows and duckdb.parameters == result.parameters
    with pytest.raises(ValueError, match="unknown stage"):
        other.implements("no_such_stage")
