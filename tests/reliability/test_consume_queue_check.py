"""A ConsumeQueue file cut short while the broker is down is rebuilt from the CommitLog at start,
and the queue offset never goes backwards (issue 23, item 3).

Real ``ferrymq broker`` processes: one stores messages in two queues and stops; the last file
of the first queue is truncated (or deleted) on disk; the restarted broker must serve every message of that
queue again and give the next send the offset after the last one assigned (the consumer group
has committed up to there). Before the fix the units were gone without a word and the next send
got an offset below the committed one.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pulling
import pytest
from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.client.allocate import MessageQueue
from ferrymq.client.broker_api import BrokerApi, send_request, v2_ext
from ferrymq.message import MessageConst, encode_properties
from ferrymq.remoting import headers
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand

TOPIC = "CqCheckTopic"
GROUP = "cq_check_group"
CQ_FILE_SIZE = 20 * 64
FIRST_QUEUE = 300  # messages in queue 0: five ConsumeQueue files
SECOND_QUEUE = 100  # then queue 1, so another queue is further along the CommitLog


async def send(client: RemotingClient, addr: str, queue_id: int, body: bytes) -> int:
    key = body[:16].decode("ascii", "replace")  # "q<queue>-o<offset>-..." or "next"
    header = headers.SendMessageRequestHeader(
        producer_group="cq_check_producer",
        topic=TOPIC,
        queue_id=queue_id,
        born_timestamp=int(time.time() * 1000),
        # a client's unique key, as every real producer sends: the index is current too, so
        # start-up dispatch does not happen to replay the whole CommitLog
        properties=encode_properties({MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: key}),
    )
    reply = await client.invoke(addr, send_request(v2_ext(header), body, False), timeout=10.0)
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    return int(reply.ext_fields["queueOffset"])


async def pull_all(api: BrokerApi, addr: str, queue_id: int) -> dict[int, bytes]:
    """queue offset -> body of every message of one queue, by raw pulls."""
    messages = await pulling.pull_queue(
        api, addr, TOPIC, queue_id, group="cq_check_reader", timeout=10.0
    )
    return {m.queue_offset: m.body for m in messages}


async def create_topic(client: RemotingClient, addr: str) -> None:
    request = RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {
            "topic": TOPIC,
            "defaultTopic": "TBW102",
            "readQueueNums": "2",
            "writeQueueNums": "2",
            "perm": "6",
            "topicFilterType": "SINGLE_TAG",
        },
    )
    reply = await client.invoke(addr, request)
    assert reply.code == ResponseCode.SUCCESS, reply.remark


def body_of(queue_id: int, offset: int) -> bytes:
    return f"q{queue_id}-o{offset}-".encode() + bytes([offset % 251]) * (50 + offset % 300)


@pytest.mark.parametrize("damage", ["truncate", "delete"])
async def test_cut_consume_queue_is_rebuilt_and_offsets_never_go_back(
    tmp_path: Path, damage: str
) -> None:
    cluster = LocalCluster(
        tmp_path / "cluster",
        groups=1,
        namesrv_port=0,
        broker_port=0,
        mapped_file_size_commit_log=64 * 1024,
        extra_conf={"mappedFileSizeConsumeQueue": str(CQ_FILE_SIZE)},
    )
    client = RemotingClient()
    api = BrokerApi(client)
    cluster.start()
    try:
        addr = cluster.broker_addrs[0]
        await create_topic(client, addr)
        for queue_id, count in ((0, FIRST_QUEUE), (1, SECOND_QUEUE)):
            for i in range(count):
                assert await send(client, addr, queue_id, body_of(queue_id, i)) == i
        mq = MessageQueue(TOPIC, "broker-a", 0)
        await api.update_consumer_offset(addr, GROUP, mq, FIRST_QUEUE)
        assert await api.query_consumer_offset(addr, GROUP, mq) == FIRST_QUEUE

        cluster.brokers[0].proc.terminate()  # a clean stop: the damage happens while it is down
        cluster.brokers[0].proc.wait(30)
        queue_dir = tmp_path / "cluster" / "broker-a-0" / "store" / "consumequeue" / TOPIC / "0"
        files = sorted(queue_dir.iterdir())
        assert len(files) == 5
        if damage == "truncate":
            with open(files[-1], "r+b") as fh:
                fh.truncate(5 * 20 + 7)  # five whole units and a torn one remain
        else:
            files[-1].unlink()  # the queue's last file is gone

        cluster.restart_broker(0)
        addr = cluster.broker_addrs[0]
        await client.close()  # its channel went with the old process
        client = RemotingClient()
        api = BrokerApi(client)
        served = await pull_all(api, addr, 0)
        assert sorted(served) == list(range(FIRST_QUEUE)), "messages of the cut file are lost"
        assert all(served[i] == body_of(0, i) for i in served)
        assert len(await pull_all(api, addr, 1)) == SECOND_QUEUE
        # The next send continues after what was assigned and committed, never below.
        assert await send(client, addr, 0, b"next") == FIRST_QUEUE
        assert await api.query_consumer_offset(addr, GROUP, mq) == FIRST_QUEUE
        info = await api.get_broker_runtime_info(addr)
        assert info["consumeQueuesRebuilt"] == "1", info
        log_text = cluster.brokers[0].log_path.read_text()
        assert re.search(rf"ERROR .*ConsumeQueue.*{TOPIC}-0.*rebuilt", log_text), log_text
    finally:
        await client.close()
        cluster.stop()
