"""Project-wide test settings: run asyncio tests on uvloop, as the services do in production."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import uvloop
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from hypothesis import settings

# No per-example deadline: hypothesis' default 200 ms is a timed assertion, and on a shared 2-core
# machine a pure function's example took 289 ms (test_spark_rules, 2026-11-28). Speed is measured
# in bench/, not in tests.
settings.register_profile("ferrymq", deadline=None)
settings.load_profile("ferrymq")


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], Any]]:
    return {"uvloop": uvloop.new_event_loop}


# FERRYMQ_REQUIRE_ALL=1 (set by scripts/test.sh): a test or module that skips because a dependency
# or an environment is missing is a failure, so a broken install cannot pass as a short green run.
REQUIRE_ALL_ENV = "FERRYMQ_REQUIRE_ALL"


def _require_all() -> bool:
    return os.environ.get(REQUIRE_ALL_ENV, "0") == "1"


def _fail_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"{REQUIRE_ALL_ENV}=1 turns this skip into a failure: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if _require_all() and report.skipped and not hasattr(report, "wasxfail"):
        _fail_skip(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    outcome = yield
    report: pytest.CollectReport = outcome.get_result()
    if _require_all() and report.skipped:
        _fail_skip(report)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The failover outage a chaos or partition test measured (``record_property``
    ``failover_outage``) is shown in the run's summary, not only in captured output."""
    lines = []
    for category in ("passed", "failed"):
        for report in terminalreporter.stats.get(category, []):
            for name, value in getattr(report, "user_properties", []):
                if name == "failover_outage":
                    lines.append(f"{report.nodeid}: {value}")
    if lines:
        terminalreporter.write_sep("-", "failover outage measured")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture
async def namesrv(tmp_path: Path) -> AsyncIterator[NamesrvApp]:
    """A NameServer on 127.0.0.1 (port 0) in this process; a test folder may define its own."""
    app = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", kv_config_path=tmp_path / "kv.json")
    )
    await app.start()
    yield app
    await app.stop()
