"""CPU and wall seconds of reading some documents' bodies and signatures from a storage:
`storage.rows.fetch_rows` against a plain DuckDB `WHERE doc_id IN (...)` scan.

  python -m benchmarks.fetch_rows benchmarks/data/inc-1000000-run-history/_storage
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import pyarrow as pa

from webdedup_assets.engine import Store
from webdedup_assets.storage.rows import fetch_rows
from webdedup_assets.storage.store import connect


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("storage")
    parser.add_argument("--sizes", default="10000,150000")
    args = parser.parse_args(argv)
    store = Store(args.storage)
    con = connect(store)
    ids = con.sql(f"SELECT doc_id FROM {store.scan_sql('documents')}").to_arrow_table()["doc_id"].combine_chunks()
    rng = np.random.default_rng(1)
    for n in (int(s) for s in args.sizes.split(",")):
        con.register("wanted", pa.table({"doc_id": ids.take(pa.array(rng.choice(len(ids), n, replace=False)))}))
        for label, read in (
            ("fetch_rows bodies", lambda: fetch_rows(con, store.data_files("documents"), "wanted", ["doc_id", "body"])),
            (
                "DuckDB IN scan bodies",
                lambda: con.sql(
                    f"SELECT doc_id, body FROM {store.scan_sql('documents')} "
                    "WHERE doc_id IN (SELECT doc_id FROM wanted)"
                ).to_arrow_table(),
            ),
            (
                "fetch_rows signatures",
                lambda: fetch_rows(con, store.data_files("fingerprinted"), "wanted", ["doc_id", "signature"]),
            ),
        ):
            started_cpu, started = cpu(), time.perf_counter()
            rows = read().num_rows
            print(
                f"{n:>8,} {label:<24} {rows:>8,} rows  wall {time.perf_counter() - started:5.2f} s  "
                f"cpu {cpu() - started_cpu:5.2f} s"
            )
    con.close()


if __name__ == "__main__":
    main()
