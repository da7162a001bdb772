"""The Spark engine: the stages of engine.stage over the same Parquet layout, on a SparkSession.

`SPARK` holds the implementations (registered by the modules below; none imports pyspark at
import time). A run passes the session settings as the `spark` option of Engine.run
(SparkSettings) or uses local[*]; engine/spark/session.py builds and reuses the session.
"""

from __future__ import annotations

from ..stage import Engine, StageRun


def _spark_version() -> str:
    from .session import spark_version

    return spark_version()


SPARK = Engine(
    "spark", single_file=False, version=_spark_version
)  # global stages write data-00000.parquet, ... (spark/io.py)


def session_of(run: StageRun):
    from .session import SparkSettings, get_session

    settings = run.options.get("spark")
    return get_session(settings if isinstance(settings, SparkSettings) else None)


from . import candidates, clustering, fingerprint, scoring  # noqa: E402,F401  (register the stages)
