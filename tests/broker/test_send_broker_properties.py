"""The properties upstream's broker adds to every message a producer sends (MSG_REGION, TRACE_ON,
CLUSTER), found missing by the Apache differential tests (tests/interop)."""

from __future__ import annotations

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.processors.send import (
    broker_added_properties,
    send_response_fields,
    with_broker_properties,
)
from ferrymq.message import decode_properties, encode_properties


def test_broker_added_properties_follow_the_config() -> None:
    config = BrokerConfig(brokerName="b", brokerClusterName="C1", regionId="R1", traceOn=False)
    assert broker_added_properties(config) == {
        "MSG_REGION": "R1",
        "TRACE_ON": "false",
        "CLUSTER": "C1",
    }


def test_send_responses_carry_region_and_trace_switch() -> None:
    config = BrokerConfig(brokerName="b", brokerClusterName="C1", regionId="R1", traceOn=False)
    assert send_response_fields(config) == {"MSG_REGION": "R1", "TRACE_ON": "false"}


def test_added_to_a_4x_and_a_5x_encoding() -> None:
    added = broker_added_properties(BrokerConfig(brokerName="b"))
    for text in ("UNIQ_KEY\x01ABC\x02TAGS\x01T\x02", "UNIQ_KEY\x01ABC\x02TAGS\x01T", ""):
        props = decode_properties(text)
        stored = with_broker_properties(props, text, added, encode_properties(added))
        expected = {**decode_properties(text), **added}
        assert decode_properties(stored) == expected == props


def test_the_broker_values_replace_a_producer_s() -> None:
    added = broker_added_properties(BrokerConfig(brokerName="b"))
    text = "CLUSTER\x01Other\x02KEYS\x01k\x02"
    props = decode_properties(text)
    stored = with_broker_properties(props, text, added, encode_properties(added))
    assert stored.count("CLUSTER") == 1
    assert decode_properties(stored)["CLUSTER"] == "DefaultCluster"
