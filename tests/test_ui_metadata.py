"""What the UI shows of a run matches the stored data: column schemas, one numeric entry per
figure, the charts (inline PNG images) and their numbers, and asset checks with actual and
expected as numbers (issue 14, "What the Dagster UI shows")."""

from __future__ import annotations

import base64
import re

import duckdb
import pyarrow.parquet as pq
import pytest

from .conftest import run_job


@pytest.fixture(scope="module")
def fixture_metadata(tmp_path_factory):
    result, store = run_job(tmp_path_factory.mktemp("ui-metadata"))
    assert result.success
    materialized = {
        e.asset_key.to_user_string(): e.event_specific_data.materialization.metadata
        for e in result.all_events
        if e.event_type_value == "ASSET_MATERIALIZATION"
    }
    checks = {
        e.event_specific_data.check_name: e.event_specific_data.metadata
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }
    return materialized, checks, store


def _png(markdown: str) -> bytes:
    found = re.fullmatch(r"!\[[^\]]*\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", markdown)
    assert found, markdown[:80]
    return base64.b64decode(found.group(1))


def test_every_asset_declares_its_stored_columns(fixture_metadata):
    materialized, _, store = fixture_metadata
    for asset in (
        "documents",
        "fingerprinted",
        "band_memberships",
        "candidate_pairs",
        "scored_pairs",
        "duplicate_pairs",
        "clusters",
        "deduped_documents",
    ):
        schema = materialized[asset]["dagster/column_schema"].value
        stored = pq.read_schema(store.files(asset)[0])
        assert [c.name for c in schema.columns] == stored.names, asset
        assert [c.type for c in schema.columns] == [str(f.type) for f in stored], asset
        undescribed = [c.name for c in schema.columns if not c.description]
        assert not undescribed, (asset, undescribed)
        # the input contract's columns have their own meaning, not the carried-through sentence
        assert not [c.name for c in schema.columns if "carried through unchanged" in c.description], asset
    descriptions = {c.name: c.description for c in materialized["scored_pairs"]["dagster/column_schema"].value.columns}
    assert descriptions["exact_jaccard"].startswith("Exact Jaccard similarity of the two shingle sets")


def test_an_extra_input_column_is_described_as_carried_through():
    from webdedup_assets.defs.columns import table_schema

    [extra, known] = table_schema("documents", [("lang", "string"), ("doc_id", "string")]).columns
    assert extra.description == "Field `lang` of the input, carried through unchanged."
    assert known.description.startswith("Document id")


def test_documents_parameters_list_only_what_applies_to_a_csv_input(fixture_metadata):
    materialized, _, _ = fixture_metadata
    parameters = materialized["documents"]["parameters"].value
    assert parameters["input_format"] == "auto" and parameters["id_column"] == "doc_id"
    assert parameters["input_path"].endswith("documents.csv")
    assert not [k for k in parameters if k.startswith(("cc_", "warc_"))], sorted(parameters)


def test_input_parameters_keep_the_warc_options_for_a_warc_input(tmp_path):
    from webdedup_assets.defs.assets import input_parameters
    from webdedup_assets.defs.config import DocumentsConfig

    warc = tmp_path / "crawl.warc.gz"
    warc.write_bytes(b"")
    kept = input_parameters(DocumentsConfig(input_path=str(warc)).model_dump())
    assert set(kept) == {"input_path", "input_format", "warc_max_record_bytes", "warc_workers"}


def test_scored_pairs_shows_the_jaccard_histogram_and_the_s_curve(fixture_metadata):
    materialized, _, store = fixture_metadata
    scored = materialized["scored_pairs"]
    assert _png(scored["jaccard_histogram"].value).startswith(b"\x89PNG\r\n\x1a\n")
    assert _png(scored["s_curve"].value).startswith(b"\x89PNG\r\n\x1a\n")
    counts = [line.split("|")[1:3] for line in scored["jaccard_counts"].value.splitlines()[2:]]
    assert len(counts) == 20 and sum(int(n) for _, n in counts) == 18
    [(stored,)] = duckdb.sql(
        f"SELECT count(*) FROM {store.scan_sql('scored_pairs')} WHERE exact_jaccard >= 0.95"
    ).fetchall()
    assert int(counts[-1][1]) == stored  # the top bin: [0.95, 1.0]
    assert scored["candidate_probability_at_threshold"].value == pytest.approx(0.991639, abs=1e-6)


