"""Incremental update == full recompute, after any sequence of add / replace / delete.

Corpora are generated from word chains: a document is a window of 40 words at some shift of a
family's 90-word sequence, so documents 4 or 8 words apart are near-duplicates and 16 apart
are not; a day holding the shift between two clusters merges them. Every global asset, every
report and every figure the manifest reads must equal a run from scratch on the same days.
"""

from __future__ import annotations

import csv
import json
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webdedup_assets.engine import incremental
from webdedup_assets.engine.incremental import bodies
from webdedup_assets.engine.stage import DUCKDB
from webdedup_assets.engine.stages.documents import stage_documents
from webdedup_assets.engine.stages.fingerprint import stage_band_memberships, stage_fingerprinted
from webdedup_assets.errors import WebdedupError
from webdedup_assets.params import (
    BandingParams,
    CandidateParams,
    FingerprintParams,
    RepresentativeParams,
    ScoringParams,
)
from webdedup_assets.storage.state import months_of
from webdedup_assets.storage.store import Store, connect

FINGERPRINT = FingerprintParams(shingle_size=3, num_perm=16, seed=3)
BANDING = BandingParams(bands=8, rows=2)
SCORING = ScoringParams(threshold=0.6)
POLICIES = {
    "fail": CandidateParams(),
    "star": CandidateParams(bucket_policy="star", hot_bucket_size=3),
}
REPRESENTATIVE = RepresentativeParams()
DAYS = [f"2026-0{1 + i // 2}-0{1 + i % 2}" for i in range(6)]  # two crawl days in each of three months
HEADER = ["doc_id", "source", "domain", "crawled_at", "title", "body"]


def _words(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [f"w{rng.randrange(10_000)}" for _ in range(n)]


FAMILIES = [_words(family, 90) for family in range(3)]


def text(family: int, shift: int) -> str:
    if family < 0:  # a document like no other
        return " ".join(_words(1000 + shift, 40))
    return " ".join(FAMILIES[family][shift : shift + 40])


class Corpus:
    """The days held and their documents, written as one CSV input (all days)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.days: dict[str, list[dict]] = {}
        self.counter = 0

    def new_id(self) -> str:
        self.counter += 1
        return f"doc{self.counter:04d}"

    def write(self) -> Path:
        path = self.folder / "input.csv"
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, HEADER)
            writer.writeheader()
            for day in sorted(self.days):
                for row in self.days[day]:
                    writer.writerow(row)
        return path

    def row(self, day: str, family: int, shift: int, doc_id: str | None = None) -> dict:
        return {
            "doc_id": doc_id or self.new_id(),
            "source": "gen",
            "domain": f"site{(family + shift) % 3}.example",
            "crawled_at": day,
            "title": f"t{family}-{shift}",
            "body": text(family, shift),
        }


def daily(store: Store, corpus: Corpus, days: list[str]) -> None:
    """The daily stages for the months of `days` (a day without documents leaves the corpus)."""
    path = corpus.write()
    months = months_of(days)
    stage_documents(store, str(path), "csv", months=months)
    stage_fingerprinted(store, FINGERPRINT, months)
    stage_band_memberships(store, BANDING, months)


def full_run(root: Path, corpus: Corpus, candidates: CandidateParams) -> Store:
    store = Store(root)
    daily(store, corpus, sorted(corpus.days))
    DUCKDB.run("candidate_pairs", store, candidates)
    DUCKDB.run("scored_pairs", store, SCORING)
    DUCKDB.run("duplicate_pairs", store, None)
    DUCKDB.run("clusters", store)
    DUCKDB.run("deduped_documents", store, REPRESENTATIVE)
    return store


ORDER = {
    "candidate_pairs": "left_doc_id, right_doc_id",
    "scored_pairs": "left_doc_id, right_doc_id",
    "duplicate_pairs": "left_doc_id, right_doc_id",
    "clusters": "doc_id",
    "deduped_documents": "doc_id",
}
REPORTS = {
    "candidate_pairs": ["candidate_summary.csv", "collision_buckets.csv"],
    "deduped_documents": ["cluster_inspection.csv", "cluster_diagnostics.csv"],
}


def snapshot(store: Store) -> dict:
    """Every global asset's rows (in key order, and in stored order), parameters, figures and reports."""
    con = connect()
    con.execute("SET preserve_insertion_order = true")  # stored order across row groups too
    out = {}
    for asset, order in ORDER.items():
        out[asset] = con.sql(f"SELECT * FROM {store.scan_sql(asset)} ORDER BY {order}").fetchall()
        out[asset + ":columns"] = con.sql(f"SELECT * FROM {store.scan_sql(asset)} LIMIT 0").arrow().schema.to_string()
        # stored order too: the full stages' ORDER BY, deduped_documents' documents file order
        out[asset + ":stored"] = con.sql(f"SELECT * FROM {store.scan_sql(asset)}").fetchall()
        params = store.params(asset)
        out[asset + ":params"] = json.dumps(params, sort_keys=True)
        stats = {k: v for k, v in store.stats(asset)[0].items() if k not in ("seconds", "threads", "document_passes")}
        out[asset + ":stats"] = stats
        for name in REPORTS.get(asset, []):
            out[name] = (store.asset_dir(asset) / name).read_text()
    con.close()
    return out


def assert_same(incremental_store: Store, corpus: Corpus, tmp: Path, candidates: CandidateParams) -> None:
    reference = tmp / "reference"
    shutil.rmtree(reference, ignore_errors=True)
    expected = snapshot(full_run(reference, corpus, candidates))
    got = snapshot(incremental_store)
    for key in expected:
        assert got[key] == expected[key], key


# ---- operations ---------------------------------------------------------------------------


def op_add(corpus: Corpus, rng: random.Random) -> list[str]:
    free = [d for d in DAYS if d not in corpus.days]
    day = rng.choice(free or DAYS)
    corpus.days[day] = [
        corpus.row(day, rng.choice([-1, 0, 0, 1, 2]), rng.randrange(0, 48, 4)) for _ in range(rng.randrange(1, 7))
    ]
    return [day]


def op_replace(corpus: Corpus, rng: random.Random) -> list[str]:
    """A held day again, with changed content: some documents keep their doc_id with a new body,
    some disappear, some are new."""
    if not corpus.days:
        return op_add(corpus, rng)
    day = rng.choice(sorted(corpus.days))
    rows = []
    for row in corpus.days[day]:
        fate = rng.random()
        if fate < 0.3:
            continue  # gone
        if fate < 0.7:
            rows.append(corpus.row(day, rng.choice([-1, 0, 1, 2]), rng.randrange(0, 48, 4), row["doc_id"]))
        else:
            rows.append(row)
    rows += [corpus.row(day, rng.choice([0, 1]), rng.randrange(0, 48, 4)) for _ in range(rng.randrange(0, 3))]
    if rows:
        corpus.days[day] = rows
    else:
        corpus.days.pop(day)
    return [day]


def op_delete(corpus: Corpus, rng: random.Random) -> list[str]:
    if not corpus.days:
        return op_add(corpus, rng)
    day = rng.choice(sorted(corpus.days))
    corpus.days.pop(day)
    return [day]


def op_merge(corpus: Corpus, rng: random.Random) -> list[str]:
    """Two clusters 16 words apart, then a day holding the document between them."""
    free = [d for d in DAYS if d not in corpus.days]
    if len(free) < 2:
        return op_replace(corpus, rng)
    family, shift = rng.choice([0, 1, 2]), rng.randrange(0, 32, 4)
    first, second = sorted(rng.sample(free, 2))
    corpus.days[first] = [corpus.row(first, family, shift), corpus.row(first, family, shift + 16)]
    return [first, second, family, shift]


def op_reorder(corpus: Corpus, rng: random.Random) -> list[str]:
    """A held day again with the same documents in another order (deduped_documents follows the
    documents files' row order, so the update moves that day's representatives)."""
    if not corpus.days:
        return op_add(corpus, rng)
    day = rng.choice(sorted(corpus.days))
    rows = list(corpus.days[day])
    rng.shuffle(rows)
    corpus.days[day] = rows
    return [day]


OPS = {"add": op_add, "replace": op_replace, "delete": op_delete, "merge": op_merge, "reorder": op_reorder}


def apply(store: Store, corpus: Corpus, name: str, rng: random.Random, candidates: CandidateParams) -> None:
    result = OPS[name](corpus, rng)
    if name == "merge" and len(result) == 4:
        first, second, family, shift = result
        daily(store, corpus, [first])
        incremental.update(store, candidates, SCORING, REPRESENTATIVE)
        corpus.days[second] = [corpus.row(second, family, shift + 8)]
        daily(store, corpus, [second])
    else:
        daily(store, corpus, result)
    report = incremental.update(store, candidates, SCORING, REPRESENTATIVE)
    assert report.mode in ("incremental", "unchanged"), report


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 10_000),
    ops=st.lists(st.sampled_from(sorted(OPS)), min_size=1, max_size=4),
    policy=st.sampled_from(sorted(POLICIES)),
)
def test_incremental_equals_full_recompute(tmp_path_factory, seed, ops, policy):
    tmp = tmp_path_factory.mktemp("inc")
    rng = random.Random(seed)
    candidates = POLICIES[policy]
    corpus = Corpus(tmp)
    store = Store(tmp / "storage")
    first = op_add(corpus, rng) + op_add(corpus, rng)
    daily(store, corpus, first)
    assert incremental.update(store, candidates, SCORING, REPRESENTATIVE).mode == "full"
    for name in ops:
        apply(store, corpus, name, rng, candidates)
        if corpus.days:
            assert_same(store, corpus, tmp, candidates)


