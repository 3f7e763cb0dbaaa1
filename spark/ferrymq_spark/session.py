"""SparkSession for the ferrymq jobs: ``local[*]`` by default, loopback only, sources registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"

# Small jobs over snapshot histories: the default 200 shuffle partitions only add task overhead.
_DEFAULT_CONF: Mapping[str, str] = {
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}


def register_sources(spark: SparkSession) -> None:
    """Make ``ferrymq-commitlog`` and ``ferrymq-consumequeue`` usable with ``spark.read.format``."""
    from ferrymq_spark.sources.commit_log import CommitLogDataSource
    from ferrymq_spark.sources.consume_queue import ConsumeQueueDataSource

    spark.dataSource.register(CommitLogDataSource)
    spark.dataSource.register(ConsumeQueueDataSource)


def build_session(
    app_name: str = "ferrymq",
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get or create the SparkSession and register the ferrymq data sources.

    ``master`` defaults to ``$SPARK_MASTER`` or ``local[*]``; on Kubernetes spark-submit sets it
    and the driver/bind settings below are overridden by ``conf``. ``SPARK_LOCAL_IP`` defaults to
    127.0.0.1 so a local run never listens beyond loopback.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers must run the driver's interpreter, or they miss this package (and its venv).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    chosen = master or os.environ.get("SPARK_MASTER")
    # Under spark-submit the JVM already holds the submitted master (e.g. k8s://...): setting one
    # here would override it. spark-submit hands the Python driver its gateway port this way.
    submitted = chosen is None and "PYSPARK_GATEWAY_PORT" in os.environ
    local = not submitted and (chosen is None or chosen.startswith("local"))
    if not submitted:
        builder = builder.master(chosen or DEFAULT_MASTER)
    for key, value in _DEFAULT_CONF.items():
        if key.startswith("spark.driver.") and not local:
            continue
        builder = builder.config(key, value)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register_sources(spark)
    return spark
