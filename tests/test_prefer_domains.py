"""--prefer-domains: a listed domain's copy is kept before the representative policy's order.

The case from news-like pages: an article on its publisher's site, a mirror a day later, and an
aggregator's copy two days later with a newsletter block appended. The default policy (newest)
keeps the aggregator's copy; the preference keeps the publisher's, in a run, after an add, and
inspect says why."""

import csv
import json
import random

import pytest

from webdedup_assets.cli.main import main
from webdedup_assets.core.ranking import domain_rank, policy_order_by, preferred_domains

ARTICLES = 5
COLUMNS = ["doc_id", "source", "domain", "crawled_at", "title", "body"]


def _article(n: int) -> str:
    rng = random.Random(n)
    vocabulary = [f"term{i}" for i in range(400)]
    return " ".join(rng.choice(vocabulary) for _ in range(80))


def _rows(days: set[int]) -> list[list[str]]:
    rows = []
    for n in range(ARTICLES):
        body = _article(n)
        copies = [
            (1, f"orig-{n}", "news.example", body),
            (2, f"mirror-{n}", "www.mirror.example", body),
            (3, f"agg-{n}", "agg.example", body + " subscribe to our newsletter for the best stories every morning"),
        ]
        rows += [[i, "s", d, f"2026-03-0{day}", f"t{n}", b] for day, i, d, b in copies if day in days]
    return rows


def _write(path, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        writer.writerows(rows)


def _kept(out) -> set[str]:
    with open(out / "clusters.csv", newline="") as handle:
        clusters = {row["cluster_id"] for row in csv.DictReader(handle)}
    assert len(clusters) == ARTICLES
    with open(out / "removed.csv", newline="") as handle:
        removed = {row["doc_id"] for row in csv.DictReader(handle)}
    all_ids = {f"{kind}-{n}" for kind in ("orig", "mirror", "agg") for n in range(ARTICLES)}
    return all_ids - removed


def _run(tmp_path, name, *flags) -> set[str]:
    _write(tmp_path / "pages.csv", _rows({1, 2, 3}))
    out = tmp_path / name
    assert main(["run", str(tmp_path / "pages.csv"), "--output", str(out), "--quiet", *flags]) == 0
    return _kept(out)


def test_newest_keeps_the_aggregators_copy_and_a_preference_keeps_the_publishers(tmp_path):
    assert _run(tmp_path, "default") == {f"agg-{n}" for n in range(ARTICLES)}
    assert _run(tmp_path, "oldest", "--representative-policy", "oldest") == {f"orig-{n}" for n in range(ARTICLES)}
    preferred = _run(tmp_path, "news", "--prefer-domains", "News.Example")
    assert preferred == {f"orig-{n}" for n in range(ARTICLES)}
    # list order decides between two listed domains; a subdomain counts as its listed domain
    mirrored = _run(tmp_path, "mirror", "--prefer-domains", "mirror.example, news.example")
    assert mirrored == {f"mirror-{n}" for n in range(ARTICLES)}


def test_an_add_keeps_the_held_preference_and_inspect_names_it(tmp_path, capsys):
    _write(tmp_path / "first.csv", _rows({1, 2}))
    _write(tmp_path / "later.csv", _rows({3}))
    out = tmp_path / "out"
    assert (
        main(["run", str(tmp_path / "first.csv"), "--output", str(out), "--quiet", "--prefer-domains", "news.example"])
        == 0
    )
    assert main(["add", str(tmp_path / "later.csv"), "--output", str(out), "--quiet"]) == 0
    assert _kept(out) == {f"orig-{n}" for n in range(ARTICLES)}
    capsys.readouterr()
    assert main(["inspect", "agg-0", "--output", str(out), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["representative"] == "orig-0"
    assert answer["why"]["key"] == "domain"
    assert answer["why"]["text"].startswith("preferred domain: news.example is listed in prefer_domains before")


def test_a_value_that_is_not_a_domain_is_refused_naming_the_flag(tmp_path, capsys):
    _write(tmp_path / "pages.csv", _rows({1}))
    out = tmp_path / "out"
    code = main(["run", str(tmp_path / "pages.csv"), "--output", str(out), "--prefer-domains", "news.example,a b"])
    assert code == 2
    assert (
        capsys.readouterr().err.strip().splitlines()[-1] == "webdedup: error: --prefer-domains 'a b': not a domain name"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("domain", "rank"),
    [("news.example", 0), ("WWW.News.Example", 0), ("mirror.example", 1), ("othernews.example", 2), (None, 2)],
)
def test_domain_rank_matches_a_domain_and_its_subdomains_only(domain, rank):
    domains = preferred_domains(" news.example, mirror.example,,news.example ")
    assert domains == ["news.example", "mirror.example"]
    assert domain_rank(domain, domains) == rank


def test_the_order_without_a_preference_is_the_policys_own():
    assert policy_order_by("newest") == "crawled_at DESC, token_count DESC, doc_id ASC"
    assert policy_order_by("newest", "a.example").startswith(
        "CASE WHEN lower(domain) = 'a.example' OR right(lower(domain), 10) = '.a.example' THEN 0 ELSE 1 END ASC, "
    )
