"""`webdedup explain` and `webdedup inspect`: parsers and printing, hooked into cli.py."""

from __future__ import annotations

import argparse
import json
import sys
import unicodedata
from typing import Any

from .folders import output_of, storage_to_read

EXIT_OK, EXIT_ERROR = 0, 2


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", default="output", help="output folder of the run (default: output)")
    parser.add_argument(
        "--storage", default=None, help="storage root of the run (default: the one the output was published from)"
    )
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")


def add_explain_parsers(sub) -> None:
    explain = sub.add_parser(
        "explain",
        help="why two pages are (or are not) duplicates",
        description="For two doc_ids of the run stored under --output: token and shingle counts, shared "
        "shingles, exact Jaccard, MinHash estimate, the bands they share (or, when they never became a "
        "candidate, P(candidate | J) for this banding), the verdict and its reason, whether they share a "
        "cluster, and the words that differ. Exit 2 on an unknown doc_id.",
    )
    explain.add_argument("left", metavar="LEFT_DOC_ID")
    explain.add_argument("right", metavar="RIGHT_DOC_ID")
    _common(explain)
    inspect = sub.add_parser(
        "inspect",
        help="the members of a cluster and why its representative won",
        description="For a cluster_id (or the cluster of a doc_id) of the run stored under --output: its "
        "members with domain, date, token count and exact Jaccard to the representative, and the ordering "
        "key of the representative policy that chose it. Exit 2 on an unknown id.",
    )
    inspect.add_argument("ident", metavar="CLUSTER_ID|DOC_ID")
    _common(inspect)


def _store(args: argparse.Namespace):
    from ..storage.store import Store
    from ..storage.transaction import reading_warnings

    output_dir = output_of(args.output)
    root = storage_to_read(output_dir, args.storage)
    if not root.is_dir():
        raise FileNotFoundError(f"no stored run under {root}; run `webdedup run INPUT --output {args.output}` first")
    for warning in reading_warnings(root, output_dir):
        print(f"webdedup: warning: {warning}", file=sys.stderr)
    return Store(root)


def _answer(args: argparse.Namespace, compute) -> tuple[int, Any]:
    from ..engine.verify import damage_named
    from ..errors import WebdedupError
    from ..storage.state import writer_lock

    try:
        store = _store(args)
        from .progress import announce_cold_kernels

        announce_cold_kernels()
        with (
            writer_lock(store.root, exclusive=False, timeout=30.0, purpose=f"webdedup {args.command}"),
            damage_named(store),
        ):
            return EXIT_OK, compute(store)
    except (WebdedupError, FileNotFoundError) as err:
        print(f"webdedup: error: {err}", file=sys.stderr)
        return EXIT_ERROR, None


