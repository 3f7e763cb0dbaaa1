"""The controller's decisions as pure functions (no I/O, no clock: time is an argument).

Names follow upstream ``ReplicasInfoManager`` / ``DefaultElectPolicy``: a group's replicas are
identified by their ``brokerId`` (1, 2, 3...), the master epoch increases by one per election, and
the SyncStateSet (the replicas that hold every acknowledged message) changes only through the
master (ALTER_SYNC_STATE_SET) or an election.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass


class Refused(ValueError):
    """A request the controller refuses; ``code`` is the upstream ResponseCode to answer with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """What the controller knows of one replica when it decides an election."""

    broker_id: int
    alive: bool
    max_offset: int  # CommitLog end from its last heartbeat (-1: never reported)


def in_sync_replicas(
    master_id: int,
    master_max_offset: int,
    slave_ack_offsets: Mapping[int, int],
    *,
    max_gap: int,
    acked_watermark: int,
    epoch_start_offset: int,
    current: Set[int],
    stalled: Set[int] = frozenset(),
) -> frozenset[int]:
    """The SyncStateSet a master proposes (upstream ``AutoSwitchHAService#maybeShrinkSyncStateSet``
    and ``maybeExpandInSyncStateSet``).

    - the master is always in it;
    - a current member stays while it is connected (it reports an ack), within ``max_gap``
      (haMaxGapNotInSync) of the master's end, and not ``stalled`` (its acks stopped advancing
      while the master had more, for haMaxTimeSlaveNotCatchup: upstream's lastCaughtUpTime);
    - a replica joins only once it holds everything ever acknowledged to a client
      (``acked_watermark``) and everything of the current epoch's start (so it has truncated any
      divergent tail): a replica that joins must not make an election lose an acked message.
    """
    members = {master_id}
    for broker_id, ack in slave_ack_offsets.items():
        if broker_id == master_id or ack < 0:
            continue
        if broker_id in current:
            if master_max_offset - ack <= max_gap and broker_id not in stalled:
                members.add(broker_id)
        elif ack >= acked_watermark and ack >= epoch_start_offset:
            members.add(broker_id)
    return frozenset(members)


def elect_master(
    sync_state_set: Set[int],
    replicas: Mapping[int, ReplicaView],
    *,
    exclude: int | None = None,
    preferred: int | None = None,
) -> int | None:
    """Whom to elect, or None (upstream ``DefaultElectPolicy.elect``, unclean election off).

    Only an alive member of the SyncStateSet may be elected: every acknowledged message is on each
    of them. Among those the highest reported CommitLog end wins (least to re-replicate), ties to
    the lowest brokerId. ``preferred`` (an admin's choice) wins when it is eligible at all.
    With no eligible replica there is no master rather than a wrong one.
    """
    eligible = [
        replicas[b] for b in sync_state_set if b in replicas and replicas[b].alive and b != exclude
    ]
    if not eligible:
        return None
    if preferred is not None and any(r.broker_id == preferred for r in eligible):
        return preferred
    best = max(eligible, key=lambda r: (r.max_offset, -r.broker_id))
    return best.broker_id


def next_epoch(current_epoch: int) -> int:
    """The master epoch after an election (epochs start at 1 with the first master)."""
    return current_epoch + 1


def master_expired(last_heartbeat_ms: int, timeout_ms: int, now_ms: int) -> bool:
    """A broker is dead for the controller once ``timeout_ms`` passed since its last heartbeat."""
    return now_ms - last_heartbeat_ms > timeout_ms


def broker_lease_ms(heartbeat_timeout_ms: int, heartbeat_interval_ms: int) -> int:
    """How long a master may acknowledge writes after the *send* of its last successful heartbeat.

    Shorter than the controller's heartbeat timeout by at least two heartbeat intervals, so the
    broker fences itself before the controller (whose clock starts at *receipt*, later) can elect
    a successor. Half the timeout at most, so a slow heartbeat round trip cannot close the gap.
    """
    return max(1, min(heartbeat_timeout_ms // 2, heartbeat_timeout_ms - 2 * heartbeat_interval_ms))


# a master's lease must outlast this many heartbeat intervals: one or two late or lost
# heartbeats (a busy machine, a retransmission) must not end the lease of a healthy master,
# which would then refuse writes it has already stored (its producer retries: duplicates)
LEASE_MIN_INTERVALS = 3


def lease_problem(heartbeat_timeout_ms: int, heartbeat_interval_ms: int) -> str | None:
    """Why these settings give a master too short a lease, or None (pure)."""
    lease = broker_lease_ms(heartbeat_timeout_ms, heartbeat_interval_ms)
    if lease >= LEASE_MIN_INTERVALS * heartbeat_interval_ms:
        return None
    # lease >= n*i  <=>  timeout/2 >= n*i and timeout - 2*i >= n*i  <=>  timeout >= 2*n*i
    min_timeout = 2 * LEASE_MIN_INTERVALS * heartbeat_interval_ms
    max_interval = heartbeat_timeout_ms // (2 * LEASE_MIN_INTERVALS)
    return (
        f"controllerHeartBeatTimeoutMills={heartbeat_timeout_ms} with "
        f"brokerHeartbeatInterval={heartbeat_interval_ms} gives a master lease of {lease} ms "
        f"(min(timeout / 2, timeout - 2 x interval)), shorter than {LEASE_MIN_INTERVALS} "
        "heartbeat intervals: a late heartbeat would end a healthy master's lease and it would "
        "refuse writes it has already stored. Set controllerHeartBeatTimeoutMills >= "
        f"{min_timeout} or brokerHeartbeatInterval <= {max_interval}"
    )


@dataclass(frozen=True, slots=True)
class Registration:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    epoch: int  # the last master epoch in the broker's epoch file (0: none)


def _is_host_port(addr: str) -> bool:
    host, sep, port = addr.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) <= 65535)


