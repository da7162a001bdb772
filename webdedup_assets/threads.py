"""How many threads a step may use (no dependency: the ingest and file layers use it too)."""

from __future__ import annotations

import os


def thread_count(requested: int | None = None) -> int:
    """requested, else $WEBDEDUP_THREADS, else the usable CPU count (at least 1)."""
    if requested is None:
        env = os.environ.get("WEBDEDUP_THREADS", "").strip()
        if env:
            requested = int(env)
        else:
            requested = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, int(requested))
