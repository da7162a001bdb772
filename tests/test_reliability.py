"""Issue 27: a damaged storage is named, not a traceback; `webdedup verify`; paths that are files;
CSV cells a spreadsheet would run; the full rebuild's report (docs/reliability.md lists them)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from webdedup_assets.cli.main import main

from .conftest import FIXTURE

HEADER = ["doc_id", "source", "domain", "crawled_at", "title", "body"]
REBUILD_CORPUS = "rebuild the storage with `webdedup run` over the corpus' whole input"
REBUILD_DERIVED = "it is derived from the other files: `webdedup add --full-rebuild` rebuilds it"


def _csv(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=HEADER)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _later_day(path: Path) -> Path:
    """Two copies of fixture pages on a day of another month, under new doc_ids."""
    with open(FIXTURE, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))[:2]
    return _csv(path, [{**r, "doc_id": "later-" + r["doc_id"], "crawled_at": "2026-04-02"} for r in rows])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    """A corpus built by `add` (the fixture, then a later day): incremental state, snapshot and
    body index included. Tests copy it (copies, not hard links: a damaged copy is the only one)."""
    folder = tmp_path_factory.mktemp("corpus")
    later = _later_day(folder / "later.csv")
    assert main(["add", str(FIXTURE), "--output", str(folder / "out")]) == 0
    assert main(["add", str(later), "--output", str(folder / "out")]) == 0
    return folder / "out", later


def _copy(corpus: tuple[Path, Path], tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(corpus[0], out)
    return out


def _cut_short(path: Path, keep: int = 300) -> None:
    path.write_bytes(path.read_bytes()[:keep])


DAMAGES = {
    "documents_part": ("documents/part-2026-03.parquet", _cut_short),
    "snapshot_part": ("incremental/snapshot/documents/part-2026-03.parquet", _cut_short),
    "state_json": ("incremental/state.json", lambda p: p.write_text('{"format": 1, "days": [')),
}
PROBLEMS = {
    "documents_part": f"no Parquet footer at its end (300 bytes): cut short or overwritten; {REBUILD_CORPUS}",
    "snapshot_part": f"no Parquet footer at its end (300 bytes): cut short or overwritten; {REBUILD_DERIVED}",
    "state_json": f"not valid JSON (Expecting value: line 1 column 24 (char 23)); {REBUILD_DERIVED}",
}
# what reads each damaged file: a snapshot is read only by an incremental add, state.json also by check
READERS = {
    "documents_part": ["add", "add_full", "check", "explain", "inspect", "evaluate"],
    "snapshot_part": ["add"],
    "state_json": ["add", "check"],
}


def _command(name: str, out: Path, later: Path) -> list[str]:
    return {
        "add": ["add", str(later), "--output", str(out)],
        "add_full": ["add", str(later), "--output", str(out), "--full-rebuild"],
        "check": ["check", str(later), "--against", str(out / "_storage"), "--report", str(out.parent / "c.parquet")],
        "explain": ["explain", "billing-canonical", "billing-mirror", "--output", str(out)],
        "inspect": ["inspect", "billing-canonical", "--output", str(out)],
        "evaluate": ["evaluate", "--output", str(out), "--no-plots"],
    }[name]


@pytest.mark.parametrize(
    "damage, command", [(damage, command) for damage, commands in READERS.items() for command in commands]
)
def test_a_damaged_storage_file_is_named_with_its_remedy(corpus, tmp_path, capsys, damage, command):
    out = _copy(corpus, tmp_path)
    relative, spoil = DAMAGES[damage]
    spoil(out / "_storage" / relative)
    capsys.readouterr()
    assert main(_command(command, out, corpus[1])) == 2
    err = capsys.readouterr().err
    # the last line (add shows its stages and says that nothing was changed before it)
    assert (
        err.splitlines()[-1] == f"webdedup: error: damaged storage: {out / '_storage' / relative}: {PROBLEMS[damage]}"
    )
    assert "Traceback" not in err


@pytest.mark.parametrize("damage", ["snapshot_part", "state_json", "body_blocks"])
def test_a_full_rebuild_gets_past_damaged_incremental_files(corpus, tmp_path, capsys, damage):
    out = _copy(corpus, tmp_path)
    if damage == "body_blocks":
        _cut_short(next((out / "_storage" / "incremental" / "bodies").glob("part-2026-03.*.blocks")))
    else:
        relative, spoil = DAMAGES[damage]
        spoil(out / "_storage" / relative)
    assert main(["verify", "--output", str(out)]) == 2
    capsys.readouterr()
    assert main(_command("add_full", out, corpus[1])) == 0
    assert "documents                   26" in capsys.readouterr().out
    assert main(["verify", "--output", str(out)]) == 0
    assert capsys.readouterr().out == ""
    assert main(_command("add", out, corpus[1])) == 0  # and the next update is incremental again
    assert ": nothing changed" in capsys.readouterr().out


def test_verify_names_each_damaged_file_and_output(corpus, tmp_path, capsys):
    out = _copy(corpus, tmp_path)
    assert main(["verify", "--output", str(out)]) == 0
    assert capsys.readouterr() == ("", f"webdedup verify: 0 problem(s) in {out / '_storage'} and {out}\n")
    assert main(["verify", "--storage", str(out / "_storage")]) == 0  # the storage alone
    assert capsys.readouterr().err == f"webdedup verify: 0 problem(s) in {out / '_storage'}\n"
    assert main(["verify", "--output", str(out), "--quiet"]) == 0
    assert capsys.readouterr() == ("", "")
    storage = out / "_storage"
    _cut_short(storage / "documents" / "part-2026-04.parquet")
    (storage / "incremental" / "state.json").write_text("[1, 2")
    blocks = next((storage / "incremental" / "bodies").glob("part-2026-03.*.blocks"))
    _cut_short(blocks, 100)
    with open(out / "clusters.csv", "a", encoding="utf-8") as handle:
        handle.write("extra,row\n")
    (out / "duplicate_pairs.csv").unlink()
    assert main(["verify", "--output", str(out)]) == 2
    captured = capsys.readouterr()
    size = (out / "clusters.csv").stat().st_size
    assert captured.out.splitlines() == [
        f"{storage / 'documents' / 'part-2026-04.parquet'}: no Parquet footer at its end (300 bytes): cut short or "
        f"overwritten; {REBUILD_CORPUS}",
        f"{blocks}: holds 100 bytes, its index points to 4,210: cut short; {REBUILD_DERIVED}",
        f"{storage / 'incremental' / 'state.json'}: not valid JSON (Expecting ',' delimiter: line 1 column 6 "
        f"(char 5)); {REBUILD_DERIVED}",
        f"{out / 'clusters.csv'}: {size:,} bytes, manifest.json lists {size - 10:,}; publish again (`webdedup run`, "
        "or `webdedup add`)",
        f"{out / 'duplicate_pairs.csv'}: listed in manifest.json but missing; publish again (`webdedup run`, or "
        "`webdedup add`)",
    ]
    assert captured.err == f"webdedup verify: 5 problem(s) in {storage} and {out}\n"


def test_verify_compares_the_rows_of_outputs_and_stored_files_with_their_records(corpus, tmp_path, capsys):
    import pyarrow.parquet as pq

    out = _copy(corpus, tmp_path)
    clusters = out / "_storage" / "clusters" / "data.parquet"
    table = pq.read_table(clusters)
    pq.write_table(table.slice(0, 5), clusters)  # a whole file, with fewer rows than its stage wrote
    lines = (out / "clusters.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    (out / "clusters.csv").write_text("".join(lines[:-1]), encoding="utf-8")
    manifest = out / "manifest.json"
    manifest.write_text(
        manifest.read_text().replace(
            f'"clusters.csv": {sum(map(len, lines))}', f'"clusters.csv": {sum(map(len, lines[:-1]))}'
        )
    )
    assert main(["verify", "--output", str(out)]) == 2
    assert capsys.readouterr().out.splitlines() == [
        f"{clusters}: holds 5 rows, stats.json records 26; `webdedup add --full-rebuild` (or `webdedup run` over "
        "the whole input) rebuilds it",
        f"{out / 'clusters.csv'}: 25 rows, manifest.json counts 26 documents; publish again (`webdedup run`, or "
        "`webdedup add`)",
    ]


def test_full_rebuild_reports_the_documents_it_added(tmp_path, capsys):
    later = _later_day(tmp_path / "later.csv")
    assert main(["add", str(FIXTURE), "--output", str(tmp_path / "out")]) == 0
    assert "documents added 24, removed 0;" in capsys.readouterr().out
    assert main(["add", str(later), "--output", str(tmp_path / "out"), "--full-rebuild"]) == 0
    assert "documents added 2, removed 0;" in capsys.readouterr().out


def _folder_commands(corpus: Path, later: Path, spot: Path) -> dict[str, list[str]]:
    return {
        "run_output": ["run", str(FIXTURE), "--output", str(spot), "--quiet"],
        "run_storage": ["run", str(FIXTURE), "--output", str(spot.parent / "o"), "--storage", str(spot), "--quiet"],
        "add_output": ["add", str(later), "--output", str(spot)],
        "check_report": ["check", str(later), "--against", str(corpus / "_storage"), "--report", str(spot / "c.pq")],
        "evaluate_dir": ["evaluate", "--output", str(corpus), "--evaluation-dir", str(spot), "--no-plots"],
        "tune_dir": ["tune", "--output", str(corpus), "--evaluation-dir", str(spot)],
    }


@pytest.mark.parametrize("command", list(_folder_commands(Path(), Path(), Path("x"))))
def test_a_folder_given_as_an_existing_file_is_refused_in_one_line(corpus, tmp_path, capsys, command):
    spot = tmp_path / "a-file"
    spot.write_text("mine\n")
    capsys.readouterr()
    assert main(_folder_commands(corpus[0], corpus[1], spot)[command]) == 2
    assert capsys.readouterr().err == f"webdedup: error: {spot}: cannot be used as a folder: it is an existing file\n"
    assert spot.read_text() == "mine\n"


def test_a_folder_under_a_file_or_that_cannot_be_made_is_refused_in_one_line(corpus, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("mine\n")
    spot = blocker / "evaluation"
    capsys.readouterr()
    assert main(["evaluate", "--output", str(corpus[0]), "--evaluation-dir", str(spot), "--no-plots"]) == 2
    assert capsys.readouterr().err == (
        f"webdedup: error: {spot}: cannot be used as a folder: {blocker} is an existing file\n"
    )
    too_long = tmp_path / ("x" * 300)
    assert main(["evaluate", "--output", str(corpus[0]), "--evaluation-dir", str(too_long), "--no-plots"]) == 2
    assert capsys.readouterr().err == f"webdedup: error: {too_long}: cannot create this folder (File name too long)\n"


def _identical_pages(path: Path, count: int, words: int = 24, day: str = "2026-03-01") -> Path:
    body = " ".join(f"word{i}" for i in range(words))
    return _csv(
        path,
        [
            {
                "doc_id": f"same-{i:05d}",
                "source": "s",
                "domain": f"d{i}.example",
                "crawled_at": day,
                "title": "t",
                "body": body,
            }
            for i in range(count)
        ],
    )


def test_evaluate_refuses_an_exact_reference_over_its_pair_budget(tmp_path, capsys):
    pages = _identical_pages(tmp_path / "same.csv", 200)  # 24 words: 20 shingles, a prefix of 11 at J >= 0.5
    assert main(["add", str(pages), "--output", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    evaluate = ["evaluate", "--output", str(tmp_path / "out"), "--no-plots", "--json"]
    assert main([*evaluate, "--max-pair-slots", "200000"]) == 2
    assert capsys.readouterr().err == (
        "webdedup: error: the exact reference would verify 218,900 pair slots, over the budget of 200,000 "
        "(--max-pair-slots): 200 documents share a shingle of their prefix (a cluster of identical or nearly "
        "identical pages); give --sample N, or raise --max-pair-slots\n"
    )
    assert main([*evaluate, "--max-pair-slots", "218900"]) == 0
    assert '"exact_pairs_at_floor": 19900' in capsys.readouterr().out


def test_similarity_join_counts_its_pair_slots_before_joining():
    from webdedup_assets.core.exact import PairBudgetExceeded, similarity_join

    sets = [np.arange(10, dtype=np.uint64)] * 50 + [np.arange(100, 110, dtype=np.uint64)]
    flat, offsets = np.concatenate(sets), np.r_[0, np.cumsum([len(s) for s in sets])].astype(np.int64)
    with pytest.raises(PairBudgetExceeded) as over:
        similarity_join(flat, offsets, 0.5, max_pair_slots=1000)
    assert (over.value.slots, over.value.budget, over.value.most_shared) == (6 * 1225, 1000, 50)
    left, _, _, _ = similarity_join(flat, offsets, 0.5, max_pair_slots=6 * 1225)
    assert len(left) == 1225


def _one_token_pages(path: Path, count: int, vocabulary: int) -> Path:
    rows = [
        {
            "doc_id": f"p{i:05d}",
            "source": "s",
            "domain": f"d{i % 50}.example",
            "crawled_at": "2026-03-01",
            "title": "t",
            "body": f"token{i % vocabulary}",
        }
        for i in range(count)
    ]
    return _csv(path, rows)


def test_the_pair_budget_names_the_hot_bucket_size_that_star_needs(tmp_path, capsys):
    """5,000 one-token pages of 10 tokens: 260 buckets of 500 pages, under the default hot_bucket_size
    (1000), so star linked none of them and its advice was wrong; it now names the size that fits."""
    pages = _one_token_pages(tmp_path / "pages.csv", 5000, 10)
    capsys.readouterr()
    assert main(["add", str(pages), "--output", str(tmp_path / "a"), "--bucket-policy", "star"]) == 2
    error = capsys.readouterr().err.splitlines()[-1]  # after the notices (a new corpus, nothing changed)
    assert error.startswith("webdedup: error: candidate join would create 32,435,000 pair slots, over the budget of ")
    assert error.endswith(  # the parameters named by their flags
        "--bucket-policy='star' links only buckets over --hot-bucket-size (1000) to their first member: set "
        "--bucket-policy='star' with --hot-bucket-size 499, strip the shared boilerplate from the input, or raise "
        "the budget (--max-pair-slots)"
    )
    star = ["--bucket-policy", "star", "--hot-bucket-size", "499"]
    assert main(["add", str(pages), "--output", str(tmp_path / "b"), *star]) == 0
    assert "clusters                    10\n" in capsys.readouterr().out


def test_budget_advice_follows_the_bucket_sizes():
    from webdedup_assets.engine.stages.candidates import BUDGET_PARAMS
    from webdedup_assets.engine.stages.candidates import budget_advice as template
    from webdedup_assets.params import CandidateParams

    def budget_advice(*args) -> str:  # as Dagster shows it: the config fields
        return template(*args).format(**{f"p{i}": name for i, name in enumerate(BUDGET_PARAMS)})

    fail, star = CandidateParams(), CandidateParams(bucket_policy="star", hot_bucket_size=100)
    # one bucket of 5,000 (4,999 star slots) and 100 buckets of 50 (1,225 pairs or 49 star slots each)
    sizes = [(5000, 1), (50, 100)]
    assert budget_advice(sizes, 200_000, fail).startswith("Set bucket_policy='star' to link hot buckets")
    assert "set bucket_policy='star' with hot_bucket_size 49, " in budget_advice(sizes, 100_000, star)
    assert budget_advice(sizes, 9_000, star).startswith("Even bucket_policy='star' with hot_bucket_size 2 exceeds")


def test_a_doc_id_with_a_nul_byte_is_refused_naming_the_file_and_the_id(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = {"source": ["s", "s"], "domain": ["d.example"] * 2, "crawled_at": ["2026-03-01"] * 2, "title": ["t"] * 2}
    pq.write_table(pa.table({"doc_id": ["a\x00b", "c"], **rows, "body": ["one two", "three"]}), tmp_path / "in.parquet")
    csv_input = _csv(tmp_path / "in.csv", [{"doc_id": "a\x00b", **{k: v[0] for k, v in rows.items()}, "body": "x"}])
    for path in (tmp_path / "in.parquet", csv_input):
        capsys.readouterr()
        assert main(["add", str(path), "--output", str(tmp_path / "out"), "--quiet"]) == 2
        assert capsys.readouterr().err.splitlines()[-1] == (  # after the notices (a new corpus, nothing changed)
            f"webdedup: error: {path}: 1 doc_id(s) contain a NUL byte, first: 'a\\x00b'; remove the NUL bytes "
            "from the doc_ids"
        )
    assert not (tmp_path / "out" / "clusters.csv").exists()


def test_csv_outputs_keep_values_a_spreadsheet_would_read_as_formulas(tmp_path, capsys):
    """Decision (docs/reliability.md): the CSV outputs hold the values exactly, as the Parquet ones do;
    a doc_id is a key that must join back to the input, so no quote is prefixed."""
    import pyarrow.parquet as pq

    ids = ["=1+1", "+SUM(A1)", "-2", "@cmd"]
    body = "the same page text of a dozen words or so, shared by every row here"
    rows = [
        {"doc_id": d, "source": "s", "domain": f"=d{i}.example", "crawled_at": "2026-03-01", "title": "t", "body": body}
        for i, d in enumerate(ids)
    ]
    assert main(["add", str(_csv(tmp_path / "in.csv", rows)), "--output", str(tmp_path / "out")]) == 0
    with open(tmp_path / "out" / "clusters.csv", newline="", encoding="utf-8") as handle:
        clusters = list(csv.DictReader(handle))
    assert sorted(r["doc_id"] for r in clusters) == sorted(ids)
    assert {r["cluster_id"] for r in clusters} == {"cluster-+SUM(A1)"}  # the smallest doc_id
    with open(tmp_path / "out" / "duplicate_pairs.csv", newline="", encoding="utf-8") as handle:
        pairs = list(csv.DictReader(handle))
    assert len(pairs) == 6 and {r["left_domain"] for r in pairs} <= {f"=d{i}.example" for i in range(4)}
    assert sorted(pq.read_table(tmp_path / "out" / "fingerprinted.parquet")["doc_id"].to_pylist()) == sorted(ids)


def test_an_add_keeps_the_parameters_the_held_global_assets_were_built_with(tmp_path, capsys):
    """An add after a run keeps the run's parameters (it extends the run's incremental state); without
    a readable state (state.json lost) the full rebuild keeps the held global assets' parameters too,
    where it used the defaults (threshold 0.7 instead of the run's 0.95) without a word."""
    later = _later_day(tmp_path / "later.csv")
    out = tmp_path / "out"
    assert main(["run", str(FIXTURE), "--output", str(out), "--threshold", "0.95", "--quiet"]) == 1  # pinned counts
    held = json.loads((out / "manifest.json").read_text())["counts"]["duplicate_pairs"]
    capsys.readouterr()
    assert main(["add", str(later), "--output", str(out)]) == 0
    assert f"-> {out}: incremental" in capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameters"]["scored_pairs"]["threshold"] == 0.95
    # the identical billing pages (1 pair at 0.95) are 4 with their later copies: 6 pairs (at 0.7, 25 in all)
    assert manifest["counts"]["duplicate_pairs"] == held + 5
    (out / "_storage" / "incremental" / "state.json").write_text("{")
    assert main(["add", str(later), "--output", str(out), "--full-rebuild"]) == 0
    assert json.loads((out / "manifest.json").read_text())["parameters"]["scored_pairs"]["threshold"] == 0.95
