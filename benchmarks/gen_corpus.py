"""Deterministic web-like corpus generator for the benchmarks (seeded, reproducible).

N pages of 150-600 words drawn from a Zipfian vocabulary, split into paragraphs and
sentences, spread over crawl days and domains. About --dup-fraction of the pages are
near-duplicates of an earlier page, each on another domain, made by one of:

  exact     an exact copy (a mirror)
  edit      1-5 words replaced
  boiler    navigation and footer boilerplate of the mirror's domain added
  reorder   paragraphs in another order

Writes the input contract (doc_id, source, domain, crawled_at, title, body) as Parquet under
OUT/documents/ (one file per crawl day, per month, or one file: --layout), and OUT/ground_truth.parquet
(doc_id, group_id, variant): every page with its group (group_id = the original's doc_id).

  python -m benchmarks.gen_corpus --docs 100000 --out benchmarks/data/c100k
  python -m benchmarks.gen_corpus --docs 100000 --script nonascii --out benchmarks/data/c100k-na
  python -m benchmarks.gen_corpus --docs 50000 --hot 50000 --out benchmarks/data/hot   # boilerplate-only pages
  python -m benchmarks.gen_corpus --docs 100000 --days 730 --layout single --out benchmarks/data/c100k-730-single
  python -m benchmarks.gen_corpus --docs 100000 --days 730 --layout monthly --out benchmarks/data/c100k-730-monthly
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from webdedup_assets.ingest.contract import CONTRACT_SCHEMA

ASCII_LETTERS = np.array(list("abcdefghijklmnopqrstuvwxyz"))
LATIN_EXTRA = list("éèêëàâäçîïôöùûüñßøåæœ")
CYRILLIC = [chr(c) for c in range(0x430, 0x450)]
GREEK = [chr(c) for c in range(0x3B1, 0x3CA)]
CJK = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]
KANA = [chr(c) for c in range(0x3041, 0x3097)]
NAV_WORDS = "home about contact privacy terms login subscribe search menu news blog careers help cookies".split()
SCHEMA = CONTRACT_SCHEMA
VARIANTS = ("exact", "edit", "boiler", "reorder")


def _vocabulary(rng: np.random.Generator, size: int, script: str) -> np.ndarray:
    """size distinct words; script ascii, nonascii (accented Latin, Cyrillic, Greek, CJK) or mixed."""
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        kind = "ascii"
        if script == "nonascii" or (script == "mixed" and rng.random() < 0.3):
            kind = ("latin", "cyrillic", "greek", "cjk")[int(rng.integers(0, 4))]
        if kind == "cjk":
            pool = CJK if rng.random() < 0.8 else KANA
            word = "".join(pool[int(i)] for i in rng.integers(0, len(pool), int(rng.integers(1, 4))))
        else:
            length = int(np.clip(rng.poisson(5) + 2, 2, 14))
            if kind == "ascii":
                word = "".join(ASCII_LETTERS[rng.integers(0, 26, length)])
            elif kind == "latin":
                chars = [
                    LATIN_EXTRA[int(rng.integers(0, len(LATIN_EXTRA)))] if rng.random() < 0.25 else str(c)
                    for c in ASCII_LETTERS[rng.integers(0, 26, length)]
                ]
                word = "".join(chars)
            else:
                pool = CYRILLIC if kind == "cyrillic" else GREEK
                word = "".join(pool[int(i)] for i in rng.integers(0, len(pool), length))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return np.array(words, dtype=object)


class Generator:
    def __init__(self, seed: int, script: str, vocab_size: int = 50_000, domains: int = 5_000, zipf: float = 1.1):
        self.rng = np.random.default_rng(seed)
        self.vocab = _vocabulary(self.rng, vocab_size, script)
        self.dotted = np.array([w + "." for w in self.vocab], dtype=object)
        self.capital = np.array([w[:1].upper() + w[1:] for w in self.vocab], dtype=object)
        weights = 1.0 / np.arange(1, vocab_size + 1) ** zipf
        self.cdf = np.cumsum(weights / weights.sum())
        self.domains = [f"site{i:05d}.{('com', 'org', 'net', 'de', 'fr', 'jp')[i % 6]}" for i in range(domains)]
        self.boilerplate = [self._boiler(i) for i in range(domains)]

    def _boiler(self, domain_index: int) -> tuple[str, str]:
        rng = np.random.default_rng(domain_index + 7)
        nav = " | ".join(rng.choice(NAV_WORDS, int(rng.integers(6, 12)), replace=False).tolist())
        foot = " ".join(self.vocab[rng.integers(0, 2000, int(rng.integers(10, 25)))].tolist())
        return nav, f"© 2026 {self.domains[domain_index]} {foot}"

    def words(self, count: int) -> np.ndarray:
        return np.searchsorted(self.cdf, self.rng.random(count)).clip(0, len(self.vocab) - 1)

    def paragraphs(self, n_words: int) -> list[str]:
        idx = self.words(n_words)
        text = self.vocab[idx]
        ends = self.rng.random(n_words) < 0.09
        ends[-1] = True
        text = np.where(ends, self.dotted[idx], text)
        starts = np.roll(ends, 1)
        text = np.where(starts, self.capital[idx], text)
        starts[0] = False
        text[0] = self.capital[idx[0]]
        n_par = int(self.rng.integers(3, 7))
        cuts = np.sort(self.rng.choice(np.arange(20, n_words - 10), n_par - 1, replace=False)) if n_words > 40 else []
        parts = np.split(text, cuts)
        return [" ".join(p.tolist()) for p in parts if len(p)]


def _edit(gen: Generator, paragraphs: list[str]) -> list[str]:
    rng = gen.rng
    out = [p.split(" ") for p in paragraphs]
    for _ in range(int(rng.integers(1, 6))):
        p = int(rng.integers(0, len(out)))
        w = int(rng.integers(0, len(out[p])))
        out[p][w] = str(gen.vocab[int(gen.words(1)[0])])
    return [" ".join(p) for p in out]


def generate(args: argparse.Namespace) -> dict:
    started = time.perf_counter()
    out = Path(args.out)
    (out / "documents").mkdir(parents=True, exist_ok=True)
    gen = Generator(args.seed, args.script)
    rng = gen.rng
    day0 = dt.date(2026, 3, 1)
    writers: dict[object, pq.ParquetWriter] = {}
    truth_ids: list[str] = []
    truth_groups: list[str] = []
    truth_variants: list[str] = []
    counts = dict.fromkeys(VARIANTS, 0)
    total = args.docs + args.hot
    chunk = 20_000
    written = 0
    hot_body = " ".join(gen.boilerplate[0]) + " Accept all cookies. Sign up for our newsletter."
    for begin in range(0, total, chunk):
        n = min(chunk, total - begin)
        ids = [f"d{begin + i:08d}" for i in range(n)]
        domain_ix = rng.integers(0, len(gen.domains), n)
        days = rng.integers(0, args.days, n)
        bodies: list[str] = []
        titles: list[str] = []
        originals: list[int] = []  # chunk positions of pages that are originals
        paragraphs_of: dict[int, list[str]] = {}
        for i in range(n):
            doc = begin + i
            if doc >= args.docs:  # boilerplate-only pages (hot bucket)
                bodies.append(hot_body)
                titles.append("Home")
                truth_ids.append(ids[i])
                truth_groups.append(f"d{args.docs:08d}")
                truth_variants.append("hot")
                continue
            if originals and rng.random() < args.dup_fraction:
                src = originals[int(rng.integers(max(0, len(originals) - 2000), len(originals)))]
                variant = VARIANTS[int(rng.integers(0, 4))]
                paras = paragraphs_of[src]
                while domain_ix[i] == domain_ix[src]:
                    domain_ix[i] = rng.integers(0, len(gen.domains))
                if variant == "edit":
                    paras = _edit(gen, paras)
                elif variant == "reorder":
                    paras = [paras[j] for j in rng.permutation(len(paras))]
                    if len(paras) > 1 and paras == paragraphs_of[src]:
                        paras = paras[1:] + paras[:1]
                elif variant == "boiler":
                    nav, foot = gen.boilerplate[domain_ix[i]]
                    paras = [nav, *paras, foot]
                counts[variant] += 1
                titles.append(titles[src])
                bodies.append("\n\n".join(paras))
                truth_ids.append(ids[i])
                truth_groups.append(ids[src])
                truth_variants.append(variant)
                continue
            paras = gen.paragraphs(int(rng.integers(150, 601)))
            paragraphs_of[i] = paras
            originals.append(i)
            titles.append(" ".join(paras[0].split(" ")[:6]))
            bodies.append("\n\n".join(paras))
            truth_ids.append(ids[i])
            truth_groups.append(ids[i])
            truth_variants.append("original")
        table = pa.table(
            {
                "doc_id": ids,
                "source": [f"https://{gen.domains[d]}/p/{doc_id}" for d, doc_id in zip(domain_ix, ids)],
                "domain": [gen.domains[d] for d in domain_ix],
                "crawled_at": pa.array([day0 + dt.timedelta(days=int(d)) for d in days], pa.date32()),
                "title": titles,
                "body": bodies,
            },
            schema=SCHEMA,
        )
        if args.layout == "single":  # one file, rows in generation order (days mixed), as exports often are
            if 0 not in writers:
                writers[0] = pq.ParquetWriter(out / "documents" / "corpus.parquet", SCHEMA, compression="zstd")
            writers[0].write_table(table, row_group_size=args.row_group)
            written += n
            continue
        dates = [day0 + dt.timedelta(days=day) for day in range(args.days)]
        keys = [d.isoformat() if args.layout == "daily" else d.strftime("%Y-%m") for d in dates]
        day_key = np.array(keys)[days]
        for key in dict.fromkeys(keys):
            part = table.filter(pa.array(day_key == key))
            if not part.num_rows:
                continue
            if key not in writers:
                prefix = "day" if args.layout == "daily" else "month"
                name = out / "documents" / f"{prefix}-{key}.parquet"
                writers[key] = pq.ParquetWriter(name, SCHEMA, compression="zstd")
            writers[key].write_table(part, row_group_size=args.row_group)
        written += n
    for writer in writers.values():
        writer.close()
    pq.write_table(
        pa.table({"doc_id": truth_ids, "group_id": truth_groups, "variant": truth_variants}),
        out / "ground_truth.parquet",
    )
    info = {
        "docs": written,
        "seed": args.seed,
        "script": args.script,
        "days": args.days,
        "layout": args.layout,
        "dup_fraction": args.dup_fraction,
        "hot": args.hot,
        "variants": counts,
        "duplicates": sum(counts.values()),
        "seconds": round(time.perf_counter() - started, 1),
    }
    (out / "corpus.json").write_text(json.dumps(info, indent=2))
    return info


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--script", choices=["ascii", "mixed", "nonascii"], default="ascii")
    parser.add_argument("--days", type=int, default=7, help="crawl days (from 2026-03-01)")
    parser.add_argument(
        "--layout",
        choices=["daily", "monthly", "single"],
        default="daily",
        help="one Parquet file per crawl day (day-YYYY-MM-DD), per month (month-YYYY-MM), or one file for all",
    )
    parser.add_argument("--dup-fraction", type=float, default=0.3)
    parser.add_argument("--hot", type=int, default=0, help="extra pages with one identical boilerplate-only body")
    parser.add_argument("--row-group", type=int, default=16_384)
    print(json.dumps(generate(parser.parse_args(argv))))


if __name__ == "__main__":
    main()