def _num(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _columns(value: Any) -> int:
    """Terminal columns a text takes: East Asian wide and full-width characters two, combining
    marks none (ids and domains in CJK scripts would push the columns out of line)."""
    return sum(
        2 if unicodedata.east_asian_width(ch) in "WF" else 0 if unicodedata.combining(ch) else 1 for ch in str(value)
    )


def _pad(value: Any, width: int) -> str:
    return f"{value!s}{' ' * (width - _columns(value))}"


def format_explain(a: dict[str, Any]) -> str:
    left, right, p = a["left"], a["right"], a["parameters"]
    width = max(_columns(left[k]) for k in ("doc_id", "domain", "crawled_at", "cluster_id"))
    lines = [
        f"{'':<22}{_pad(left['doc_id'], width)}  {right['doc_id']}",
        f"{'domain':<22}{_pad(left['domain'], width)}  {right['domain']}",
        f"{'crawled_at':<22}{_pad(left['crawled_at'], width)}  {right['crawled_at']}",
        f"{'tokens':<22}{_pad(left['token_count'], width)}  {right['token_count']}",
        f"{'shingles':<22}{_pad(left['shingle_count'], width)}  {right['shingle_count']}",
        f"{'cluster':<22}{_pad(left['cluster_id'], width)}  {right['cluster_id']}",
        "",
        f"{'shared shingles':<22}{a['shared_shingles']} ({p['shingle_size']}-{p.get('shingle_unit', 'word')} shingles)",
        f"{'exact Jaccard':<22}{_num(a['exact_jaccard'])}"
        + (f" (threshold {p['threshold']})" if p["threshold"] is not None else ""),
    ]
    lines += _simhash_lines(a) if p.get("fingerprint_method") == "simhash" else _minhash_lines(a)
    lines.append(f"{'candidate':<22}{'yes' if a['candidate'] else 'no'}")
    lines.append(f"{'verdict':<22}{a['verdict']}: {a['reason']}")
    lines.append(f"{'same cluster':<22}{'yes' if a['same_cluster'] else 'no'}")
    diff = a["diff"]
    lines.append("")
    if not diff["differing_stretches"]:
        lines.append(f"normalized words: identical ({diff['left_tokens']} tokens)")
    else:
        first = "" if len(diff["shown"]) == diff["differing_stretches"] else f", first {len(diff['shown'])}"
        where = "" if diff.get("compared") is None else f" in the first {diff['compared']} words (compared up to there)"
        lines.append(
            f"normalized words: {diff['matching_tokens']} in common, {diff['differing_stretches']} differing "
            f"stretch(es){where}{first}:"
        )
        for hunk in diff["shown"]:
            lines.append(f"  @{hunk['left_position']}/{hunk['right_position']} {hunk['op']}")
            lines.append(f"    - {hunk['left'] or '(nothing)'}")
            lines.append(f"    + {hunk['right'] or '(nothing)'}")
    return "\n".join(lines)


def _minhash_lines(a: dict[str, Any]) -> list[str]:
    p, bands = a["parameters"], a["shared_bands"]
    shown = ", ".join(map(str, bands[:20])) + (" ..." if len(bands) > 20 else "")
    return [
        f"{'MinHash estimate':<22}{_num(a['minhash_estimate'])} ({p['num_perm']} values)",
        f"{'shared bands':<22}{len(bands)} of {p['bands']} ({shown})"
        if bands
        else f"{'shared bands':<22}0 of {p['bands']}: never in one LSH bucket",
        f"{'P(candidate | J)':<22}{_num(a['candidate_probability'])} for J={_num(a['exact_jaccard'])}, "
        f"{p['bands']} bands x {p['rows']} rows",
    ]


def _blocking(p: dict[str, Any]) -> str:
    if p.get("key_blocks", 1) == 1:
        return f"{p['blocks']} blocks of the 64 bits"
    return f"{p['keys']} keys of {p['key_blocks']} of {p['blocks']} blocks of the 64 bits"


def _simhash_lines(a: dict[str, Any]) -> list[str]:
    p, blocks, distance = a["parameters"], a["shared_bands"], a["hamming_distance"]
    return [
        f"{'SimHash distance':<22}{'-' if distance is None else distance} of 64 bits (max_hamming {p['max_hamming']})",
        f"{'shared keys':<22}{len(blocks)} of {p['keys']} ({', '.join(map(str, blocks))})"
        if blocks
        else f"{'shared keys':<22}0 of {p['keys']}: every key differs",
        f"{'P(candidate | d)':<22}{_num(a['candidate_probability'])} for d={'-' if distance is None else distance}, "
        f"{_blocking(p)} (1 within max_hamming)",
    ]


def format_inspect(c: dict[str, Any]) -> str:
    lines = [
        f"{c['cluster_id']}: {c['size']} member(s); representative {c['representative']}",
        f"policy {c['policy']} (ORDER BY {c['order_by']}): {c['why']['text']}",
        "",
    ]
    ids, domains = (
        max([_columns(name), *(_columns(m[name]) for m in c["members"])]) + 2 for name in ("doc_id", "domain")
    )
    lines.append(f"  {_pad('doc_id', ids)}{_pad('domain', domains)}{'crawled_at':<12}{'tokens':>7}  {'Jaccard':>7}")
    for m in c["members"]:
        mark = "*" if m["representative"] else " "
        lines.append(
            f"{mark} {_pad(m['doc_id'], ids)}{_pad(m['domain'], domains)}{m['crawled_at']!s:<12}"
            f"{m['token_count']!s:>7}  {m['jaccard_to_representative']:>7.4f}"
        )
    if c["members_shown"] < c["size"]:
        lines.append(f"  ... {c['size'] - c['members_shown']} more")
    return "\n".join(lines)


def cmd_explain(args: argparse.Namespace) -> int:
    from ..quality.explain import explain_pair

    code, answer = _answer(args, lambda store: explain_pair(store, args.left, args.right))
    if answer is not None:
        print(json.dumps(answer, indent=2, default=str) if args.json else format_explain(answer))
    return code


def cmd_inspect(args: argparse.Namespace) -> int:
    from ..quality.explain import inspect_cluster

    code, answer = _answer(args, lambda store: inspect_cluster(store, args.ident))
    if answer is not None:
        print(json.dumps(answer, indent=2, default=str) if args.json else format_inspect(answer))
    return code
