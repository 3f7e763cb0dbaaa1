"""The remoting port of the standalone proxy (upstream ``RemotingProtocolServer``) on
``remotingListenPort``: the project's remoting server with the activities' handlers."""

from __future__ import annotations

from ferrymq.proxy.cluster import ClusterBackend
from ferrymq.proxy.config import ProxyConfig
from ferrymq.proxy.remoting.activities import RemotingActivities
from ferrymq.remoting.processor import ProcessorTable
from ferrymq.remoting.server import RemotingServer


class RemotingProtocolServer:
    def __init__(self, config: ProxyConfig, backend: ClusterBackend) -> None:
        self.config = config
        processors = ProcessorTable()
        self.server = RemotingServer(
            config.bind_address,
            config.remoting_listen_port,
            processors=processors,
            name="proxy-remoting",
        )
        self.activities = RemotingActivities(config, backend, self.access_addr)
        self.activities.register(processors)

    @property
    def port(self) -> int:
        return self.server.port

    def access_addr(self) -> str:
        """The address routes name for every broker (upstream remotingAccessAddr + port)."""
        return f"{self.config.remoting_access_host()}:{self.server.port}"

    async def start(self) -> None:
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()