def _ops_sequence(tmp: Path, seed: int, ops: list[str]) -> Store:
    """Two days, a full build, then `ops`, each compared with a run from scratch."""
    rng = random.Random(seed)
    corpus = Corpus(tmp)
    store = Store(tmp / "storage")
    daily(store, corpus, op_add(corpus, rng) + op_add(corpus, rng))
    assert incremental.update(store, POLICIES["fail"], SCORING, REPRESENTATIVE).mode == "full"
    for name in ops:
        apply(store, corpus, name, rng, POLICIES["fail"])
        if corpus.days:
            assert_same(store, corpus, tmp, POLICIES["fail"])
    return store


def test_character_shingles_are_scored_as_character_shingles(tmp_path, monkeypatch):
    """The incremental verification uses the stored shingle unit (it once hashed word shingles
    whatever the unit): with 7-character shingles, every score equals the full run's."""
    monkeypatch.setattr(
        __import__(__name__, fromlist=["FINGERPRINT"]),
        "FINGERPRINT",
        FingerprintParams(shingle_size=7, shingle_unit="char", num_perm=16, seed=3),
    )
    store = _ops_sequence(tmp_path, 7, ["add", "merge", "replace", "add"])
    assert store.params("fingerprinted")["fingerprint"]["shingle_unit"] == "char"
    con = connect()
    assert con.execute(f"SELECT count(*) FROM {store.scan_sql('duplicate_pairs')}").fetchone()[0] > 0
    # `check`: a new page 4 words off a held one, scored with 7-character shingles
    held_id, held_body = con.execute(f"SELECT doc_id, body FROM {store.scan_sql('documents')} LIMIT 1").fetchone()
    con.close()
    words = held_body.split()
    new_body = " ".join(words[4:] + ["extra", "words", "at", "the", "end"])
    path = tmp_path / "new.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, HEADER)
        writer.writeheader()
        writer.writerow({**Corpus(tmp_path).row(DAYS[-1], 0, 0, "new-page"), "body": new_body})
    incremental.check_input(store, str(path), "csv", tmp_path / "check.parquet")
    rows = pq.read_table(tmp_path / "check.parquet").to_pylist()
    from webdedup_assets.core.fingerprint import shingle_sets

    def chars(body: str) -> set[int]:
        flat, _ = shingle_sets(pa.array([body], pa.large_string()), 7, "char")
        return set(flat.tolist())

    (row,) = rows
    assert row["is_duplicate"] and row["matched_doc_id"] is not None
    con = connect()
    (matched_body,) = con.execute(
        f"SELECT body FROM {store.scan_sql('documents')} WHERE doc_id = ?", [row["matched_doc_id"]]
    ).fetchone()
    con.close()
    a, b = chars(matched_body), chars(new_body)
    assert row["exact_jaccard"] == pytest.approx(len(a & b) / len(a | b))


