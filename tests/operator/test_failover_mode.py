"""The deployed failover mode of a Broker and the refusal of a change (pure functions)."""

from __future__ import annotations

import pytest
from ferrymq_operator import failover_mode
from ferrymq_operator.builders import broker as broker_builder
from ferrymq_operator.builders import pod
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import parse_broker_spec

OWNER = Owner("ferrymq.io/v1alpha1", "Broker", "orders", "prod", "uid-1")


def _conf(failover: str) -> str:
    spec = parse_broker_spec(
        {"nameServerRef": {"name": "ns"}, "replicasPerGroup": 2, "failover": failover}
    )
    return pod.properties_text(broker_builder.broker_conf(OWNER, spec, "ns:9876", 0, 0))


@pytest.mark.parametrize("failover", ["none", "controller"])
def test_the_mode_read_back_from_a_built_conf(failover: str) -> None:
    assert failover_mode.mode_of_conf(_conf(failover)) == failover


def test_deployed_mode_from_the_first_conf_found() -> None:
    confs = [None, _conf("controller"), _conf("none")]
    assert failover_mode.deployed_mode(confs, True, False) == "controller"


def test_nothing_deployed_allows_any_mode() -> None:
    assert failover_mode.deployed_mode([], False, False) is None
    assert failover_mode.refusal(None, "controller") is None


def test_statefulsets_without_confs_fall_back_to_the_controller_statefulset() -> None:
    assert failover_mode.deployed_mode([None], True, True) == "controller"
    assert failover_mode.deployed_mode([None], True, False) == "none"


def test_same_mode_is_not_refused() -> None:
    assert failover_mode.refusal("none", "none") is None
    assert failover_mode.refusal("controller", "controller") is None


@pytest.mark.parametrize(("deployed", "wanted"), [("none", "controller"), ("controller", "none")])
def test_a_change_is_refused_with_what_to_do(deployed: str, wanted: str) -> None:
    failure = failover_mode.refusal(deployed, wanted)  # type: ignore[arg-type]
    assert failure is not None
    assert failure.reason == "FailoverModeChangeUnsupported"
    assert f"set spec.failover back to {deployed!r}" in failure.message
    assert "migrate" in failure.message
