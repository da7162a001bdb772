"""A corpus of real text from this machine for quality measurements: Debian copyright files
(/usr/share/doc/*/copyright) and manual page sources (/usr/share/man/**/*.gz), one document per
file, in sorted path order, up to --docs documents. License texts and man pages of related
tools give many near-duplicate pairs spread over the whole Jaccard range, which a generated
corpus lacks. Writes the input contract (doc_id, source, domain, crawled_at, title, body) as
one Parquet file.

  python -m benchmarks.debian_corpus --docs 20000 --out /tmp/debian20k.parquet
"""

from __future__ import annotations

import argparse
import gzip
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def documents(limit: int, keep: Callable[[Path], bool] | None = None) -> list[dict]:
    """Up to `limit` documents, in path order; `keep`: only the files it accepts (the tests' subsets)."""
    paths = sorted(Path("/usr/share/doc").glob("*/copyright")) + sorted(Path("/usr/share/man").rglob("*.gz"))
    rows = []
    for path in paths:
        if len(rows) >= limit:
            break
        if keep is not None and not keep(path):
            continue
        try:
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
        body = raw.decode("utf-8", errors="replace")
        if not body.strip():
            continue
        kind = "copyright" if path.name == "copyright" else "man"
        rows.append(
            {
                "doc_id": f"{kind}:{path}",
                "source": kind,
                "domain": path.parent.name,
                "crawled_at": "2026-01-01",
                "title": path.parent.name if kind == "copyright" else path.name,
                "body": body,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rows = documents(args.docs)
    table = pa.Table.from_pylist(rows)
    table = table.set_column(3, "crawled_at", table["crawled_at"].cast(pa.date32()))
    pq.write_table(table, args.out)
    print(f"{len(rows)} documents -> {args.out}")


if __name__ == "__main__":
    main()
