"""The command line's progress sink (see engine.progress): a live tqdm bar per task when stderr is a
terminal, plain lines (progress.PlainLines: every 10 s and when a task ends) when it is not, e.g. in
CI logs. `webdedup run --quiet` installs no sink at all."""

from __future__ import annotations

import io
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from ..progress import PlainLines, installed

PROGRESS_LOGGER = "webdedup.progress"


class Bar:
    """A live tqdm bar (rate, and ETA when the total is known), left on screen when done."""

    def __init__(self, name: str, total: int | None, unit: str, stream: TextIO) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            total=total,
            desc=f"  {name}",
            unit=f" {unit}",
            unit_scale=unit == "B",  # bytes as kB/MB/GB; counts as they are
            file=stream,
            mininterval=0.2,
            dynamic_ncols=True,
            leave=True,
        )

    def update(self, n: int, **figures: Any) -> None:
        if figures:
            self.bar.set_postfix(figures, refresh=False)
        self.bar.update(n)

    def close(self) -> None:
        self.bar.close()


def announce_cold_kernels() -> None:
    """Say why the first run of a fresh install is slow (make install compiles the kernels ahead)."""
    from ..core.kernel.warm import is_cold

    if is_cold():
        print("webdedup: compiling kernels (first run only, ~15 s)", file=sys.stderr, flush=True)


def _columns(stream: TextIO) -> int:
    """The terminal's width (a terminal of unknown or no width gets plain lines, not empty bars)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return 80  # a terminal-like stream without a descriptor (tests)


def stderr_sink(stream: TextIO | None = None):
    """The sink `webdedup` installs: bars on a terminal, plain lines otherwise."""
    stream = stream if stream is not None else sys.stderr
    live = hasattr(stream, "isatty") and stream.isatty() and _columns(stream) >= 40

    def sink(name: str, total: int | None, unit: str):
        return Bar(name, total, unit, stream) if live else PlainLines(name, total, unit, stream)

    return sink


@contextmanager
def progress_shown(quiet: bool, headline: str | None = None) -> Iterator[None]:
    """A command's progress on stderr for the block: one line per stage as it starts and ends,
    and the live counts of long stages; nothing with --quiet."""
    progress = logging.getLogger(PROGRESS_LOGGER)
    handler = logging.StreamHandler(sys.stderr)
    if not quiet:
        handler.setFormatter(logging.Formatter("  %(message)s"))
        progress.addHandler(handler)
        progress.setLevel(logging.INFO)
        if headline:
            print(headline, file=sys.stderr)
        announce_cold_kernels()
    try:
        with installed(None if quiet else stderr_sink()):
            yield
    finally:
        progress.removeHandler(handler)  # a second command in the same process does not print twice
