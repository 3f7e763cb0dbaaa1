"""Which store claims a slave scale-down may delete (opt-in, pod gone, never a master)."""

from __future__ import annotations

from ferrymq_operator.claims import claims_to_delete, parse_claim


def test_parse_claim() -> None:
    assert parse_claim("orders", "store-orders-broker-2-1") == (2, 1)
    assert parse_claim("orders", "store-orders-broker-02-1") is None
    assert parse_claim("orders", "store-other-broker-0-1") is None
    assert parse_claim("orders", "data-orders-broker-0-1") is None
    assert parse_claim("orders", "store-orders-broker-0-x") is None


def test_only_removed_slaves_without_pods() -> None:
    claims = [f"store-orders-broker-{g}-{i}" for g in range(2) for i in range(3)]
    pods = ["orders-broker-0-0", "orders-broker-0-1", "orders-broker-1-0", "orders-broker-1-2"]
    doomed = claims_to_delete("orders", claims, pods, groups=2, replicas_per_group=2)
    # group 1's ordinal 2 still has a (terminating) pod: kept until it is gone.
    assert doomed == ["store-orders-broker-0-2"]


def test_never_a_master_or_a_group_beyond_spec() -> None:
    claims = ["store-orders-broker-0-0", "store-orders-broker-3-1"]
    assert claims_to_delete("orders", claims, [], groups=2, replicas_per_group=1) == []


def test_other_brokers_claims_untouched() -> None:
    claims = ["store-orders2-broker-0-1", "store-orders-broker-0-1"]
    assert claims_to_delete("orders", claims, [], groups=1, replicas_per_group=1) == [
        "store-orders-broker-0-1"
    ]
