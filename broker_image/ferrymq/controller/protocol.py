"""Controller-mode request/response codes (upstream RequestCode/ResponseCode numbers) and the
shapes both ends share: the replica info a controller answers with, and the epoch list a broker
answers GET_BROKER_EPOCH_CACHE with.

Headers travel in extFields (strings, as every remoting header); lists travel as a JSON body.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import orjson


class ControllerRequestCode(IntEnum):
    BROKER_HEARTBEAT = 904
    CONTROLLER_ALTER_SYNC_STATE_SET = 1001
    CONTROLLER_ELECT_MASTER = 1002
    CONTROLLER_REGISTER_BROKER = 1003
    CONTROLLER_GET_REPLICA_INFO = 1004
    CONTROLLER_GET_METADATA_INFO = 1005
    CONTROLLER_GET_SYNC_STATE_DATA = 1006
    GET_BROKER_EPOCH_CACHE = 1007
    NOTIFY_BROKER_ROLE_CHANGED = 1008


class ControllerResponseCode(IntEnum):
    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_NOT_LEADER = 2007
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010
    CONTROLLER_MASTER_STILL_EXIST = 2011
    CONTROLLER_ELECT_MASTER_FAILED = 2012


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """A group's current master and SyncStateSet (upstream GetReplicaInfoResponseHeader +
    SyncStateSet body). ``master_broker_id`` None: the group has no master right now."""

    master_broker_id: int | None
    master_addr: str
    master_ha_addr: str
    master_epoch: int
    sync_state_set: frozenset[int] = field(default_factory=frozenset)
    sync_state_set_epoch: int = 0

    def to_ext(self) -> dict[str, str]:
        return {
            "masterBrokerId": "" if self.master_broker_id is None else str(self.master_broker_id),
            "masterAddress": self.master_addr,
            "masterHaAddress": self.master_ha_addr,
            "masterEpoch": str(self.master_epoch),
            "syncStateSetEpoch": str(self.sync_state_set_epoch),
        }

    def body(self) -> bytes:
        return orjson.dumps({"syncStateSet": sorted(self.sync_state_set)})

    @classmethod
    def parse(cls, ext: dict[str, str], body: bytes) -> ReplicaInfo:
        """From a response; ValueError (with what was wrong) on a malformed one."""
        try:
            raw_id = ext.get("masterBrokerId", "")
            data: Any = orjson.loads(body) if body else {}
            members = data.get("syncStateSet", []) if isinstance(data, dict) else []
            return cls(
                master_broker_id=int(raw_id) if raw_id not in ("", "-1") else None,
                master_addr=ext.get("masterAddress", ""),
                master_ha_addr=ext.get("masterHaAddress", ""),
                master_epoch=int(ext.get("masterEpoch", "0")),
                sync_state_set=frozenset(int(m) for m in members),
                sync_state_set_epoch=int(ext.get("syncStateSetEpoch", "0")),
            )
        except (ValueError, TypeError, orjson.JSONDecodeError) as exc:
            raise ValueError(f"malformed replica info {ext!r}: {exc}") from None


def elect_master_body(
    cluster_name: str, broker_name: str, addrs: dict[int, str], sync_state_set: frozenset[int]
) -> bytes:
    """Upstream ElectMasterResponseBody as its fastjson writes it: fields in name order and the
    brokerId keys of ``brokerAddrs`` unquoted (a Map<Long, String>). Byte for byte what Apache's
    controller answers: its mqadmin 5.4.0 electMaster (fastjson2) cannot read the unquoted keys
    and reports "not support unquoted name" after the election took place; ferrymq's answer must
    read the same, so the body is written the same."""
    members = ",".join(f"{b}:{orjson.dumps(a).decode()}" for b, a in sorted(addrs.items()))
    group = (
        f'{{"brokerAddrs":{{{members}}},"brokerName":{orjson.dumps(broker_name).decode()},'
        f'"cluster":{orjson.dumps(cluster_name).decode()}}}'
    )
    return f'{{"brokerMemberGroup":{group},"syncStateSet":{orjson.dumps(sorted(sync_state_set)).decode()}}}'.encode()
