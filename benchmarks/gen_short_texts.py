"""A labelled set of short texts (titles and one-sentence snippets) for the SimHash and char-shingle
comparison of issue 31: each original with variants made by known small edits, and the pairs a
person would call duplicates (the same title or snippet) or not.

  python -m benchmarks.gen_short_texts --out fixtures/short

Writes OUT/documents.csv (the input contract, as fixtures/labelled/) and OUT/pairs.csv
(left_doc_id, right_doc_id, is_duplicate, edit): every pair within a family (an original and its
variants) with its label; pairs across families are not duplicates. The texts are built here from
templates and word lists written for this project (English, and a Russian and a Greek list for
other scripts), seeded and reproducible.

The rule behind the labels: two short texts are duplicates when they say the same thing — the
same words in another case or punctuation, with accents dropped, with one typo, with one filler
word added or dropped, or with their two halves swapped ("A: B" as "B: A"). They are not
duplicates when a content word changes (another subject, place or figure: a sibling headline) —
the case where a tiny n-gram set makes Jaccard swing with one word.
"""

from __future__ import annotations

import argparse
import csv
import random
from datetime import date, timedelta
from pathlib import Path

EN_SUBJECTS = [
    "City council",
    "Regional railway",
    "Harbour authority",
    "Water utility",
    "University hospital",
    "Football club",
    "Weather service",
    "Public library",
    "Cycling association",
    "School board",
    "Museum of modern art",
    "Local bakery",
    "Software startup",
    "Farmers market",
    "Fire brigade",
    "Airport operator",
]
EN_VERBS = ["approves", "delays", "announces", "cancels", "expands", "reviews", "opens", "cuts", "launches", "defends"]
EN_OBJECTS = [
    "new budget for schools",
    "night trains to the coast",
    "plan for cheaper parking",
    "repairs of the old bridge",
    "summer opening hours",
    "recall of two kitchen products",
    "grant for young artists",
    "rules for electric scooters",
    "second runway project",
    "free lunches for pupils",
    "ban on plastic bags",
    "study on river pollution",
]
EN_PLACES = ["in Northport", "in Lakeside", "in Riverton", "in Eastfield", "in Millbrook", "in Westhaven"]
EN_TAILS = [
    "after months of debate",
    "despite strong protests",
    "with support from residents",
    "as costs keep rising",
    "following a public survey",
    "ahead of the winter season",
]
EN_FILLERS = ["today", "now", "finally", "officially"]

RU_SUBJECTS = [
    "Городской совет",
    "Региональная железная дорога",
    "Городская больница",
    "Футбольный клуб",
    "Школьный совет",
]
RU_VERBS = ["одобрил", "отложил", "объявил", "отменил", "расширил"]
RU_OBJECTS = [
    "новый бюджет для школ",
    "ночные поезда к морю",
    "ремонт старого моста",
    "летние часы работы",
    "правила для электросамокатов",
    "бесплатные обеды для учеников",
]
RU_PLACES = ["в Северном порту", "в Озёрске", "в Речном", "в Восточном поле"]

EL_SUBJECTS = [
    "Το δημοτικό συμβούλιο",
    "Ο περιφερειακός σιδηρόδρομος",
    "Το πανεπιστημιακό νοσοκομείο",
    "Η σχολική επιτροπή",
]
EL_VERBS = ["εγκρίνει", "αναβάλλει", "ανακοινώνει", "ακυρώνει", "επεκτείνει"]
EL_OBJECTS = [
    "νέο προϋπολογισμό για τα σχολεία",
    "νυχτερινά τρένα προς την ακτή",
    "επισκευή της παλιάς γέφυρας",
    "θερινό ωράριο λειτουργίας",
    "κανόνες για ηλεκτρικά πατίνια",
]
EL_PLACES = ["στη Θεσσαλονίκη", "στην Πάτρα", "στο Ηράκλειο", "στη Λάρισα"]

LANGS = {
    "en": (EN_SUBJECTS, EN_VERBS, EN_OBJECTS, EN_PLACES),
    "ru": (RU_SUBJECTS, RU_VERBS, RU_OBJECTS, RU_PLACES),
    "el": (EL_SUBJECTS, EL_VERBS, EL_OBJECTS, EL_PLACES),
}
ACCENTED = {"a": "á", "e": "é", "o": "ó", "i": "í", "u": "ü", "ο": "ό", "α": "ά", "ε": "έ", "ι": "ί"}
DOMAINS = ["news.example", "feeds.example", "mirror.example", "aggregator.example", "search.example"]


def _title(rng: random.Random, lang: str, parts: dict) -> str:
    return f"{parts['subject']} {parts['verb']} {parts['object']}"


def _snippet(rng: random.Random, lang: str, parts: dict) -> str:
    tail = f" {parts['tail']}" if lang == "en" else ""
    return f"{parts['subject']} {parts['verb']} {parts['object']} {parts['place']}{tail}."


