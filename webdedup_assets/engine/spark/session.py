"""The SparkSession the Spark engine runs on: local[*], a cluster master URL or a Spark Connect
URL, with loopback defaults for local runs. pyspark is imported here, lazily, so the DuckDB
engine never needs it."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
import threading
import warnings
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
    """The session for these settings (created once per process and reused: starting a session
    is slow). Executors run this interpreter (PYSPARK_PYTHON), so they have pyarrow,
    numba and webdedup itself. With `remote` (Spark Connect) this process is a thin client: the
    server's executors run the Python side, so the server needs webdedup on its Python path."""
    settings = settings or SparkSettings()
    with _lock:
        session = _sessions.get(settings)
        if session is not None:
            return session
        try:
            from pyspark.sql import SparkSession
        except ImportError as err:  # the optional extra
            raise WebdedupError("the spark engine needs pyspark: pip install 'webdedup[spark]' (and Java 17)") from err
        _one_kind(settings)
        if settings.remote:
            session = _connect(SparkSession, settings)
            _sessions[settings] = session
            return session
        builder = SparkSession.builder.appName("webdedup")
        if submitted(settings):
            for key, value in DEFAULT_CONF.items():
                if key.startswith("spark.sql."):  # runtime settings; the rest is spark-submit's
                    builder = builder.config(key, value)
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


def _one_kind(settings: SparkSettings) -> None:
    """pyspark switches its whole API to Spark Connect, process-wide, once a Connect session
    exists (SPARK_CONNECT_MODE_ENABLED): a classic session (local or a master) and a Connect
    session cannot be used side by side in one process. Refused here with a clear message (stop
    the other one first: stop_sessions)."""
    for other in _sessions:
        if bool(other.remote) != bool(settings.remote):
            raise WebdedupError(
                f"the Spark engine cannot use {settings.describe()} while this process holds a session on "
                f"{other.describe()}: pyspark runs Spark Connect and classic sessions in separate processes"
            )


# How long the Connect server may take to accept the connection before the run is refused: pyspark
# itself retries an unreachable server for many minutes before it gives up.
CONNECT_TIMEOUT_SECONDS = 30


def _connect(SparkSession, settings: SparkSettings):
    """A Spark Connect session on `settings.remote` (a new one: pyspark's getOrCreate would hand
    back any Connect session of this process, whatever its URL). The session-scoped defaults
    (spark.sql.*: UTC, adaptive execution, Arrow) and `conf` apply to this session only; the
    server's own settings (its master, executors, spark.checkpoint.dir) are the server's."""
    try:
        with _no_pandas_warning():  # (pyspark's Connect modules check their dependencies on import)
            import grpc
            from pyspark.sql.connect.client import DefaultChannelBuilder
            from pyspark.sql.connect.utils import check_dependencies

            check_dependencies()
    except ImportError as err:  # grpcio-status, googleapis-common-protos, zstandard: the spark extra
        raise WebdedupError(
            f"--spark-remote (Spark Connect) needs pyspark's Connect client packages: pip install 'webdedup[spark]' "
            f"({err})"
        ) from err
    try:
        channel = DefaultChannelBuilder(settings.remote).toChannel()
    except ValueError as err:  # PySparkValueError: INVALID_CONNECT_URL
        raise WebdedupError(f"bad Spark Connect URL {settings.remote!r}: {err}") from None
    try:
        grpc.channel_ready_future(channel).result(timeout=CONNECT_TIMEOUT_SECONDS)
    except grpc.FutureTimeoutError:
        raise WebdedupError(
            f"no Spark Connect server answers at {settings.remote} (waited {CONNECT_TIMEOUT_SECONDS} s)"
        ) from None
    finally:
        channel.close()
    builder = SparkSession.builder.remote(settings.remote).appName("webdedup")
    conf = {key: value for key, value in DEFAULT_CONF.items() if key.startswith("spark.sql.")}
    if settings.shuffle_partitions:
        conf["spark.sql.shuffle.partitions"] = str(settings.shuffle_partitions)
    conf.update(settings.conf)
    for key, value in conf.items():
        builder = builder.config(key, value)
    global _connect_mode_set_here
    _connect_mode_set_here = _connect_mode_set_here or "SPARK_CONNECT_MODE_ENABLED" not in os.environ
    with _no_pandas_warning():
        return builder.create()


_connect_mode_set_here = False


@contextlib.contextmanager
def _no_pandas_warning():
    """pyspark's Connect client warns that pandas >= 3 is not fully supported (twice, on the
    terminal of every run); the engine exchanges Arrow batches (mapInArrow), never pandas."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)
        yield


def connect_mode(session) -> bool:
    """A Spark Connect session (no SparkContext, no RDDs on this side)."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def _remove_checkpoint_dirs() -> None:
    while _checkpoint_dirs:
        shutil.rmtree(_checkpoint_dirs.pop(), ignore_errors=True)


atexit.register(_remove_checkpoint_dirs)


def stop_sessions() -> None:
    global _connect_mode_set_here
    with _lock:
        for session in _sessions.values():
            session.stop()
        _sessions.clear()
        _remove_checkpoint_dirs()
        if _connect_mode_set_here:
            # pyspark leaves the process in Connect mode after a Connect session stops (its API
            # would keep building Connect plans): undone, so a classic session can follow
            os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
            _connect_mode_set_here = False


def spark_version() -> str:
    from pyspark import __version__

    return __version__
