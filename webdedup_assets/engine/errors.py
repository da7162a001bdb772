"""User-facing errors: the message names the problem (file, column, doc_id, parameter)."""


class WebdedupError(Exception):
    """Bad input, bad parameters or incompatible upstream data. Shown to users as is."""