def test_diagnostics_under_a_member_cap_equal_the_full_run(tmp_path, monkeypatch):
    """cluster_diagnostics.csv measures at most COHESION_MAX_MEMBERS members (largest clusters
    first); an update recomputes the touched clusters and those the cap moved over, and the
    result equals the full stage's with the same cap."""
    from webdedup_assets.engine import invariants

    monkeypatch.setattr(invariants, "COHESION_MAX_MEMBERS", 3)
    store = _ops_sequence(tmp_path, 11, ["merge", "add", "merge", "replace", "delete"])
    rows = list(csv.DictReader((store.asset_dir("deduped_documents") / "cluster_diagnostics.csv").open()))
    assert sum(int(r["members_checked"]) for r in rows if int(r["size"]) > 2) <= 3


def test_pages_to_verify_beyond_the_memory_budget_are_scored_as_the_full_stage_scores(tmp_path, monkeypatch):
    """An update whose pages to verify have more shingles than scoring's memory budget (an add as
    large as the corpus) scores them in groups within it, as scored_pairs does, not all at once;
    every result still equals the full run's."""
    from webdedup_assets.engine.incremental import verify

    monkeypatch.setattr(verify, "SCORING_MEMORY_BYTES", 400)  # two pages' sets or so
    passes = []

    def scored_in_groups(*args):
        scores = score_members(*args)
        passes.append(scores.passes)
        return scores

    score_members = verify.score_members
    monkeypatch.setattr(verify, "score_members", scored_in_groups)
    _ops_sequence(tmp_path, 5, ["add", "merge", "replace"])
    assert passes and min(passes) > 1, passes


def test_a_full_collision_list_is_updated_as_the_full_run_lists_it(tmp_path, monkeypatch):
    """collision_buckets.csv lists COLLISION_TOP buckets; once the list is full an update gathers
    only the touched buckets as large as its smallest one, and still equals the full run's list."""
    from webdedup_assets.engine.incremental import links
    from webdedup_assets.engine.stages import candidates

    for module in (candidates, links):
        monkeypatch.setattr(module, "COLLISION_TOP", 4)
    store = _ops_sequence(tmp_path, 3, ["add", "merge", "add", "replace"])
    rows = list(csv.DictReader((store.asset_dir("candidate_pairs") / "collision_buckets.csv").open()))
    assert len(rows) == 4 and all(int(r["size"]) >= 2 for r in rows)


def test_a_day_joins_two_clusters(tmp_path):
    corpus = Corpus(tmp_path)
    store = Store(tmp_path / "storage")
    corpus.days[DAYS[0]] = [corpus.row(DAYS[0], 0, 0, "b-left"), corpus.row(DAYS[0], 0, 4, "c-left")]
    corpus.days[DAYS[1]] = [corpus.row(DAYS[1], 0, 16, "d-right"), corpus.row(DAYS[1], 0, 20, "e-right")]
    daily(store, corpus, DAYS[:2])
    incremental.update(store, POLICIES["fail"], SCORING, REPRESENTATIVE)
    con = connect()
    before = dict(con.sql(f"SELECT doc_id, cluster_id FROM {store.scan_sql('clusters')}").fetchall())
    assert before["b-left"] == "cluster-b-left" and before["d-right"] == "cluster-d-right"
    corpus.days[DAYS[2]] = [corpus.row(DAYS[2], 0, 10, "z-bridge")]
    daily(store, corpus, [DAYS[2]])
    report = incremental.update(store, POLICIES["fail"], SCORING, REPRESENTATIVE)
    assert report.mode == "incremental" and report.days_added == [DAYS[2]] and report.documents_added == 1
    after = dict(con.sql(f"SELECT doc_id, cluster_id FROM {store.scan_sql('clusters')}").fetchall())
    assert set(after.values()) == {"cluster-b-left"}
    con.close()
    # every documents file has its body index (what the update verified with)
    indexes = sorted(p.name.split(".")[0] for p in bodies.bodies_dir(store).glob("*.index.parquet"))
    assert indexes == [f.stem.split(".")[0] for f in store.data_files("documents")]
    assert_same(store, corpus, tmp_path, POLICIES["fail"])


def test_changed_fingerprint_parameters_are_refused(tmp_path):
    corpus = Corpus(tmp_path)
    store = Store(tmp_path / "storage")
    corpus.days[DAYS[0]] = [corpus.row(DAYS[0], 0, 0), corpus.row(DAYS[0], 0, 4)]
    daily(store, corpus, [DAYS[0]])
    incremental.update(store, POLICIES["fail"], SCORING, REPRESENTATIVE)
    stage_fingerprinted(store, FingerprintParams(shingle_size=4, num_perm=16, seed=3), months_of([DAYS[0]]))
    stage_band_memberships(store, BANDING, months_of([DAYS[0]]))
    with pytest.raises(WebdedupError, match="incremental update refused.*shingle_size"):
        incremental.update(store, POLICIES["fail"], SCORING, REPRESENTATIVE)
    report = incremental.update(store, POLICIES["fail"], SCORING, REPRESENTATIVE, full_rebuild_flag=True)
    assert report.mode == "full" and report.reason == "full_rebuild requested"


