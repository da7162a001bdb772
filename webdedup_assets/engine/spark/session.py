"""The SparkSession the Spark engine runs on: local[*], a cluster master URL or a Spark Connect
URL, with loopback defaults for local runs. pyspark is imported here, lazily, so the DuckDB
engine never needs it."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import WebdedupError

DEFAULT_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.skewJoin.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Arrow batches to the Python workers bounded in bytes as well as rows: 10,000 long pages
    # (or their shingle sets) would otherwise make one batch of gigabytes.
    "spark.sql.execution.arrow.maxBytesPerBatch": str(32 << 20),
    # The Parquet reader's batches are counted in rows (4,096 by default): of long pages (the
    # documents' bodies) that is hundreds of MB of one task's heap.
    "spark.sql.parquet.columnarReaderBatchSize": "512",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}
LOCAL_CONF = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
# The share of the machine's memory a local[*] driver takes as its heap (local mode runs every
# task in the driver's JVM: Spark's own 1 GiB leaves all of them together a few hundred MB, so
# they spill early). The rest stays for the Python workers, which hold the shingle sets being
# scored, and for the page cache.
LOCAL_MEMORY_SHARE = 4
# Compressed documents per shuffle partition of a run (the partitions are set per stage from the
# documents' size and the cores; adaptive execution coalesces the small ones).
DOCUMENT_BYTES_PER_PARTITION = 32 << 20


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


LOG_CONFIG = Path(__file__).with_name("log4j2.properties")

_lock = threading.Lock()
_sessions: dict[SparkSettings, Any] = {}
_checkpoint_dirs: list[str] = []  # local folders made here: removed when the sessions stop or the process exits


def _loopback(settings: SparkSettings) -> bool:
    master = settings.master or "local[*]"
    return settings.remote is None and (master.startswith("local") or "127.0.0.1" in master or "localhost" in master)


def _local(settings: SparkSettings) -> bool:
    return settings.remote is None and (settings.master or "local[*]").startswith("local")


def _driver_memory_given() -> bool:
    """The user chose the driver's memory: SPARK_DRIVER_MEMORY or --driver-memory in PYSPARK_SUBMIT_ARGS
    (a `spark.driver.memory` in SparkSettings.conf is applied after the defaults and wins anyway)."""
    return bool(os.environ.get("SPARK_DRIVER_MEMORY")) or "--driver-memory" in os.environ.get("PYSPARK_SUBMIT_ARGS", "")


def machine_memory_bytes() -> int:
    """Physical memory, or the container's limit (cgroup v2) when that is smaller."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        with open("/sys/fs/cgroup/memory.max") as source:
            limit = source.read().strip()
    except OSError:
        return physical
    return min(physical, int(limit)) if limit.isdigit() else physical


def local_driver_memory(memory_bytes: int | None = None) -> str:
    """spark.driver.memory for local[*]: LOCAL_MEMORY_SHARE of the machine's memory, at least 1 GiB."""
    memory = machine_memory_bytes() if memory_bytes is None else memory_bytes
    return f"{max(1024, memory // LOCAL_MEMORY_SHARE >> 20)}m"


def shuffle_partitions(cores: int, document_bytes: int) -> int:
    """spark.sql.shuffle.partitions for a run: a few tasks per core, more when the documents are
    large (adaptive execution coalesces partitions, never splits them)."""
    return max(4 * cores, -(-document_bytes // DOCUMENT_BYTES_PER_PARTITION))


def size_shuffles(session, document_bytes: int) -> None:
    """The run's shuffle partitions from the cores and the documents' size, unless the user set
    them (SparkSettings.shuffle_partitions, its conf or spark-submit --conf). Classic sessions only:
    a Spark Connect server's cores are the server's."""
    if connect_mode(session) or session.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        return
    cores = session.sparkContext.defaultParallelism
    session.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions(cores, document_bytes)))


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
    # pyspark warns on the terminal of every run, classic or Connect, that pandas >= 3 is not
    # fully supported; the engine exchanges Arrow batches (mapInArrow), never pandas. Set on
    # every call: a caller's warnings.catch_warnings may have dropped it since the last one.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)
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
        _require_master_answers(settings.master)
        builder = SparkSession.builder.appName("webdedup")
        if submitted(settings):
            for key, value in DEFAULT_CONF.items():
                if key.startswith("spark.sql."):  # runtime settings; the rest is spark-submit's
                    builder = builder.config(key, value)
        else:
            # Quiet from the JVM's start (log4j2.properties beside this module); the user's own
            # SPARK_SUBMIT_OPTS, or a -Dlog4j2.configurationFile of theirs, wins.
            os.environ.setdefault("SPARK_SUBMIT_OPTS", f'-Dlog4j2.configurationFile="{LOG_CONFIG}"')
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
            if _loopback(settings):
                os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            builder = builder.master(settings.master or "local[*]")
            conf = dict(DEFAULT_CONF)
            if _loopback(settings):
                conf.update(LOCAL_CONF)
            if _local(settings) and not _driver_memory_given():
                conf["spark.driver.memory"] = local_driver_memory()
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
        # (engine/stages/clustering_spark.py), unless spark.checkpoint.dir is set.
        if session.sparkContext.getCheckpointDir() is None:
            folder = tempfile.mkdtemp(prefix="webdedup-spark-checkpoints-")
            _checkpoint_dirs.append(folder)
            session.sparkContext.setCheckpointDir(folder)
        session.sparkContext.setLogLevel("ERROR")
        _sessions[settings] = session
        return session


