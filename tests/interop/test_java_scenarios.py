"""The Java client (rocketmq-client 4.9.8 and 5.4.0) against Apache RocketMQ 5.4.0 and against
ferrymq: the same scenario on both, and what the user sees must be equal (tests/interop/README.md)."""

from __future__ import annotations

from typing import Any

import pytest

from .differential import PERM_RW, assert_same, differential, observe
from .java_runner import JavaScenarios
from .reference import Target

# the session fixtures start two clusters and a JVM (minutes on a loaded 2-core machine): room for
# the first test's setup; a scenario itself is bounded by its own timeouts
pytestmark = pytest.mark.timeout(900)

READ_ONLY = 4


def names(java: JavaScenarios, base: str) -> str:
    """A topic or group name of its own per test and client version (the brokers live for the
    whole session), the same on both brokers."""
    return f"{base}_{java.client.replace('.', '')}"


def sent_ok(results: list[dict[str, Any]]) -> bool:
    return all(r.get("status") == "SEND_OK" for r in results)


def arrival_order_free(obs: dict[str, Any]) -> dict[str, Any]:
    """Async and oneway sends promise no order of arrival within a queue (Apache 5.4.0 stored a
    oneway seq 2 before seq 0 in one CI run): each queue's messages sorted by ``seq``, with the
    offsets each queue handed out kept apart so they still compare."""
    stored = obs["stored"]
    obs["queueOffsets"] = sorted((m["queueId"], m["queueOffset"]) for m in stored)
    stored.sort(key=lambda m: (m["queueId"], int(m["properties"]["seq"])))
    for m in stored:
        m["queueOffset"] = "<queue offset>"
    return obs


@pytest.mark.parametrize("mode", ["sync", "async", "oneway", "batch"])
def test_send_modes_tags_keys_properties(
    java_client: JavaScenarios, targets: list[Target], mode: str
) -> None:
    topic = names(java_client, f"Send_{mode}")

    def check(obs: dict[str, Any]) -> None:
        assert len(obs["stored"]) == 4
        assert mode == "oneway" or sent_ok(obs["sent"])

    differential(
        java_client,
        targets,
        "send",
        topics={topic: (2, PERM_RW)},
        topic=topic,
        group=names(java_client, f"PG_send_{mode}"),
        mode=mode,
        count=4,
        check=check,
        prepare=arrival_order_free if mode in ("async", "oneway") else None,
    )


def test_sql92_filter_and_bad_expression(java_client: JavaScenarios, targets: list[Target]) -> None:
    topic = names(java_client, "Sql92")
    seen = {
        t.name: observe(
            java_client,
            t,
            "sql92",
            topics={topic: (2, PERM_RW)},
            topic=topic,
            group=names(java_client, "CG_sql"),
        )
        for t in targets
    }
    assert seen["apache"]["pushed"] == ["sql-6", "sql-8"]
    # Kept on purpose (README "Differences kept"): the parse error's wording is JavaCC's on
    # Apache; ferrymq's parser names the same column. Code and everything else must be equal.
    for obs in seen.values():
        remark = obs["badSql"]["remark"]
        assert "column 4" in remark, remark
        obs["badSql"]["remark"] = "<parse error at column 4>"
    assert_same(seen, f"sql92 on rocketmq-client {java_client.client}")


def test_orderly_consumption_keeps_order(java_client: JavaScenarios, targets: list[Target]) -> None:
    topic = names(java_client, "Orderly")

    def check(obs: dict[str, Any]) -> None:
        assert sum(len(v) for v in obs["perQueue"].values()) == 12
        assert obs["suspendedOnce"]

    differential(
        java_client,
        targets,
        "orderly",
        topics={topic: (4, PERM_RW)},
        topic=topic,
        group=names(java_client, "CG_orderly"),
        check=check,
    )


def half_queue_offsets_ordered(obs: dict[str, Any]) -> dict[str, Any]:
    """A transactional send answers its half message's offset in RMQ_SYS_TRANS_HALF_TOPIC, a
    queue the broker also appends to on its own: each check pass re-appends the half messages it
    asks about. Apache 5.4.0 writes its op messages in batches (transactionOpBatchInterval, 3 s),
    so a pass may also re-append (and ask about) a committed or rolled back half whose op message
    is not written yet, and re-appends copies left unanswered after a scenario has ended (up to
    transactionCheckMax times). How many such copies precede ours is timing, so the half offsets
    are compared as their order: the sends' in send order, the check-back's after them."""
    sent = [m["queueOffset"] for m in obs["sent"]]
    assert sent == sorted(set(sent)), f"half offsets not increasing: {sent}"
    for i, m in enumerate(obs["sent"]):
        m["queueOffset"] = i
    checked = obs["checkedMessage"]
    if checked is not None:
        assert checked["queueOffset"] > sent[-1], (checked["queueOffset"], sent)
        checked["queueOffset"] = "<after the half messages>"
    return obs


