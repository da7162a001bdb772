"""A labelled evaluation set: web-like pages, each with variants made by known edits, and the
pairs a person would call duplicates (same page) or not.

  python -m benchmarks.gen_labelled --out fixtures/labelled

Writes OUT/documents.csv (the input contract) and OUT/pairs.csv (left_doc_id, right_doc_id,
is_duplicate, edit): every pair within a family (an original page and its variants) with its
label; pairs across families are not duplicates. The text is generated here from sentence
templates and word lists written for this project (seeded, reproducible), so it reads like
news and shop pages without copying any real page.

The rule behind the labels: two pages are duplicates when they carry the same content — an
exact mirror, a copy with navigation/footer boilerplate or a date line added, a copy with a
few words changed (at most 5 %), with paragraphs in another order, or with one short paragraph
appended. They are not duplicates when the content differs: a rewrite (25 % or 45 % of the
words changed), a teaser (only the first paragraph), or a sibling article built from the same
templates on the same topic. An edit of 10-15 % of the words is labelled a duplicate too: a
heavily edited copy of the same page, the hard case that sits near the 0.7 Jaccard rule.
"""

from __future__ import annotations

import argparse
import csv
import random
from datetime import date, timedelta
from pathlib import Path

SUBJECTS = [
    "the city council",
    "a local bakery",
    "the regional railway",
    "our support team",
    "the new library",
    "a small software company",
    "the football club",
    "the weather service",
    "the university hospital",
    "a family-run hotel",
    "the harbour authority",
    "the museum of modern art",
    "the school board",
    "an independent bookshop",
    "the water utility",
    "the cycling association",
    "a neighbourhood cafe",
]
VERBS = [
    "announced",
    "reported",
    "confirmed",
    "postponed",
    "opened",
    "reviewed",
    "expanded",
    "reduced",
    "launched",
    "criticised",
    "approved",
    "celebrated",
    "redesigned",
    "tested",
    "delayed",
    "published",
]
OBJECTS = [
    "a plan for wider pavements",
    "the opening hours for the winter",
    "a discount on annual tickets",
    "the results of the spring survey",
    "a programme for young readers",
    "repairs on the northern bridge",
    "a recall of two kitchen products",
    "new prices for delivery",
    "the timetable for the coming season",
    "a pilot project with electric buses",
    "the renovation of the main hall",
    "a guide for first visitors",
    "support for older customers",
    "a festival in the old town",
    "changes to the parking rules",
    "a partnership with three schools",
    "the menu for the holidays",
    "a study on air quality",
]
CLAUSES = [
    "after months of discussion",
    "despite the cold weather",
    "following complaints from residents",
    "to the surprise of many visitors",
    "as part of a larger budget",
    "according to a short statement",
    "with help from volunteers",
    "before the end of the month",
    "while construction continues nearby",
    "in response to rising costs",
    "for the third year in a row",
    "ahead of the busy summer weeks",
]
DETAILS = [
    "Tickets can be booked online or at the front desk.",
    "A spokesperson said more details will follow.",
    "Residents are invited to a public meeting on Thursday evening.",
    "The change applies to all branches.",
    "Prices include taxes and free returns within thirty days.",
    "Parking is limited, so plan your trip.",
    "Questions can be sent to the information office.",
    "The project is funded by a regional grant.",
    "Children under twelve enter free of charge.",
    "The previous schedule remains valid until Monday.",
    "Several shops in the area have reported higher demand.",
    "An accessible entrance is on the east side.",
]
FILLER = [
    "quickly",
    "mostly",
    "recently",
    "carefully",
    "often",
    "finally",
    "partly",
    "clearly",
    "slowly",
    "new",
    "old",
    "large",
    "small",
    "public",
    "private",
    "local",
    "national",
    "early",
    "late",
    "short",
    "street",
    "market",
    "garden",
    "station",
    "office",
    "river",
    "window",
    "winter",
    "summer",
    "evening",
]
NAV = "Home | News | Shop | Events | About us | Contact | Sign in | Search this site"
FOOTER = "Copyright {year} {site}. All rights reserved. Privacy policy | Cookie settings | Terms of use | Imprint"

DUPLICATE_EDITS = ("mirror", "boilerplate", "dateline", "typos", "reorder", "appended", "heavy_edit")
DISTINCT_EDITS = ("rewrite", "deep_rewrite", "teaser", "sibling")


