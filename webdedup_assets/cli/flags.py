"""The command line flag of each parameter (webdedup_assets.params), for the parsers and the errors."""

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
    """An error's message for the command line: a parameter's named by its flag."""
    return err.render(flag) if isinstance(err, params.ParamError) else str(err)
