"""The availability and operator alerts (broker/NameServer down, scrape failures, failed puts,
DLQ growth, reconcile failures, no leader): `promtool test rules` fires each on test series and
stays quiet on healthy ones; the group-without-master alert is tested in tests/observability."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from chart.helm import CHART

TESTS = Path(__file__).parent / "promtool" / "availability.rules.test.yaml"
RULES = CHART / "rules" / "ferrymq.rules.yaml"
NEW_ALERTS = (
    "FerrymqBrokerDown",
    "FerrymqNameServerDown",
    "FerrymqScrapeFailing",
    "FerrymqPutFailures",
    "FerrymqDeadLetterQueueGrowing",
    "FerrymqOperatorReconcileFailing",
    "FerrymqOperatorNoLeader",
)


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool is missing: scripts/setup.sh installs it (Debian package prometheus)")
    return subprocess.run(
        [tool, *map(str, args)], capture_output=True, text=True, timeout=60, check=False
    )


def test_availability_alerts_fire_and_stay_quiet() -> None:
    done = promtool("test", "rules", TESTS)
    assert done.returncode == 0, done.stdout + done.stderr
    text = TESTS.read_text()
    for alert in NEW_ALERTS:
        assert f"alertname: {alert}" in text, f"{alert} has no promtool test"
        assert f"alert: {alert}" in RULES.read_text()


def test_the_alert_tests_can_fail(tmp_path: Path) -> None:
    # expecting the healthy broker b-1 to be reported down is refused
    broken = TESTS.read_text().replace("pod: b-0}", "pod: b-1}")
    broken = broken.replace("../../../charts", str(CHART.parent))
    path = tmp_path / "broken.test.yaml"
    path.write_text(broken)
    assert promtool("test", "rules", path).returncode != 0
