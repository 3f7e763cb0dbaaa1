"""POP across a controller-mode failover, with real processes: a consumer pops half the messages
and acks half of those; the master is killed (SIGKILL); the elected replica replays the replicated
revive topic, so another consumer gets every message not acked before the kill (the in-flight ones
after their invisible time, with attempt 2) and none acked before it."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from ferrymq.client.errors import MQClientError
from ferrymq.client.pop_api import PopApi
from ferrymq.message import MessageConst, MessageExt
from ferrymq.remoting.client import RemotingClient
from raw_remoting import send_message

from .failover_helpers import GROUP, TOPIC, addr_of, failover_cluster, group_state, wait_until
from .test_failover_chaos import prepare

POP_GROUP = "pop_failover_cg"


async def pop_some(api: PopApi, addr: str, want: int, invisible_ms: int) -> list[MessageExt]:
    got: list[MessageExt] = []

    async def enough() -> bool:
        result = await api.pop(
            addr,
            GROUP,
            group=POP_GROUP,
            topic=TOPIC,
            max_msg_nums=min(32, want - len(got)),
            invisible_time_ms=invisible_ms,
            poll_time_ms=1000,
        )
        got.extend(result.messages)
        return len(got) >= want

    await wait_until(f"{want} popped from {addr}", enough, 60)
    return got


async def test_pop_state_survives_a_controller_failover(tmp_path: Path) -> None:
    with failover_cluster(tmp_path / "cluster") as cluster:
        client = RemotingClient()
        try:
            master = await prepare(client, cluster)
            master_addr = addr_of(cluster, master)
            bodies = [f"f{i}".encode() for i in range(40)]
            for i, body in enumerate(bodies):
                await send_message(client, master_addr, TOPIC, body, queue_id=i % 4, check=True)
            api = PopApi(client)
            popped = await pop_some(api, master_addr, 20, invisible_ms=5000)
            handles = [m.properties[MessageConst.PROPERTY_POP_CK] for m in popped]
            for handle in handles[:5]:
                assert await api.ack(master_addr, POP_GROUP, TOPIC, handle)
            assert await api.batch_ack(master_addr, POP_GROUP, TOPIC, handles[5:10])
            acked = {m.body for m in popped[:10]}

            cluster.brokers[master - 1].proc.kill()
            await asyncio.to_thread(cluster.brokers[master - 1].proc.wait, 30)

            async def elected() -> int | None:
                state = await group_state(client, cluster.controller_addr)
                new = state.get("masterBrokerId")
                return int(new) if new not in (None, master) else None

            new_master = await wait_until("a new master", elected, 60)
            new_addr = addr_of(cluster, new_master)
            got: list[MessageExt] = []

            async def everything_else() -> bool:
                try:
                    result = await api.pop(
                        new_addr,
                        GROUP,
                        group=POP_GROUP,
                        topic=TOPIC,
                        invisible_time_ms=60_000,
                        poll_time_ms=1000,
                    )
                except MQClientError:  # still taking over (not a master yet)
                    return False
                got.extend(result.messages)
                return len({m.body for m in got}) >= 30

            await wait_until("the unacked messages from the new master", everything_else, 90)
            counts = Counter(m.body for m in got)
            assert not acked & set(counts), (
                f"acked before the kill, delivered again: {acked & set(counts)}"
            )
            assert set(counts) == set(bodies) - acked
            held = {m.body for m in popped[10:]}
            assert {m.body for m in got if m.reconsume_times == 1} == held
        finally:
            await client.close()