def test_transaction_commit_rollback_check_back(
    java_client: JavaScenarios, targets: list[Target]
) -> None:
    topic = names(java_client, "Tx")

    def check(obs: dict[str, Any]) -> None:
        assert obs["checkedBack"]
        assert sorted(m["body"] for m in obs["stored"]) == ["commit-1", "unknown-1"]

    differential(
        java_client,
        targets,
        "transaction",
        topics={topic: (1, PERM_RW)},
        topic=topic,
        group=names(java_client, "PG_tx"),
        check=check,
        prepare=half_queue_offsets_ordered,
    )


def test_retry_then_dlq_and_read_the_dlq(java_client: JavaScenarios, targets: list[Target]) -> None:
    topic = names(java_client, "Retry")

    def check(obs: dict[str, Any]) -> None:
        assert [m["reconsumeTimes"] for m in obs["deliveries"]] == [0, 1]
        assert isinstance(obs["dlq"], list) and len(obs["dlq"]) == 1

    differential(
        java_client,
        targets,
        "retry_dlq",
        topics={topic: (1, PERM_RW)},
        topic=topic,
        group=names(java_client, "CG_retry"),
        check=check,
    )


def test_delay_level(java_client: JavaScenarios, targets: list[Target]) -> None:
    topic = names(java_client, "Delay")

    def check(obs: dict[str, Any]) -> None:
        assert [m["body"] for m in obs["received"]] == ["delayed"]

    differential(
        java_client,
        targets,
        "delay",
        topics={topic: (1, PERM_RW)},
        topic=topic,
        group=names(java_client, "CG_delay"),
        check=check,
    )


def test_request_reply(java_client: JavaScenarios, targets: list[Target]) -> None:
    topic = names(java_client, "Request")

    def check(obs: dict[str, Any]) -> None:
        assert obs["reply"].get("body") == "reply-to-question", obs["reply"]

    differential(
        java_client,
        targets,
        "request_reply",
        topics={topic: (1, PERM_RW)},
        topic=topic,
        group=names(java_client, "CG_request"),
        timeout_s=30,
        check=check,
    )


def test_query_by_key_and_id(java_client: JavaScenarios, targets: list[Target]) -> None:
    topic = names(java_client, "Query")

    def check(obs: dict[str, Any]) -> None:
        assert len(obs["byKey"]) == 3
        assert obs["byOffsetMsgId"]["body"] == "query-1"
        assert obs["byUniqueId"]["body"] == "query-2"

    differential(
        java_client,
        targets,
        "query",
        topics={topic: (2, PERM_RW)},
        topic=topic,
        group=names(java_client, "PG_query"),
        key=names(java_client, "qkey"),
        check=check,
    )


def produce_on_each(
    java: JavaScenarios, targets: list[Target], topic: str, queues: int, count: int, prefix: str
) -> None:
    """The same ``count`` messages on every target (the send results compared too)."""
    produced = {
        t.name: observe(
            java,
            t,
            "produce",
            topics={topic: (queues, PERM_RW)},
            topic=topic,
            group=names(java, f"PG_{prefix}"),
            prefix=prefix,
            count=count,
        )
        for t in targets
    }
    assert sent_ok(produced["apache"])
    assert_same(produced, f"produce {topic}")


def test_lite_pull_subscribe_and_assign_seek(
    java_client: JavaScenarios, targets: list[Target]
) -> None:
    topic = names(java_client, "LitePull")
    produce_on_each(java_client, targets, topic, 4, 8, "lite")

    def check(obs: dict[str, Any]) -> None:
        assert len(obs["subscribed"]) == 8
        assert len(obs["assignedSeek"]) == 7

    differential(
        java_client,
        targets,
        "lite_pull",
        topic=topic,
        group=names(java_client, "CG_lite"),
        count=8,
        check=check,
    )


