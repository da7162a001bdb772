"""The Spark engine object: `SPARK` holds the Spark implementations of the stages of engine.stage
(registered by engine/stages/*_spark.py; none imports pyspark at import time), and the session a
stage runs on."""

from __future__ import annotations

import functools

from ...errors import WebdedupError
from ..stage import Engine, Implementation, StageRun


def _spark_version() -> str:
    from .session import spark_version

    return spark_version()


class SparkEngine(Engine):
    """The stages on Spark: a failed Spark job becomes a WebdedupError of one line naming the
    stage, the cause and the setting to change (session.describe_failure), not a Java stack."""

    def implements(self, stage: str):
        register = super().implements(stage)

        def reported(function: Implementation) -> Implementation:
            @functools.wraps(function)
            def run_reported(run: StageRun):
                from .session import describe_failure, spark_failure_types

                try:
                    return function(run)
                except WebdedupError:
                    raise
                except spark_failure_types() as err:
                    raise WebdedupError(describe_failure(stage, err, settings_of(run))) from err

            return register(run_reported)

        return reported


SPARK = SparkEngine(
    "spark", single_file=False, version=_spark_version
)  # global stages write data-00000.parquet, ... (spark/io.py)


def settings_of(run: StageRun):
    from .session import SparkSettings

    settings = run.options.get("spark")
    return settings if isinstance(settings, SparkSettings) else SparkSettings()


def session_of(run: StageRun):
    """The run's session, its shuffle partitions sized for this store's documents; the stage's
    jobs are grouped under its name (`webdedup <stage>` in the Spark UI and the event log)."""
    from .session import connect_mode, get_session, size_shuffles

    session = get_session(settings_of(run))
    size_shuffles(session, sum(f.stat().st_size for f in run.store.files("documents")))
    if not connect_mode(session):
        session.sparkContext.setJobGroup(f"webdedup-{run.stage.name}", f"webdedup {run.stage.name}")
    return session
