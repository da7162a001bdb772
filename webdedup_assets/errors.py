"""User-facing errors: the message names the problem (file, column, doc_id, parameter).

Defined at the top of the package so that every layer (ingest, engine, defs, cli) raises the
same type without importing a layer above it.
"""


class Flag:
    """A flag a signal handler can set: no lock (a threading.Event takes one, and a second signal
    arriving inside its set() waited on that lock forever)."""

    def __init__(self) -> None:
        self.value = False

    def set(self) -> None:
        self.value = True

    def clear(self) -> None:
        self.value = False

    def is_set(self) -> bool:
        return self.value


# Set by the command line's Ctrl-C handler. The KeyboardInterrupt it raises can be lost inside a
# DuckDB query that ends anyway, so the pipeline also looks at this before each stage.
INTERRUPTED = Flag()


class WebdedupError(Exception):
    """Bad input, bad parameters or incompatible upstream data. Shown to users as is."""