def test_a_doc_id_held_on_another_day_is_refused_by_the_update(tmp_path):
    """Each crawl month's documents are validated alone, so a day of another month holding a doc_id
    the corpus holds already reaches the update, which names it (and leaves the global assets)."""
    corpus = Corpus(tmp_path)
    store = Store(tmp_path / "storage")
    corpus.days[DAYS[0]] = [corpus.row(DAYS[0], 0, 0, "same-id"), corpus.row(DAYS[0], 0, 4)]
    daily(store, corpus, [DAYS[0]])
    incremental.update(store, POLICIES["fail"], SCORING, REPRESENTATIVE)
    before = (store.asset_dir("clusters") / "data.parquet").read_bytes()
    later = Corpus(tmp_path)  # an input of the later month only (the same id within one input is refused)
    later.days[DAYS[2]] = [later.row(DAYS[2], 1, 0, "same-id"), later.row(DAYS[2], 1, 8, "other-id")]
    daily(store, later, [DAYS[2]])
    repeated = rf"doc_id must be unique across crawl days; repeated: 'same-id' on {DAYS[0]}, {DAYS[2]}$"
    with pytest.raises(WebdedupError, match=repeated):
        incremental.update(store, POLICIES["fail"], SCORING, REPRESENTATIVE)
    assert (store.asset_dir("clusters") / "data.parquet").read_bytes() == before


def test_changed_threshold_rebuilds_and_says_so(tmp_path):
    corpus = Corpus(tmp_path)
    store = Store(tmp_path / "storage")
    corpus.days[DAYS[0]] = [corpus.row(DAYS[0], 0, 0), corpus.row(DAYS[0], 0, 8)]
    daily(store, corpus, [DAYS[0]])
    incremental.update(store, POLICIES["fail"], SCORING, REPRESENTATIVE)
    report = incremental.update(store, POLICIES["fail"], ScoringParams(threshold=0.9), REPRESENTATIVE)
    assert report.mode == "full" and "scoring parameters changed" in report.reason


def test_nothing_changed_is_a_no_op(tmp_path):
    corpus = Corpus(tmp_path)
    store = Store(tmp_path / "storage")
    corpus.days[DAYS[0]] = [corpus.row(DAYS[0], 0, 0), corpus.row(DAYS[0], 0, 8)]
    daily(store, corpus, [DAYS[0]])
    incremental.update(store, POLICIES["fail"], SCORING, REPRESENTATIVE)
    assert incremental.update(store, POLICIES["fail"], SCORING, REPRESENTATIVE).mode == "unchanged"
    daily(store, corpus, [DAYS[0]])  # the same day again, same content: files rewritten
    assert incremental.update(store, POLICIES["fail"], SCORING, REPRESENTATIVE).mode == "unchanged"


# ---- the command line ---------------------------------------------------------------------


def _split_fixture(folder: Path) -> tuple[Path, Path]:
    import pyarrow.csv as pacsv

    from tests.conftest import FIXTURE

    table = pacsv.read_csv(FIXTURE, convert_options=pacsv.ConvertOptions(column_types={"crawled_at": "string"}))
    early = table.filter(pa.compute.less(table["crawled_at"], "2026-03-10"))
    late = table.filter(pa.compute.greater_equal(table["crawled_at"], "2026-03-10"))
    paths = folder / "early.csv", folder / "late.csv"
    pacsv.write_csv(early, paths[0])
    pacsv.write_csv(late, paths[1])
    return paths


def test_cli_add_day_by_day_equals_run(tmp_path, capsys):
    from tests.conftest import FIXTURE
    from webdedup_assets.cli.main import main

    early, late = _split_fixture(tmp_path)
    assert main(["run", str(FIXTURE), "--output", str(tmp_path / "full"), "--quiet"]) == 0
    assert main(["add", str(early), "--output", str(tmp_path / "inc")]) == 0
    assert "full rebuild (no incremental state" in capsys.readouterr().out
    assert main(["add", str(late), "--output", str(tmp_path / "inc")]) == 0
    out = capsys.readouterr().out
    assert ": incremental" in out
    steps = re.search(
        r"seconds: documents ([\d.]+), fingerprinted ([\d.]+), band_memberships ([\d.]+), "
        r"update ([\d.]+), publish ([\d.]+)",
        out,
    )
    assert steps and all(float(s) >= 0 for s in steps.groups()), out
    con = connect()
    for name, order in (("clusters.csv", "doc_id"), ("duplicate_pairs.csv", "left_doc_id, right_doc_id")):
        expected = con.sql(f"SELECT * FROM read_csv('{tmp_path / 'full' / name}') ORDER BY {order}").fetchall()
        got = con.sql(f"SELECT * FROM read_csv('{tmp_path / 'inc' / name}') ORDER BY {order}").fetchall()
        assert got == expected, name
    for name in ("deduped_documents.parquet", "scored_pairs.parquet"):
        order = "doc_id" if name.startswith("deduped") else "left_doc_id, right_doc_id"
        expected = con.sql(f"SELECT * FROM '{tmp_path / 'full' / name}' ORDER BY {order}").fetchall()
        got = con.sql(f"SELECT * FROM '{tmp_path / 'inc' / name}' ORDER BY {order}").fetchall()
        assert got == expected, name
    full = json.loads((tmp_path / "full" / "manifest.json").read_text())["counts"]
    inc = json.loads((tmp_path / "inc" / "manifest.json").read_text())["counts"]
    assert inc == full
    con.close()


