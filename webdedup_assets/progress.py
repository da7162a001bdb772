"""Progress of long work (documents fingerprinted, pairs scored, WARC records read, Common Crawl
ranges fetched), reported by the engine and shown by whatever sink the caller installs.

The engine only counts: `with task("fingerprinted", total=n, unit="docs") as t: t.advance(k)`.
With no sink (library use) a task costs one attribute check per advance. The CLI installs a sink
for its run (webdedup_assets.cli.progress: live bars on a terminal, plain lines otherwise,
nothing with --quiet); the Dagster layer sets the default sink, `log_sink`, so that runs
launched from the UI log the same figures as plain lines. rich/tqdm are never imported here.

A sink is a callable `sink(name, total, unit) -> handle` whose handle has `update(n, **figures)`
(n more units done; figures such as failures so far) and `close()`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TextIO


class Handle(Protocol):
    def update(self, n: int, **figures: Any) -> None: ...

    def close(self) -> None: ...


Sink = Callable[[str, "int | None", str], Handle]

_sink: Sink | None = None
_default: Sink | None = None  # used outside any `installed` block (e.g. runs launched from the Dagster UI)
_lock = threading.Lock()


def set_default(sink: Sink | None) -> None:
    """The sink of work done outside any `installed` block (the Dagster layer sets a log sink)."""
    global _default
    _default = sink


@contextmanager
def installed(sink: Sink | None) -> Iterator[None]:
    """Show the engine's progress through `sink` for the block (None: show nothing)."""
    global _sink
    with _lock:
        previous, _sink = _sink, (sink if sink is not None else _quiet)
    try:
        yield
    finally:
        with _lock:
            _sink = previous


def _quiet(name: str, total: int | None, unit: str) -> Handle:  # installed(None): show nothing
    raise AssertionError("never called")


class Task:
    """One unit of long work; advance() is thread-safe and cheap when no sink is installed."""

    def __init__(self, name: str, total: int | Callable[[], int] | None, unit: str) -> None:
        self.done = 0
        self._lock = threading.Lock()
        sink = _sink if _sink is not None else _default
        if sink is _quiet:
            sink = None
        if sink is not None and callable(total):
            total = total()  # a total that costs a little to count is counted only when shown
        self.name, self.total, self.unit = name, total, unit
        self._handle = sink(name, total, unit) if sink is not None else None

    @property
    def shown(self) -> bool:
        """Whether a sink shows this task (work done only to report progress can be skipped)."""
        return self._handle is not None

    def advance(self, n: int = 1, **figures: Any) -> None:
        if self._handle is None:
            return
        with self._lock:
            self.done += n
            self._handle.update(n, **figures)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


@contextmanager
def task(name: str, total: int | Callable[[], int] | None = None, unit: str = "items") -> Iterator[Task]:
    """A progress task for the block: closed (its final line shown) when the block ends."""
    current = Task(name, total, unit)
    try:
        yield current
    finally:
        current.close()


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


class _LogStream:
    """A stream whose lines go to a logger (PlainLines print into it)."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger, self.pending = logger, ""

    def write(self, text: str) -> int:
        self.pending += text
        while "\n" in self.pending:
            line, self.pending = self.pending.split("\n", 1)
            self.logger.info(line.strip())
        return len(text)

    def flush(self) -> None:
        pass


def log_sink(logger: logging.Logger) -> Sink:
    """Plain progress lines as log records (the Dagster layer passes its run logger)."""
    stream = _LogStream(logger)
    return lambda name, total, unit: PlainLines(name, total, unit, stream)
