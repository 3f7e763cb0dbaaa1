"""Typed calls a client makes to the NameServers (the NameServer half of upstream MQClientAPIImpl).

NameServers are independent and hold the same routes (every broker registers with each), so a
call goes to one of them and moves on to the next when that one is unreachable. Upstream picks one
at random and sticks to it; here the first reachable one is kept until it fails.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TypeVar

from ferrymq.client.errors import MQClientError, NameServerUnreachableError, response_error
from ferrymq.remoting import bodies, headers
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError

log = logging.getLogger(__name__)

_B = TypeVar("_B", bound=bodies.Body)


def parse_namesrv_addr(value: str | Sequence[str]) -> list[str]:
    """``"h1:9876;h2:9876"`` (upstream's separator; commas accepted too) -> a checked list."""
    raw = [value] if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in raw:
        for part in item.replace(",", ";").split(";"):
            addr = part.strip()
            if not addr:
                continue
            host, sep, port = addr.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"NameServer address {addr!r} is not host:port")
            out.append(addr)
    if not out:
        raise ValueError("no NameServer address given (namesrvAddr / --namesrv / NAMESRV_ADDR)")
    return out


class NamesrvApi:
    def __init__(
        self, remoting: RemotingClient, addrs: Sequence[str], timeout: float = 3.0
    ) -> None:
        self.remoting = remoting
        self.addrs = list(addrs)
        self.timeout = timeout
        self._current = 0

    async def _invoke_any(
        self, code: int, header: headers.Header | None = None
    ) -> tuple[str, RemotingCommand]:
        """Send to the current NameServer, failing over to the others; returns (addr, response)."""
        errors: list[str] = []
        ext = header.to_ext() if header is not None else None
        for i in range(len(self.addrs)):
            idx = (self._current + i) % len(self.addrs)
            addr = self.addrs[idx]
            try:
                response = await self.remoting.invoke(
                    addr, RemotingCommand.request(code, ext), self.timeout
                )
            except RemotingError as exc:
                errors.append(str(exc))
                continue
            self._current = idx
            return addr, response
        raise NameServerUnreachableError(
            ",".join(self.addrs), "not reachable: " + "; ".join(errors)
        )

    async def _call(self, code: int, header: headers.Header | None = None) -> RemotingCommand:
        addr, response = await self._invoke_any(code, header)
        if response.code != ResponseCode.SUCCESS:
            raise response_error(response.code, response.remark, addr)
        return response

    async def _call_body(
        self, model: type[_B], code: int, header: headers.Header | None = None
    ) -> _B:
        response = await self._call(code, header)
        try:
            return model.decode(response.body_bytes())
        except bodies.BodyError as exc:
            raise MQClientError(f"NameServer sent an unreadable {model.__name__}: {exc}") from None

    async def get_route(self, topic: str) -> bodies.TopicRouteData | None:
        """The topic's route, or None when no broker serves it (TOPIC_NOT_EXIST)."""
        addr, response = await self._invoke_any(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, headers.GetRouteInfoRequestHeader(topic=topic)
        )
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if response.code != ResponseCode.SUCCESS:
            raise response_error(response.code, response.remark, addr)
        try:
            return bodies.TopicRouteData.decode(response.body_bytes())
        except bodies.BodyError as exc:
            raise MQClientError(f"NameServer {addr} sent an unreadable route: {exc}") from None

    async def get_cluster_info(self) -> bodies.ClusterInfo:
        return await self._call_body(bodies.ClusterInfo, RequestCode.GET_BROKER_CLUSTER_INFO)

    async def get_all_topic_list(self) -> list[str]:
        body = await self._call_body(
            bodies.TopicList, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER
        )
        return sorted(body.topic_list)

    async def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        """DELETE_TOPIC_IN_NAMESRV on every NameServer (each holds its own copy of the route)."""
        header = headers.DeleteTopicFromNamesrvRequestHeader(topic=topic, cluster_name=cluster)
        await self._each(RequestCode.DELETE_TOPIC_IN_NAMESRV, header)

    async def wipe_write_perm(self, broker_name: str) -> dict[str, int]:
        """WIPE_WRITE_PERM_OF_BROKER on every NameServer: {namesrv: topics affected}."""
        header = headers.WipeWritePermOfBrokerRequestHeader(broker_name=broker_name)
        out = {}
        for addr, response in (
            await self._each(RequestCode.WIPE_WRITE_PERM_OF_BROKER, header)
        ).items():
            out[addr] = int(response.ext_fields.get("wipeTopicCount", "0") or 0)
        return out

    async def add_write_perm(self, broker_name: str) -> dict[str, int]:
        header = headers.AddWritePermOfBrokerRequestHeader(broker_name=broker_name)
        out = {}
        for addr, response in (
            await self._each(RequestCode.ADD_WRITE_PERM_OF_BROKER, header)
        ).items():
            out[addr] = int(response.ext_fields.get("addTopicCount", "0") or 0)
        return out

    async def _each(self, code: int, header: headers.Header) -> dict[str, RemotingCommand]:
        out: dict[str, RemotingCommand] = {}
        for addr in self.addrs:
            try:
                response = await self.remoting.invoke(
                    addr, RemotingCommand.request(code, header.to_ext()), self.timeout
                )
            except RemotingError as exc:
                raise NameServerUnreachableError(addr, str(exc)) from exc
            if response.code != ResponseCode.SUCCESS:
                raise response_error(response.code, response.remark, addr)
            out[addr] = response
        return out
