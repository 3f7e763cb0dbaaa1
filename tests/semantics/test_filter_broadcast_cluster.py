"""Broadcasting, tag and SQL92 filtering, and compression through a real broker."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest
from ferrymq.client import Message, MessageExt, MessageModel, Producer, PushConsumer
from ferrymq.filter import FilterCompileError
from ferrymq.message import MessageSysFlag
from ferrymq.remoting.bodies import SubscriptionData
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import PULL_FLAG_SUBSCRIPTION, PullMessageRequestHeader
from polling import wait_for

from semantics.cluster import SemanticsCluster, semantics_cluster

pytestmark = pytest.mark.timeout(120)


def _all_consumed(cluster: SemanticsCluster, consumer: PushConsumer, topic: str) -> bool:
    """The consumer's progress reached the end of every queue (every message was evaluated)."""
    store = cluster.broker.store
    assert store is not None and consumer.offset_store is not None
    owned = [mq for mq in consumer.owned_queues() if mq.topic == topic]
    return bool(owned) and all(
        consumer.offset_store.offsets.get(mq, -1)
        == store.get_max_offset_in_queue(topic, mq.queue_id)
        for mq in owned
    )


async def test_broadcasting_delivers_every_message_to_every_consumer(tmp_path: Path) -> None:
    async with semantics_cluster(tmp_path) as cluster:
        await cluster.create_topic("News", queues=3)
        got: dict[str, Counter[bytes]] = {"a": Counter(), "b": Counter()}
        consumers = []
        for name in got:
            c = PushConsumer(
                "bc-g",
                instance=cluster.instance(),
                message_model=MessageModel.BROADCASTING,
                offsets_dir=tmp_path / "offsets",
            )
            c.subscribe("News")
            c.register_listener(lambda msgs, ctx, n=name: got[n].update(m.body for m in msgs))
            await c.start()
            consumers.append(c)
        try:
            async with Producer("bc-p", cluster.namesrv_addr) as producer:
                for i in range(30):
                    await producer.send(Message("News", f"n{i}".encode()))
            want = Counter(f"n{i}".encode() for i in range(30))
            await wait_for(lambda: got["a"] == want and got["b"] == want, 20, "both got all")
            await wait_for(lambda: all(_all_consumed(cluster, c, "News") for c in consumers), 10)
        finally:
            for c in consumers:
                await c.shutdown()
        # progress is per consumer, in local files; the broker keeps none for the group
        files = sorted((tmp_path / "offsets").rglob("offsets.json"))
        assert len(files) == 2
        for f in files:
            rows = orjson.loads(f.read_bytes())["offsetTable"]
            assert sum(r["offset"] for r in rows if r["topic"] == "News") == 30
        assert cluster.broker.offsets.query_offset("bc-g", "News", 0) in (-1, None)


async def _sql_consumer(
    cluster: SemanticsCluster,
    group: str,
    topic: str,
    expression: str,
    kind: str,
    got: list[MessageExt],
) -> PushConsumer:
    consumer = PushConsumer(group, instance=cluster.instance())
    consumer.subscribe(topic, expression, kind)
    consumer.register_listener(lambda msgs, ctx: got.extend(msgs))
    await consumer.start()
    return consumer


async def test_sql92_and_tags_select_exactly_the_matching_messages(tmp_path: Path) -> None:
    async with semantics_cluster(tmp_path, enable_property_filter=True) as cluster:
        await cluster.create_topic("Trades", queues=2)
        sql_got: list[MessageExt] = []
        tag_got: list[MessageExt] = []
        sql = await _sql_consumer(
            cluster,
            "sql-g",
            "Trades",
            "amount BETWEEN 10 AND 40 AND (region IN ('eu', 'apac') OR vip IS NOT NULL) AND TAGS <> 'TagC'",
            "SQL92",
            sql_got,
        )
        tags = await _sql_consumer(cluster, "tag-g", "Trades", "TagA || TagC", "TAG", tag_got)
        expected_sql: set[int] = set()
        expected_tag: set[int] = set()
        try:
            async with Producer("trade-p", cluster.namesrv_addr) as producer:
                for i in range(60):
                    msg = Message("Trades", str(i).encode())
                    msg.tags = ["TagA", "TagB", "TagC"][i % 3]
                    region = ["eu", "us", "apac", "latam"][i % 4]
                    msg.properties["amount"] = str(i)
                    msg.properties["region"] = region
                    if i % 7 == 0:
                        msg.properties["vip"] = "yes"
                    if i == 13:
                        msg.properties["amount"] = "lots"  # not a number: never matches
                    await producer.send(msg)
                    numeric = i != 13
                    if (
                        numeric
                        and 10 <= i <= 40
                        and (region in ("eu", "apac") or i % 7 == 0)
                        and msg.tags != "TagC"
                    ):
                        expected_sql.add(i)
                    if msg.tags in ("TagA", "TagC"):
                        expected_tag.add(i)
            await wait_for(lambda: _all_consumed(cluster, sql, "Trades"), 20, "SQL consumer done")
            await wait_for(lambda: _all_consumed(cluster, tags, "Trades"), 20, "tag consumer done")
        finally:
            await sql.shutdown()
            await tags.shutdown()
        assert sorted(int(m.body) for m in sql_got) == sorted(expected_sql)
        assert sorted(int(m.body) for m in tag_got) == sorted(expected_tag)