def test_broadcasting(java_client: JavaScenarios, targets: list[Target]) -> None:
    topic = names(java_client, "Broadcast")

    def check(obs: list[list[str]]) -> None:
        assert obs == [["bc-0", "bc-1", "bc-2", "bc-3"]] * 2

    differential(
        java_client,
        targets,
        "broadcast",
        topics={topic: (2, PERM_RW)},
        topic=topic,
        group=names(java_client, "CG_broadcast"),
        count=4,
        check=check,
    )


def test_two_consumers_join_and_leave(java_client: JavaScenarios, targets: list[Target]) -> None:
    """Two push consumers of one group on 4 queues: each gets two (AllocateMessageQueueAveragely,
    in client id order) and both are listed; one leaves, the other takes all four and consumes
    what was produced meanwhile, nothing lost and nothing twice."""
    topic = names(java_client, "Rebalance")
    early = [f"early-{i}" for i in range(8)]
    late = sorted(f"late-{i}" for i in range(8))

    def check(obs: dict[str, Any]) -> None:
        assert obs["joinedSettled"] and obs["leftSettled"]
        assert obs["joinedAllocation"] == [[0, 1], [2, 3]]
        assert obs["joinedConsumers"] == ["consumer-0", "consumer-1"]
        assert sorted(obs["early"][0] + obs["early"][1]) == early
        assert obs["leftAllocation"] == [0, 1, 2, 3]
        assert obs["leftConsumers"] == ["consumer-0"]
        assert obs["survivorAfterLeave"] == late

    differential(
        java_client,
        targets,
        "rebalance",
        topics={topic: (4, PERM_RW)},
        topic=topic,
        group=names(java_client, "CG_rebalance"),
        count=8,
        check=check,
    )


def test_consumer_offsets_survive_a_broker_restart(
    java_client: JavaScenarios, targets: list[Target]
) -> None:
    """Consume, stop the consumer (offsets persisted), restart the broker, produce more: the
    group resumes after what it consumed. The first consumer's listener returns only once the
    consumer is stopping, so its offsets reach the broker by the shutdown's persist alone."""
    topic = names(java_client, "Offsets")
    group = names(java_client, "CG_offsets")
    produce_on_each(java_client, targets, topic, 2, 4, "before")
    first = {
        t.name: observe(
            java_client,
            t,
            "consume",
            topic=topic,
            group=group,
            expected=4,
            finish_at_shutdown=True,
        )
        for t in targets
    }
    assert first["apache"] == ["before-0", "before-1", "before-2", "before-3"]
    assert_same(first, "consume before the restart")
    for t in targets:
        t.restart_broker(0)
    produce_on_each(java_client, targets, topic, 2, 2, "after")
    second = {
        t.name: observe(java_client, t, "consume", topic=topic, group=group, expected=2)
        for t in targets
    }
    assert second["apache"] == ["after-0", "after-1"]
    assert_same(second, "consume after the restart")


def test_namespace(java_client: JavaScenarios, targets: list[Target]) -> None:
    ns = names(java_client, "ns")
    topic = "Namespaced"

    def check(obs: dict[str, Any]) -> None:
        assert [m["body"] for m in obs["received"]] == ["namespaced"]

    differential(
        java_client,
        targets,
        "namespace",
        topics={f"{ns}%{topic}": (1, PERM_RW)},
        namespace=ns,
        topic=topic,
        group=names(java_client, "CG_ns"),
        check=check,
    )


def test_message_trace(java_client: JavaScenarios, targets: list[Target]) -> None:
    topic = names(java_client, "Traced")

    def check(obs: dict[str, Any]) -> None:
        assert [r[0] for r in obs["records"]] == ["Pub"], obs

    differential(
        java_client,
        targets,
        "trace",
        topics={topic: (1, PERM_RW)},
        topic=topic,
        group=names(java_client, "PG_trace"),
        check=check,
    )


def test_bad_input_codes_and_remarks(java_client: JavaScenarios, targets: list[Target]) -> None:
    topic = names(java_client, "BadInput")
    read_only = names(java_client, "ReadOnly")

    def check(obs: dict[str, Any]) -> None:
        for case in ("unknownTopicRoute", "oversized", "readOnlyTopic", "queueOutOfRange"):
            assert "class" in obs[case], (case, obs[case])

    differential(
        java_client,
        targets,
        "bad_input",
        topics={topic: (2, PERM_RW), read_only: (1, READ_ONLY)},
        topic=topic,
        read_only_topic=read_only,
        unknown_topic=names(java_client, "NoSuchTopic"),
        group=names(java_client, "PG_bad"),
        check=check,
    )
