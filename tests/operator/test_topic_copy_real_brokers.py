"""The operator's scale-out topic copy against real ferrymq brokers (child processes, 127.0.0.1).

Group a already serves topics; group b is the "new group". RemotingTopicAdmin reads a's topic
table and creates the missing topics on b over the broker admin protocol, exactly as the operator
does after a scale-out (there with pod DNS addresses instead of 127.0.0.1 ports).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.client.admin import AdminClient
from ferrymq_operator.broker_admin import RemotingTopicAdmin, copy_topics


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("topic-copy"),
        groups=2,
        namesrv_port=0,
        broker_port=0,
        cluster_name="orders",
        mapped_file_size_commit_log=1024 * 1024,
    ) as running:
        yield running


async def test_copy_to_new_group_over_the_admin_protocol(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    source, target = cluster.broker_addrs
    async with AdminClient(cluster.namesrv_addr) as admin_client:
        await admin_client.create_topic(
            "payments", broker_addr=source, read_queue_nums=4, write_queue_nums=4
        )
        await admin_client.create_topic(
            "audit-log", broker_addr=source, read_queue_nums=2, write_queue_nums=2, order=True
        )

    admin = RemotingTopicAdmin(timeout_seconds=5)
    before = {t.topic_name for t in await admin.topics(target)}
    assert "payments" not in before

    brokers = [cluster.group_name(0), cluster.group_name(1)]
    created = await copy_topics(admin, [source], target, "orders", brokers)
    assert {t.topic_name for t in created} == {"payments", "audit-log"}

    after = {t.topic_name: t for t in await admin.topics(target)}
    assert after["payments"].read_queue_nums == 4 and after["payments"].write_queue_nums == 4
    assert after["audit-log"].order is True
    # System and per-broker topics were left to the brokers themselves.
    assert all(not t.topic_name.startswith("%") for t in created)
    # Idempotent: a second pass finds nothing to do.
    assert await copy_topics(admin, [source], target, "orders", brokers) == []