def test_every_chart_has_its_numbers_in_a_table_the_ui_shows_inline(fixture_metadata):
    """A PNG chart is too long for the UI to show inline (it opens on a click); beside each, a
    Markdown table of its numbers short enough to be shown inline."""
    from webdedup_assets.defs.assets import INLINE_MARKDOWN_CHARS

    materialized, _, _ = fixture_metadata
    pairs = {
        "scored_pairs": [("jaccard_histogram", "jaccard_counts"), ("s_curve", "candidate_probability")],
        "clusters": [("cluster_sizes", "cluster_size_counts")],
        "manifest": [("s_curve", "candidate_probability")],
    }
    for asset, charts in pairs.items():
        for chart, numbers in charts:
            assert len(materialized[asset][chart].value) >= INLINE_MARKDOWN_CHARS, (asset, chart)
            table = materialized[asset][numbers].value
            assert len(table) < INLINE_MARKDOWN_CHARS and table.startswith("| "), (asset, numbers)
    lines = materialized["manifest"]["candidate_probability"].value.splitlines()[2:]
    curve = {float(j): float(p) for j, p in (line.split("|")[1:3] for line in lines)}
    assert curve[0.7] == 0.9916  # the threshold's row: P(candidate) at 26 bands x 5 rows
    assert curve[0.3] < 0.1 and curve[0.95] == 1.0


def test_clusters_show_their_size_distribution(fixture_metadata):
    materialized, _, store = fixture_metadata
    clusters = materialized["clusters"]
    assert _png(clusters["cluster_sizes"].value).startswith(b"\x89PNG")
    rows = [line.split("|")[1:3] for line in clusters["cluster_size_counts"].value.splitlines()[2:]]
    sizes = {int(size): int(n) for size, n in rows}
    stored = dict(
        duckdb.sql(
            f"SELECT cluster_size, count(DISTINCT cluster_id) FROM {store.scan_sql('clusters')} GROUP BY 1"
        ).fetchall()
    )
    assert sizes == stored and sum(sizes.values()) == 12
    assert clusters["clusters"].value == 12 and clusters["duplicate_clusters"].value == 6  # numbers, plotted


def test_each_figure_is_its_own_number_and_checks_carry_actual_and_expected(fixture_metadata):
    materialized, checks, _ = fixture_metadata
    manifest = materialized["manifest"]
    assert manifest["counts/candidate_pairs"].value == 18
    assert manifest["counts/representatives"].value == 12
    assert manifest["counts/retained_ratio"].value == pytest.approx(0.5)
    assert materialized["duplicate_pairs"]["exact_duplicate_pairs"].value == 6
    expected = checks["candidate_pairs_match_expected_counts"]
    assert expected["candidate_pairs/actual"].value == 18 and expected["candidate_pairs/expected"].value == 18
    assert checks["deduped_documents_match_expected_counts"]["representatives/actual"].value == 12


def test_pair_previews_show_both_titles_and_the_differing_words(fixture_metadata):
    materialized, _, store = fixture_metadata
    table = materialized["duplicate_pairs"]["pairs_side_by_side"].value
    lines = table.splitlines()
    assert lines[0] == "| left | right | jaccard | left title | right title | only in left | only in right |"
    left, right = (cell.strip() for cell in lines[2].split("|")[1:3])
    [(lowest,)] = duckdb.sql(f"SELECT min(exact_jaccard) FROM {store.scan_sql('duplicate_pairs')}").fetchall()
    assert f"{lowest:.4f}" in lines[2]  # the least similar duplicate first
    titles = dict(
        duckdb.sql(
            f"SELECT doc_id, title FROM {store.scan_sql('documents')} WHERE doc_id IN ('{left}', '{right}')"
        ).fetchall()
    )
    cells = [cell.strip() for cell in lines[2].split("|")[1:-1]]
    assert cells[3] == titles[left][:59] or cells[3].startswith(titles[left][:50])
    assert cells[4] == titles[right][:59] or cells[4].startswith(titles[right][:50])
    assert cells[5] != "—" or cells[6] != "—"  # a near duplicate differs in some words


