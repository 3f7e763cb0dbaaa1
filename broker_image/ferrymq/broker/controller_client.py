"""A controller-mode broker's calls: to the controller (register, heartbeat, SyncStateSet) and to
its group's master (GET_BROKER_EPOCH_CACHE). Each returns parsed values or raises
:class:`ControllerCallError` with the code and remark, never a half-parsed answer."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from ferrymq.controller.protocol import ControllerRequestCode as Req
from ferrymq.controller.protocol import ControllerResponseCode as Resp
from ferrymq.controller.protocol import ReplicaInfo
from ferrymq.ha.epoch_file import EpochEntry, upstream_entries
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError, RemotingTimeoutError

CALL_TIMEOUT_S = 2.0


class ControllerCallError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    cluster_name: str
    broker_name: str
    broker_id: int  # the replica id (>= 1)
    broker_addr: str


async def _invoke(
    client: RemotingClient, addr: str, request: RemotingCommand, timeout: float
) -> RemotingCommand:
    try:
        response = await client.invoke(addr, request, timeout)
    except RemotingTimeoutError as exc:
        # a controller (or master) that stopped answering: never reuse that connection
        client.abort_channel(addr)
        raise ControllerCallError(-1, f"{addr}: {exc}; connection dropped") from None
    except (RemotingError, OSError, TimeoutError, ValueError) as exc:
        raise ControllerCallError(-1, f"{addr}: {exc or type(exc).__name__}") from None
    if response.code != ResponseCode.SUCCESS:
        raise ControllerCallError(response.code, f"{addr}: {response.remark or response.code}")
    return response


def _replica_info(response: RemotingCommand) -> ReplicaInfo:
    try:
        return ReplicaInfo.parse(response.ext_fields, response.body_bytes())
    except ValueError as exc:
        raise ControllerCallError(-1, str(exc)) from None


class ControllerClient:
    def __init__(self, client: RemotingClient, addrs: list[str], me: BrokerIdentity) -> None:
        self.client = client
        self.addrs = addrs
        self.me = me
        self._current = 0

    @property
    def addr(self) -> str:
        return self.addrs[self._current % len(self.addrs)]

    async def _call(
        self, code: int, ext: dict[str, object], body: bytes | None = None
    ) -> ReplicaInfo:
        try:
            response = await _invoke(
                self.client, self.addr, RemotingCommand.request(code, ext, body), CALL_TIMEOUT_S
            )
        except ControllerCallError as exc:
            if exc.code in (-1, Resp.CONTROLLER_NOT_LEADER):
                # unreachable, or a standby of several (Lease-elected) controllers: try the
                # next controller address next time
                self._current += 1
            raise
        return _replica_info(response)

    def _identity(self) -> dict[str, object]:
        return {
            "clusterName": self.me.cluster_name,
            "brokerName": self.me.broker_name,
            "brokerId": self.me.broker_id,
            "brokerAddr": self.me.broker_addr,
        }

    async def register(
        self, *, epoch: int, max_offset: int, timeout_ms: int, ha_addr: str | None
    ) -> ReplicaInfo:
        ext = {
            **self._identity(),
            "epoch": epoch,
            "maxOffset": max_offset,
            "heartbeatTimeoutMills": timeout_ms,
            "haAddress": ha_addr,
        }
        return await self._call(Req.CONTROLLER_REGISTER_BROKER, ext)

    async def heartbeat(
        self, *, epoch: int, max_offset: int, timeout_ms: int, ha_addr: str | None
    ) -> ReplicaInfo:
        ext = {
            **self._identity(),
            "epoch": epoch,
            "maxOffset": max_offset,
            "heartbeatTimeoutMills": timeout_ms,
            "haAddress": ha_addr,
        }
        return await self._call(Req.BROKER_HEARTBEAT, ext)

    async def alter_sync_state_set(
        self, *, master_epoch: int, sync_state_set_epoch: int, members: frozenset[int]
    ) -> ReplicaInfo:
        ext = {
            "brokerName": self.me.broker_name,
            "masterBrokerId": self.me.broker_id,
            "masterEpoch": master_epoch,
            "syncStateSetEpoch": sync_state_set_epoch,
        }
        body = orjson.dumps({"syncStateSet": sorted(members)})
        return await self._call(Req.CONTROLLER_ALTER_SYNC_STATE_SET, ext, body)


JAVA_LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class EpochCache:
    entries: list[EpochEntry]
    max_offset: int


# ferrymq's own key in the EpochEntryCache body: every entry of the epoch file, which upstream's
# readers (mqadmin, fastjson) ignore and ferrymq's replicas truncate by (see upstream_entries)
ALL_EPOCHS_KEY = "ferrymqEpochList"


def epoch_cache_body(
    entries: list[EpochEntry],
    max_offset: int,
    *,
    cluster_name: str = "",
    broker_name: str = "",
    broker_id: int = 0,
) -> bytes:
    """GET_BROKER_EPOCH_CACHE answer (upstream EpochEntryCache: who answers, epochList,
    maxOffset; mqadmin getBrokerEpoch prints the names and id). ``epochList`` holds the entries
    upstream's broker would have recorded (:func:`upstream_entries`)."""
    listed = upstream_entries(entries)
    return orjson.dumps(
        {
            "clusterName": cluster_name,
            "brokerName": broker_name,
            "brokerId": broker_id,
            # upstream EpochEntry: an entry ends where the next starts; the last is open
            # (Long.MAX_VALUE, which mqadmin replaces by maxOffset)
            "epochList": [
                {"epoch": e.epoch, "startOffset": e.start_offset, "endOffset": end}
                for e, end in zip(
                    listed, [*(n.start_offset for n in listed[1:]), JAVA_LONG_MAX], strict=False
                )
            ],
            "maxOffset": max_offset,
            ALL_EPOCHS_KEY: [{"epoch": e.epoch, "startOffset": e.start_offset} for e in entries],
        }
    )


async def fetch_epoch_cache(client: RemotingClient, master_addr: str) -> EpochCache:
    response = await _invoke(
        client,
        master_addr,
        RemotingCommand.request(Req.GET_BROKER_EPOCH_CACHE),
        CALL_TIMEOUT_S,
    )
    try:
        return parse_epoch_cache(response.body_bytes())
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ControllerCallError(-1, f"{master_addr}: malformed epoch cache: {exc!r}") from None


def parse_epoch_cache(body: bytes) -> EpochCache:
    """A GET_BROKER_EPOCH_CACHE body: a ferrymq master's whole epoch file, an upstream master's
    epochList otherwise."""
    data = orjson.loads(body)
    listed = data.get(ALL_EPOCHS_KEY, data["epochList"])
    entries = [EpochEntry(int(e["epoch"]), int(e["startOffset"])) for e in listed]
    return EpochCache(entries, int(data["maxOffset"]))