def validate_registration(
    reg: Registration,
    *,
    group_cluster: str | None,
    group_epoch: int,
    live_addr_of_id: str | None,
) -> None:
    """Raise :class:`Refused` (with the upstream code) when a registration cannot be accepted.

    - bad config: empty names, brokerId < 1 (in controller mode the id names the replica; the
      master registers with NameServers as 0), a malformed address;
    - mismatched group: the group is known under another cluster;
    - stale or impossible epoch: a broker claiming an epoch the controller never issued (its state
      was lost or the broker belongs to another controller);
    - another *live* broker already holds this brokerId at a different address.
    """
    from ferrymq.controller.protocol import ControllerResponseCode as C

    problems: list[str] = []
    if not reg.cluster_name.strip():
        problems.append("clusterName is empty")
    if not reg.broker_name.strip():
        problems.append("brokerName is empty")
    if reg.broker_id < 1:
        problems.append(
            f"brokerId {reg.broker_id}: in controller mode each replica needs its own brokerId "
            ">= 1 (the elected master registers with NameServers as 0)"
        )
    if not _is_host_port(reg.broker_addr):
        problems.append(f"brokerAddr {reg.broker_addr!r} is not host:port")
    if reg.epoch < 0:
        problems.append(f"epoch {reg.epoch} is negative")
    if problems:
        raise Refused(C.CONTROLLER_INVALID_REQUEST, "bad registration: " + "; ".join(problems))
    if group_cluster is not None and group_cluster != reg.cluster_name:
        raise Refused(
            C.CONTROLLER_INVALID_REQUEST,
            f"broker group {reg.broker_name} belongs to cluster {group_cluster}, "
            f"not {reg.cluster_name}",
        )
    if reg.epoch > group_epoch:
        raise Refused(
            C.CONTROLLER_FENCED_MASTER_EPOCH,
            f"broker {reg.broker_name}/{reg.broker_id} claims master epoch {reg.epoch} but the "
            f"controller's latest is {group_epoch}: its epoch file comes from another controller "
            "or the controller's state was lost",
        )
    if live_addr_of_id is not None and live_addr_of_id != reg.broker_addr:
        raise Refused(
            C.CONTROLLER_INVALID_REQUEST,
            f"brokerId {reg.broker_id} of {reg.broker_name} is held by the live broker "
            f"{live_addr_of_id}; give {reg.broker_addr} another brokerId",
        )


def check_alter_sync_state_set(
    *,
    master_id: int | None,
    master_epoch: int,
    sync_state_set_epoch: int,
    known_ids: Set[int],
    request_master_id: int,
    request_master_epoch: int,
    request_sss_epoch: int,
    new_set: Set[int],
) -> None:
    """Raise :class:`Refused` unless the current master may replace the SyncStateSet with
    ``new_set`` (upstream ``ReplicasInfoManager.alterSyncStateSet``)."""
    from ferrymq.controller.protocol import ControllerResponseCode as C

    if master_id is None or request_master_id != master_id:
        raise Refused(
            C.CONTROLLER_INVALID_MASTER,
            f"broker {request_master_id} is not the master (the master is {master_id})",
        )
    if request_master_epoch != master_epoch:
        raise Refused(
            C.CONTROLLER_FENCED_MASTER_EPOCH,
            f"master epoch {request_master_epoch} is stale (current {master_epoch})",
        )
    if request_sss_epoch != sync_state_set_epoch:
        raise Refused(
            C.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
            f"SyncStateSet epoch {request_sss_epoch} is stale (current {sync_state_set_epoch})",
        )
    if master_id not in new_set:
        raise Refused(C.CONTROLLER_INVALID_REPLICAS, "the new SyncStateSet lacks the master")
    unknown = set(new_set) - set(known_ids)
    if unknown:
        raise Refused(
            C.CONTROLLER_INVALID_REPLICAS,
            f"the new SyncStateSet names unregistered brokers {sorted(unknown)}",
        )
