"""Progress of long work (documents fingerprinted, pairs scored, WARC records read, Common Crawl
ranges fetched), reported by the engine and shown by whatever sink the caller installs.

The engine only counts: `with task("fingerprinted", total=n, unit="docs") as t: t.advance(k)`.
With no sink installed (Dagster UI runs, tests, library use) a task costs one attribute check
per advance. The CLI installs a sink (webdedup_assets.progress_cli: live bars on a terminal,
plain lines otherwise, nothing with --quiet); rich/tqdm are never imported here.

A sink is a callable `sink(name, total, unit) -> handle` whose handle has `update(n, **figures)`
(n more units done; figures such as failures so far) and `close()`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol


class Handle(Protocol):
    def update(self, n: int, **figures: Any) -> None: ...

    def close(self) -> None: ...


Sink = Callable[[str, "int | None", str], Handle]

_sink: Sink | None = None
_lock = threading.Lock()


@contextmanager
def installed(sink: Sink | None) -> Iterator[None]:
    """Show the engine's progress through `sink` for the block (None: show nothing)."""
    global _sink
    with _lock:
        previous, _sink = _sink, sink
    try:
        yield
    finally:
        with _lock:
            _sink = previous


class Task:
    """One unit of long work; advance() is thread-safe and cheap when no sink is installed."""

    def __init__(self, name: str, total: int | Callable[[], int] | None, unit: str) -> None:
        self.done = 0
        self._lock = threading.Lock()
        sink = _sink
        if sink is not None and callable(total):
            total = total()  # a total that costs a little to count is counted only when shown
        self.name, self.total, self.unit = name, total, unit
        self._handle = sink(name, total, unit) if sink is not None else None

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