@pytest.mark.parametrize(
    "cap, read_with_verification",
    [
        (None, ["c0", "c1", "c2", "c3", "c4", "c5", "n0"]),
        (1, ["c0", "c1", "c2", "n0"]),  # the pages to verify, and one member: what the cap lets be measured
    ],
)
def test_an_update_measures_cluster_diagnostics_on_the_pages_it_verified(
    tmp_path, monkeypatch, cap, read_with_verification
):
    """The members the diagnostics measure after an update are read with the pages to verify (one
    scan of the bodies, not two), the far end of a chain included though no new page comes near
    it, and no more members than the diagnostics' cap: no shingle set is loaded again, and the
    published diagnostics equal a full run's."""
    from tests.test_cluster_diagnostics import chain_bodies
    from webdedup_assets.cli.main import main
    from webdedup_assets.engine import invariants, shingle_sets
    from webdedup_assets.engine.incremental import verify

    if cap is not None:
        monkeypatch.setattr(invariants, "COHESION_MAX_MEMBERS", cap)

    chain = chain_bodies(5)  # c0 ... c5: one cluster by chaining; c5 shares little with c0
    mirror = chain[0].split()
    mirror[10] = "mirrored"  # a new page next to c0 only
    fields = ["doc_id", "source", "domain", "crawled_at", "title", "body"]
    days = {
        "history.csv": [
            [f"c{i}", "crawl", f"site{i}.example", f"2026-03-0{i + 1}", "t", b] for i, b in enumerate(chain)
        ],
        "day.csv": [["n0", "crawl", "mirror.example", "2026-03-20", "t", " ".join(mirror)]],
    }
    for name, rows in days.items():
        with open(tmp_path / name, "w", newline="") as handle:
            csv.writer(handle).writerows([fields, *rows])
    with open(tmp_path / "all.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([fields, *days["history.csv"], *days["day.csv"]])
    assert main(["run", str(tmp_path / "all.csv"), "--output", str(tmp_path / "full"), "--quiet"]) in (0, 1)
    assert main(["add", str(tmp_path / "history.csv"), "--output", str(tmp_path / "inc")]) in (0, 1)
    covered, loaded = [], []
    covering, load = shingle_sets.ShingleSets.covering, shingle_sets.load_shingle_sets

    def spy_covering(self, store, size, ids, unit="word"):
        covered.append(sorted(set(ids.to_pylist())))
        return covering(self, store, size, ids, unit)

    def spy_load(*args, **kwargs):
        loaded.append(args[2] if len(args) > 2 else kwargs.get("doc_ids"))
        return load(*args, **kwargs)

    built = []
    sets_of = verify.shingle_sets_of

    def spy_sets_of(doc_ids, *args):
        built.append(sorted(doc_ids.to_pylist()))
        return sets_of(doc_ids, *args)

    monkeypatch.setattr(shingle_sets.ShingleSets, "covering", spy_covering)
    monkeypatch.setattr(shingle_sets, "load_shingle_sets", spy_load)
    monkeypatch.setattr(verify, "shingle_sets_of", spy_sets_of)
    assert main(["add", str(tmp_path / "day.csv"), "--output", str(tmp_path / "inc")]) in (0, 1)
    assert built == [read_with_verification]
    measured = read_with_verification if cap is None else ["c0", "n0"]  # the member and its representative
    assert covered == [measured]  # the members measured ...
    assert loaded == []  # ... on the sets verification computed
    name = "cluster_diagnostics.csv"
    assert (tmp_path / "inc" / name).read_text() == (tmp_path / "full" / name).read_text()


def test_cli_add_refuses_other_fingerprint(tmp_path, capsys):
    from webdedup_assets.cli.main import main

    early, late = _split_fixture(tmp_path)
    assert main(["add", str(early), "--output", str(tmp_path / "inc")]) == 0
    assert main(["add", str(late), "--output", str(tmp_path / "inc"), "--shingle-size", "3"]) == 2
    assert "changing a fingerprint parameter needs a full rebuild" in capsys.readouterr().err


@pytest.mark.parametrize("verify", ["jaccard", "hamming"])
def test_a_check_in_batches_of_pages_reports_what_one_batch_reports(tmp_path, monkeypatch, verify):
    """check shingles the new pages a batch at a time, with the corpus pages paired with them (a
    check of a whole crawl held every page's body and set at once): batches of two pages give the
    report of one batch, with SimHash fingerprints deciding too."""
    from tests.conftest import FIXTURE
    from webdedup_assets.cli.main import main
    from webdedup_assets.engine.incremental import check

    pages = tmp_path / "pages.csv"  # (not beside the counts pinned for the default parameters)
    shutil.copy(FIXTURE, pages)
    simhash = ["--fingerprint-method", "simhash", "--verify", "hamming"] if verify == "hamming" else []
    assert main(["run", str(pages), "--output", str(tmp_path / "out"), "--quiet", *simhash]) == 0
    reports = []  # the corpus' own pages checked against it: each page has candidates
    for batch in (check.CHECK_BATCH_PAGES, 2):
        monkeypatch.setattr(check, "CHECK_BATCH_PAGES", batch)
        reports.append(tmp_path / f"check-{batch}.parquet")
        assert main(["check", str(pages), "--against", str(tmp_path / "out"), "--report", str(reports[-1])]) == 0
    one, batched = (pq.read_table(r) for r in reports)
    assert batched.equals(one)
    assert pa.compute.sum(pa.compute.greater(one["candidates"], 0)).as_py() > 2  # more than one batch of two
    assert pa.compute.sum(one["is_duplicate"]).as_py() > 0


def test_cli_check_changes_nothing(tmp_path, capsys):
    from tests.conftest import FIXTURE
    from webdedup_assets.cli.main import main

    early, late = _split_fixture(tmp_path)
    assert main(["add", str(early), "--output", str(tmp_path / "inc")]) == 0
    storage = tmp_path / "inc" / "_storage"
    before = sorted((p.relative_to(storage), p.stat().st_mtime_ns) for p in storage.rglob("*") if p.is_file())
    report = tmp_path / "check.parquet"
    assert main(["check", str(late), "--against", str(storage), "--report", str(report)]) == 0
    after = sorted((p.relative_to(storage), p.stat().st_mtime_ns) for p in storage.rglob("*") if p.is_file())
    assert before == after
    rows = pq.read_table(report).to_pylist()
    # the answer agrees with a full run over both: a late page is a duplicate of an early one
    # exactly when the full run pairs them
    assert main(["run", str(FIXTURE), "--output", str(tmp_path / "full"), "--quiet"]) == 0
    con = connect()
    early_ids = {r[0] for r in con.sql(f"SELECT doc_id FROM read_csv('{early}')").fetchall()}
    late_ids = {r[0] for r in con.sql(f"SELECT doc_id FROM read_csv('{late}')").fetchall()}
    pairs = con.sql(
        f"SELECT left_doc_id, right_doc_id, exact_jaccard FROM read_csv('{tmp_path / 'full' / 'duplicate_pairs.csv'}')"
    ).fetchall()
    con.close()
    expected = {}
    for left, right, jaccard in pairs:
        for new, old in ((left, right), (right, left)):
            if new in late_ids and old in early_ids:
                expected[new] = max(expected.get(new, 0.0), jaccard)
    assert {r["doc_id"] for r in rows} == late_ids
    got = {r["doc_id"]: r["exact_jaccard"] for r in rows if r["is_duplicate"]}
    assert set(got) == set(expected)
    for doc_id, jaccard in got.items():
        assert jaccard == pytest.approx(expected[doc_id])
    assert all(r["matched_cluster_id"] for r in rows if r["is_duplicate"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.integers(0, 30),
    group=st.integers(1, 7),
    keep=st.lists(st.booleans(), min_size=30, max_size=30),
    new_keys=st.lists(st.integers(0, 200), max_size=12, unique=True),
    reordered=st.lists(st.tuples(st.integers(0, 29), st.integers(2, 12), st.randoms()), max_size=2),
)
def test_splice_keeps_the_stored_order_across_row_groups(tmp_path_factory, rows, group, keep, new_keys, reordered):
    """deduped_documents' splice (representatives.splice_parts, then parquet_splice.rewrite): kept rows
    of an old file written in row groups of `group` rows, new rows put in at their keys, and the
    keys of some runs of old rows shuffled among themselves (a documents file written again with
    its rows in another order); the rewritten file holds the merge by key, in order."""
    from webdedup_assets.engine.incremental.representatives import splice_parts
    from webdedup_assets.storage import parquet_splice

    folder = tmp_path_factory.mktemp("splice")
    path, target = folder / "old.parquet", folder / "new.parquet"
    keys = [k * 7 for k in range(rows)]  # the old rows' keys, ascending
    schema = pa.schema([("key", pa.int64()), ("body", pa.string())])
    options = parquet_splice.layout(schema, "body")
    old = pa.table({"key": keys, "body": [f"old-{k}" for k in keys]}, schema=schema)
    pq.write_table(old, path, row_group_size=group, **options)
    for begin, length, shuffle in reordered:  # the rows' keys now: a run of them shuffled
        run = keys[begin : begin + length]
        shuffle.shuffle(run)
        keys[begin : begin + length] = run
    kept_rows = np.array([i for i in range(rows) if keep[i]], np.int64)
    kept_keys = np.array([keys[i] for i in kept_rows], np.int64)
    new_keys = np.array(sorted(k * 7 + 3 for k in new_keys), np.int64)  # never equal to an old key
    new = pa.table({"key": new_keys, "body": [f"new-{k}" for k in new_keys]}, schema=schema)
    given = [new.slice(i, 2) for i in range(0, new.num_rows, 2)]  # read as they are taken, two rows at a time
    parts = splice_parts(pq.ParquetFile(path), schema, kept_rows, kept_keys, given, new_keys)
    written, _ = parquet_splice.rewrite(path, target, schema, "body", parts, options)
    out = pq.read_table(target)
    # an old row's body names the key it was written with; its place follows its key now
    expected = sorted(
        [(keys[i], f"old-{i * 7}") for i in kept_rows.tolist()] + [(int(k), f"new-{k}") for k in new_keys]
    )
    assert written == len(expected)
    assert list(zip(out["body"].to_pylist())) == [(body,) for _, body in expected]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(0, 25), min_size=1, max_size=3),
    group=st.integers(1, 6),
    picks=st.lists(st.integers(0, 74), max_size=20),
)
def test_fetch_rows_reads_the_wanted_rows(tmp_path_factory, sizes, group, picks):
    """storage.rows.fetch_rows over files of small row groups, reading every file or only those
    holding a wanted row: exactly the wanted documents; a column only the first file has comes
    back NULL for the others' rows."""
    from webdedup_assets.storage import rows as layout

    folder = tmp_path_factory.mktemp("fetch")
    files, ids = [], []
    for f, size in enumerate(sizes):
        names = [f"d{f}-{i:02d}" for i in range(size)]
        path = folder / f"part-{f}.parquet"
        columns = {"doc_id": names, "body": [n + "!" for n in names]}
        if f == 0:
            columns["lang"] = ["en"] * size
        pq.write_table(pa.table(columns), path, row_group_size=group)
        files.append(path)
        ids += names
    wanted = sorted({ids[p] for p in picks if p < len(ids)})
    con = connect()
    con.register("wanted_arrow", pa.table({"doc_id": pa.array(wanted, pa.string())}))
    con.execute("CREATE TEMP TABLE wanted AS SELECT * FROM wanted_arrow")
    expected = [(w, w + "!", "en" if w.startswith("d0-") else None) for w in wanted]
    for in_few_files in (False, True):
        got = layout.fetch_rows(con, files, "wanted", ["doc_id", "body", "lang"], in_few_files=in_few_files)
        found = sorted(zip(*(got.column(c).to_pylist() for c in ("doc_id", "body", "lang")))) if got else []
        assert found == expected, in_few_files
    con.close()


