"""The command line flag of each parameter (webdedup_assets.params), for the parsers and the errors."""

import sys

from .. import params

# Flags whose name is not the parameter's own (`--shingle-size` for shingle_size).
FLAG_NAMES = {
    "input_format": "--format",
    "warc_max_record_bytes": "--max-record-bytes",
    "cc_accept_terms_of_use": "--accept-commoncrawl-terms",
    "cc_timeout_seconds": "--cc-timeout",
    "cc_max_retries": "--cc-retries",
    "cc_retry_backoff_seconds": "--cc-backoff",
}


def flag(name: str) -> str:
    """The command line flag of a parameter of webdedup_assets.params."""
    return FLAG_NAMES.get(name) or "--" + name.replace("_", "-")


def error_text(err: Exception) -> str:
    """An error's message for the command line: a parameter's named by its flag (also in a stage's
    refusal that names parameters: pipeline.StageFailed's advice)."""
    err = getattr(err, "advice", None) or err
    return err.render(flag) if isinstance(err, params.ParamError) else str(err)


def warn_of_empty_text(counts: dict) -> None:
    """A warning when pages hold no word (their text empty or missing: a text column mapped to a
    field most records lack kept them as empty pages without a word)."""
    empty = counts.get("empty_documents") or 0
    if empty:
        print(
            f"webdedup: warning: {empty} of {counts['documents']} document(s) hold no word (an empty or missing "
            "text; is --text-column right?): each is a cluster of its own",
            file=sys.stderr,
        )
