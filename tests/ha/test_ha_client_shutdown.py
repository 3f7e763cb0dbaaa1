"""The slave's HA client stops when asked, even if the cancel is lost.

On Python 3.11, ``asyncio.wait_for`` hands back the inner operation's outcome when a cancel
arrives just as that operation completes: a cancel that lands as the master closes the connection
surfaces inside the client as an ordinary lost connection. The client used to take it as one,
reconnect every 5 s for good, and ``shutdown()`` never returned (on the real node a controller-mode
broker elected master hung there and stayed a slave of its predecessor's closed port).

The session below does exactly what 3.11's ``wait_for`` does in that race: it turns the cancel
into the connection error that completed at the same moment.
"""

from __future__ import annotations

import asyncio

from ferrymq.ha.config import HAConfig, Role
from ferrymq.ha.slave import HAClient


class LosesTheCancel(HAClient):
    def __init__(self, config: HAConfig) -> None:
        super().__init__(None, config)  # type: ignore[arg-type]  # never receives a frame here
        self.sessions = 0
        self.in_session = asyncio.Event()

    async def _session(self, address: str) -> None:
        self.sessions += 1
        self.in_session.set()
        try:
            await asyncio.get_running_loop().create_future()  # a connection that stays up
        except asyncio.CancelledError:
            raise ConnectionResetError("master closed the connection") from None


async def test_shutdown_ends_the_loop_when_the_cancel_turns_into_a_connection_error() -> None:
    client = LosesTheCancel(
        HAConfig(role=Role.SLAVE, master_ha_address="127.0.0.1:1", reconnect_interval_s=0.05)
    )
    client.start()
    await client.in_session.wait()
    # bounded only so that the old behaviour fails instead of hanging the run
    await asyncio.wait_for(client.shutdown(), 30)
    assert client.sessions == 1
