"""Set-up checks that turn Spark's opaque failures into clear errors.

Two traps catch nearly everyone who runs a Python data source:

* Python data sources need **pyarrow**, which ``pip install pyspark`` does not bring (install
  ``pocketmq[spark]``, which pins ``pyspark[sql]``). Without it Spark only reports "Python
  worker exited unexpectedly".
* Spark's Python workers run ``PYSPARK_PYTHON`` (or the ``spark.pyspark.python`` setting), which
  defaults to whatever ``python3`` is first on PATH - usually not the virtual environment
  that has pyarrow and pocketmq. It must be set before the SparkSession starts.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from typing import Any

log = logging.getLogger("pocketmq.spark")

__all__ = ["SparkSetupError", "check_driver", "check_local_workers", "check_workers", "worker_python"]

#: What a worker must be able to import to run the data source.
WORKER_IMPORTS = "import pyarrow, numpy, pocketmq.spark.reader, pocketmq.spark.writer"


class SparkSetupError(RuntimeError):
    """Spark cannot run the pocketmq data source as set up; the message says how to fix it."""


def check_driver() -> None:
    try:
        import pyarrow  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        raise SparkSetupError(
            "pyarrow is not installed: Spark's Python data sources need it. Install the spark extra "
            "(pip install 'pocketmq[spark]') or pip install 'pyspark[sql]'.") from None


def worker_python(spark: Any) -> str:
    """The interpreter Spark starts for Python workers: ``spark.pyspark.python``, else the
    JVM's ``PYSPARK_PYTHON``, else ``python3``."""
    configured = spark.conf.get("spark.pyspark.python", None)
    if configured:
        return str(configured)
    try:
        env = spark.sparkContext._jvm.java.lang.System.getenv("PYSPARK_PYTHON")
    except Exception:  # Spark Connect and other sessions without a JVM gateway
        env = os.environ.get("PYSPARK_PYTHON")
    return str(env) if env else "python3"


def _same_interpreter(path: str) -> bool:
    try:
        return os.path.samefile(path, sys.executable)
    except OSError:
        return False


def check_local_workers(spark: Any) -> None:
    """In local mode, make sure the worker interpreter can import what the data source needs
    (without running a Spark job). Raises :class:`SparkSetupError`."""
    exe = worker_python(spark)
    resolved = shutil.which(exe) or exe
    if _same_interpreter(resolved):
        return
    try:
        proc = subprocess.run([resolved, "-c", WORKER_IMPORTS], capture_output=True, text=True, timeout=60,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        problem = str(exc)
    else:
        if proc.returncode == 0:
            return
        problem = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
    raise SparkSetupError(
        f"Spark's Python workers run {exe!r} ({resolved}), which cannot run the pocketmq data source: "
        f"{problem}. Set PYSPARK_PYTHON={sys.executable} (and PYSPARK_DRIVER_PYTHON) in the environment "
        f"before the SparkSession starts, or build it with .config('spark.pyspark.python', "
        f"'{sys.executable}'), or use pocketmq.spark.local_session().")


def _probe(_: Any) -> list[tuple[str, str]]:
    try:
        exec(WORKER_IMPORTS, {})
        return [(sys.executable, "")]
    except Exception as exc:
        return [(sys.executable, f"{type(exc).__name__}: {exc}")]


def check_workers(spark: Any, partitions: int = 1) -> str:
    """Run a tiny job to check that executors can import the data source (for clusters, where
    the workers' interpreter is configured outside this process). Returns the executors'
    interpreter; raises :class:`SparkSetupError`."""
    try:
        rdd = spark.sparkContext.parallelize(range(partitions), partitions)
        results = rdd.mapPartitions(_probe).collect()
    except Exception as exc:
        raise SparkSetupError(
            f"a Python task failed on the executors ({type(exc).__name__}); check that spark.pyspark.python "
            f"(or PYSPARK_PYTHON on the workers) names an interpreter with pocketmq[spark] installed: "
            f"{str(exc)[:2000]}") from None
    for exe, problem in results:
        if problem:
            raise SparkSetupError(
                f"executors run {exe}, which cannot import the pocketmq data source: {problem}. Install "
                "pocketmq[spark] there or point spark.pyspark.python at an interpreter that has it.")
    return str(results[0][0]) if results else ""
