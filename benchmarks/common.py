"""Helpers shared by the benchmark scripts (not part of the package)."""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (Linux ru_maxrss is KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def document_files(corpus: Path) -> list[Path]:
    folder = corpus / "documents" if (corpus / "documents").is_dir() else corpus
    return sorted(folder.glob("*.parquet"))


def count_rows(files: list[Path]) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def machine() -> str:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    python = platform.python_version()
    return f"{cpu or platform.processor()}, {os.cpu_count()} cores, {mem:.0f} GiB, Python {python}, load {load}"


def run_child(args: list[str]) -> tuple[str, float]:
    """Run a Python child process; returns (stdout, its peak RSS in MiB) via wait4."""
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, cwd=ROOT)
    out = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"child {args} failed with exit code {proc.returncode}")
    return out, usage.ru_maxrss / 1024
