"""Fixtures for the operator's builder tests (no cluster needed)."""

from __future__ import annotations

import pytest
from ferrymq_operator.builders.names import Owner


@pytest.fixture
def broker_owner() -> Owner:
    return Owner("ferrymq.io/v1alpha1", "Broker", "orders", "prod", "uid-broker-1")


@pytest.fixture
def namesrv_owner() -> Owner:
    return Owner("ferrymq.io/v1alpha1", "NameServer", "routes", "prod", "uid-ns-1")
