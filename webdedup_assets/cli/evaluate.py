"""`webdedup evaluate`: the parser and command, hooked into cli.py by add_evaluate_parser / cmd_evaluate."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .folders import storage_to_read

EXIT_OK, EXIT_ERROR = 0, 2


def _thresholds(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"--thresholds takes comma-separated numbers, got {text!r}") from err
    if not values or any(not 0.0 < v <= 1.0 for v in values):
        raise argparse.ArgumentTypeError(f"--thresholds must be numbers in (0, 1], got {text!r}")
    return values


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from err
    if value < 2:
        raise argparse.ArgumentTypeError(f"expected an integer >= 2, got {value}")
    return value


def add_evaluate_parser(sub) -> argparse.ArgumentParser:
    evaluate = sub.add_parser(
        "evaluate",
        help="measure the quality of a stored run: labels, an exact reference, sweeps, plots, cluster diagnostics",
        description="Evaluate the run stored under --output (its storage DIR/_storage unless --storage). "
        "With --labels (pairs file: left_doc_id,right_doc_id,is_duplicate) or --label-column (a cluster "
        "label column of the documents): pairwise precision, recall, F1 and adjusted Rand index of the run "
        "and of a sweep of thresholds. Always (unless --no-reference): an exact similarity join (prefix "
        "filtering, not LSH) gives every pair with Jaccard >= the lowest threshold, and the LSH miss rate "
        "per Jaccard bin. Writes CSV tables, PNG plots and summary.json to DIR/evaluation. Exit 0 on "
        "success, 2 on bad labels or parameters.",
    )
    evaluate.add_argument("--output", default="output", help="output folder of the run (default: output)")
    evaluate.add_argument(
        "--storage", default=None, help="storage root of the run (default: the one the output was published from)"
    )
    evaluate.add_argument(
        "--evaluation-dir", default=None, help="where tables and plots go (default: OUTPUT/evaluation)"
    )
    evaluate.add_argument(
        "--labels",
        default=None,
        help="CSV or Parquet of left_doc_id,right_doc_id,is_duplicate; with --label-column, a per-document "
        "file of doc_id and that label column (e.g. a generator's ground truth)",
    )
    evaluate.add_argument(
        "--label-column",
        default=None,
        help="a column holding a true cluster label: of the documents, or of the --labels file",
    )
    evaluate.add_argument(
        "--thresholds",
        type=_thresholds,
        default=None,
        help="comma-separated thresholds of the sweep (default 0.5,0.55,...,1.0; the run's own is always added)",
    )
    evaluate.add_argument(
        "--sample", type=_positive, default=None, help="exact reference over N sampled documents (default: all)"
    )
    evaluate.add_argument("--seed", type=int, default=0, help="seed of the document sample (default 0)")
    evaluate.add_argument(
        "--reference-floor",
        type=float,
        default=None,
        help="lowest Jaccard of the exact reference (default: the lowest threshold of the sweep)",
    )
    evaluate.add_argument("--no-reference", action="store_true", help="skip the exact reference")
    evaluate.add_argument(
        "--max-pair-slots",
        type=_positive,
        default=None,
        help="the exact reference is refused when its join would verify more pair slots (pairs of documents "
        "sharing a rare shingle; a cluster of n identical pages makes n^2/2) (default 50,000,000)",
    )
    evaluate.add_argument(
        "--giant-size", type=_positive, default=50, help="clusters of this size or more are flagged giant (default 50)"
    )
    evaluate.add_argument("--no-plots", action="store_true", help="tables only, no PNGs")
    evaluate.add_argument("--json", action="store_true", help="print the figures as JSON")
    return evaluate


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def _print_summary(summary: dict) -> None:
    run = summary["run"]
    print(f"webdedup evaluate ({summary['storage_root']}):")
    print(
        f"  run: {run['documents']} documents, threshold {run['threshold']}, {run['bands']} bands x {run['rows']} "
        f"rows (P(candidate | threshold) {run['candidate_probability_at_threshold']}), "
        f"{run['candidate_pairs']} candidates, {run['duplicate_pairs']} duplicate pairs"
    )
    if "labels" in summary:
        lab = summary["labels"]
        cur = lab["current_run"]
        print(
            f"  labels: precision {_fmt(cur['precision'])}  recall {_fmt(cur['recall'])}  F1 {_fmt(cur['f1'])}  "
            f"ARI {_fmt(cur['ari'])}  (best F1 {_fmt(lab['best_f1'])} at threshold {lab['best_f1_threshold']})"
        )
        print("  threshold  precision  recall  f1      ari")
        for row in summary["threshold_sweep"]:
            print(
                f"  {row['threshold']:<9g}  {_fmt(row['precision']):<9}  {_fmt(row['recall']):<6}  "
                f"{_fmt(row['f1']):<6}  {_fmt(row['ari'])}"
            )
    if "reference" in summary:
        ref = summary["reference"]
        scope = f"a sample of {ref['documents']} documents" if ref["sampled"] else f"all {ref['documents']} documents"
        print(
            f"  exact reference over {scope}: {ref['exact_pairs_at_threshold']} pairs with J >= {run['threshold']}, "
            f"LSH found {ref['found_by_lsh_at_threshold']} (recall {_fmt(ref['lsh_recall_at_threshold'])}, "
            f"miss rate {_fmt(ref['lsh_miss_rate_at_threshold'])})"
        )
        print("  jaccard bin   exact pairs  found  observed  expected")
        for row in summary["jaccard_bins"]:
            if row["exact_pairs"]:
                label = "1.00" if row["jaccard_from"] >= 1 else f"{row['jaccard_from']:.2f}-{row['jaccard_to']:.2f}"
                print(
                    f"  {label:<12}  {row['exact_pairs']:>11}  {row['lsh_candidates']:>5}  "
                    f"{_fmt(row['observed_candidate_rate']):>8}  {_fmt(row['expected_candidate_rate']):>8}"
                )
    clusters = summary["clusters"]
    print(
        f"  clusters: {clusters['multi_document_clusters']} with several documents, largest {clusters['largest']}, "
        f"{clusters['giant']} giant (>= {clusters['giant_size']}), {clusters['low_cohesion']} low-cohesion "
        f"(a member below the threshold to its representative)"
    )
    for example in clusters["flagged_examples"]:
        print(
            f"    {example['cluster_id']}: size {example['size']}, min Jaccard to representative "
            f"{_fmt(example['min_jaccard_to_representative'])} ({example['flag']})"
        )
    print(f"  tables and plots in {summary['evaluation_dir']}")


def _folders(args: argparse.Namespace) -> tuple[Path | None, Path]:
    """The run's storage root (None, with the error printed, when there is no stored run) and
    where tables and plots go."""
    output_dir = Path(args.output).expanduser().resolve()
    storage_root = storage_to_read(output_dir, args.storage)
    evaluation_dir = output_dir / "evaluation"
    if args.evaluation_dir:
        evaluation_dir = Path(args.evaluation_dir).expanduser().resolve()
    if not storage_root.is_dir():
        print(f"webdedup: error: no stored run under {storage_root}; run `webdedup run` first", file=sys.stderr)
        return None, evaluation_dir
    from ..storage.transaction import reading_warnings

    for warning in reading_warnings(storage_root, output_dir):
        print(f"webdedup: warning: {warning}", file=sys.stderr)
    return storage_root, evaluation_dir


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ..engine.verify import damage_named
    from ..errors import WebdedupError
    from ..quality.evaluate import evaluate_run
    from ..storage.store import Store

    storage_root, evaluation_dir = _folders(args)
    if storage_root is None:
        return EXIT_ERROR
    try:
        with damage_named(Store(storage_root)):
            summary = evaluate_run(
                Store(storage_root),
                evaluation_dir,
                labels_path=Path(args.labels) if args.labels else None,
                label_column=args.label_column,
                thresholds=args.thresholds,
                sample=args.sample,
                reference=not args.no_reference,
                reference_floor=args.reference_floor,
                giant_size=args.giant_size,
                seed=args.seed,
                plots=not args.no_plots,
                max_pair_slots=args.max_pair_slots,
            )
    except WebdedupError as err:
        print(f"webdedup: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        _print_summary(summary)
    return EXIT_OK


def _ints(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from err
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from err
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


def add_tune_parser(sub) -> argparse.ArgumentParser:
    tune = sub.add_parser(
        "tune",
        help="recommend num-perm x bands x rows for a target recall at a threshold, measured on the stored corpus",
        description="For the corpus of the run stored under --output: every pair with Jaccard >= THRESHOLD by "
        "an exact similarity join, then for each num-perm and bands x rows the measured LSH recall of those "
        "pairs and the number of candidate pairs the band join creates. Recommends the banding with the "
        "fewest candidates that reaches --target-recall and prints the trade-off table. Writes tune.csv and "
        "tune.json to DIR/evaluation. Exit 0 with a recommendation, 1 when no banding reaches the target, "
        "2 on bad parameters.",
    )
    tune.add_argument("--output", default="output", help="output folder of the run (default: output)")
    tune.add_argument(
        "--storage", default=None, help="storage root of the run (default: the one the output was published from)"
    )
    tune.add_argument("--evaluation-dir", default=None, help="where tune.csv goes (default: OUTPUT/evaluation)")
    tune.add_argument("--threshold", type=_fraction, default=None, help="Jaccard threshold (default: the run's)")
    tune.add_argument("--target-recall", type=_fraction, default=0.99, help="recall to reach (default 0.99)")
    tune.add_argument(
        "--min-probability",
        type=float,
        default=0.0,
        help="only bandings with P(candidate | threshold) >= this on the S-curve (default 0: any)",
    )
    tune.add_argument(
        "--num-perm", type=_ints, default=None, help="MinHash sizes to try (default 64,96,120,128,130,160)"
    )
    tune.add_argument("--sample", type=_positive, default=None, help="use N sampled documents (default: all)")
    tune.add_argument("--seed", type=int, default=0, help="seed of the document sample (default 0)")
    tune.add_argument(
        "--max-pair-slots",
        type=int,
        default=50_000_000,
        help="bandings whose band join needs more pair slots are reported, not counted (default 50,000,000)",
    )
    tune.add_argument("--json", action="store_true", help="print the figures as JSON")
    return tune


def _tune_table(summary: dict) -> str:
    """One line per banding (MinHash) or blocking (SimHash) tried, the recommended one marked."""
    simhash = summary["fingerprint_method"] == "simhash"
    lines = [
        "  max_hamming  key_blocks  keys  recall    candidates"
        if simhash
        else "  num_perm  bands x rows  P(cand|T)  recall    candidates"
    ]
    order = (lambda r: (r["max_hamming"], r["key_blocks"])) if simhash else (lambda r: (r["num_perm"], r["rows"]))
    for row in sorted(summary["bandings"], key=order):
        mark = "  <- recommended" if row is summary["recommended"] else ""
        candidates = (
            f"{row['candidates']:,}" if row["candidates"] is not None else f"over budget ({row['pair_slots']:,} slots)"
        )
        if simhash:
            shape = f"  {row['max_hamming']:>11}  {row['key_blocks']:>10}  {row['keys']:>4}"
        else:
            probability = row["p_candidate_at_threshold"]
            shape = f"  {row['num_perm']:>8}  {row['bands']:>5} x {row['rows']:<5}  {probability:<9.4f}"
        lines.append(f"{shape}  {_fmt(row['recall']):<8}  {candidates}{mark}")
    return "\n".join(lines)


def cmd_tune(args: argparse.Namespace) -> int:
    from ..engine.verify import damage_named
    from ..errors import WebdedupError
    from ..quality.tune import tune
    from ..storage.store import Store

    storage_root, evaluation_dir = _folders(args)
    if storage_root is None:
        return EXIT_ERROR
    try:
        with damage_named(Store(storage_root)):
            summary = tune(
                Store(storage_root),
                evaluation_dir,
                threshold=args.threshold,
                target_recall=args.target_recall,
                num_perms=args.num_perm,
                sample=args.sample,
                seed=args.seed,
                max_pair_slots=args.max_pair_slots,
                min_probability=args.min_probability,
            )
    except WebdedupError as err:
        print(f"webdedup: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    best = summary["recommended"]
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        scope = f"a sample of {summary['documents']}" if summary["sampled"] else f"all {summary['documents']}"
        print(
            f"webdedup tune: {summary['exact_pairs_at_threshold']} exact pairs with J >= {summary['threshold']} "
            f"among {scope} documents; target recall {summary['target_recall']}"
        )
        print(_tune_table(summary))
        if best is not None:
            flags = (
                f"--fingerprint-method simhash --max-hamming {best['max_hamming']} --key-blocks {best['key_blocks']}"
                if summary["fingerprint_method"] == "simhash"
                else f"--num-perm {best['num_perm']} --bands {best['bands']} --rows {best['rows']}"
            )
            print(
                f"  recommended (recall {best['recall']}, {best['candidates']:,} candidates), as flags of run:\n"
                f"    {flags} --threshold {summary['threshold']}"
            )
    if not summary["exact_pairs_at_threshold"]:
        print(
            f"webdedup: no pair of these documents reaches Jaccard {summary['threshold']}: nothing to tune",
            file=sys.stderr,
        )
        return 1
    if best is None:
        print(
            f"webdedup: no banding tried reaches recall {args.target_recall}"
            + (f" with P(candidate | threshold) >= {args.min_probability}" if args.min_probability else ""),
            file=sys.stderr,
        )
        return 1
    return EXIT_OK
