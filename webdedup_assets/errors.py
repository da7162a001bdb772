"""User-facing errors: the message names the problem (file, column, doc_id, parameter).

Defined at the top of the package so that every layer (ingest, engine, defs, cli) raises the
same type without importing a layer above it.
"""

import threading

# Set by the command line's Ctrl-C handler. The KeyboardInterrupt it raises can be lost inside a
# DuckDB query that ends anyway, so the pipeline also looks at this before each stage.
INTERRUPTED = threading.Event()


class WebdedupError(Exception):
    """Bad input, bad parameters or incompatible upstream data. Shown to users as is."""
