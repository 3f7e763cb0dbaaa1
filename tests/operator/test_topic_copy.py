"""Topic planning for new broker groups (pure) and the copy driver over a recording admin."""

from __future__ import annotations

from ferrymq_operator.broker_admin import (
    AdminUnavailable,
    RemotingTopicAdmin,
    TopicConfig,
    UnavailableAdmin,
    copy_topics,
    default_admin,
    is_system_topic,
    plan_topic_copy,
)

BROKERS = ["orders-broker-0", "orders-broker-1", "orders-broker-2"]


def test_system_topics_are_not_copied() -> None:
    for name in [
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRACE_TOPIC",
        "%RETRY%g1",
        "%DLQ%g1",
        "orders",
        "orders-broker-1",
        "OFFSET_MOVED_EVENT",
        "SELF_TEST_TOPIC",
    ]:
        assert is_system_topic(name, "orders", BROKERS), name
    assert not is_system_topic("payments", "orders", BROKERS)


def test_union_of_sources_with_largest_queue_counts() -> None:
    g0 = [TopicConfig("a", 4, 4), TopicConfig("b", 8, 8), TopicConfig("TBW102")]
    g1 = [TopicConfig("a", 8, 6), TopicConfig("c", 2, 2, order=True)]
    plan = plan_topic_copy([g0, g1], [], "orders", BROKERS)
    assert [t.topic_name for t in plan] == ["a", "b", "c"]
    assert plan[0] == TopicConfig("a", 8, 6)
    assert plan[2].order is True


def test_topics_already_on_target_are_skipped() -> None:
    source = [TopicConfig("a", 4, 4), TopicConfig("b", 4, 4)]
    target = [TopicConfig("a", 4, 4), TopicConfig("b", 2, 2)]
    assert plan_topic_copy([source], target, "orders", BROKERS) == [TopicConfig("b", 4, 4)]


def test_nothing_to_copy() -> None:
    assert plan_topic_copy([], [], "orders", BROKERS) == []


class RecordingAdmin:
    """In-memory stand-in for brokers reached over the admin protocol (a test double, named so)."""

    def __init__(self, topics: dict[str, list[TopicConfig]]) -> None:
        self.topics_by_addr = topics
        self.created: list[tuple[str, TopicConfig]] = []

    async def topics(self, broker_addr: str) -> list[TopicConfig]:
        return list(self.topics_by_addr.get(broker_addr, []))

    async def create_topic(self, broker_addr: str, config: TopicConfig) -> None:
        self.created.append((broker_addr, config))
        self.topics_by_addr.setdefault(broker_addr, []).append(config)


async def test_copy_creates_planned_topics_on_target() -> None:
    admin = RecordingAdmin(
        {"g0:10911": [TopicConfig("a"), TopicConfig("TBW102")], "g1:10911": [TopicConfig("b")]}
    )
    created = await copy_topics(admin, ["g0:10911", "g1:10911"], "g2:10911", "orders", BROKERS)
    assert [t.topic_name for t in created] == ["a", "b"]
    assert [addr for addr, _ in admin.created] == ["g2:10911", "g2:10911"]
    # Idempotent: a second pass creates nothing.
    assert await copy_topics(admin, ["g0:10911", "g1:10911"], "g2:10911", "orders", BROKERS) == []


async def test_unavailable_admin_says_why() -> None:
    admin = UnavailableAdmin("no admin client")
    try:
        await copy_topics(admin, ["a"], "b", "orders", BROKERS)
    except AdminUnavailable as error:
        assert "no admin client" in str(error)
    else:
        raise AssertionError("expected AdminUnavailable")


def test_default_admin_is_usable() -> None:
    admin = default_admin(1.0)
    assert isinstance(admin, RemotingTopicAdmin)
    assert admin.timeout_seconds == 1.0
