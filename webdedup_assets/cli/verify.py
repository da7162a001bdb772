"""`webdedup verify`: the parser and command, hooked into cli.py by add_verify_parser / cmd_verify."""

from __future__ import annotations

import argparse
import sys

from ..errors import WebdedupError
from .folders import output_of, storage_to_read

EXIT_OK, EXIT_ERROR = 0, 2


def add_verify_parser(sub) -> argparse.ArgumentParser:
    verify = sub.add_parser(
        "verify",
        help="check a storage and its published outputs end to end (changes nothing)",
        description="Every Parquet file of the storage readable (footer, row groups within the file, the rows its "
        "stage recorded), every JSON file parsed, every body index whole; manifest.json of --output readable and "
        "every output it lists present with its size and the row counts of its counts. One line per problem "
        "(the file, what is wrong, the remedy) on stdout. Exit 0 when all is whole, 2 otherwise.",
    )
    verify.add_argument(
        "--output", default=None, help="output folder of the corpus (default: output, unless --storage is given)"
    )
    verify.add_argument(
        "--storage",
        default=None,
        help="storage root (default: the one the output was published from, else OUTPUT/_storage)",
    )
    verify.add_argument("--storage-only", action="store_true", help="check the storage only, not the outputs")
    return verify


def cmd_verify(args: argparse.Namespace) -> int:
    from ..engine.verify import interrupted_problems, output_problems, publication_problems, storage_problems
    from ..storage.store import Store

    output_dir = output_of(args.output or "output")
    try:
        root = storage_to_read(output_dir, args.storage)
    except WebdedupError as err:
        print(f"webdedup: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    storage_only = args.storage_only or (args.storage and not args.output)
    if not root.is_dir():
        print(f"webdedup: error: no storage under {root}", file=sys.stderr)
        return EXIT_ERROR
    problems = storage_problems(Store(root)) + interrupted_problems(Store(root))
    if not storage_only:
        problems += output_problems(output_dir) or publication_problems(Store(root), output_dir)
    for problem in problems:
        print(problem)
    if not args.quiet:
        shown = f"{root}" if storage_only else f"{root} and {output_dir}"
        print(f"webdedup verify: {len(problems)} problem(s) in {shown}", file=sys.stderr)
    return EXIT_ERROR if problems else EXIT_OK
