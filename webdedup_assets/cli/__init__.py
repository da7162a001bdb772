"""The `webdedup` command line: main.py parses and dispatches, one module per command group.
Nothing here imports Dagster."""

import os
import signal
import sys
import threading
from typing import Any

from ..errors import INTERRUPTED

_RECEIVED: list[int] = []  # the signals that stopped the command: SIGTERM (`timeout`, systemd) as Ctrl-C


def _interrupt(signum: int, frame: Any) -> None:
    if frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        # inside the import machinery (a module lock's weakref callback prints the KeyboardInterrupt
        # as an ignored exception's traceback and drops it): the signal again in a moment, outside
        threading.Timer(0.05, os.kill, (os.getpid(), signum)).start()
        return
    _RECEIVED.append(signum)
    if INTERRUPTED.is_set():  # a second Ctrl-C: the first one's undo is under way and runs to its end
        return
    INTERRUPTED.set()
    signal.default_int_handler(signum, frame)  # KeyboardInterrupt: what the command changed is undone


def entry() -> None:
    """The `webdedup` command and `python -m webdedup_assets.cli.main`: main(), then the process ends
    with its status (exiting.end_process: no module teardown). Ctrl-C ends it with status 130 and
    one line (what the command changed is put back on the way, and said so), SIGTERM the same way
    with status 143; a reader of its output that stops early (`| head`), silently with status 141.
    The handlers are set before the command's modules are imported: a Ctrl-C while they load is
    one line too."""
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    from .exiting import end_process

    try:
        from .main import main

        status = main()
    except BrokenPipeError:  # the reader of stdout went away (`| head`): end as `head`'s writers do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 128 + signal.SIGPIPE
    except BaseException as err:
        # after a Ctrl-C, whatever stopped the command is the interruption (a DuckDB query raises
        # its own "Query interrupted" error instead of the KeyboardInterrupt)
        if not (isinstance(err, KeyboardInterrupt) or (isinstance(err, Exception) and INTERRUPTED.is_set())):
            raise
        terminated = signal.SIGTERM in _RECEIVED
        print(f"webdedup: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
        status = 128 + (signal.SIGTERM if terminated else signal.SIGINT)
    end_process(status)