async def test_bad_sql92_is_rejected_at_subscription_time(tmp_path: Path) -> None:
    async with semantics_cluster(tmp_path, enable_property_filter=True) as cluster:
        await cluster.create_topic("Trades", queues=1)
        consumer = PushConsumer("bad-g", instance=cluster.instance())
        with pytest.raises(FilterCompileError, match="numbers only"):
            consumer.subscribe("Trades", "amount > 'ten'", "SQL92")
        client = RemotingClient()
        try:
            # what upstream clients do before starting: CHECK_CLIENT_CONFIG
            sub = SubscriptionData(topic="Trades", sub_string="amount >", expression_type="SQL92")
            body = orjson.dumps(
                {"clientId": "x", "group": "bad-g", "subscriptionData": sub.to_json_obj()}
            )
            check = await client.invoke(
                cluster.broker_addr,
                RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, None, body),
            )
            assert check.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
            assert "unexpected end" in (check.remark or "")
            good = orjson.dumps(
                {
                    "clientId": "x",
                    "group": "bad-g",
                    "subscriptionData": SubscriptionData(
                        topic="Trades", sub_string="amount > 1", expression_type="SQL92"
                    ).to_json_obj(),
                }
            )
            ok = await client.invoke(
                cluster.broker_addr,
                RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, None, good),
            )
            assert ok.code == ResponseCode.SUCCESS
            # and a pull carrying a bad expression is refused with the reason, not served
            header = PullMessageRequestHeader(
                consumer_group="bad-g",
                topic="Trades",
                queue_id=0,
                queue_offset=0,
                max_msg_nums=32,
                sys_flag=PULL_FLAG_SUBSCRIPTION,
                commit_offset=0,
                suspend_timeout_millis=0,
                subscription="region IN (1, 2)",
                sub_version=1,
                expression_type="SQL92",
            )
            pull = await client.invoke(
                cluster.broker_addr,
                RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext()),
            )
            assert pull.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and pull.remark
        finally:
            await client.close()


async def test_sql92_needs_enable_property_filter(tmp_path: Path) -> None:
    async with semantics_cluster(tmp_path) as cluster:  # enablePropertyFilter defaults to false
        client = RemotingClient()
        try:
            sub = SubscriptionData(topic="T", sub_string="a > 1", expression_type="SQL92")
            body = orjson.dumps(
                {"clientId": "x", "group": "g", "subscriptionData": sub.to_json_obj()}
            )
            check = await client.invoke(
                cluster.broker_addr,
                RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, None, body),
            )
        finally:
            await client.close()
        assert check.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "enablePropertyFilter" in (check.remark or "")


async def test_large_bodies_travel_compressed_and_arrive_intact(tmp_path: Path) -> None:
    async with semantics_cluster(tmp_path) as cluster:
        await cluster.create_topic("Big", queues=1)
        got: list[MessageExt] = []
        consumer = PushConsumer("big-g", instance=cluster.instance())
        consumer.subscribe("Big")
        consumer.register_listener(lambda msgs, ctx: got.extend(msgs))
        await consumer.start()
        big = b"".join(f"line {i} of a large report\n".encode() for i in range(2000))
        small = b"x" * 4096  # at the threshold: not compressed
        try:
            async with Producer("big-p", cluster.namesrv_addr) as producer:
                big_result = await producer.send(Message("Big", big))
                await producer.send(Message("Big", small))
            await wait_for(lambda: len(got) == 2, 20, "both bodies")
        finally:
            await consumer.shutdown()
        assert [m.body for m in got] == [big, small]
        store = cluster.broker.store
        assert store is not None
        from ferrymq.message import decode_message_id

        _, _, offset = decode_message_id(big_result.offset_msg_id)
        size = store.commit_log.get_record_size(offset)
        assert size < len(big) // 4  # stored deflated
        stored = store.look_message_by_offset(offset)
        assert stored is not None and stored.sys_flag & MessageSysFlag.COMPRESSED_FLAG
        assert not got[1].sys_flag & MessageSysFlag.COMPRESSED_FLAG
