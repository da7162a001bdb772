"""The SparkSession the Spark engine runs on: local[*], a cluster master URL or a Spark Connect
URL, with loopback defaults for local runs. pyspark is imported here, lazily, so the DuckDB
engine never needs it."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

from ...errors import WebdedupError

# Small shuffles for a small corpus; a cluster sets its own (spark-submit --conf) and AQE
# coalesces partitions either way.
DEFAULT_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.skewJoin.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}
LOCAL_CONF = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}


@dataclass(frozen=True)
class SparkSettings:
    """Where the engine runs: `master` (local[2], spark://host:port, yarn, k8s://...) or
    `remote` (Spark Connect, sc://host:port); neither: local[*]."""

    master: str | None = None
    remote: str | None = None
    conf: tuple[tuple[str, str], ...] = ()
    shuffle_partitions: int | None = None

    def describe(self) -> str:
        return self.remote or self.master or "local[*]"


_lock = threading.Lock()
_sessions: dict[SparkSettings, Any] = {}
_checkpoint_dirs: list[str] = []  # local folders made here: removed when the sessions stop or the process exits


def _loopback(settings: SparkSettings) -> bool:
    master = settings.master or "local[*]"
    return settings.remote is None and (master.startswith("local") or "127.0.0.1" in master or "localhost" in master)


def submitted(settings: SparkSettings) -> bool:
    """Launched by spark-submit (its PythonRunner hands the driver a gateway): with neither a
    master nor a remote given, the master, the executors' Python and paths are spark-submit's,
    never overridden by local defaults."""
    return settings.master is None and settings.remote is None and "PYSPARK_GATEWAY_PORT" in os.environ


def get_session(settings: SparkSettings | None = None):
    """The session for these settings (created once per process and reused: a session start
    costs ~15 s). Executors run this interpreter (PYSPARK_PYTHON), so they have pyarrow,
    numba and webdedup itself."""
    settings = settings or SparkSettings()
    with _lock:
        session = _sessions.get(settings)
        if session is not None:
            return session
        try:
            from pyspark.sql import SparkSession
        except ImportError as err:  # the optional extra
            raise WebdedupError("the spark engine needs pyspark: pip install 'webdedup[spark]' (and Java 17)") from err
        builder = SparkSession.builder.appName("webdedup")
        if submitted(settings):
            for key, value in DEFAULT_CONF.items():
                if key.startswith("spark.sql."):  # runtime settings; the rest is spark-submit's
                    builder = builder.config(key, value)
        elif settings.remote:
            builder = builder.remote(settings.remote)
        else:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
            if _loopback(settings):
                os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            builder = builder.master(settings.master or "local[*]")
            conf = dict(DEFAULT_CONF)
            if _loopback(settings):
                conf.update(LOCAL_CONF)
            # Executors import webdedup: the package's folder on their path (same machine or a
            # shared file system; a cluster installs the wheel on its nodes instead).
            root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
            path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
            conf["spark.executorEnv.PYTHONPATH"] = path
            conf["spark.executorEnv.PYSPARK_PYTHON"] = os.environ["PYSPARK_PYTHON"]
            if settings.shuffle_partitions:
                conf["spark.sql.shuffle.partitions"] = str(settings.shuffle_partitions)
            for key, value in conf.items():
                builder = builder.config(key, value)
        for key, value in settings.conf:
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        if not settings.remote:
            # Reliable checkpoints (clusters): a local folder here; on a cluster the clusters
            # stage puts them under the storage root, which every executor sees
            # (engine/spark/clustering.py), unless spark.checkpoint.dir is set.
            if session.sparkContext.getCheckpointDir() is None:
                folder = tempfile.mkdtemp(prefix="webdedup-spark-checkpoints-")
                _checkpoint_dirs.append(folder)
                session.sparkContext.setCheckpointDir(folder)
            session.sparkContext.setLogLevel("ERROR")
        _sessions[settings] = session
        return session


def _remove_checkpoint_dirs() -> None:
    while _checkpoint_dirs:
        shutil.rmtree(_checkpoint_dirs.pop(), ignore_errors=True)


atexit.register(_remove_checkpoint_dirs)


def stop_sessions() -> None:
    with _lock:
        for session in _sessions.values():
            session.stop()
        _sessions.clear()
        _remove_checkpoint_dirs()


def spark_version() -> str:
    from pyspark import __version__

    return __version__
