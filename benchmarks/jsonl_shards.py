"""A generated corpus (benchmarks.gen_corpus) again as Dolma-style JSON Lines shards: the same pages,
one object per line with the fields `id`, `text`, `source`, `created` (an ISO 8601 timestamp) and
`metadata` {`url`, `title`}, in SHARDS files of zstd-compressed JSON Lines (`shard-00000.jsonl.zst`,
rows in the corpus' order). For comparing JSON Lines input with the same pages as Parquet:

  python -m benchmarks.jsonl_shards benchmarks/data/c1m --shards 16 --out benchmarks/data/c1m-jsonl
  webdedup run benchmarks/data/c1m-jsonl --output OUT --storage ST --id-column id --text-column text \\
      --date-column created --url-column metadata.url --title-column metadata.title --quiet
"""

from __future__ import annotations

import argparse
from pathlib import Path

import duckdb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", help="a folder written by benchmarks.gen_corpus")
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute(
        f"CREATE TEMP VIEW pages AS SELECT row_number() OVER () - 1 AS n, * "
        f"FROM read_parquet('{Path(args.corpus) / 'documents'}/*.parquet')"
    )
    total = con.execute("SELECT count(*) FROM pages").fetchone()[0]
    per_shard = -(-total // args.shards)
    for shard in range(args.shards):
        target = out / f"shard-{shard:05d}.jsonl.zst"
        con.execute(
            f"""COPY (SELECT doc_id AS id, body AS text, source,
                            strftime(crawled_at, '%Y-%m-%dT%H:%M:%SZ') AS created,
                            {{'url': 'https://' || domain || '/' || doc_id, 'title': title}} AS metadata
                       FROM pages WHERE n >= {shard * per_shard} AND n < {(shard + 1) * per_shard} ORDER BY n)
                TO '{target}' (FORMAT json, COMPRESSION zstd)"""
        )
    print(f"{total:,} pages in {args.shards} shards under {out}")


if __name__ == "__main__":
    main()