def _parts(rng: random.Random, lang: str) -> dict:
    subjects, verbs, objects, places = LANGS[lang]
    return {
        "subject": rng.choice(subjects),
        "verb": rng.choice(verbs),
        "object": rng.choice(objects),
        "place": rng.choice(places),
        "tail": rng.choice(EN_TAILS),
    }


def _typo(rng: random.Random, text: str) -> str:
    words = text.split(" ")
    long_words = [i for i, w in enumerate(words) if len(w) >= 5]
    i = rng.choice(long_words)
    word = words[i]
    j = rng.randrange(1, len(word) - 2)
    words[i] = word[:j] + word[j + 1] + word[j] + word[j + 2 :]  # two letters swapped
    return " ".join(words)


def _accents(text: str) -> str:
    out, done = [], 0
    for ch in text:
        if ch in ACCENTED and done < 3:
            out.append(ACCENTED[ch])
            done += 1
        else:
            out.append(ch)
    return "".join(out)


def _filler(rng: random.Random, text: str, lang: str) -> str:
    words = text.rstrip(".").split(" ")
    filler = rng.choice(EN_FILLERS) if lang == "en" else {"ru": "сегодня", "el": "σήμερα"}[lang]
    words.insert(len(words) // 2, filler)
    return " ".join(words) + ("." if text.endswith(".") else "")


def _swap(parts: dict, kind: str, lang: str) -> str:
    head = f"{parts['subject']} {parts['verb']} {parts['object']}"
    tail = parts["place"] if kind == "snippet" else parts["subject"]
    if kind == "snippet":
        return f"{tail[0].upper() + tail[1:]}: {head}"
    return f"{parts['object'][0].upper() + parts['object'][1:]}: {parts['subject']} {parts['verb']}"


SYLLABLES = ["ka", "ro", "vi", "ten", "mar", "lo", "su", "del", "qui", "bra", "no", "zel", "fa", "gor", "ish", "pel"]


def place_name(rng: random.Random) -> str:
    """A made-up proper noun of 3-4 syllables (16^3 + 16^4 of them), for --named."""
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.choice((3, 4)))).capitalize()


def variants(rng: random.Random, lang: str, kind: str, name: str | None = None) -> list[tuple[str, str, bool]]:
    """(edit, text, duplicate of the original) of one family; the original first. With a name,
    the subject carries it (so that families of a large set rarely share their words)."""
    parts = _parts(rng, lang)
    if name:
        parts["subject"] = f"{parts['subject']} {name}"
    make = _title if kind == "title" else _snippet
    original = make(rng, lang, parts)
    out = [("original", original, True)]
    out.append(("case_punct", original.upper().rstrip(".") + " !", True))
    out.append(("typo", _typo(rng, original), True))
    out.append(("filler", _filler(rng, original, lang), True))
    out.append(("reorder", _swap(parts, kind, lang), True))
    if any(ch in ACCENTED for ch in original):
        out.append(("accents", _accents(original), True))
    subjects, verbs, objects, places = LANGS[lang]
    for field, pool in (("subject", subjects), ("object", objects), ("verb", verbs)):
        sibling = dict(parts, **{field: rng.choice([p for p in pool if p != parts[field]])})
        out.append((f"sibling_{field}", make(rng, lang, sibling), False))
    return out


def generate(families: int, seed: int, named: bool = False) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    names = random.Random(seed + 1)  # its own stream: without --named the set stays as it was
    documents, pairs = [], []
    start = date(2026, 5, 1)
    for f in range(families):
        lang = "en" if f % 5 < 3 else ("ru" if f % 5 == 3 else "el")
        kind = "title" if f % 2 == 0 else "snippet"
        members = variants(rng, lang, kind, place_name(names) if named else None)
        ids = []
        for v, (edit, text, _) in enumerate(members):
            doc_id = f"short-{f:04d}-{v}"
            ids.append((doc_id, edit, members[v][2]))
            documents.append(
                {
                    "doc_id": doc_id,
                    "source": "short",
                    "domain": rng.choice(DOMAINS),
                    "crawled_at": (start + timedelta(days=rng.randrange(60))).isoformat(),
                    "title": f"{kind} ({lang})",
                    "body": text,
                    "edit": edit,
                }
            )
        for i in range(len(ids)):
            for j in range(i + 1, len(ids)):
                (left, edit_l, dup_l), (right, edit_r, dup_r) = ids[i], ids[j]
                pairs.append(
                    {
                        "left_doc_id": left,
                        "right_doc_id": right,
                        "is_duplicate": "true" if dup_l and dup_r else "false",
                        "edit": f"{edit_l}~{edit_r}",
                    }
                )
    return documents, pairs


def write(out: Path, families: int, seed: int, named: bool = False) -> None:
    documents, pairs = generate(families, seed, named)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("documents.csv", documents), ("pairs.csv", pairs)):
        with open(out / name, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="fixtures/short")
    parser.add_argument("--families", type=int, default=300)
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument(
        "--named", action="store_true", help="a made-up proper noun in each family's subject (for large sets)"
    )
    args = parser.parse_args()
    write(Path(args.out), args.families, args.seed, args.named)


if __name__ == "__main__":
    main()
