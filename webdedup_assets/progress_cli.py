"""The command line's progress sink (see engine.progress): a live tqdm bar per task when stderr is a
terminal, plain lines (every PLAIN_INTERVAL seconds and when a task ends) when it is not, e.g. in
CI logs. `webdedup run --quiet` installs no sink at all."""

from __future__ import annotations

import io
import os
import sys
import time
from typing import Any, TextIO

PLAIN_INTERVAL = 10.0  # seconds between two plain lines of one task


def _count(value: float) -> str:
    return f"{value:,.0f}"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class PlainLines:
    """One line per PLAIN_INTERVAL seconds: count, share of the total, rate, ETA; a last line at close."""

    def __init__(self, name: str, total: int | None, unit: str, stream: TextIO) -> None:
        self.name, self.total, self.unit, self.stream = name, total, unit, stream
        self.done = 0
        self.figures: dict[str, Any] = {}
        self.started = self.last = time.monotonic()

    def _line(self, final: bool) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed
        text = f"  {self.name:<18} {_count(self.done)}"
        if self.total is not None and not final:
            share = self.done / self.total if self.total else 1.0
            text += f"/{_count(self.total)} {self.unit} ({share:.0%})"
        else:
            text += f" {self.unit}"
        text += f" in {elapsed:.2f} s, {_count(rate)} {self.unit}/s"
        if not final and self.total and rate > 0:
            text += f", ETA {_duration((self.total - self.done) / rate)}"
        extra = ", ".join(f"{k} {v}" for k, v in self.figures.items())
        return text + (f", {extra}" if extra else "")

    def update(self, n: int, **figures: Any) -> None:
        self.done += n
        self.figures.update(figures)
        now = time.monotonic()
        if now - self.last >= PLAIN_INTERVAL and (self.total is None or self.done < self.total):
            self.last = now
            print(self._line(final=False), file=self.stream, flush=True)

    def close(self) -> None:
        print(self._line(final=True), file=self.stream, flush=True)


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
    from .core.kernel.warm import is_cold

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
        return (Bar if live else PlainLines)(name, total, unit, stream)

    return sink
