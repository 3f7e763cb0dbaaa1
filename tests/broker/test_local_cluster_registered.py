"""LocalCluster.restart_broker returns once the NameServer lists the broker again: a broker prints
its ready line before its first registration has been answered, and one stopped by SIGTERM
unregistered itself, so a producer right after the restart found no route (the e2e restart test
failed once so, nothing produced 46 ms after the ready line)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ferrymq.broker.local_cluster import LocalCluster, pick_free_port, registered_brokers

# how long the relay holds a new connection before passing it on: a registration that slow
REGISTRATION_DELAY_S = 5.0


class SlowRelay:
    """127.0.0.1:<port> forwarded to ``target``; connections accepted once ``delay`` is set wait
    that long before anything is passed on (a NameServer slow to answer a new broker)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.delay = 0.0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(self.delay)  # the injected slowness, not a synchronisation
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    @contextmanager
    def running(self) -> Iterator[SlowRelay]:
        thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        try:
            yield self
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            thread.join(10)


def test_restart_returns_once_the_namesrv_lists_the_broker_again(tmp_path: Path) -> None:
    namesrv_port = pick_free_port("127.0.0.1")
    with (
        SlowRelay(namesrv_port).running() as relay,
        LocalCluster(
            tmp_path,
            groups=1,
            namesrv_port=namesrv_port,
            broker_port=0,
            extra_conf={"namesrvAddr": f"127.0.0.1:{relay.port}"},
        ) as cluster,
    ):
        addr = cluster.broker_addrs[0]
        relay.delay = REGISTRATION_DELAY_S
        cluster.restart_broker(0)  # SIGTERM: the old process unregistered itself
        table = registered_brokers(cluster.namesrv_addr)
        assert table is not None
        assert addr in table.get("broker-a", {}).values(), table
