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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Spark jobs on a shared 2-core machine can take minutes under load (session start alone is
    # 10 s idle, over 60 s loaded): a generous per-test limit, still finite, for this directory.
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.path).startswith(here) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(900))


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
