"""Precision and recall of MinHash (word and char shingles) and SimHash on the short-text set
(fixtures/short, benchmarks/gen_short_texts.py), all at the same threshold: one `webdedup run` and
one `webdedup evaluate --labels` per configuration, a Markdown table on stdout.

  python -m benchmarks.short_texts [--work /tmp/short-bench]

Exact Jaccard decides in every configuration, so the fingerprint changes only which pairs become
candidates: precision moves little, recall is where the methods differ.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = REPO / "fixtures" / "short" / "documents.csv"
PAIRS = REPO / "fixtures" / "short" / "pairs.csv"

CONFIGS = [
    ("minhash / word 5", ["--shingle-unit", "word", "--shingle-size", "5"]),
    ("minhash / word 2", ["--shingle-unit", "word", "--shingle-size", "2"]),
    ("minhash / char 5", ["--shingle-unit", "char", "--shingle-size", "5"]),
    ("minhash / char 2", ["--shingle-unit", "char", "--shingle-size", "2"]),
    *(
        (
            f"simhash / char 5, max_hamming {m}",
            [
                "--fingerprint-method",
                "simhash",
                "--shingle-unit",
                "char",
                "--shingle-size",
                "5",
                "--max-hamming",
                str(m),
            ],
        )
        for m in (3, 5, 7)
    ),
    *(
        (
            f"simhash / char 5, max_hamming {m}, key_blocks 3",
            ["--fingerprint-method", "simhash", "--shingle-unit", "char", "--shingle-size", "5"]
            + ["--max-hamming", str(m), "--key-blocks", "3"],
        )
        for m in (5, 7)
    ),
    (
        "simhash / word 2, max_hamming 5",
        ["--fingerprint-method", "simhash", "--shingle-size", "2", "--max-hamming", "5"],
    ),
]


def cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "webdedup_assets.cli", *args], capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: a check failed (the pinned fixture counts do not apply here)
        raise SystemExit(f"webdedup {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def measure(work: Path, threshold: float) -> list[dict]:
    rows = []
    for name, flags in CONFIGS:
        out = work / name.replace(" ", "").replace("/", "-").replace(",", "_")
        shutil.rmtree(out, ignore_errors=True)
        counts = json.loads(
            cli("run", str(DOCUMENTS), "--output", str(out), "--threshold", str(threshold), "--quiet", "--json", *flags)
        )
        summary = json.loads(cli("evaluate", "--output", str(out), "--labels", str(PAIRS), "--no-plots", "--json"))
        run = summary["labels"]["current_run"]
        reference = summary.get("reference", {})
        rows.append(
            {
                "config": name,
                "candidates": counts["candidate_pairs"],
                "duplicate_pairs": counts["duplicate_pairs"],
                "edge_precision": run["edge_precision"],
                "edge_recall": run["edge_recall"],
                "cluster_precision": run["precision"],
                "cluster_recall": run["recall"],
                "recall_of_exact_pairs": reference.get("lsh_recall_at_threshold"),
            }
        )
        print(f"{name}: done", file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="/tmp/short-bench")
    parser.add_argument("--threshold", type=float, default=0.7)
    args = parser.parse_args()
    rows = measure(Path(args.work), args.threshold)
    columns = list(rows[0])
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()) + " |")


if __name__ == "__main__":
    main()
