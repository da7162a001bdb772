import json
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from webdedup_assets.cli.main import main
from webdedup_assets.defs.checks import describe_failure

from .conftest import CLASSIC, FIXTURE


def test_cli_run_prints_the_summary_and_writes_outputs(tmp_path, capsys):
    code = main(["run", str(FIXTURE), "--output", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "candidate_pairs             18" in captured.out
    assert "representatives             12" in captured.out
    assert "retained_ratio              0.5" in captured.out
    assert "fingerprinted      done: 24 rows" in captured.err
    # live progress, as plain lines (stderr is not a terminal here), with the stages' own counts
    assert re.search(r"^  documents +24 docs in [0-9.]+ s", captured.err, re.M), captured.err  # DuckDB query progress
    assert re.search(r"^  fingerprinted +24 docs in [0-9.]+ s, [0-9,]+ docs/s$", captured.err, re.M), captured.err
    assert re.search(r"^  scored_pairs +18 pairs in [0-9.]+ s", captured.err, re.M), captured.err
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["counts"]["duplicate_pairs"] == 18
    assert (tmp_path / "out" / "_storage" / "documents" / "part-2026-03.parquet").exists()


def test_cli_classic_parameters_and_json(tmp_path, capsys):
    code = main(
        [
            "run",
            str(FIXTURE),
            "--output",
            str(tmp_path / "out"),
            "--num-perm",
            str(CLASSIC["num_perm"]),
            "--bands",
            "8",
            "--threshold",
            "0.7",
            "--json",
            "--quiet",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "docs/s" not in captured.err and "pairs in" not in captured.err  # --quiet: no progress
    counts = json.loads(captured.out)
    assert counts["candidate_pairs"] == 18 and counts["representatives"] == 12
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["parameters"]["band_memberships"] == {"bands": 8, "rows": 8}


def test_cli_rejects_bands_that_do_not_divide_num_perm(tmp_path, capsys):
    assert main(["run", str(FIXTURE), "--output", str(tmp_path), "--num-perm", "64", "--bands", "5"]) == 2
    assert "--num-perm 64 is not divisible by --bands 5" in capsys.readouterr().err


def test_cli_over_budget_fails_before_the_join_with_the_message(tmp_path, capsys):
    assert main(["run", str(FIXTURE), "--output", str(tmp_path), "--max-pair-slots", "10", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "error in candidate_pairs" in err
    assert "candidate join would create 382 pair slots, over the budget of 10 (--max-pair-slots)" in err


def test_cli_reports_a_failed_count_check(tmp_path, capsys):
    # a lower threshold on the fixture still gives 18 duplicates; a stricter one breaks the pinned counts
    assert main(["run", str(FIXTURE), "--output", str(tmp_path), "--threshold", "0.95", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "check failed: duplicate_pairs:duplicate_pairs_match_expected_counts" in err


def test_console_script_help():
    proc = subprocess.run(
        [sys.executable, "-m", "webdedup_assets.cli.main", "run", "--help"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0
    for flag in (
        "--shingle-size",
        "--num-perm",
        "--bands",
        "--threshold",
        "--max-pair-slots",
        "--bucket-policy",
        "--representative-policy",
    ):
        assert flag in proc.stdout


@pytest.mark.parametrize(
    "command", ["run", "add", "check", "explain", "inspect", "evaluate", "tune", "verify", "probability"]
)
def test_every_command_takes_quiet(command, capsys):
    with pytest.raises(SystemExit) as ended:
        main([command, "--help"])
    assert ended.value.code == 0
    assert "--quiet" in capsys.readouterr().out


def _drop_from_clusters(monkeypatch, doc_ids):
    """Make the DuckDB engine's clusters stage lose documents, so the blocking check
    every_document_in_one_cluster fails."""
    from webdedup_assets.engine import DUCKDB
    from webdedup_assets.storage.store import read_params, write_table

    real = DUCKDB.stages["clusters"]

    def lossy(run):
        output = real(run)
        path = run.store.path("clusters")
        table = pq.read_table(path)
        keep = pc.invert(pc.is_in(table.column("doc_id"), pa.array(doc_ids)))
        write_table(path, table.filter(keep), read_params(path))
        return output

    monkeypatch.setitem(DUCKDB.stages, "clusters", lossy)


def test_cli_failed_blocking_check_prints_its_whole_message_with_doc_ids(tmp_path, capsys, monkeypatch):
    _drop_from_clusters(monkeypatch, ["notice-02", "notice-01"])
    assert main(["run", str(FIXTURE), "--output", str(tmp_path / "out"), "--quiet"]) == 1
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if "every_document_in_one_cluster" in ln)
    assert line == (
        "webdedup: check failed: clusters:every_document_in_one_cluster: documents without cluster: 2; "
        "first documents without cluster: 'notice-01', 'notice-02'"
    )
    assert "blocking asset check failed with ERROR severity:" not in err  # not Dagster's cut-off summary
    assert "summary" not in capsys.readouterr().out


def test_check_failure_description_lists_figures_and_first_offenders():
    details = {
        "threshold": 0.8,
        "pairs_below_threshold": 2,
        "first_pairs_below_threshold": [["a", "b", 0.5], ["a", "c", 0.7]],
        "pairs_not_ordered": 0,
        "first_pairs_not_ordered": [],
    }
    assert describe_failure(details) == (
        "threshold: 0.8; pairs below threshold: 2; first pairs below threshold: ('a', 'b', 0.5), ('a', 'c', 0.7)"
    )


def test_invariants_name_their_first_offenders(tmp_path):
    from webdedup_assets.engine import Store, invariants
    from webdedup_assets.storage.store import write_table

    store = Store(tmp_path)
    write_table(store.path("documents"), pa.table({"doc_id": ["a", "b", "c", "d"]}), {})
    write_table(
        store.path("duplicate_pairs"),
        pa.table({"left_doc_id": ["a", "c", "b"], "right_doc_id": ["b", "b", "d"], "exact_jaccard": [0.9, 0.5, 0.7]}),
        {"duplicates": {"threshold": 0.8}},
    )
    passed, details = invariants.duplicates_meet_threshold(store)
    assert not passed
    assert details["first_pairs_below_threshold"] == [["b", "d", 0.7], ["c", "b", 0.5]]
    assert details["first_pairs_not_ordered"] == [["c", "b"]]
    write_table(
        store.path("clusters"),
        pa.table({"cluster_id": ["cluster-a", "cluster-a", "cluster-a", "cluster-x"], "doc_id": ["a", "b", "b", "x"]}),
        {},
    )
    passed, details = invariants.every_document_in_one_cluster(store)
    assert not passed
    assert (
        details["documents_without_cluster"],
        details["documents_in_several_clusters"],
        details["clustered_ids_not_in_documents"],
    ) == (2, 1, 1)
    assert details["first_documents_without_cluster"] == ["c", "d"]
    assert details["first_documents_in_several_clusters"] == ["b"]
    assert details["first_clustered_ids_not_in_documents"] == ["x"]
    write_table(
        store.path("deduped_documents"), pa.table({"cluster_id": ["cluster-a", "cluster-a"], "doc_id": ["a", "b"]}), {}
    )
    passed, details = invariants.one_representative_per_cluster(store)
    assert not passed
    assert details["first_clusters_without_representative"] == ["cluster-x"]
    assert details["first_clusters_with_several_representatives"] == [["cluster-a", ["a", "b"]]]


def test_progress_tasks_plain_lines_and_live_bars():
    import io

    from webdedup_assets.cli.progress import stderr_sink
    from webdedup_assets.progress import installed, task

    counted = []
    with installed(None), task("fingerprinted", total=lambda: counted.append(1) or 5, unit="docs") as shown:
        shown.advance(5)
    assert counted == []  # --quiet: nothing is shown and the total is never counted

    plain = io.StringIO()
    with installed(stderr_sink(plain)), task("cc ranges", total=5, unit="ranges") as shown:
        shown.advance(2, failed=0)
        shown.advance(3, failed=1)
    assert re.fullmatch(r"  cc ranges +5 ranges in [0-9.]+ s, [0-9,]+ ranges/s, failed 1\n", plain.getvalue())

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    live = Terminal()
    with installed(stderr_sink(live)), task("fingerprinted", total=4, unit="docs") as shown:
        shown.advance(4)
    assert "fingerprinted" in live.getvalue() and "100%" in live.getvalue()


def test_progress_of_a_warc_file_counts_its_bytes_and_records(tmp_path, capsys):
    from pathlib import Path

    from .test_warc_fixtures import Rec, corpus, write_warc

    recs = corpus()
    path = tmp_path / "a.warc.gz"
    write_warc(path, [Rec("warcinfo", ""), *recs.values()])
    code = main(["run", str(path), "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 0, err
    found = re.search(r"^  warc records +([0-9,]+) B in [0-9.]+ s, [0-9,]+ B/s, records (\d+)$", err, re.M)
    assert found, err
    assert int(found.group(1).replace(",", "")) == Path(path).stat().st_size
    assert int(found.group(2)) == len(recs) + 1

    code = main(["run", str(path), "--output", str(tmp_path / "quiet"), "--quiet"])
    assert code == 0 and "warc records" not in capsys.readouterr().err


def test_progress_outside_the_cli_goes_to_a_log_sink(caplog):
    import logging

    from webdedup_assets import progress
    from webdedup_assets.progress import installed, log_sink, set_default, task

    previous = progress._default  # the Dagster layer's, once webdedup_assets.defs is imported
    logger = logging.getLogger("test.webdedup.progress")
    set_default(log_sink(logger))
    try:
        with caplog.at_level(logging.INFO, logger=logger.name), task("scored_pairs", 3, "pairs") as shown:
            shown.advance(3)
        with installed(None), task("scored_pairs", 3, "pairs") as shown:  # --quiet wins over the default
            shown.advance(3)
    finally:
        set_default(previous)
    lines = [r.getMessage() for r in caplog.records if r.name == logger.name]
    assert len(lines) == 1 and re.fullmatch(r"scored_pairs +3 pairs in [0-9.]+ s, [0-9,]+ pairs/s", lines[0])


def test_run_works_with_dagster_impossible_to_import(tmp_path):
    """The CLI is the plain pipeline (engine.pipeline): it never imports Dagster."""
    script = (
        "import sys; sys.modules['dagster'] = None\n"
        "from webdedup_assets.cli.main import main\n"
        f"status = main(['run', {str(FIXTURE)!r}, '--output', {str(tmp_path / 'out')!r}, '--quiet', '--json'])\n"
        "assert not any(name.startswith('dagster') for name, module in sys.modules.items() if module), 'imported'\n"
        "sys.exit(status)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["representatives"] == 12
    assert pq.read_metadata(tmp_path / "out" / "deduped_documents.parquet").num_rows == 12


def test_the_command_ends_quickly_with_its_outputs_complete_and_its_status(tmp_path):
    """`python -m webdedup_assets.cli.main` ends through cli.entry (no module teardown): the outputs are
    whole, stdout is all there, and the exit status is main()'s, also for a failed check."""
    command = [sys.executable, "-m", "webdedup_assets.cli.main", "run", str(FIXTURE), "--quiet", "--json"]
    proc = subprocess.run([*command, "--output", str(tmp_path / "ok")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    counts = json.loads(proc.stdout)
    assert counts["candidate_pairs"] == 18 and counts["representatives"] == 12
    manifest = json.loads((tmp_path / "ok" / "manifest.json").read_text())
    assert manifest["counts"]["representatives"] == 12
    assert pq.read_metadata(tmp_path / "ok" / "deduped_documents.parquet").num_rows == 12
    strict = [*command, "--output", str(tmp_path / "strict"), "--threshold", "0.95"]
    proc = subprocess.run(strict, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "check failed: duplicate_pairs:duplicate_pairs_match_expected_counts" in proc.stderr
    package = [sys.executable, "-m", "webdedup_assets.cli", "probability", "--bands", "26", "--rows", "5"]
    proc = subprocess.run([*package, "--threshold", "0.7"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "J=0.70  P(candidate)=0.9916  <- threshold" in proc.stdout, proc.stderr


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["run", "in.csv", "--threshold", "abc"],
            "webdedup run: error: argument --threshold: invalid float value: 'abc'",
        ),
        (
            ["frob"],
            "webdedup: error: argument command: invalid choice: 'frob' (choose from 'run', 'probability', "
            "'evaluate', 'tune', 'explain', 'inspect', 'add', 'check', 'verify')",
        ),
    ],
)
def test_a_mistake_on_the_command_line_is_one_line(capsys, argv, line):
    with pytest.raises(SystemExit) as ended:
        main(argv)
    assert ended.value.code == 2
    prog = " ".join(["webdedup", *argv[:1]]) if argv[0] == "run" else "webdedup"
    assert capsys.readouterr().err == f"{line} (see {prog} --help)\n"


def test_a_reader_that_stops_early_ends_the_command_silently(tmp_path):
    """`webdedup inspect ... | head -0`: no BrokenPipeError traceback, status 141 as a writer killed by SIGPIPE."""
    out = tmp_path / "out"
    assert main(["run", str(FIXTURE), "--output", str(out), "--quiet"]) == 0
    command = [sys.executable, "-m", "webdedup_assets.cli.main", "inspect", "billing-canonical", "--output", str(out)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    assert (proc.wait(timeout=120), proc.stderr.read()) == (141, "")


def test_files_of_a_folder_no_format_reads_are_named_and_a_format_absent_from_it_is_told(tmp_path, capsys):
    """A folder of shards with a .ndjson and a .csv.gz among them: 20 of 51 files were read without
    a word; --format parquet on a folder of CSV said the folder held no input file at all."""
    folder = tmp_path / "in"
    (folder / "more").mkdir(parents=True)
    (folder / "pages.csv").write_bytes(FIXTURE.read_bytes())
    (folder / "more" / "shard.ndjson").write_text("{}\n")
    (folder / "more" / "table.csv.gz").write_bytes(b"")
    (folder / "_SUCCESS").write_text("")  # a marker, not input
    assert main(["run", str(folder), "--output", str(tmp_path / "out"), "--quiet"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"webdedup: warning: {folder}: 2 file(s) not read, of suffixes no input format has (shard.ndjson, "
        "table.csv.gz); webdedup reads .csv, .tsv, .parquet, .jsonl (.gz, .zst), .json.gz, .json.zst, .warc, .warc.gz"
    ]
    assert main(["run", str(folder), "--format", "parquet", "--output", str(tmp_path / "o2"), "--quiet"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"webdedup: error: input folder '{folder}' holds no file of --format parquet (1 file(s) of other formats: "
        "--format auto reads each by its suffix)"
    )


def test_add_help_shows_the_values_of_the_corpus_its_output_holds(tmp_path, capsys):
    """An add keeps the held corpus' parameters: its help says which they are, and what giving
    another value does; without a corpus it shows the package's defaults."""
    from webdedup_assets.cli.main import main

    out = tmp_path / "out"
    assert (
        main(["run", str(FIXTURE), "--output", str(out), "--shingle-size", "7", "--threshold", "0.8", "--quiet"]) == 0
    )
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["add", "--help", "--output", str(out)])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "shingle_unit is char. Held corpus: 7; another value is refused." in text
    assert (
        "Exact shingle Jaccard a duplicate pair needs. Held corpus: 0.8; another value rebuilds the global assets."
        in text
    )
    assert "Field holding the document id. Held corpus: doc_id; another value is refused." in text
    assert "Held corpus: (none); another value is refused." in text  # no url column
    assert "Held corpus: false; another value rebuilds the global assets." in text  # a switch, as a user writes it
    with pytest.raises(SystemExit):
        main(["add", "--help", "--output", str(tmp_path / "nothing-here")])
    text = " ".join(capsys.readouterr().out.split())
    assert "Held corpus" not in text and "Exact shingle Jaccard a duplicate pair needs. Default: 0.7" in text
