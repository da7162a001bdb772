"""fingerprint_method simhash: the kernel against its plain-Python definition, the pigeonhole
blocking, the fixture end to end, the refusals, and incremental add against a full run (on Spark:
tests/test_spark_simhash.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webdedup_assets.core import reference
from webdedup_assets.core.fingerprint import simhash_texts
from webdedup_assets.core.simhash import (
    block_bounds,
    block_keys,
    block_values,
    candidate_probability_at_distance,
    from_words,
    hamming,
    to_words,
)
from webdedup_assets.params import BandingParams, FingerprintParams
from webdedup_assets.storage.store import Store, connect

from . import test_incremental  # imported here: its @given tests are created at import, not inside ours
from .conftest import FIXTURE

TEXTS = [
    "The quick brown fox jumps over the lazy dog",
    "The quick brown fox jumped over the lazy dog!",
    "",
    None,
    "word",
    "a a a a a a a b",  # repeated shingles: weighed by their count
    "Cafe\u0301 cre\u0300me bru\u0302le\u0301e",  # combining marks: the exact normalizer's pass
    "\u4eca\u65e5\u306f\u826f\u3044\u5929\u6c17 \ud55c\uad6d\uc5b4",
    "Городской совет одобрил новый бюджет для школ",
]


@pytest.mark.parametrize("unit, size", [("word", 1), ("word", 3), ("word", 5), ("char", 2), ("char", 5)])
def test_kernel_equals_the_plain_python_definition(unit, size):
    tokens, shingles, hashes = simhash_texts(pa.array(TEXTS, pa.string()), size, unit)
    expected = [reference.simhash(reference.shingle_list(text, size, unit)) for text in TEXTS]
    assert [int(h) for h in hashes] == expected
    assert [int(n) for n in shingles] == [len(reference.shingle_list(t, size, unit)) for t in TEXTS]
    assert int(hashes[2]) == 0 and int(hashes[3]) == 0  # no shingles: 0 (and no block keys downstream)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=60), min_size=1, max_size=8), st.integers(1, 4))
def test_kernel_equals_reference_on_any_text(texts, size):
    for unit in ("word", "char"):
        _, _, hashes = simhash_texts(pa.array(texts, pa.string()), size, unit)
        assert [int(h) for h in hashes] == [reference.simhash(reference.shingle_list(t, size, unit)) for t in texts]


def test_term_frequency_decides_a_bit():
    """One shingle repeated three times outvotes two others: the fingerprint is its hash where
    the other two disagree with it, whatever their bits."""
    a, b, c = 0b1100, 0b1010, 0b0110
    assert reference.simhash([a, a, a, b, c]) == a
    assert reference.simhash([a, b, c]) == 0b1110  # each of bits 1..3 has 2 of 3 votes


def test_stored_words_round_trip_and_hamming():
    values = np.array([0, 1, 2**64 - 1, 0x8000_0000_0000_0001], dtype=np.uint64)
    words = to_words(values)
    assert words.dtype == np.uint32 and words.shape == (4, 2)
    assert words[3].tolist() == [0x8000_0000, 1]  # high half first
    assert (from_words(words) == values).all()
    assert hamming(values, values[::-1]).tolist() == [2, 63, 63, 2]  # 0 vs 0x80..01; 1 vs all ones


@pytest.mark.parametrize("max_hamming", [0, 1, 3, 7, 31])
def test_blocks_cover_the_64_bits(max_hamming):
    bounds = block_bounds(max_hamming)
    assert len(bounds) == max_hamming + 1
    assert bounds[0][0] == 0 and sum(width for _, width in bounds) == 64
    assert all(start + width == nxt for (start, width), (nxt, _) in zip(bounds, bounds[1:]))


@pytest.mark.parametrize(("max_hamming", "key_blocks"), [(0, 1), (1, 1), (2, 1), (5, 1), (1, 2), (3, 3)])
def test_candidate_probability_at_distance_counts_every_placement(max_hamming, key_blocks):
    """Against every placement of the differing bits (distances 0..3): the share that leaves at
    least key_blocks blocks whole; 1 within max_hamming."""
    import itertools

    bounds = block_bounds(max_hamming, key_blocks)
    assert len(bounds) == max_hamming + key_blocks
    for distance in range(4):
        placements = list(itertools.combinations(range(64), distance))
        whole = sum(sum(not any(s <= b < s + w for b in bits) for s, w in bounds) >= key_blocks for bits in placements)
        expected = whole / len(placements)
        assert candidate_probability_at_distance(distance, max_hamming, key_blocks) == pytest.approx(expected)
    assert candidate_probability_at_distance(max_hamming, max_hamming, key_blocks) == 1.0
    assert candidate_probability_at_distance(64, max_hamming, key_blocks) == 0.0


@settings(max_examples=300, deadline=None)
@given(
    value=st.integers(0, 2**64 - 1),
    max_hamming=st.integers(0, 31),
    key_blocks=st.integers(1, 4),
    flips=st.lists(st.integers(0, 63), max_size=31, unique=True),
)
def test_every_pair_within_max_hamming_shares_a_block(value, max_hamming, key_blocks, flips):
    """The pigeonhole guarantee: max_hamming flipped bits leave key_blocks of the max_hamming +
    key_blocks blocks whole, so the two fingerprints share the key of those blocks (band_index,
    band_hash)."""
    import math

    from hypothesis import assume

    assume(math.comb(max_hamming + key_blocks, key_blocks) <= 256)
    flips = flips[:max_hamming]
    other = value
    for bit in flips:
        other ^= 1 << bit
    left, right = np.array([value], np.uint64), np.array([other], np.uint64)
    assert int(hamming(left, right)[0]) == len(flips) <= max_hamming
    keys_left = block_keys(left, max_hamming, key_blocks)[0]
    keys_right = block_keys(right, max_hamming, key_blocks)[0]
    assert len(keys_left) == math.comb(max_hamming + key_blocks, key_blocks)
    assert (keys_left == keys_right).any()
    # and a pair differing in one bit of all but key_blocks - 1 blocks shares none (the guarantee is tight)
    spread = value
    for start, _ in block_bounds(max_hamming, key_blocks)[key_blocks - 1 :]:
        spread ^= 1 << start
    assert not (block_keys(np.array([spread], np.uint64), max_hamming, key_blocks)[0] == keys_left).any()


def test_one_block_per_key_writes_the_keys_it_wrote_before_key_blocks():
    """key_blocks 1: band_hash(block index, [block value]), the layout of stored corpora."""
    from webdedup_assets.core.minhash import band_keys

    hashes = np.array([0, 1, 2**63 + 12345, 2**64 - 1], np.uint64)
    for max_hamming in (0, 3, 9):
        assert (
            block_keys(hashes, max_hamming) == band_keys(block_values(hashes, max_hamming), max_hamming + 1, 1)
        ).all()


def _pairs(folder) -> set[tuple[str, str]]:
    con = connect()
    rows = con.sql(f"SELECT left_doc_id, right_doc_id FROM read_csv('{folder / 'duplicate_pairs.csv'}')").fetchall()
    con.close()
    return set(rows)


def test_fixture_with_simhash(tmp_path, capsys):
    """The fixture's revisions (exact Jaccard about 0.93 to their canonical page) lie 4 to 9 bits
    from it: at max_hamming 9 simhash finds the 18 duplicate pairs and 12 representatives MinHash
    finds (from 54 candidates, where the pinned count is MinHash's 18); at the default 3 only the
    pairs whose fingerprints share a 16-bit block (the 6 exact mirrors and 6 of the 12 revisions),
    and the pinned counts' checks say so (exit 1)."""
    import json

    from webdedup_assets.cli.main import main

    assert main(["run", str(FIXTURE), "--output", str(tmp_path / "minhash"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["run", str(FIXTURE), "--output", str(tmp_path / "wide"), "--quiet", "--fingerprint-method",
                 "simhash", "--max-hamming", "9"]) == 1  # fmt: skip
    # 10 blocks of 6-7 bits: more candidates than the pinned 18 (54), the same duplicates
    failed = [line for line in capsys.readouterr().err.splitlines() if "check failed" in line]
    assert len(failed) == 1 and "candidate pairs: expected 18, actual 54" in failed[0]
    wide = json.loads((tmp_path / "wide" / "manifest.json").read_text())
    assert wide["counts"]["duplicate_pairs"] == 18 and wide["counts"]["representatives"] == 12
    assert _pairs(tmp_path / "wide") == _pairs(tmp_path / "minhash")
    con = connect()
    scored = con.execute(f"""SELECT min(hamming_distance), max(hamming_distance), count(minhash_estimate),
        count(*) FILTER (reason = 'jaccard_and_simhash')
        FROM '{tmp_path / "wide" / "scored_pairs.parquet"}' WHERE is_duplicate""").fetchall()[0]
    assert scored == (0, 9, 0, 18)  # minhash_estimate is null for simhash
    assert pq.read_schema(tmp_path / "minhash" / "scored_pairs.parquet").names[-1] == "reason"  # columns kept
    assert pq.read_schema(tmp_path / "wide" / "_storage" / "duplicate_pairs" / "data.parquet").names[-2:] == [
        "hamming_distance",
        "kind",
    ]
    con.close()
    capsys.readouterr()
    assert main(["run", str(FIXTURE), "--output", str(tmp_path / "default"), "--quiet", "--fingerprint-method",
                 "simhash"]) == 1  # fmt: skip
    assert "duplicate pairs: expected 18, actual 12" in capsys.readouterr().err
    narrow = _pairs(tmp_path / "default")
    assert len(narrow) == 12 and narrow < _pairs(tmp_path / "minhash")
    capsys.readouterr()
    # explain speaks of the 64 bits' blocks: a revision 7 bits from its page, a candidate through one block
    assert main(["explain", "incident-canonical", "incident-revision", "--output", str(tmp_path / "default")]) == 0
    explained = capsys.readouterr().out
    assert "SimHash distance      7 of 64 bits (max_hamming 3)" in explained
    assert "shared keys           1 of 4 (0)" in explained
    assert "P(candidate | d)      0.4417 for d=7" in explained and "MinHash" not in explained
    assert "verdict               duplicate: jaccard_match (near duplicate)" in explained
    stored = json.loads((tmp_path / "default" / "manifest.json").read_text())
    assert stored["counts"]["exact_duplicate_pairs"] == 6 and stored["counts"]["representatives"] == 15
    capsys.readouterr()
    # tune measures the blockings: the fewest candidates that find every pair at J >= 0.7 (of 18)
    assert main(["tune", "--output", str(tmp_path / "default")]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[1].split() == ["max_hamming", "key_blocks", "keys", "recall", "candidates"]
    assert [line.split() for line in said if line.split()[:2] in (["3", "1"], ["9", "3"])] == [
        ["3", "1", "4", "0.6667", "12"],  # the run's blocking: 12 of the 18 pairs
        ["9", "3", "220", "1.0000", "19"],
    ]
    assert said[-1].strip() == "--fingerprint-method simhash --max-hamming 8 --key-blocks 2 --threshold 0.7"
    assert "8           2    45  1.0000    18  <- recommended" in "\n".join(said)


def test_verify_hamming_lets_the_fingerprints_decide(tmp_path, capsys):
    """At threshold 0.95 the exact Jaccard keeps only the 6 exact mirrors (the revisions lie at
    ~0.93); with verify hamming and max_hamming 9 the fingerprints decide: the 18 pairs MinHash
    finds at 0.7, the 12 revisions as simhash_match, the Jaccard still beside them. The manifest
    states the mode for both pair stages; check decides the same way."""
    import json

    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    from webdedup_assets.cli.main import main

    assert main(["run", str(FIXTURE), "--output", str(tmp_path / "minhash"), "--quiet"]) == 0
    flags = ["--fingerprint-method", "simhash", "--max-hamming", "9", "--threshold", "0.95", "--quiet"]
    main(["run", str(FIXTURE), "--output", str(tmp_path / "jaccard"), *flags])
    main(["run", str(FIXTURE), "--output", str(tmp_path / "hamming"), *flags, "--verify", "hamming"])
    capsys.readouterr()
    assert len(_pairs(tmp_path / "jaccard")) == 6
    assert _pairs(tmp_path / "hamming") == _pairs(tmp_path / "minhash")
    con = connect()
    reasons = con.execute(f"""SELECT reason, is_duplicate, count(*), max(hamming_distance), min(exact_jaccard) < 0.95
        FROM '{tmp_path / "hamming" / "scored_pairs.parquet"}' GROUP BY ALL ORDER BY ALL""").fetchall()
    con.close()
    assert reasons == [
        ("beyond_max_hamming", False, 36, 34, True),
        ("jaccard_and_simhash", True, 6, 0, False),
        ("simhash_match", True, 12, 9, True),
    ]
    parameters = json.loads((tmp_path / "hamming" / "manifest.json").read_text())["parameters"]
    assert parameters["scored_pairs"] == parameters["duplicate_pairs"] == {"threshold": 0.95, "verify": "hamming"}
    assert (
        "verify" not in json.loads((tmp_path / "jaccard" / "manifest.json").read_text())["parameters"]["scored_pairs"]
    )

    # check: the revisions, under new ids, against the corpus without them (their pages at ~0.93)
    table = pacsv.read_csv(FIXTURE, convert_options=pacsv.ConvertOptions(column_types={"crawled_at": "string"}))
    revision = pc.match_substring(table["doc_id"], "-revision")
    pacsv.write_csv(table.filter(pc.invert(revision)), tmp_path / "pages.csv")
    revisions = table.filter(revision)
    revisions = revisions.set_column(0, "doc_id", pc.binary_join_element_wise(revisions["doc_id"], "-again", ""))
    pacsv.write_csv(revisions, tmp_path / "revisions.csv")
    for mode, matched in (("jaccard", 0), ("hamming", 6)):
        corpus = tmp_path / f"corpus-{mode}"
        assert main(["add", str(tmp_path / "pages.csv"), "--output", str(corpus), *flags, "--verify", mode]) == 0
        report = tmp_path / f"check-{mode}.parquet"
        assert main(["check", str(tmp_path / "revisions.csv"), "--against", str(corpus), "--report", str(report)]) == 0
        said = capsys.readouterr().out
        assert ("SimHash within 9 bits" if mode == "hamming" else "exact Jaccard >= 0.95") in said
        rows = [r for r in pq.read_table(report).to_pylist() if r["is_duplicate"]]
        assert len(rows) == matched, mode
        for row in rows:  # the canonical page and its mirror share a fingerprint: the smaller doc_id
            assert row["matched_doc_id"] == row["doc_id"].replace("-revision-again", "-canonical")
            assert 0.9 < row["exact_jaccard"] < 0.95


def test_longer_keys_cut_the_chance_candidates_not_the_duplicates(tmp_path, capsys):
    """At max_hamming 9 on the fixture, 10 keys of one block make 54 candidates; 55 keys of two of
    11 blocks 29, 220 keys of three of 12 blocks 19: the 18 duplicate pairs and 12
    representatives each time (every pair within 9 bits still shares a key)."""
    import json

    from webdedup_assets.cli.main import main

    found = {}
    for key_blocks in (1, 2, 3):
        out = tmp_path / f"k{key_blocks}"
        flags = ["--fingerprint-method", "simhash", "--max-hamming", "9", "--key-blocks", str(key_blocks)]
        main(["run", str(FIXTURE), "--output", str(out), "--quiet", *flags])
        manifest = json.loads((out / "manifest.json").read_text())
        counts, lsh = manifest["counts"], manifest["lsh"]
        found[key_blocks] = (
            counts["candidate_pairs"],
            counts["duplicate_pairs"],
            counts["representatives"],
            lsh["keys"],
        )
        bands = Store(out / "_storage").scan_sql("band_memberships")
        assert connect().execute(f"SELECT count(*) FROM {bands}").fetchone()[0] == 24 * lsh["keys"]
    assert found == {1: (54, 18, 12, 10), 2: (29, 18, 12, 55), 3: (19, 18, 12, 220)}
    assert _pairs(tmp_path / "k3") == _pairs(tmp_path / "k1")
    capsys.readouterr()
    assert main(["run", str(FIXTURE), "--output", str(tmp_path / "many"), "--fingerprint-method", "simhash",
                 "--max-hamming", "20", "--key-blocks", "5"]) == 2  # fmt: skip
    assert capsys.readouterr().err == (
        "webdedup: error: --max-hamming 20 with --key-blocks 5 makes 53130 keys per document (at most 256, and at "
        "most 64 blocks)\n"
    )


def test_verify_hamming_without_simhash_is_refused_in_one_line(tmp_path, capsys):
    from webdedup_assets.cli.main import main

    assert main(["run", str(FIXTURE), "--output", str(tmp_path / "out"), "--verify", "hamming"]) == 2
    assert capsys.readouterr().err == (
        "webdedup: error: --verify hamming needs --fingerprint-method simhash (the Hamming distance of SimHash "
        "fingerprints decides); use --verify jaccard or --fingerprint-method simhash\n"
    )
    assert not (tmp_path / "out").exists()


def test_add_with_another_method_is_refused(tmp_path, capsys):
    from webdedup_assets.cli.main import main

    from .test_incremental import _split_fixture

    early, late = _split_fixture(tmp_path)
    assert main(["add", str(early), "--output", str(tmp_path / "inc"), "--fingerprint-method", "simhash"]) == 0
    capsys.readouterr()
    assert main(["add", str(late), "--output", str(tmp_path / "inc"), "--fingerprint-method", "minhash"]) == 2
    err = capsys.readouterr().err
    assert "--fingerprint-method=simhash (held) vs minhash (given)" in err  # the flag given, not the field
    assert "changing a fingerprint parameter needs a full rebuild" in err


def test_scoring_refuses_candidates_of_another_method(tmp_path):
    """Stored with the data: candidate pairs built over simhash fingerprints are not scored over
    minhash ones fingerprinted since (the upstream check names both fingerprint groups)."""
    from webdedup_assets.engine.stage import DUCKDB
    from webdedup_assets.engine.stages.documents import stage_documents
    from webdedup_assets.engine.stages.fingerprint import stage_band_memberships, stage_fingerprinted
    from webdedup_assets.errors import WebdedupError
    from webdedup_assets.params import CandidateParams, ScoringParams
    from webdedup_assets.storage.store import Store

    store = Store(tmp_path / "storage")
    stage_documents(store, str(FIXTURE), "csv", months=["2026-03"])
    stage_fingerprinted(store, FingerprintParams(fingerprint_method="simhash"), ["2026-03"])
    banded = stage_band_memberships(store, BandingParams(), ["2026-03"])
    assert banded.rows == 24 * 4  # 4 blocks per document at max_hamming 3
    assert banded.parameters["fingerprint"]["fingerprint_method"] == "simhash"
    assert "max_hamming" not in banded.parameters["banding"]  # the default is not stored (see params)
    DUCKDB.run("candidate_pairs", store, CandidateParams())
    stage_fingerprinted(store, FingerprintParams(), ["2026-03"])
    with pytest.raises(WebdedupError, match=r"scored_pairs: candidate_pairs was built with fingerprint=.*simhash"):
        DUCKDB.run("scored_pairs", store, ScoringParams())


@pytest.mark.parametrize("verify", ["jaccard", "hamming"])
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000))
def test_incremental_simhash_equals_full_recompute(tmp_path_factory, monkeypatch, verify, seed):
    """test_incremental's add / merge / replace / delete sequence over SimHash fingerprints, the
    Jaccard or the fingerprints deciding: after every step the update equals a run from scratch
    (band keys, Hamming distances, decisions, clusters)."""
    from webdedup_assets.params import ScoringParams

    monkeypatch.setattr(test_incremental, "SCORING", ScoringParams(threshold=0.6, verify=verify))
    monkeypatch.setattr(
        test_incremental, "FINGERPRINT", FingerprintParams(shingle_size=3, fingerprint_method="simhash")
    )
    key_blocks = 2 if verify == "hamming" else 1  # longer keys too: the same update code
    monkeypatch.setattr(test_incremental, "BANDING", BandingParams(max_hamming=6, key_blocks=key_blocks))
    store = test_incremental._ops_sequence(tmp_path_factory.mktemp("sim"), seed, ["add", "merge", "replace", "delete"])
    assert store.params("fingerprinted")["fingerprint"]["fingerprint_method"] == "simhash"
    con = connect()
    scored = store.scan_sql("scored_pairs")
    columns = [row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {scored}").fetchall()]
    assert "hamming_distance" in columns  # the sequence may end with no pair left: the schema still says SimHash
    rows, measured = con.execute(f"SELECT count(*), count(hamming_distance) FROM {scored}").fetchone()
    assert measured == rows  # every pair carries its fingerprints' distance
    con.close()
