"""One SparkSession for the whole test session (startup costs ~10 s), loopback only."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

pyspark = pytest.importorskip("pyspark")


def pytest_configure(config: pytest.Config) -> None:
    # pyspark 4.x warns on every pandas conversion under pandas 3; it is noise for these tests.
    config.addinivalue_line(
        "filterwarnings", "ignore:PySpark does not yet fully support pandas:FutureWarning"
    )
    config.addinivalue_line("filterwarnings", "ignore:The copy keyword is deprecated")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from ferrymq_spark.session import build_session

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    session = build_session(
        "ferrymq-tests",
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
    )
    yield session
    session.stop()
