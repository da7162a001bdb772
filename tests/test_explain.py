"""`webdedup explain` and `webdedup inspect` over the fixture run."""

import json

import duckdb
import pytest

from webdedup_assets.cli.main import main
from webdedup_assets.core.minhash import candidate_probability


def _ask(fixture_run, capsys, *argv: str) -> tuple[int, str, str]:
    _, store, output = fixture_run
    code = main([*argv, "--output", str(output), "--storage", str(store.root)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _stored(store, asset: str, where: str) -> list[tuple]:
    return duckdb.sql(f"SELECT * FROM {store.scan_sql(asset)} WHERE {where}").fetchall()


def test_explain_a_near_duplicate_pair_gives_the_stored_jaccard_and_shared_bands(fixture_run, capsys):
    _, store, _ = fixture_run
    code, out, err = _ask(fixture_run, capsys, "explain", "billing-revision", "billing-canonical", "--json")
    assert code == 0, err
    answer = json.loads(out)
    stored = duckdb.sql(
        f"SELECT exact_jaccard, minhash_estimate, reason, shared_bands FROM {store.scan_sql('scored_pairs')} "
        "WHERE left_doc_id = 'billing-canonical' AND right_doc_id = 'billing-revision'"
    ).fetchall()
    assert len(stored) == 1
    jaccard, estimate, reason, bands = stored[0]
    assert answer["left"]["doc_id"] == "billing-canonical"  # stored order: left < right
    assert answer["exact_jaccard"] == pytest.approx(jaccard) and 0.0 < jaccard < 1.0
    assert answer["stored_exact_jaccard"] == pytest.approx(jaccard)
    assert answer["minhash_estimate"] == pytest.approx(estimate)
    assert len(answer["shared_bands"]) == bands > 0
    assert answer["candidate"] and answer["verdict"] == "duplicate" and answer["reason"].startswith(reason)
    assert answer["same_cluster"] and answer["left"]["cluster_id"] == "cluster-billing-canonical"
    assert 0 < answer["shared_shingles"] < answer["left"]["shingle_count"]
    # the one edit of the revision: "the following morning" -> "the next morning"
    assert [(h["left"], h["right"]) for h in answer["diff"]["shown"]] == [("following", "next")]


def test_explain_prints_a_readable_answer(fixture_run, capsys):
    code, out, err = _ask(fixture_run, capsys, "explain", "billing-canonical", "billing-mirror")
    assert code == 0, err
    assert "exact Jaccard         1.0000" in out
    assert "verdict               duplicate: jaccard_and_minhash (exact duplicate)" in out
    assert "normalized words: identical" in out


def test_explain_a_pair_that_never_became_a_candidate_gives_the_probability(fixture_run, capsys):
    _, store, _ = fixture_run
    code, out, err = _ask(fixture_run, capsys, "explain", "billing-canonical", "incident-canonical", "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert not _stored(
        store, "candidate_pairs", "left_doc_id = 'billing-canonical' AND right_doc_id = 'incident-canonical'"
    )
    assert answer["candidate"] is False and answer["shared_bands"] == []
    assert answer["verdict"] == "not a candidate" and "never shared a band" in answer["reason"]
    p = answer["parameters"]
    assert answer["candidate_probability"] == pytest.approx(
        candidate_probability(answer["exact_jaccard"], p["bands"], p["rows"])
    )
    assert answer["exact_jaccard"] < p["threshold"] and not answer["same_cluster"]
    code, out, _ = _ask(fixture_run, capsys, "explain", "billing-canonical", "incident-canonical")
    assert code == 0
    assert f"shared bands          0 of {p['bands']}: never in one LSH bucket" in out
    assert "P(candidate | J)" in out


def test_explain_unknown_doc_id_exits_2_naming_it(fixture_run, capsys):
    code, out, err = _ask(fixture_run, capsys, "explain", "billing-canonical", "no-such-page")
    assert code == 2 and out == ""
    assert "unknown doc_id 'no-such-page'" in err


def test_inspect_names_the_members_the_representative_and_the_winning_key(fixture_run, capsys):
    _, store, _ = fixture_run
    code, out, err = _ask(fixture_run, capsys, "inspect", "billing-revision", "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["cluster_id"] == "cluster-billing-canonical" and answer["size"] == 3
    kept = _stored(store, "deduped_documents", "cluster_id = 'cluster-billing-canonical'")
    assert len(kept) == 1
    representative = "billing-mirror"  # newest crawled_at (2026-03-03) under the default policy
    assert answer["representative"] == representative
    assert answer["policy"] == "newest" and answer["why"]["key"] == "crawled_at"
    members = {m["doc_id"]: m for m in answer["members"]}
    assert set(members) == {"billing-canonical", "billing-mirror", "billing-revision"}
    assert [m["doc_id"] for m in answer["members"]][0] == representative
    assert members["billing-canonical"]["jaccard_to_representative"] == 1.0  # same body as the mirror
    assert 0.0 < members["billing-revision"]["jaccard_to_representative"] < 1.0
    assert members["billing-mirror"]["domain"] == "pages.copycat.example"
    assert members["billing-mirror"]["token_count"] > 0

    code, text, _ = _ask(fixture_run, capsys, "inspect", "cluster-billing-canonical")
    assert code == 0
    assert "cluster-billing-canonical: 3 member(s); representative billing-mirror" in text
    assert "policy newest" in text and "newest: crawled_at" in text


def test_inspect_unknown_id_exits_2(fixture_run, capsys):
    code, out, err = _ask(fixture_run, capsys, "inspect", "cluster-nothing")
    assert code == 2 and out == ""
    assert "'cluster-nothing'" in err


def test_two_long_pages_differing_in_one_word_are_diffed_around_it():
    """The common beginning and end are matched first: a page of 200k words with one word changed
    is diffed in a moment, the change shown where it is."""
    from webdedup_assets.quality.explain import word_diff

    left = [f"w{i % 5000}" for i in range(200_000)]
    right = list(left)
    right[123_456] = "changed"
    diff = word_diff(" ".join(left), " ".join(right))
    assert diff["differing_stretches"] == 1 and diff["compared"] is None
    assert diff["matching_tokens"] == 199_999
    assert diff["shown"] == [
        {"op": "replace", "left_position": 123_456, "right_position": 123_456, "left": "w3456", "right": "changed"}
    ]


def test_the_differing_part_of_two_long_pages_is_compared_up_to_a_bound(monkeypatch):
    from webdedup_assets.quality import explain

    monkeypatch.setattr(explain, "EXACT_DIFF_TOKENS", 1000)
    left = [f"w{i}" for i in range(3000)]
    right = [f"x{i}" if i % 100 == 50 else w for i, w in enumerate(left)]
    diff = explain.word_diff(" ".join(left), " ".join(right))
    assert diff["compared"] == 50 + 500  # from the first difference, 500 words of each page
    assert diff["differing_stretches"] == 5  # at 50, 150, 250, 350, 450
    assert [h["left_position"] for h in diff["shown"]] == [50, 150, 250, 350, 450]


def test_pages_without_a_shingle_have_no_minhash_estimate(tmp_path, capsys):
    pages = tmp_path / "pages.csv"
    pages.write_text(
        "doc_id,domain,crawled_at,body\n"
        "e1,a.example,2026-03-01,\n"
        "e2,b.example,2026-03-01,\n"
        "w1,c.example,2026-03-01,words enough to make a few shingles of three words each\n"
    )
    out = tmp_path / "out"
    assert main(["run", str(pages), "--output", str(out), "--quiet"]) == 0
    capsys.readouterr()
    for other in ("e2", "w1"):
        assert main(["explain", "e1", other, "--output", str(out), "--json"]) == 0
        answer = json.loads(capsys.readouterr().out)
        assert answer["exact_jaccard"] == 0.0 and answer["minhash_estimate"] is None, other


def test_inspect_keeps_its_columns_in_line_with_wide_and_long_ids():
    """CJK ids take two terminal columns a character; an id longer than the header's column
    widens it: every row's domain, date and figures start in the same terminal column."""
    from webdedup_assets.cli.explain import _columns, format_inspect

    members = [
        ("新闻-二〇二六-报道-一", "新华网.example", True, 1.0),
        ("a-very-long-ascii-document-identifier-0001", "mirror.example", False, 0.8123),
        ("ニュース-1", "例え.example", False, 0.75),
    ]
    text = format_inspect(
        {
            "cluster_id": "cluster-新闻",
            "size": 3,
            "members_shown": 3,
            "representative": members[0][0],
            "policy": "newest",
            "order_by": "crawled_at DESC",
            "why": {"text": "newest"},
            "members": [
                {
                    "doc_id": doc_id,
                    "domain": domain,
                    "crawled_at": "2026-03-01",
                    "token_count": 120,
                    "representative": rep,
                    "jaccard_to_representative": jaccard,
                }
                for doc_id, domain, rep, jaccard in members
            ],
        }
    )
    header, *rows = text.splitlines()[3:]
    starts = {_columns(line[: line.index(part)]) for line in rows for part in ("2026-03-01",)}
    assert starts == {_columns(header[: header.index("crawled_at")])}
    domain_starts = {_columns(row[: row.index(domain)]) for row, (_, domain, _, _) in zip(rows, members)}
    assert domain_starts == {_columns(header[: header.index("domain")])}
    assert {_columns(row) for row in rows} == {_columns(header)}
    assert rows[0].startswith("* 新闻-二〇二六-报道-一")