def test_the_state_takes_the_bucket_figures_the_candidates_stage_kept_for_its_own_file(tmp_path):
    """A full run's state holds the figures and largest buckets the candidates stage kept beside
    the candidate_pairs file it wrote; once that file is replaced (another engine, a rerun) or the
    hot size differs, they are not taken."""
    import os

    from webdedup_assets.cli.main import main
    from webdedup_assets.engine.stages.candidates import COLLISION_TOP_FILE, kept_bucket_summary, kept_dir
    from webdedup_assets.storage.store import Store

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "documents.csv"
    assert (
        main(["run", str(fixture), "--output", str(tmp_path / "out"), "--storage", str(tmp_path / "st"), "--quiet"])
        == 0
    )
    store = Store(tmp_path / "st")
    state = json.loads((tmp_path / "st" / "incremental" / "state.json").read_text())
    kept = kept_bucket_summary(store, 1000)
    assert kept == state["figures"] and kept["collision_buckets"] == 156 and kept["max_bucket_size"] == 3
    top = pq.read_table(kept_dir(store) / COLLISION_TOP_FILE)
    assert top.equals(pq.read_table(tmp_path / "st" / "incremental" / COLLISION_TOP_FILE))
    assert top.num_rows == 156 and top.column_names == ["band_index", "band_hash", "size", "doc_ids"]
    assert kept_bucket_summary(store, 999) is None
    data = store.path("candidate_pairs")
    shutil.copyfile(data, tmp_path / "copy.parquet")
    os.replace(tmp_path / "copy.parquet", data)  # the same rows in a new file
    assert kept_bucket_summary(store, 1000) is None


