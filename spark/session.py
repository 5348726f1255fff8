"""Building the SparkSession: an embedded local[*] by default, any cluster with a master URL."""
from __future__ import annotations

import os
import sys

DEFAULT_MASTER = "local[*]"


def configured_master() -> str | None:
    """The master spark-submit (or spark-defaults) already set, if any."""
    try:
        from pyspark import SparkConf
        return SparkConf().get("spark.master", None)
    except Exception:
        return None


def make_session(master: str | None = None, app_name: str = "disque-stats-ingest",
                 driver_memory: str | None = "2g", conf: dict | None = None, log_level: str = "ERROR"):
    """Create (or get) a SparkSession.

    * master: explicit URL; else whatever spark-submit configured; else ``local[*]``.
    * For a local master the driver binds to the loopback address (``SPARK_LOCAL_IP``),
      the web UI is off and the Python workers use this interpreter.
    """
    from pyspark.sql import SparkSession

    master = master or configured_master() or DEFAULT_MASTER
    local = master.startswith("local")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    b = SparkSession.builder.appName(app_name).master(master)
    b = b.config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
    b = b.config("spark.sql.session.timeZone", "UTC")
    b = b.config("spark.log.level", log_level)
    # the JVM does not JIT-compile methods over 8000 bytecodes; Spark's default limit (64K)
    # lets whole-stage codegen produce such methods for our wide projections, which then
    # run interpreted. 8000 makes Spark split them instead (measured ~10-15% less CPU).
    b = b.config("spark.sql.codegen.hugeMethodLimit", "8000")
    # PySpark 4 records the Python call site of every DataFrame function for its error
    # messages: three JVM round trips and a stack walk per call, which was half the wall time
    # of an ingest of a small log (measured: 19 -> 10 s for the tests' scripted log).
    b = b.config("spark.python.sql.dataFrameDebugging.enabled", "false")
    if local:
        b = b.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        if driver_memory:
            b = b.config("spark.driver.memory", driver_memory)
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    try:
        spark.sparkContext.setLogLevel(log_level)
    except Exception:
        pass
    return spark
