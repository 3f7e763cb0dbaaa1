"""Topic attributes (upstream RocketMQ 5 ``+key=value`` / ``-key``): parsing, the alter rules, and
the admin codes against a live broker (the Topic/ConsumerGroup resources rely on them)."""

from __future__ import annotations

from typing import Any

import pytest
from ferrymq.broker import topic_attributes as ta
from ferrymq.broker.app import BrokerApp
from ferrymq.client.broker_api import BrokerApi
from ferrymq.remoting.bodies import SubscriptionGroupConfig
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import CreateTopicRequestHeader


def test_parse_and_alter() -> None:
    ops = ta.parse_operations("+message.type=FIFO")
    assert ops == {"message.type": "FIFO"}
    assert ta.alter({}, ops, create=True) == {"message.type": "FIFO"}
    assert (
        ta.alter({"message.type": "FIFO"}, ta.parse_operations("-message.type"), create=False) == {}
    )


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("message.type=FIFO", r"must start with \+"),
        ("+message.type", r"\+key=value"),
        ("-message.type=FIFO", "-key"),
        ("+a=1,+a=2", "given twice"),
    ],
)
def test_malformed_operations_are_refused(text: str, words: str) -> None:
    with pytest.raises(ta.AttributeRefused, match=words):
        ta.parse_operations(text)


def test_unknown_keys_values_and_removals_are_refused() -> None:
    with pytest.raises(ta.AttributeRefused, match="unsupported topic attribute"):
        ta.alter({}, {"retention.ms": "1"}, create=True)
    with pytest.raises(ta.AttributeRefused, match="not one of"):
        ta.alter({}, {"message.type": "URGENT"}, create=True)
    with pytest.raises(ta.AttributeRefused, match="being created"):
        ta.alter({}, {"message.type": None}, create=True)
    with pytest.raises(ta.AttributeRefused, match="not set"):
        ta.alter({}, {"message.type": None}, create=False)


def test_operations_text_reaches_exactly_the_desired_attributes() -> None:
    current = {"message.type": "FIFO"}
    assert ta.operations_text(current, {"message.type": "NORMAL"}) == "+message.type=NORMAL"
    assert ta.operations_text(current, {}) == "-message.type"
    assert ta.operations_text(current, current) == ""
    text = ta.operations_text(current, {"message.type": "DELAY"})
    assert ta.alter(current, ta.parse_operations(text), create=False) == {"message.type": "DELAY"}


async def test_attributes_over_the_admin_protocol(
    broker: BrokerApp, client: RemotingClient
) -> None:
    """UPDATE_AND_CREATE_TOPIC with ``attributes``: stored, returned, kept when the field is
    absent, removed with ``-key``; a bad attribute is refused with a remark and changes nothing."""
    api = BrokerApi(client)

    async def attributes() -> dict[str, str]:
        table = (await api.get_all_topic_config(broker.addr)).topic_config_table
        return dict(table["AttrT"].attributes)

    create = CreateTopicRequestHeader(topic="AttrT", attributes="+message.type=FIFO")
    await api.create_topic(broker.addr, create)
    assert await attributes() == {"message.type": "FIFO"}
    await api.create_topic(broker.addr, CreateTopicRequestHeader(topic="AttrT", read_queue_nums=4))
    assert await attributes() == {"message.type": "FIFO"}  # no field: kept
    for bad, reason in (
        ("+retention=1d", "unsupported topic attribute"),
        ("+message.type=URGENT", "not one of"),
        ("message.type=FIFO", "must start with"),
    ):
        header = CreateTopicRequestHeader(topic="AttrT", attributes=bad)
        response = await client.invoke(
            broker.addr,
            RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext()),
        )
        assert response.code == ResponseCode.SYSTEM_ERROR and reason in (response.remark or "")
    assert await attributes() == {"message.type": "FIFO"}
    await api.create_topic(
        broker.addr, CreateTopicRequestHeader(topic="AttrT", attributes="-message.type")
    )
    assert await attributes() == {}


async def test_subscription_group_admin_calls(broker: BrokerApp, client: RemotingClient) -> None:
    """The rest of upstream SubscriptionGroupConfig round-trips; DELETE_SUBSCRIPTIONGROUP removes."""
    api = BrokerApi(client)
    config = SubscriptionGroupConfig(
        group_name="orderly", consume_message_orderly=True, consume_timeout_minute=3
    )
    await api.create_subscription_group(broker.addr, config)
    table = (await api.get_all_subscription_group_config(broker.addr)).subscription_group_table
    assert table["orderly"].consume_message_orderly is True
    assert table["orderly"].consume_timeout_minute == 3
    await api.delete_subscription_group(broker.addr, "orderly")
    table = (await api.get_all_subscription_group_config(broker.addr)).subscription_group_table
    assert "orderly" not in table


def test_mixed_is_refused_unless_the_broker_allows_it() -> None:
    with pytest.raises(ta.MixedRefused, match=r"MIXED message type is not supported\."):
        ta.alter({}, ta.parse_operations("+message.type=MIXED"), create=True)
    assert ta.MixedRefused().code == ResponseCode.INVALID_PARAMETER
    assert ta.alter({}, {"message.type": "MIXED"}, create=True, allow_mixed=True) == {
        "message.type": "MIXED"
    }
    assert ta.alter({}, {"message.type": "UNSPECIFIED"}, create=True) == {
        "message.type": "UNSPECIFIED"
    }


async def test_cli_topic_create_sets_message_type(broker: BrokerApp) -> None:
    import asyncio

    from ferrymq.cli.main import app
    from typer.testing import CliRunner

    namesrv = broker.config.namesrv_addr
    assert namesrv is not None

    def create(topic: str, kind: str) -> Any:
        argv = ["admin", "topic", "create", "-t", topic, "-n", namesrv, "-b", broker.addr]
        return CliRunner().invoke(app, [*argv, "-r", "2", "-w", "2", "-a", f"+message.type={kind}"])

    # the CLI runs its own event loop: in a thread, so the broker's loop keeps serving
    result = await asyncio.to_thread(create, "CliFifo", "FIFO")
    assert result.exit_code == 0, result.output
    config = broker.topics.get("CliFifo")
    assert config is not None and config.attributes == {"message.type": "FIFO"}
    refused = await asyncio.to_thread(create, "CliMixed", "MIXED")
    assert refused.exit_code != 0
    assert (
        "MIXED message type is not" in refused.output and "INVALID_PARAMETER (29)" in refused.output
    )