# ---- stored order: days added one by one are stored as one run of all of them stores them -----


def _published_equal(a: Path, b: Path) -> None:
    """Every published CSV byte for byte, every Parquet output row for row in its stored order."""
    names = sorted(p.name for p in a.iterdir() if p.suffix in (".csv", ".parquet"))
    assert names == sorted(p.name for p in b.iterdir() if p.suffix in (".csv", ".parquet"))
    for name in names:
        if name.endswith(".csv"):
            assert (a / name).read_bytes() == (b / name).read_bytes(), name
        else:
            assert pq.read_table(a / name).equals(pq.read_table(b / name)), name


def _fixture_by_day(folder: Path, suffix: str = ".csv") -> list[Path]:
    from .test_documents_adopt import contract_table, fixture_rows

    folder.mkdir(parents=True)
    days: dict[str, list[dict]] = {}
    for row in fixture_rows():
        days.setdefault(row["crawled_at"], []).append(row)
    paths = []
    for day, rows in sorted(days.items()):
        path = folder / f"{day}{suffix}"
        if suffix == ".csv":
            with open(path, "w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
        else:
            pq.write_table(contract_table(rows), path)
        paths.append(path)
    return paths


def test_daily_csv_files_added_one_by_one_are_stored_in_the_order_of_one_run(tmp_path):
    """In order, and with the last day added first."""
    from webdedup_assets.cli.main import main

    days = _fixture_by_day(tmp_path / "days")
    assert main(["run", str(tmp_path / "days"), "--output", str(tmp_path / "ran"), "--quiet"]) == 0
    for name, order in (("in_order", days), ("last_first", [days[-1], *days[:-1]])):
        for day in order:
            assert main(["add", str(day), "--output", str(tmp_path / name), "--quiet"]) == 0
        _published_equal(tmp_path / name, tmp_path / "ran")
        stored = sorted(p.name for p in (tmp_path / name / "_storage" / "documents").glob("part-*.parquet"))
        assert stored == [f"part-2026-03.{day.stem}.parquet" for day in days], name


def test_a_run_then_an_add_of_an_adopted_daily_export_is_stored_as_one_run_of_both(tmp_path):
    """The run's month file gets company (an export adopted as it is): both are segments named by
    their first day, in the run of both as well."""
    from webdedup_assets.cli.main import main

    from .test_documents_adopt import contract_table, fixture_rows

    rows = fixture_rows()
    early, late = (
        [r for r in rows if r["crawled_at"] <= "2026-03-11"],
        [r for r in rows if r["crawled_at"] > "2026-03-11"],
    )
    both = tmp_path / "both"
    both.mkdir()
    with open(both / "early.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(early)
    pq.write_table(contract_table(late), both / "late.parquet")
    assert main(["run", str(both / "early.csv"), "--output", str(tmp_path / "added"), "--quiet"]) == 0
    assert main(["add", str(both / "late.parquet"), "--output", str(tmp_path / "added"), "--quiet"]) == 0
    assert main(["run", str(both), "--output", str(tmp_path / "ran"), "--quiet"]) == 0
    _published_equal(tmp_path / "added", tmp_path / "ran")
    for out in ("added", "ran"):
        stored = sorted(p.name for p in (tmp_path / out / "_storage" / "documents").glob("part-*.parquet"))
        assert stored == ["part-2026-03.2026-03-01.parquet", "part-2026-03.2026-03-12.parquet"], out


def test_an_add_without_storage_extends_the_corpus_its_output_was_published_from(tmp_path, capsys):
    """The output's manifest names its storage root: an add that forgets --storage extends that
    corpus (it started a new one-day corpus in OUTPUT/_storage and republished it over the
    output: 992 published documents became 340), and the reading commands find it too."""
    from tests.conftest import FIXTURE
    from webdedup_assets.cli.main import main

    early, late = _split_fixture(tmp_path)
    out, storage = tmp_path / "out", tmp_path / "elsewhere"
    assert main(["run", str(early), "--output", str(out), "--storage", str(storage), "--quiet"]) == 0
    assert main(["add", str(late), "--output", str(out), "--quiet"]) == 0
    assert not (out / "_storage").exists()
    assert json.loads((out / "manifest.json").read_text())["counts"]["documents"] == 24
    assert main(["run", str(FIXTURE), "--output", str(tmp_path / "one"), "--quiet"]) == 0
    _published_equal(out, tmp_path / "one")
    capsys.readouterr()
    assert main(["verify", "--output", str(out), "--quiet"]) == 0
    assert main(["inspect", "billing-mirror", "--output", str(out)]) == 0
    assert "billing-mirror" in capsys.readouterr().out
    assert main(["check", str(late), "--against", str(out), "--quiet"]) == 0
    assert pq.read_metadata(out / "check.parquet").num_rows == len(late.read_text().splitlines()) - 1


def test_an_output_folder_given_another_storage_is_then_read_and_extended_there(tmp_path, capsys):
    """An output folder reused with another --storage while OUTPUT/_storage still holds an older
    corpus: the commands without --storage followed OUTPUT/_storage (the add published the older
    corpus with the day over the published one, check compared with the older corpus); they follow
    the storage the manifest names."""
    from tests.conftest import FIXTURE
    from webdedup_assets.cli.main import main

    early, late = _split_fixture(tmp_path)
    out, storage = tmp_path / "out", tmp_path / "elsewhere"
    assert main(["run", str(late), "--output", str(out), "--quiet"]) == 0  # an older corpus in out/_storage
    assert main(["run", str(early), "--output", str(out), "--storage", str(storage), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["check", str(early), "--against", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["held_doc_ids"]["count"] == len(early.read_text().splitlines()) - 1
    assert main(["add", str(late), "--output", str(out), "--quiet"]) == 0
    assert json.loads((out / "manifest.json").read_text())["storage_root"] == str(storage)
    assert main(["run", str(FIXTURE), "--output", str(tmp_path / "one"), "--quiet"]) == 0
    _published_equal(out, tmp_path / "one")


def test_a_moved_or_copied_corpus_is_still_updated_incrementally(tmp_path, capsys):
    """The state named the global files by their paths and inodes: a corpus folder moved (or copied
    with its times, a backup restored) made the next add a full rebuild, saying a global file
    had been rewritten."""
    import shutil

    from tests.conftest import FIXTURE
    from webdedup_assets.cli.main import main

    early, late = _split_fixture(tmp_path)
    assert main(["run", str(early), "--output", str(tmp_path / "out"), "--quiet"]) == 0
    shutil.move(tmp_path / "out", tmp_path / "moved")
    shutil.copytree(tmp_path / "moved", tmp_path / "copy")  # (copy2: the files' times kept)
    assert main(["run", str(FIXTURE), "--output", str(tmp_path / "one"), "--quiet"]) == 0
    for out in ("moved", "copy"):
        capsys.readouterr()
        assert main(["add", str(late), "--output", str(tmp_path / out), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["mode"] == "incremental", out
        _published_equal(tmp_path / out, tmp_path / "one")


def test_a_middle_day_added_or_a_held_day_added_again_is_stored_in_the_order_of_one_run(tmp_path):
    """A day that falls between held days of its month (and a held day given again) takes its
    place among them, as one run of all the days stores it: the published outputs are those of
    that run, row for row."""
    from webdedup_assets.cli.main import main

    days = _fixture_by_day(tmp_path / "days")
    middle = days[len(days) // 2]
    assert main(["run", str(tmp_path / "days"), "--output", str(tmp_path / "ran"), "--quiet"]) == 0
    others = tmp_path / "others"
    others.mkdir()
    for day in days:
        if day != middle:
            (others / day.name).write_bytes(day.read_bytes())
    assert main(["run", str(others), "--output", str(tmp_path / "middle"), "--quiet"]) == 0
    assert main(["add", str(middle), "--output", str(tmp_path / "middle"), "--quiet"]) == 0
    _published_equal(tmp_path / "middle", tmp_path / "ran")
    assert main(["run", str(tmp_path / "days"), "--output", str(tmp_path / "again"), "--quiet"]) == 0
    assert main(["add", str(middle), "--output", str(tmp_path / "again"), "--quiet"]) == 0
    _published_equal(tmp_path / "again", tmp_path / "ran")


def test_the_manifest_of_an_add_times_the_global_stages_it_updated(tmp_path, capsys):
    """Each global stage's seconds are those of the update's steps that wrote it (they were 0.0)."""
    from webdedup_assets.cli.main import main

    days = _fixture_by_day(tmp_path / "days")
    out = tmp_path / "out"
    for day in days[:-1]:
        assert main(["add", str(day), "--output", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["add", str(days[-1]), "--output", str(out), "--json"]) == 0
    update = json.loads(capsys.readouterr().out)["seconds"]
    timings = json.loads((out / "manifest.json").read_text())["timings_seconds"]
    assert timings["scored_pairs"] == update["scoring"] > 0
    assert timings["duplicate_pairs"] == update["duplicates"] > 0
    assert timings["clusters"] == update["clusters"] > 0
    assert timings["candidate_pairs"] == pytest.approx(update["body_index"] + update["changes"] + update["candidates"])
    steps = ("representatives", "deduped_documents", "cluster_inspection", "diagnostics")
    assert timings["deduped_documents"] == pytest.approx(sum(update[s] for s in steps))


def test_check_names_the_nearest_corpus_page_of_a_page_that_is_no_duplicate(tmp_path, capsys):
    """matched_* stay for duplicates; nearest_doc_id names the best candidate whatever the verdict."""
    from webdedup_assets.cli.main import main

    from .conftest import FIXTURE
    from .test_documents_adopt import fixture_rows

    rows = fixture_rows()
    out = tmp_path / "out"
    assert main(["run", str(FIXTURE), "--output", str(out), "--quiet"]) == 0
    half = rows[1]["body"].split()
    same_body = min(r["doc_id"] for r in rows if r["body"] == rows[1]["body"])
    new = tmp_path / "new.csv"
    with open(new, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        page = {"source": "s", "domain": "new.example", "crawled_at": "2026-04-01", "title": "t"}
        writer.writerow({**page, "doc_id": "unrelated", "body": "tomatoes want sun and water in the spring garden"})
        writer.writerow({**page, "doc_id": "copy", "body": rows[0]["body"]})
        writer.writerow({**page, "doc_id": "half", "body": " ".join(half[: len(half) // 2])})
    assert main(["check", str(new), "--against", str(out), "--quiet"]) == 0
    found = {r["doc_id"]: r for r in pq.read_table(out / "check.parquet").to_pylist()}
    assert found["unrelated"]["nearest_doc_id"] is None and found["unrelated"]["candidates"] == 0
    assert found["copy"]["is_duplicate"] and found["copy"]["nearest_doc_id"] == found["copy"]["matched_doc_id"]
    half_row = found["half"]
    assert not half_row["is_duplicate"] and half_row["matched_doc_id"] is None and half_row["candidates"] > 0
    assert half_row["nearest_doc_id"] == same_body and 0.3 < half_row["exact_jaccard"] < 0.7