def test_ui_previews_off_leaves_the_charts_and_previews_out_of_the_metadata(tmp_path):
    """With ui_previews off (a throwaway instance no one looks at), the figures, row counts,
    parameters and checks stay, and so do the outputs."""
    from .conftest import FIXTURE, RunEvents, job_config
    from .dagster_runs import execute

    config = job_config(tmp_path / "storage", tmp_path / "output")
    config["resources"]["storage"]["config"]["ui_previews"] = False
    result = RunEvents(execute(str(FIXTURE), config))
    assert result.success
    shown = {"preview", "pairs_side_by_side", "jaccard_histogram", "jaccard_counts", "s_curve", "cluster_sizes"}
    seen = set()
    for event in result.all_events:
        if event.event_type_value == "ASSET_MATERIALIZATION":
            metadata = event.event_specific_data.materialization.metadata
            asset = event.asset_key.to_user_string()
            seen.add(asset)
            if asset in ("manifest", "rejected_records"):  # their previews read no data: kept
                continue
            assert not shown & set(metadata), asset
            assert "dagster/row_count" in metadata and "parameters" in metadata, asset
    assert {"documents", "scored_pairs", "clusters", "deduped_documents", "manifest"} <= seen
    assert any(e.event_type_value == "ASSET_CHECK_EVALUATION" for e in result.all_events)
    assert (tmp_path / "output" / "manifest.json").exists()


def test_the_check_job_names_a_missing_input(fixture_run, tmp_path):
    """The webdedup_check job on an input_path that does not exist fails in one line naming it."""
    import dagster as dg

    from webdedup_assets.defs import defs

    from .conftest import failure_messages

    _, store, _ = fixture_run
    missing = tmp_path / "no-such-crawl" / "new.csv"
    result = defs.resolve_job_def("webdedup_check").execute_in_process(
        run_config={
            "ops": {"checked_documents": {"config": {"input_path": str(missing)}}},
            "resources": {
                "storage": {"config": {"storage_root": str(store.root), "output_dir": str(tmp_path / "out")}}
            },
            "loggers": {"console": {"config": {"log_level": "CRITICAL"}}},
        },
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    assert not result.success
    assert failure_messages(result) == [f"input '{missing}' does not exist"]


def _global_defaults(storage_root) -> dict:
    """The launchpad's defaults of the global job as a freshly loaded code location sees them (a new
    process, as `dagster dev` starts on Reload), for the given storage root."""
    import json
    import os
    import subprocess
    import sys

    from .conftest import REPO

    script = (
        "import json; from webdedup_assets.defs import defs\n"
        "ops = defs.resolve_job_def('webdedup_global').run_config_schema.config_type.fields['ops'].config_type\n"
        "def default(op, field):\n"
        "    return ops.fields[op].config_type.fields['config'].config_type.fields[field].default_value\n"
        "print(json.dumps({'threshold': default('scored_pairs', 'threshold'),\n"
        "    'representative_policy': default('deduped_documents', 'representative_policy')}))\n"
    )
    env = {**os.environ, "WEBDEDUP_STORAGE_ROOT": str(storage_root), "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_launchpad_defaults_are_the_parameters_in_force(tmp_path):
    """After a run at threshold 0.9 (and the oldest-page policy), the definitions loaded again
    offer 0.9 and that policy as the launchpad's defaults; an empty storage offers the model's."""
    result, store = run_job(tmp_path, threshold=0.9, representative_policy="oldest")
    assert result.success
    assert _global_defaults(store.root) == {"threshold": 0.9, "representative_policy": "oldest"}
    assert _global_defaults(tmp_path / "empty") == {"threshold": 0.7, "representative_policy": "newest"}


def test_simhash_shows_p_candidate_by_hamming_distance_not_an_s_curve(tmp_path):
    """A SimHash run has no bands: band_memberships and scored_pairs show P(candidate) by the
    Hamming distance of two fingerprints (1 within max_hamming), and no MinHash S-curve."""
    result, _ = run_job(tmp_path, fingerprint_method="simhash")
    assert not any(e.event_type_value == "STEP_FAILURE" for e in result.all_events)
    materialized = {
        e.asset_key.to_user_string(): e.event_specific_data.materialization.metadata
        for e in result.all_events
        if e.event_type_value == "ASSET_MATERIALIZATION"
    }
    for asset in ("band_memberships", "scored_pairs"):
        table = materialized[asset]["candidate_probability"].value.splitlines()
        assert table[0].split("|")[1:3] == [" hamming distance ", " P(candidate) "], asset
        rows = [[cell.strip() for cell in line.split("|")[1:3]] for line in table[2:]]
        assert rows[:5] == [["0", "1.0000"], ["1", "1.0000"], ["2", "1.0000"], ["3", "1.0000"], ["4", "0.8969"]], asset
        assert float(rows[-1][1]) >= 0.001 and len(rows) < 64, asset
    assert "s_curve" not in materialized["scored_pairs"] and "s_curve" not in materialized["manifest"]
    assert "candidate_probability_at_threshold" not in materialized["scored_pairs"]
    assert "candidate_probability_at_threshold" not in materialized["duplicate_pairs"]