def sentence(rng: random.Random) -> str:
    text = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(CLAUSES)}."
    text = text[0].upper() + text[1:]
    return text + (" " + rng.choice(DETAILS) if rng.random() < 0.6 else "")


def article(rng: random.Random) -> list[str]:
    return [" ".join(sentence(rng) for _ in range(rng.randint(3, 6))) for _ in range(rng.randint(3, 6))]


def substitute(rng: random.Random, paragraphs: list[str], share: float) -> list[str]:
    """Replace `share` of the words (chosen at random) by filler words."""
    words = [p.split(" ") for p in paragraphs]
    slots = [(i, j) for i, p in enumerate(words) for j in range(len(p))]
    for i, j in rng.sample(slots, max(1, round(share * len(slots)))):
        words[i][j] = rng.choice(FILLER)
    return [" ".join(p) for p in words]


def variant(rng: random.Random, edit: str, paragraphs: list[str], site: str, day: date) -> list[str]:
    if edit == "mirror":
        return list(paragraphs)
    if edit == "boilerplate":
        return [NAV, *paragraphs, FOOTER.format(year=day.year, site=site)]
    if edit == "dateline":
        return [f"Published {day.isoformat()}, updated {(day + timedelta(days=2)).isoformat()}", *paragraphs]
    if edit == "typos":
        return substitute(rng, paragraphs, rng.uniform(0.01, 0.05))
    if edit == "reorder":
        shuffled = list(paragraphs)
        while shuffled == paragraphs:
            rng.shuffle(shuffled)
        return shuffled
    if edit == "appended":
        return [*paragraphs, "Update: " + sentence(rng)]
    if edit == "heavy_edit":
        return substitute(rng, paragraphs, rng.uniform(0.10, 0.15))
    if edit == "rewrite":
        return substitute(rng, paragraphs, 0.25)
    if edit == "deep_rewrite":
        return substitute(rng, paragraphs, 0.45)
    if edit == "teaser":
        return paragraphs[:1]
    if edit == "sibling":
        return article(rng)
    raise ValueError(edit)


def generate(out: Path, originals: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    sites = [
        f"{name}.example"
        for name in (
            "daily-post",
            "city-news",
            "shopfront",
            "metro-times",
            "harbour-herald",
            "valley-voice",
            "market-hall",
            "northern-star",
            "riverside",
            "old-town",
        )
    ]
    documents, pairs = [], []
    for family in range(originals):
        site = rng.choice(sites)
        day = date(2026, 1, 1) + timedelta(days=rng.randrange(300))
        paragraphs = article(rng)
        title = sentence(rng)[:60]
        members = [(f"lab-{family:04d}-0", "original", site, paragraphs)]
        edits = rng.sample(DUPLICATE_EDITS, 2) + rng.sample(DISTINCT_EDITS, 1)
        for index, edit in enumerate(edits, start=1):
            other = rng.choice([s for s in sites if s != site])
            members.append((f"lab-{family:04d}-{index}", edit, other, variant(rng, edit, paragraphs, other, day)))
        for doc_id, edit, domain, body in members:
            documents.append(
                {
                    "doc_id": doc_id,
                    "source": "labelled",
                    "domain": domain,
                    "crawled_at": (day + timedelta(days=rng.randrange(5))).isoformat(),
                    "title": title,
                    "body": "\n\n".join(body),
                    "edit": edit,
                }
            )
        for a in range(len(members)):
            for b in range(a + 1, len(members)):
                same = all(m[1] == "original" or m[1] in DUPLICATE_EDITS for m in (members[a], members[b]))
                pairs.append(
                    {
                        "left_doc_id": members[a][0],
                        "right_doc_id": members[b][0],
                        "is_duplicate": str(same).lower(),
                        "edit": f"{members[a][1]}~{members[b][1]}",
                    }
                )
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("documents.csv", documents), ("pairs.csv", pairs)):
        with open(out / name, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return {
        "documents": len(documents),
        "pairs": len(pairs),
        "duplicate_pairs": sum(p["is_duplicate"] == "true" for p in pairs),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--originals", type=int, default=150)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    print(generate(Path(args.out), args.originals, args.seed))


if __name__ == "__main__":
    main()
