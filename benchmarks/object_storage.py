"""The storage root in object storage against a local one: one crawl day added to a history.

A real S3 protocol server on 127.0.0.1 (moto's, in this process: no network cost, so the figures
are the sync's own work: listing, hashing nothing, copying bytes) holds the storage. Uses the
daily corpus and history of benchmarks.incremental (made by it when missing). Each command runs
in a fresh process:

  history      `webdedup add HISTORY --storage s3://bench/st`: the first upload of the whole storage
  add          `webdedup add LAST_DAY --storage s3://bench/st` on the machine that built it (its copy
               is current: nothing downloaded), against the same add on a local storage
  new machine  the same add with an empty WEBDEDUP_CACHE: the whole storage downloaded first

  python -m benchmarks.object_storage --history 100000
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import subprocess
import sys
import time

from benchmarks.common import ROOT
from benchmarks.incremental import DATA, fresh_copy
from benchmarks.incremental import main as incremental


def command(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Seconds of a webdedup command in a fresh process, and what it uploaded (and an add's mode)."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "webdedup_assets.cli.main", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
    )
    if done.returncode:
        sys.exit(f"webdedup {' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    uploaded = re.findall(r"uploaded .*MB", done.stderr)
    mode = re.search(r": (full rebuild \(.*\)|incremental|nothing changed)$", done.stdout, re.MULTILINE)
    told = ", ".join([*uploaded[-1:], *([f"mode {mode.group(1)}"] if mode else [])])
    return time.perf_counter() - started, told or "nothing uploaded"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=100_000)
    parser.add_argument("--day", type=int, default=10_000)
    args = parser.parse_args(argv)
    corpus = DATA / f"inc-{args.history}-{args.day}"
    built = DATA / f"inc-{args.history}-run-history"
    if not (built / "manifest.json").exists():
        incremental(["--history", str(args.history), "--day", str(args.day)])
    history, last = corpus / "history", sorted((corpus / "documents").glob("*.parquet"))[-1]
    work = DATA / f"s3-{args.history}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no request log
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    s3 = {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
    }
    try:
        boto3.client(
            "s3",
            endpoint_url=s3["AWS_ENDPOINT_URL"],
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
        ).create_bucket(Bucket="bench")

        def remote(prefix: str) -> list[str]:
            return ["--storage", f"s3://bench/{prefix}", "--output", str(work / f"out-{prefix}")]

        machine = {**s3, "WEBDEDUP_CACHE": str(work / "machine-a")}
        for prefix in ("st", "other"):  # the same history twice: one for this machine, one for a new one
            seconds, uploaded = command(["add", str(history), *remote(prefix)], machine)
            print(f"history, storage in the bucket: {seconds:.1f} s, {uploaded}")
        fresh_copy(built, work / "local")
        seconds, _ = command(["add", str(last), "--output", str(work / "local")], s3)
        print(f"add, local storage: {seconds:.2f} s")
        seconds, uploaded = command(["add", str(last), *remote("st")], machine)
        print(f"add, storage in the bucket, this machine's copy current: {seconds:.2f} s, {uploaded}")
        fresh_copy(built, work / "local")
        seconds, _ = command(["add", str(last), "--output", str(work / "local")], s3)
        print(f"add, local storage: {seconds:.2f} s")
        new_machine = {**s3, "WEBDEDUP_CACHE": str(work / "machine-b")}
        seconds, uploaded = command(["add", str(last), *remote("other")], new_machine)
        size = sum(p.stat().st_size for p in (work / "machine-b").rglob("*") if p.is_file())
        print(
            f"add, storage in the bucket, a new machine: {seconds:.2f} s (its copy: {size / 1e6:,.0f} MB), {uploaded}"
        )
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
