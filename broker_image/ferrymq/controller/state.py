"""The controller's state (upstream ``ReplicasInfoManager``: BrokerReplicaInfo + SyncStateInfo)
and its file store.

Persisted (``<controllerStorePath>/controller.json``, replaced atomically: temp file, fsync,
rename, previous version kept as ``.bak``): per group its cluster, replicas (brokerId -> address),
master, master epoch, SyncStateSet and its epoch. Liveness (last heartbeat, reported offset) is
runtime only: after a restart every broker gets a full heartbeat timeout to show up again before
it can be declared dead, so a restart never causes an election by itself.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from ferrymq.controller.decisions import ReplicaView, master_expired
from ferrymq.controller.protocol import ReplicaInfo
from ferrymq.store.json_file import read_json, write_bytes_atomic

STATE_FILE = "controller.json"


@dataclass(slots=True)
class Replica:
    broker_id: int
    addr: str
    ha_addr: str = ""
    # runtime only
    last_heartbeat_ms: int = 0
    heartbeat_timeout_ms: int = 10_000
    max_offset: int = -1

    def alive(self, now_ms: int) -> bool:
        return not master_expired(self.last_heartbeat_ms, self.heartbeat_timeout_ms, now_ms)


@dataclass(slots=True)
class GroupState:
    cluster_name: str
    broker_name: str
    replicas: dict[int, Replica] = field(default_factory=dict)
    master_id: int | None = None
    master_epoch: int = 0
    sync_state_set: set[int] = field(default_factory=set)
    sync_state_set_epoch: int = 0

    def replica_info(self) -> ReplicaInfo:
        master = self.replicas.get(self.master_id) if self.master_id is not None else None
        return ReplicaInfo(
            master_broker_id=self.master_id,
            master_addr=master.addr if master else "",
            master_ha_addr=master.ha_addr if master else "",
            master_epoch=self.master_epoch,
            sync_state_set=frozenset(self.sync_state_set),
            sync_state_set_epoch=self.sync_state_set_epoch,
        )

    def views(self, now_ms: int) -> dict[int, ReplicaView]:
        return {b: ReplicaView(b, r.alive(now_ms), r.max_offset) for b, r in self.replicas.items()}

    def replicas_info(self, now_ms: int) -> dict[str, Any]:
        """Upstream ``BrokerReplicasInfo.ReplicasInfo`` (what CONTROLLER_GET_SYNC_STATE_DATA
        answers mqadmin getSyncStateSet with): the master, the epochs, and each replica as a
        ReplicaIdentity in or out of the SyncStateSet, with whether its heartbeats are current."""
        master = self.replicas.get(self.master_id) if self.master_id is not None else None
        members: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
        for broker_id, replica in sorted(self.replicas.items()):
            members[broker_id in self.sync_state_set].append(
                {
                    "brokerName": self.broker_name,
                    "brokerId": broker_id,
                    "brokerAddress": replica.addr,
                    "alive": replica.alive(now_ms),
                }
            )
        return {
            "masterBrokerId": self.master_id,
            "masterAddress": master.addr if master else None,
            "masterEpoch": self.master_epoch,
            "syncStateSetEpoch": self.sync_state_set_epoch,
            "inSyncReplicas": members[True],
            "notInSyncReplicas": members[False],
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "clusterName": self.cluster_name,
            "brokerName": self.broker_name,
            "replicas": {
                str(b): {"addr": r.addr, "haAddr": r.ha_addr} for b, r in self.replicas.items()
            },
            "masterBrokerId": self.master_id,
            "masterEpoch": self.master_epoch,
            "syncStateSet": sorted(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], now_ms: int) -> GroupState:
        replicas = {
            int(b): Replica(int(b), str(r["addr"]), str(r.get("haAddr", "")), now_ms)
            for b, r in data.get("replicas", {}).items()
        }
        master = data.get("masterBrokerId")
        return cls(
            cluster_name=str(data["clusterName"]),
            broker_name=str(data["brokerName"]),
            replicas=replicas,
            master_id=None if master is None else int(master),
            master_epoch=int(data.get("masterEpoch", 0)),
            sync_state_set={int(b) for b in data.get("syncStateSet", [])},
            sync_state_set_epoch=int(data.get("syncStateSetEpoch", 0)),
        )


class StateConflict(RuntimeError):
    """The stored state changed since this controller read it (another controller wrote)."""


class StateStore(Protocol):
    """Where the controller keeps its groups: :class:`FileStateStore` (one controller) or
    ``k8s_store.ConfigMapStateStore`` (compare-and-swap on the Kubernetes API)."""

    def load(self, now_ms: int) -> dict[str, GroupState]: ...

    async def save(self, groups: dict[str, GroupState]) -> None: ...


class FileStateStore:
    """One JSON file; writes are serialised and run in a thread (fsync off the event loop)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / STATE_FILE
        self._lock = asyncio.Lock()

    def __str__(self) -> str:
        return str(self.path)

    def load(self, now_ms: int) -> dict[str, GroupState]:
        """The saved groups (``.bak`` when the main file is torn); ValueError when unreadable."""
        data = read_json(self.path, default={"groups": []})
        try:
            groups = [GroupState.from_json(g, now_ms) for g in data.get("groups", [])]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{self.path}: unreadable controller state: {exc!r}") from None
        return {g.broker_name: g for g in groups}

    async def save(self, groups: dict[str, GroupState]) -> None:
        payload = orjson.dumps(
            {"groups": [g.to_json() for g in groups.values()]}, option=orjson.OPT_INDENT_2
        )
        async with self._lock:
            await asyncio.to_thread(write_bytes_atomic, self.path, payload)
