"""User-facing errors: the message names the problem (file, column, doc_id, parameter).

Defined at the top of the package so that every layer (ingest, engine, defs, cli) raises the
same type without importing a layer above it.
"""


class WebdedupError(Exception):
    """Bad input, bad parameters or incompatible upstream data. Shown to users as is."""
