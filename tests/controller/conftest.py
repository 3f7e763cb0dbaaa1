"""Controller tests: the failover outage a chaos test measured (``record_property``
``failover_outage``) is shown in the run's summary, not only in captured output."""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
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
