"""Records/s of WARC -> documents on a generated .warc.gz (warcio writes it; needs the dev extra).

    .venv/bin/python benchmarks/warc_bench.py [--pages 20000]

Measures the reader webdedup uses (own gzip-member framing + FastWARC + Resiliparse) and, when
installed, the alternatives it was chosen over: FastWARC's own iterator, and warcio +
charset-normalizer + selectolax (or + trafilatura). Only the first is a dependency.
"""

from __future__ import annotations

import argparse
import io
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

WORDS = (
    "river town museum boat wooden winter workshop visitors children oak planks ribs seams cotton pitch "
    "founder shipwright tools yards coast planes augers adzes mallets labelled schools spring regatta roof "
    "wind west bread starter flour water proof crust lid oven market square bridge tower garden harbour"
).split()


def generate(path: Path, pages: int) -> None:
    from test_warc_fixtures import Rec, page, record_bytes

    rng = random.Random(5)
    with open(path, "wb") as handle:
        for i in range(pages):
            text = " ".join(rng.choice(WORDS) for _ in range(400))
            handle.write(record_bytes(Rec("request", f"http://site{i % 500}.example/p{i}"), True))
            body = page(f"Page {i}", text).encode()
            handle.write(record_bytes(Rec("response", f"http://site{i % 500}.example/p{i}", body), True))


def bench_webdedup(path: Path) -> int:
    from webdedup_assets.ingest.convert import convert_warc_input
    from webdedup_assets.ingest.options import WarcOptions

    out = path.with_suffix(".bench.parquet")
    result = convert_warc_input([(path, path.name)], out, WarcOptions())
    out.unlink()
    return result["summary"]["documents"]


def bench_fastwarc_iterator(path: Path) -> int:
    from fastwarc.warc import ArchiveIterator, WarcRecordType
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding
    from resiliparse.parse.html import HTMLTree

    n = 0
    with open(path, "rb") as handle:
        for record in ArchiveIterator(handle, record_types=WarcRecordType.response):
            data = record.reader.read()
            tree = HTMLTree.parse(bytes_to_str(data, detect_encoding(data)))
            extract_plain_text(tree, main_content=True)
            n += 1
    return n


def bench_warcio_selectolax(path: Path) -> int:
    from charset_normalizer import from_bytes
    from selectolax.lexbor import LexborHTMLParser as HTMLParser
    from warcio.archiveiterator import ArchiveIterator

    n = 0
    with open(path, "rb") as handle:
        for record in ArchiveIterator(handle):
            if record.rec_type != "response":
                continue
            data = record.content_stream().read()
            best = from_bytes(data).best()
            tree = HTMLParser(str(best) if best else data.decode("utf-8", "replace"))
            tree.body.text(separator=" ") if tree.body else ""
            n += 1
    return n


def bench_warcio_trafilatura(path: Path, limit: int = 1000) -> int:
    import trafilatura
    from warcio.archiveiterator import ArchiveIterator

    n = 0
    with open(path, "rb") as handle:
        for record in ArchiveIterator(handle):
            if record.rec_type != "response":
                continue
            trafilatura.extract(record.content_stream().read())
            n += 1
            if n >= limit:
                break
    return n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=20000)
    args = parser.parse_args()
    data = ROOT / "benchmarks" / "data"
    data.mkdir(parents=True, exist_ok=True)
    path = data / f"bench-{args.pages}.warc.gz"
    if not path.exists():
        generate(path, args.pages)
    print(f"{path.name}: {path.stat().st_size / 1e6:.1f} MB, {args.pages} responses + {args.pages} requests")
    runs = [
        ("webdedup (gzip-member framing + fastwarc + resiliparse)", bench_webdedup),
        ("fastwarc ArchiveIterator + resiliparse (no framing checks)", bench_fastwarc_iterator),
        ("warcio + charset-normalizer + selectolax", bench_warcio_selectolax),
        ("warcio + trafilatura (first 1000 pages)", bench_warcio_trafilatura),
    ]
    for label, fn in runs:
        try:
            started = time.perf_counter()
            n = fn(path)
            seconds = time.perf_counter() - started
        except ImportError as err:
            print(f"  {label:<62} skipped ({err.name or err} not installed)")
            continue
        print(f"  {label:<62} {n:>6} pages in {seconds:6.2f} s = {n / seconds:8.0f} pages/s")
    _ = io


if __name__ == "__main__":
    main()
