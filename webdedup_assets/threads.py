"""Threads for every layer (no dependency: the ingest and storage layers use it too): how many a step
may use, a prefetching reader and an ordered map.

The compiled kernels release the GIL, and pyarrow releases it while decoding and encoding Parquet,
so plain threads use every core: one thread reads and decodes the next record batches while worker
threads run the kernel on earlier ones, and the calling thread writes results in input order (so
output is identical for any thread count).
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar


def thread_count(requested: int | None = None) -> int:
    """requested, else $WEBDEDUP_THREADS, else the usable CPU count (at least 1)."""
    if requested is None:
        env = os.environ.get("WEBDEDUP_THREADS", "").strip()
        if env:
            requested = int(env)
        else:
            requested = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, int(requested))


T = TypeVar("T")
R = TypeVar("R")
_DONE = object()


def prefetch(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """Iterate items on a background thread, at most depth items ahead of the consumer."""
    buffer: queue.Queue = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        buffer.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            buffer.put((_DONE, None))
        except BaseException as err:  # handed to the consumer
            buffer.put((_DONE, err))

    worker = threading.Thread(target=produce, name="webdedup-reader", daemon=True)
    worker.start()
    try:
        while True:
            item, error = buffer.get()
            if item is _DONE:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()
        while worker.is_alive():
            try:
                buffer.get_nowait()
            except queue.Empty:
                worker.join(timeout=0.05)


def ordered_map(fn: Callable[[T], R], items: Iterable[T], threads: int) -> Iterator[R]:
    """fn over items on `threads` worker threads, results yielded in input order."""
    if threads <= 1:
        for item in items:
            yield fn(item)
        return
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="webdedup-kernel") as pool:
        pending: deque = deque()
        try:
            for item in items:
                pending.append(pool.submit(fn, item))
                if len(pending) > threads:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
