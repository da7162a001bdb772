"""`webdedup` for spark-submit: the same command line, on the session spark-submit configured
(its --master, --deploy-mode client, --conf, --py-files), with --engine spark unless given.

  spark-submit --master yarn --deploy-mode client \\
    --conf spark.pyspark.python=/opt/venv/bin/python \\
    "$(python -c 'import webdedup_assets.engine.spark.submit as m; print(m.__file__)')" \\
    run /shared/crawl/2026-04 --output /shared/dedup/2026-04

The driver (where this runs) executes the DuckDB stages (documents, manifest) and reads the
storage root, so the storage root and the output folder must be on a file system the driver and
every executor see at the same path.
"""

from __future__ import annotations

import sys

from webdedup_assets.cli.main import main

if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv and argv[0] in ("run",) and "--engine" not in argv:
        argv += ["--engine", "spark"]
    sys.exit(main(argv))