def _require_master_answers(master: str | None) -> None:
    """A standalone master (spark://host:port[,host:port]) must accept a connection: Spark itself
    retries for a minute, then stops its JVM as if it had run out of memory."""
    if not master or not master.startswith("spark://"):
        return
    for address in master[len("spark://") :].split(","):
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_SECONDS).close()
            return
        except (OSError, ValueError):
            continue
    raise WebdedupError(f"no Spark master answers at {master} (a standalone master listens at spark://host:7077)")


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
    return builder.create()


_connect_mode_set_here = False


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


# What a Spark failure's text says -> (the cause in words, which setting to change). The first
# match wins; the texts are the JVM's and pyspark's own messages.
_MEMORY_SIGNS = (
    "OutOfMemoryError",
    "Java heap space",
    "GC overhead limit exceeded",
    "Could not allocate memory",
    "Unable to acquire",
    "UNABLE_TO_ACQUIRE_MEMORY",
)
_PYTHON_WORKER_SIGNS = ("Python worker exited unexpectedly", "PYTHON_WORKER_EXITED", "worker crashed")
_DISK_SIGNS = ("No space left on device",)
# The driver only sees that the SparkContext or its JVM is gone: in local mode an OutOfMemoryError
# in a task thread stops the JVM (Spark's uncaught-exception handler), and the job's own error is lost.
_STOPPED_SIGNS = (
    "SparkContext was shut down",
    "stopped SparkContext",
    'SparkContext.dagScheduler()" is null',
    "Answer from Java side is empty",
    "Error while sending or receiving",
    "Connection refused",
)


def describe_failure(stage: str, error: BaseException, settings: SparkSettings) -> str:
    """One line for a failed Spark stage: the stage, the cause and the setting to change (the
    JVM's stack trace stays in Spark's log, never in the message)."""
    text = str(error)
    if any(sign in text for sign in _MEMORY_SIGNS):
        return f"Spark ran out of memory in {stage} ({_root_cause(text)}); {_memory_setting(settings)}"
    if any(sign in text for sign in _PYTHON_WORKER_SIGNS):
        return (
            f"a Spark Python worker died in {stage} (killed, usually for lack of memory: it holds its task's Arrow "
            f"batches); leave the workers more memory: fewer tasks at once (--spark-master local[1]) or a smaller "
            f"SPARK_DRIVER_MEMORY on this machine, spark.executor.pyspark.memory on a cluster"
        )
    if any(sign in text for sign in _STOPPED_SIGNS):
        return (
            f"Spark stopped during {stage}: its JVM shut down (usually out of memory: look for OutOfMemoryError "
            f"in Spark's log); {_memory_setting(settings)}"
        )
    if "INVALID_DRIVER_MEMORY" in text or "INVALID_EXECUTOR_MEMORY" in text:  # refused at the start
        return f"Spark refused its memory setting in {stage} ({_root_cause(text)}); {_memory_setting(settings)}"
    if any(sign in text for sign in _DISK_SIGNS):
        return f"Spark's scratch disk filled up in {stage}; point spark.local.dir (SPARK_LOCAL_DIRS) at a larger disk"
    if "WebdedupError: " in text:  # raised by webdedup code in an executor: its own message
        return f"{stage}: {text.rsplit('WebdedupError: ', 1)[1].splitlines()[0].strip()}"
    return f"Spark failed in {stage}: {_root_cause(text)} (the stack trace is in Spark's log)"


def _root_cause(text: str) -> str:
    """Spark's error condition ([FAILED_READ_FILE...] names the file) and the innermost 'Caused by:'
    of a Java error text, package prefixes dropped; else its first exception line."""
    lines = [line.strip().removeprefix(": ") for line in text.splitlines() if line.strip()]
    causes = [_short(line.removeprefix("Caused by: ")) for line in lines if line.startswith("Caused by: ")]
    conditions = [
        found.group(0)[:240] for found in (re.search(r"\[[A-Z][A-Z_.]+\] .*", line) for line in lines) if found
    ]
    condition = conditions[0] if conditions else None
    if causes:
        chosen = causes[-1] if condition is None or condition == causes[-1] else f"{condition}; caused by {causes[-1]}"
    else:
        exceptions = [line for line in lines if ("Exception" in line or "Error" in line) and ": " in line]
        chosen = _short(next(iter(exceptions), lines[0] if lines else "no message"))
    return chosen[:500]


def _short(line: str) -> str:
    """org.apache.spark.SparkException: ... -> SparkException: ...; at most 240 characters."""
    head, _, rest = line.partition(": ")
    if "." in head and " " not in head:
        line = f"{head.rsplit('.', 1)[1]}: {rest}" if rest else head.rsplit(".", 1)[1]
    return line[:240]


def _memory_setting(settings: SparkSettings) -> str:
    if settings.remote:
        return "raise the Spark Connect server's spark.executor.memory (local server: spark.driver.memory)"
    if _local(settings) and not submitted(settings):
        now = _chosen_driver_memory(settings)
        return f"local mode runs every task in the driver's JVM: raise its memory with SPARK_DRIVER_MEMORY (now {now})"
    return "raise spark.executor.memory (spark-submit --conf or the cluster's spark-defaults.conf)"


def _chosen_driver_memory(settings: SparkSettings) -> str:
    """The local driver's memory as get_session chose it (read here, not from a JVM that may be gone)."""
    given = dict(settings.conf).get("spark.driver.memory") or os.environ.get("SPARK_DRIVER_MEMORY")
    if given:
        return given
    if _driver_memory_given():
        return "as in PYSPARK_SUBMIT_ARGS"
    return f"{local_driver_memory()}, a quarter of this machine's memory"


def spark_failure_types() -> tuple[type[BaseException], ...]:
    """The exceptions a failed Spark job raises in the driver (classic and Connect sessions)."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return (Py4JError, PySparkException)
