"""Side-by-side: webdedup fingerprint stage vs datasketch 2.0 vs rensa 0.5, same corpus and parameters.

  pip install -e ".[bench]"
  python -m benchmarks.compare benchmarks/data/c100k [--rounds 2] [--docs N]

Parameters for all three: 5-token shingles, 64 MinHash values, LSH with 8 bands x 8 rows.
Each engine runs in its own child process (so its peak RSS is its own), in alternating order
over --rounds; the best time of each engine is reported.

Timed, per engine, from the corpus Parquet to signatures and LSH index:
  webdedup    stage_fingerprinted + stage_band_memberships (Parquet in -> signatures and band
              keys persisted as Parquet), WEBDEDUP_THREADS threads (default: all cores)
  datasketch  read Parquet, tokenize in Python (lowercase \\w+ words, 5-word shingles),
              MinHash(num_perm=64).update_batch, MinHashLSH(num_perm=64, params=(8, 8)) inserts
  rensa       same reading and tokenizing, RMinHash.digest_matrix_from_token_sets (its bulk
              full-set API, Rust, multi-threaded) + RMinHashLSH(num_bands=8).insert_matrix
Candidate recall (untimed): share of ground-truth duplicate pairs (pages of one group) that
share at least one whole band of 8 signature values, which is exactly what each LSH index
returns for the pair.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import document_files, machine, run_child

SHINGLE, NUM_PERM, BANDS, ROWS, SEED = 5, 64, 8, 8, 1
WORD = re.compile(r"\w+")


def _read_bodies(corpus: Path, limit: int | None) -> tuple[list[str], list[str]]:
    ids: list[str] = []
    bodies: list[str] = []
    for path in document_files(corpus):
        table = pq.read_table(path, columns=["doc_id", "body"])
        ids.extend(table.column("doc_id").to_pylist())
        bodies.extend(table.column("body").to_pylist())
        if limit and len(ids) >= limit:
            break
    return ids[:limit] if limit else ids, bodies[:limit] if limit else bodies


def _shingles(text: str) -> list[str]:
    tokens = WORD.findall(text.lower())
    if len(tokens) < SHINGLE:
        return [" ".join(tokens)] if tokens else []
    return [" ".join(tokens[i : i + SHINGLE]) for i in range(len(tokens) - SHINGLE + 1)]


def run_webdedup(corpus: Path, limit: int | None, work: Path):
    from webdedup_assets.engine import Store, stage_band_memberships, stage_documents, stage_fingerprinted
    from webdedup_assets.params import BandingParams, FingerprintParams

    store = Store(work / "store")
    source = corpus / "documents"
    if limit:  # the first `limit` documents as one Parquet file
        ids, bodies = _read_bodies(corpus, limit)
        first = pq.read_table(document_files(corpus)[0]).schema
        table = pa.concat_tables(pq.read_table(p) for p in document_files(corpus)).slice(0, limit).cast(first)
        source = work / "input.parquet"
        pq.write_table(table, source)
    stage_documents(store, str(source))
    from webdedup_assets.core.fingerprint import fingerprint_texts
    from webdedup_assets.core.minhash import MinHashParams

    fingerprint_texts(pa.array(["warm up", "é"]), SHINGLE, *MinHashParams(NUM_PERM, SEED).coefficients())
    started = time.perf_counter()
    stage_fingerprinted(store, FingerprintParams(shingle_size=SHINGLE, num_perm=NUM_PERM, seed=SEED))
    stage_band_memberships(store, BandingParams(bands=BANDS, rows=ROWS))
    seconds = time.perf_counter() - started
    table = pq.read_table(store.path("fingerprinted"), columns=["doc_id", "signature"])
    signatures = table.column("signature").combine_chunks().flatten().to_numpy().reshape(table.num_rows, NUM_PERM)
    return seconds, table.column("doc_id").to_pylist(), signatures


def run_datasketch(corpus: Path, limit: int | None, work: Path):
    from datasketch import MinHash, MinHashLSH

    started = time.perf_counter()
    ids, bodies = _read_bodies(corpus, limit)
    lsh = MinHashLSH(num_perm=NUM_PERM, params=(BANDS, ROWS))
    signatures = np.empty((len(ids), NUM_PERM), dtype=np.uint64)
    with lsh.insertion_session() as session:
        for i, (doc_id, body) in enumerate(zip(ids, bodies)):
            minhash = MinHash(num_perm=NUM_PERM, seed=SEED)
            minhash.update_batch([s.encode("utf-8") for s in _shingles(body)])
            session.insert(doc_id, minhash, check_duplication=False)
            signatures[i] = minhash.hashvalues
    return time.perf_counter() - started, ids, signatures


def run_rensa(corpus: Path, limit: int | None, work: Path):
    from rensa import RMinHash, RMinHashLSH

    started = time.perf_counter()
    ids, bodies = _read_bodies(corpus, limit)
    matrix = RMinHash.digest_matrix_from_token_sets([_shingles(b) for b in bodies], NUM_PERM, SEED)
    lsh = RMinHashLSH(0.5, NUM_PERM, BANDS)
    lsh.insert_matrix(matrix)
    seconds = time.perf_counter() - started
    return seconds, ids, np.asarray(matrix.to_rows(), dtype=np.uint64)


ENGINES = {"webdedup": run_webdedup, "datasketch": run_datasketch, "rensa": run_rensa}


def candidate_recall(corpus: Path, ids: list[str], signatures: np.ndarray) -> dict:
    left, right = true_pairs(corpus, ids)
    if not left.size:
        return {"true_pairs": 0, "candidate_recall": None}
    bands_l = signatures[left].reshape(-1, BANDS, ROWS)
    bands_r = signatures[right].reshape(-1, BANDS, ROWS)
    found = (bands_l == bands_r).all(axis=2).any(axis=1)
    return {"true_pairs": int(left.size), "candidate_recall": round(float(found.mean()), 4)}


def true_pairs(corpus: Path, ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    truth = pq.read_table(corpus / "ground_truth.parquet").to_pandas()
    position = {doc_id: i for i, doc_id in enumerate(ids)}
    truth = truth[truth.doc_id.isin(position)]
    left, right = [], []
    for _, members in truth.groupby("group_id").doc_id:
        rows = [position[d] for d in members]
        for a in range(len(rows)):
            for b in range(a + 1, len(rows)):
                left.append(rows[a])
                right.append(rows[b])
    return np.array(left, dtype=np.int64), np.array(right, dtype=np.int64)


def recall_spread(corpus: Path, limit: int | None, seeds: int) -> None:
    """Untimed: webdedup's candidate recall for several MinHash seeds, and the recall every
    unbiased 8x8 MinHash LSH has in expectation, mean of 1 - (1 - J^8)^8 over the true pairs
    with J their exact shingle Jaccard (webdedup's shingles; the Python tokenizer of the other
    two gives the same sets on this corpus up to rare tokens)."""
    from webdedup_assets.core.fingerprint import fingerprint_texts, shingle_sets
    from webdedup_assets.core.minhash import MinHashParams
    from webdedup_assets.core.sets import jaccard_blocks

    ids, bodies = _read_bodies(corpus, limit)
    texts = pa.array(bodies, pa.large_string())
    left, right = true_pairs(corpus, ids)
    flat, offsets = shingle_sets(texts, SHINGLE)
    exact = np.zeros(len(left))
    sets = (flat, offsets[:-1], offsets[1:])
    jaccard_blocks(*sets, *sets, left, right, exact)
    expected = float(np.mean(1 - (1 - exact**ROWS) ** BANDS))

    def recall(signatures: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
        hit = (signatures[a].reshape(-1, BANDS, ROWS) == signatures[b].reshape(-1, BANDS, ROWS)).all(axis=2)
        return round(float(hit.any(axis=1).mean()), 4)

    by_engine: dict[str, list[float]] = {"webdedup": []}
    for seed in range(1, seeds + 1):
        signatures = fingerprint_texts(texts, SHINGLE, *MinHashParams(NUM_PERM, seed).coefficients())[2]
        by_engine["webdedup"].append(recall(signatures, left, right))
    # The other engines over the same seeds, on the documents of true pairs only (recall needs
    # nothing else), shingled once by their Python tokenizer.
    involved = np.unique(np.concatenate([left, right]))
    local = {int(doc): i for i, doc in enumerate(involved)}
    a = np.array([local[int(d)] for d in left], dtype=np.int64)
    b = np.array([local[int(d)] for d in right], dtype=np.int64)
    shingled = [_shingles(bodies[d]) for d in involved]
    try:
        from datasketch import MinHash

        encoded = [[s.encode("utf-8") for s in doc] for doc in shingled]
        by_engine["datasketch"] = []
        for seed in range(1, seeds + 1):
            hashes = np.array([m.hashvalues for m in MinHash.bulk(encoded, num_perm=NUM_PERM, seed=seed)])
            by_engine["datasketch"].append(recall(hashes, a, b))
    except ImportError:
        pass
    try:
        from rensa import RMinHash

        by_engine["rensa"] = []
        for seed in range(1, seeds + 1):
            matrix = RMinHash.digest_matrix_from_token_sets(shingled, NUM_PERM, seed)
            by_engine["rensa"].append(recall(np.asarray(matrix.to_rows(), dtype=np.uint64), a, b))
    except ImportError:
        pass
    print(
        json.dumps(
            {
                "true_pairs": int(len(left)),
                "expected_recall_8x8": round(expected, 4),
                "recall_by_seed": by_engine,
                "mean_recall": {k: round(float(np.mean(v)), 4) for k, v in by_engine.items()},
            }
        )
    )


def child(engine: str, corpus: Path, limit: int | None) -> None:
    with tempfile.TemporaryDirectory(dir=corpus.parent) as work:
        seconds, ids, signatures = ENGINES[engine](corpus, limit, Path(work))
    result = {"engine": engine, "docs": len(ids), "seconds": round(seconds, 3), "docs_per_s": round(len(ids) / seconds)}
    result.update(candidate_recall(corpus, ids, signatures))
    print(json.dumps(result))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus")
    parser.add_argument("--docs", type=int, default=None, help="use only the first N documents")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--engines", default="webdedup,datasketch,rensa")
    parser.add_argument(
        "--recall-seeds", type=int, default=0, help="only print each engine's recall for seeds 1..N (untimed)"
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    corpus = Path(args.corpus).resolve()
    if args.recall_seeds:
        recall_spread(corpus, args.docs, args.recall_seeds)
        return
    if args.child:
        child(args.child, corpus, args.docs)
        return
    engines = args.engines.split(",")
    results: dict[str, list[dict]] = {e: [] for e in engines}
    for round_index in range(args.rounds):
        order = engines if round_index % 2 == 0 else engines[::-1]
        for engine in order:
            extra = ["--docs", str(args.docs)] if args.docs else []
            out, rss = run_child(["-m", "benchmarks.compare", str(corpus), "--child", engine, *extra])
            figure = json.loads(out.strip().splitlines()[-1])
            figure["peak_rss_mib"] = round(rss)
            results[engine].append(figure)
            print(json.dumps(figure), file=sys.stderr)
    best = {e: min(r, key=lambda f: f["seconds"]) for e, r in results.items()}
    print(
        f"corpus {corpus} ({best[engines[0]]['docs']:,} docs), shingles {SHINGLE}, {NUM_PERM} values, "
        f"{BANDS}x{ROWS} bands; {machine()}; WEBDEDUP_THREADS={os.environ.get('WEBDEDUP_THREADS', 'all')}"
    )
    print(f"{'engine':<12}{'best s':>9}{'docs/s':>10}{'peak RSS MiB':>14}{'recall':>9}{'webdedup/x':>12}")
    for engine, figure in best.items():
        ratio = figure["docs_per_s"] and best.get("webdedup", figure)["docs_per_s"] / figure["docs_per_s"]
        print(
            f"{engine:<12}{figure['seconds']:>9.2f}{figure['docs_per_s']:>10,}{figure['peak_rss_mib']:>14,}"
            f"{figure['candidate_recall']:>9}{ratio:>11.1f}x"
        )


if __name__ == "__main__":
    main()
