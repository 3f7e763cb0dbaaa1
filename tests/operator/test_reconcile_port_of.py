"""The pod ports the roll and drains use to reach broker pods (reconcile._port_of)."""

from __future__ import annotations

from ferrymq_operator.models import parse_broker_spec
from ferrymq_operator.reconcile import _port_of

REF = {"nameServerRef": {"name": "routes"}}


def test_fixed_roles_pod_ordinal_is_the_broker_id() -> None:
    spec = parse_broker_spec(
        {**REF, "hostNetwork": True, "replicasPerGroup": 2, "listenPort": 20911}
    )
    assert [_port_of(spec)(0, o) for o in range(2)] == [20911, 20921]


def test_controller_mode_pod_ordinal_is_broker_id_minus_one() -> None:
    spec = parse_broker_spec(
        {**REF, "hostNetwork": True, "replicasPerGroup": 2, "listenPort": 21911,
         "failover": "controller"}
    )  # fmt: skip
    # the broker.conf of pod 0 has brokerId 1 and listenPort 21921 (builders/broker.py)
    assert [_port_of(spec)(0, o) for o in range(2)] == [21921, 21931]
