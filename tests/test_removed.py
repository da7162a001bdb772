"""removed.csv: every removed document, the representative kept in its place, their Jaccard, why."""

import csv

from webdedup_assets.cli.main import main


def _write(path, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["doc_id", "source", "domain", "crawled_at", "title", "body"])
        writer.writerows(rows)


def test_removed_names_the_representative_the_jaccard_and_the_reason(tmp_path):
    words = [f"word{i}" for i in range(60)]
    # a ~ b and b ~ c (Jaccard 0.756 each), a and c only 0.565: a joins c's cluster by chaining
    rows = [
        ["a", "s", "one.example", "2026-03-01", "a", " ".join(words[0:40])],
        ["b", "s", "two.example", "2026-03-02", "b", " ".join(words[5:45])],
        ["c", "s", "three.example", "2026-03-03", "c", " ".join(words[10:50])],
        ["z", "s", "four.example", "2026-03-03", "z", "something else entirely, a page of its own"],
    ]
    _write(tmp_path / "pages.csv", rows)
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "pages.csv"), "--output", str(out), "--quiet"]) in (0, 1)  # cohesion warns
    with open(out / "removed.csv", newline="") as handle:
        removed = {row["doc_id"]: row for row in csv.DictReader(handle)}
    assert set(removed) == {"a", "b"}  # c is the newest: kept; z has no duplicate
    assert removed["b"]["representative"] == "c" and removed["b"]["reason"] == "near duplicate of the representative"
    assert round(float(removed["b"]["jaccard_to_representative"]), 3) == 0.756
    assert removed["a"]["representative"] == "c" and removed["a"]["reason"].startswith("chained")
    assert round(float(removed["a"]["jaccard_to_representative"]), 3) == 0.565
    assert removed["a"]["cluster_id"] == "cluster-a" and removed["a"]["cluster_size"] == "3"
