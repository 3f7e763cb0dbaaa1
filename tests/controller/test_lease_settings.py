"""The master lease is validated against the heartbeat settings (issue 34, item 2).

With ``controllerHeartBeatTimeoutMills=3000`` and ``brokerHeartbeatInterval=1000`` the lease was
1000 ms, one heartbeat interval: any late heartbeat let a healthy master's lease lapse and it
refused writes already in its CommitLog (code 14; 7 in about 3,900 sends; the producer's retry
stored duplicates). A lease must now span 3 intervals; the error names both fixes.
"""

from __future__ import annotations

import pytest
from ferrymq.broker.controller_mode_config import ControllerModeSettings
from ferrymq.controller.decisions import LEASE_MIN_INTERVALS, broker_lease_ms, lease_problem
from pydantic import ValidationError


def settings(timeout: int, interval: int) -> ControllerModeSettings:
    return ControllerModeSettings.model_validate(
        {
            "enableControllerMode": "true",
            "controllerAddr": "127.0.0.1:9878",
            "controllerHeartBeatTimeoutMills": str(timeout),
            "brokerHeartbeatInterval": str(interval),
        }
    )


def test_the_probes_setting_is_refused_with_both_fixes_named() -> None:
    with pytest.raises(ValidationError) as exc:
        settings(3000, 1000)
    text = str(exc.value)
    assert "lease of 1000 ms" in text
    assert "controllerHeartBeatTimeoutMills >= 6000" in text
    assert "brokerHeartbeatInterval <= 500" in text


@pytest.mark.parametrize(("timeout", "interval"), [(10_000, 1000), (6000, 1000), (3000, 300)])
def test_defaults_and_the_tests_settings_pass(timeout: int, interval: int) -> None:
    assert settings(timeout, interval).controller_heart_beat_timeout_mills == timeout


def test_the_rule_is_the_lease_spanning_three_intervals() -> None:
    for timeout in range(100, 20_001, 100):
        for interval in (10, 50, 100, 250, 300, 500, 1000, 2000, 3000):
            ok = broker_lease_ms(timeout, interval) >= LEASE_MIN_INTERVALS * interval
            assert (lease_problem(timeout, interval) is None) == ok, (timeout, interval)
