"""With real processes: a message the SyncStateSet has not confirmed is served by no replica.

A slave of the set is frozen (SIGSTOP) and a message is sent: the master stores it but cannot
have every member acknowledge it, so an election could still lose it. Neither the master nor the
other slave serves it (a consumer that read it could later skip the message a new master stores
at the same queue offset); once the frozen slave resumes and acknowledges it, both serve it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from ferrymq.client.broker_api import BrokerApi
from ferrymq.client.errors import MQClientError
from ferrymq.client.producer import Producer
from ferrymq.message import Message, MessageExt
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.errors import RemotingError

from .failover_helpers import (
    KEEP_FROZEN_MEMBERS,
    TOPIC,
    addr_of,
    failover_cluster,
    read_all,
    runtime_info,
    wait_healthy,
    wait_until,
)
from .test_failover_chaos import prepare


def served(queues: dict[int, list[MessageExt]], body: bytes) -> bool:
    return any(m.body == body for msgs in queues.values() for m in msgs)


async def served_by_all(api: BrokerApi, addrs: list[str], body: bytes) -> bool:
    return all([served(await read_all(api, a), body) for a in addrs])


async def test_no_replica_serves_what_the_sync_state_set_has_not_confirmed(tmp_path: Path) -> None:
    with failover_cluster(tmp_path / "cluster", extra_conf=KEEP_FROZEN_MEMBERS) as cluster:
        client = RemotingClient()
        api = BrokerApi(client)
        master = await prepare(client, cluster)
        await wait_healthy(client, cluster)
        frozen_id, live_id = [b for b in (1, 2, 3) if b != master]
        master_addr = addr_of(cluster, master)
        live_addr = addr_of(cluster, live_id)
        producer = Producer(
            "unconfirmed_producer",
            cluster.namesrv_addr,
            send_msg_timeout=15.0,
            retry_times_when_send_failed=0,
        )
        await producer.start()
        try:
            first = b"confirmed-before-the-freeze"
            await producer.send(Message(TOPIC, first))

            async def everywhere(body: bytes = first) -> bool:
                return await served_by_all(api, [master_addr, live_addr], body)

            await wait_until("the first message on both", everywhere, 30)
            frozen = cluster.brokers[frozen_id - 1]
            os.kill(frozen.pid, signal.SIGSTOP)
            try:
                body = b"unconfirmed-while-a-member-is-frozen"
                # not acknowledged (the frozen member never acks it within syncFlushTimeout)
                with contextlib.suppress(MQClientError, RemotingError, TimeoutError):
                    await producer.send(Message(TOPIC, body))
                info = await runtime_info(client, master_addr)
                members = info["controllerSyncStateSet"].split(",")
                assert str(frozen_id) in members, info  # so it still counts
                assert not served(await read_all(api, master_addr), body)
                assert not served(await read_all(api, live_addr), body)
                assert int(info["confirmOffset"]) < int(info["commitLogMaxOffset"]), info
                live_info = await runtime_info(client, live_addr)
                # the live slave holds the bytes; it just does not serve them yet
                assert int(live_info["commitLogMaxOffset"]) == int(info["commitLogMaxOffset"])
                after = await runtime_info(client, master_addr)
                assert str(frozen_id) in after["controllerSyncStateSet"].split(","), after
            finally:
                os.kill(frozen.pid, signal.SIGCONT)

            async def everywhere_now() -> bool:
                return await served_by_all(api, [master_addr, live_addr], body)

            await wait_until("the message served once confirmed", everywhere_now, 60)
        finally:
            await producer.shutdown()
            await client.close()
