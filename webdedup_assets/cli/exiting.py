"""The end of a `webdedup` command's process (cli.entry)."""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from typing import NoReturn


def end_process(code: int) -> NoReturn:
    """End the process with status `code` once the command has returned, without the interpreter
    tearing down numba's and pyarrow's (and, where imported, dagster's) module graphs one object at
    a time, which no one waits for usefully. Every file the command wrote is closed by then; the
    exit handlers still run (logging is flushed, temporary folders removed, a Spark gateway
    stopped). Only when no other thread is
    running: otherwise the normal exit joins them."""
    _flush()
    if threading.active_count() == 1:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the command has ended: a Ctrl-C now changes nothing
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        atexit._run_exitfuncs()  # what a normal exit runs first: logging.shutdown, weakref finalizers
        _flush()
        os._exit(code)
    sys.exit(code)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # the reader went away (`| head`), or it was closed
            pass
