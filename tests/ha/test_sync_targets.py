"""What a slave does with the topic configs it copies (ManagerSyncTargets, real managers): a topic
deleted on the master loses its queues and offsets here; a master whose config version went back
(topics.json lost) does not make the slave drop the queues that may be the only copy."""

from __future__ import annotations

from collections.abc import Sequence

from ferrymq.broker.consumer_offsets import ConsumerOffsetManager
from ferrymq.broker.subscription_groups import SubscriptionGroupManager
from ferrymq.broker.topic_config import TopicConfigManager
from ferrymq.ha.broker_ha import ManagerSyncTargets
from ferrymq.remoting.bodies import DataVersion, TopicConfig, TopicConfigSerializeWrapper


class RecordingStore:
    """Stand-in for the slave's MessageStore: records which topics' queues were deleted."""

    def __init__(self) -> None:
        self.deleted: list[list[str]] = []

    def delete_topics(self, names: Sequence[str]) -> int:
        self.deleted.append(list(names))
        return len(names)


def _wrapper(topics: list[str], counter: int, timestamp: int = 1) -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper(
        topic_config_table={t: TopicConfig(topic_name=t) for t in topics},
        data_version=DataVersion(timestamp=timestamp, counter=counter),
    )


def _targets() -> tuple[
    ManagerSyncTargets, TopicConfigManager, ConsumerOffsetManager, RecordingStore, list[str]
]:
    topics = TopicConfigManager(
        cluster_name="C",
        broker_name="b",
        auto_create_topic_enable=False,
        default_topic_queue_nums=4,
    )
    offsets = ConsumerOffsetManager()
    changed: list[str] = []
    targets = ManagerSyncTargets(
        topics=topics,
        offsets=offsets,
        groups=SubscriptionGroupManager(auto_create=True),
        schedule=lambda: None,
        on_topics_changed=lambda: changed.append("changed"),
    )
    store = RecordingStore()
    targets.store = store  # type: ignore[assignment]
    return targets, topics, offsets, store, changed


def test_a_topic_deleted_on_the_master_loses_its_queues_and_offsets() -> None:
    targets, _, offsets, store, changed = _targets()
    targets.replace_topic_configs(_wrapper(["A", "B"], counter=5))
    offsets.commit_offset("g", "B", 0, 3)
    version = offsets.version
    removed: list[list[str]] = []
    targets.on_topics_removed = removed.append
    store.deleted.clear()  # the slave's own built-in topics the master lacks went at the first copy

    targets.replace_topic_configs(_wrapper(["A"], counter=6))
    assert store.deleted == [["B"]] and removed == [["B"]]
    assert offsets.query_offset("g", "B", 0) == -1 and offsets.version > version
    assert targets.has_topic("A") and not targets.has_topic("B")
    assert targets.versions().topic_config == 6
    assert len(changed) == 2


def test_the_same_version_deletes_nothing() -> None:
    targets, topics, _, store, _ = _targets()
    targets.replace_topic_configs(_wrapper(["A"], counter=5))
    store.deleted.clear()
    # the slave restarted: its built-in topics are back, the master's version is unchanged
    topics.table["TBW102"] = TopicConfig(topic_name="TBW102")
    targets.replace_topic_configs(_wrapper(["A"], counter=5))
    assert store.deleted == []


def test_a_master_whose_version_went_back_does_not_make_the_slave_drop_queues() -> None:
    targets, _, offsets, store, _ = _targets()
    targets.replace_topic_configs(_wrapper(["A", "B"], counter=40))
    offsets.commit_offset("g", "B", 0, 3)
    store.deleted.clear()
    # the master came back without its topics.json: a fresh version, counter 1, no B
    targets.replace_topic_configs(_wrapper(["A"], counter=1, timestamp=99))
    assert store.deleted == []
    assert offsets.query_offset("g", "B", 0) == 3
    assert not targets.has_topic("B")  # the config follows the master; the queues stay
