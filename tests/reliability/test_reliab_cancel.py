"""The cancellation that made SIGTERM hang (issue 23 item 4), made deterministic: the
registration loop is cancelled in each of the first loop turns after a re-registration was
kicked; its stop must always end (it was swallowed by ``asyncio.wait_for`` on Python 3.11 when
the kick and the cancel met in one turn, and the loop went on re-registering for ever)."""

from __future__ import annotations

import asyncio

import pytest
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.register import BrokerRegistration
from ferrymq.remoting.bodies import TopicConfigSerializeWrapper
from ferrymq.remoting.client import RemotingClient
from reliab_helpers import refusing_address


@pytest.mark.parametrize("turns", range(6))
async def test_registration_stop_never_swallowed(turns: int) -> None:
    holder, namesrv = refusing_address()
    client = RemotingClient()
    config = BrokerConfig(broker_name="b", broker_ip1="127.0.0.1", namesrv_addr=namesrv)
    registration = BrokerRegistration(config, client, TopicConfigSerializeWrapper)
    try:
        registration.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while registration.rounds < 1:  # the first round failed (refused): now it waits
            assert loop.time() < deadline
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        registration.trigger()
        for _ in range(turns):
            await asyncio.sleep(0)  # exactly ``turns`` loop turns between kick and cancel
        task = registration._task
        assert task is not None
        task.cancel()
        done, _ = await asyncio.wait((task,), timeout=5)
        assert done, f"registration loop survived its cancellation ({turns} turns after a kick)"
        assert task.cancelled()
    finally:
        await registration.stop()
        await client.close()
        holder.close()
