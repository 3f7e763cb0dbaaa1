"""The controller's pure decisions: SyncStateSet, election, epochs, truncation, registration."""

from __future__ import annotations

import pytest
from ferrymq.controller.decisions import (
    Refused,
    Registration,
    ReplicaView,
    broker_lease_ms,
    check_alter_sync_state_set,
    elect_master,
    in_sync_replicas,
    master_expired,
    next_epoch,
    validate_registration,
)
from ferrymq.controller.protocol import ControllerResponseCode as C
from ferrymq.ha.epoch_file import EpochEntry, EpochFile, entries_up_to, truncate_offset
from hypothesis import given
from hypothesis import strategies as st

GAP = 1000


def sss(master_max: int, acks: dict[int, int], current: set[int], watermark: int = 0) -> set[int]:
    return set(
        in_sync_replicas(
            1,
            master_max,
            acks,
            max_gap=GAP,
            acked_watermark=watermark,
            epoch_start_offset=0,
            current=current,
        )
    )


def test_master_alone_is_in_sync() -> None:
    assert sss(5000, {}, {1}) == {1}


def test_member_within_gap_stays_and_beyond_gap_leaves() -> None:
    assert sss(5000, {2: 4000, 3: 3999}, {1, 2, 3}) == {1, 2}


def test_disconnected_member_leaves() -> None:
    assert sss(5000, {2: 5000}, {1, 2, 3}) == {1, 2}


def test_joiner_needs_every_acknowledged_byte() -> None:
    # within the gap but missing acknowledged data: joining could make an election lose it
    assert sss(5000, {2: 4500}, {1}, watermark=4800) == {1}
    assert sss(5000, {2: 4800}, {1}, watermark=4800) == {1, 2}


def test_joiner_must_reach_the_epoch_start() -> None:
    members = in_sync_replicas(
        1, 900, {2: 100}, max_gap=GAP, acked_watermark=0, epoch_start_offset=500, current={1}
    )
    assert members == {1}


def view(bid: int, alive: bool = True, offset: int = 0) -> ReplicaView:
    return ReplicaView(bid, alive, offset)


def test_elect_only_from_alive_sync_state_set() -> None:
    replicas = {1: view(1, alive=False), 2: view(2, offset=10), 3: view(3, offset=99)}
    # 3 has more data but is not in the SyncStateSet: never elected
    assert elect_master({1, 2}, replicas, exclude=1) == 2


def test_no_election_when_sync_state_set_has_nobody_alive() -> None:
    replicas = {1: view(1, alive=False), 2: view(2, offset=500)}
    assert elect_master({1}, replicas, exclude=1) is None
    assert elect_master(set(), replicas) is None


def test_elect_highest_offset_then_lowest_id() -> None:
    replicas = {2: view(2, offset=7), 3: view(3, offset=9), 4: view(4, offset=9)}
    assert elect_master({2, 3, 4}, replicas) == 3


def test_preferred_only_when_eligible() -> None:
    replicas = {2: view(2, offset=7), 3: view(3, offset=9), 4: view(4, alive=False)}
    assert elect_master({2, 3, 4}, replicas, preferred=2) == 2
    assert elect_master({2, 3, 4}, replicas, preferred=4) == 3


@given(
    st.dictionaries(
        st.integers(1, 6),
        st.tuples(st.booleans(), st.integers(-1, 10_000)),
        max_size=6,
    ),
    st.sets(st.integers(1, 6)),
    st.one_of(st.none(), st.integers(1, 6)),
)
def test_election_never_picks_outside_alive_sync_state_set(
    raw: dict[int, tuple[bool, int]], members: set[int], exclude: int | None
) -> None:
    replicas = {b: view(b, alive, off) for b, (alive, off) in raw.items()}
    chosen = elect_master(members, replicas, exclude=exclude)
    eligible = {b for b in members if b in replicas and replicas[b].alive and b != exclude}
    if not eligible:
        assert chosen is None
    else:
        assert chosen in eligible
        assert replicas[chosen].max_offset == max(replicas[b].max_offset for b in eligible)


def test_epochs_and_expiry() -> None:
    assert next_epoch(0) == 1 and next_epoch(41) == 42
    assert not master_expired(1000, 3000, 4000)
    assert master_expired(1000, 3000, 4001)


@given(st.integers(100, 60_000), st.integers(10, 5_000))
def test_lease_is_shorter_than_the_controller_timeout(timeout: int, interval: int) -> None:
    lease = broker_lease_ms(timeout, interval)
    assert 0 < lease < timeout
    assert lease <= timeout // 2 or lease <= timeout - 2 * interval


# --- truncation ---------------------------------------------------------------------------


def e(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(a, b) for a, b in pairs]


def test_old_master_truncates_what_it_wrote_after_its_epoch_ended() -> None:
    old = e((1, 0), (2, 1000))  # master of epoch 2 from 1000, wrote up to 1500
    new = e((1, 0), (2, 1000), (3, 1200))  # the new master had 2's data up to 1200
    assert truncate_offset(old, 1500, new, 1800) == 1200


def test_new_master_missed_the_old_masters_whole_epoch() -> None:
    old = e((1, 0), (2, 1000))
    new = e((1, 0), (3, 900))  # elected without any of epoch 2 (unacked tail only)
    assert truncate_offset(old, 1500, new, 2000) == 900


def test_slave_behind_keeps_everything() -> None:
    local = e((1, 0), (2, 1000))
    remote = e((1, 0), (2, 1000), (3, 2000))
    assert truncate_offset(local, 1500, remote, 2500) == 1500


def test_empty_replica_and_pre_controller_data() -> None:
    assert truncate_offset([], 0, e((1, 0)), 100) == 0
    # data written before controller mode (epoch 0) is shared up to the first epoch's start
    assert truncate_offset([], 700, e((1, 500)), 900) == 500
    assert truncate_offset([], 300, e((1, 500)), 900) == 300


@given(
    st.lists(st.integers(0, 50), min_size=0, max_size=6),
    st.integers(0, 5),
    st.integers(0, 400),
    st.integers(0, 400),
)
def test_truncation_point_is_a_common_prefix(
    steps: list[int], fork: int, local_extra: int, remote_extra: int
) -> None:
    """Build one history, fork it: the cut never exceeds either side, never drops shared data
    of epochs both sides hold in full."""
    shared: list[EpochEntry] = []
    offset = 0
    for i, step in enumerate(steps, start=1):
        shared.append(EpochEntry(i, offset))
        offset += step
    fork_at = min(fork, len(shared))
    base = shared[:fork_at]
    base_end = shared[fork_at].start_offset if fork_at < len(shared) else offset
    next_epoch_no = len(steps) + 1
    local = [*base, EpochEntry(next_epoch_no, base_end)]  # the old master's lost epoch
    remote = [*base, EpochEntry(next_epoch_no + 1, base_end)]  # the new master's epoch
    cut = truncate_offset(local, base_end + local_extra, remote, base_end + remote_extra)
    assert cut == base_end


def test_entries_up_to_drops_epochs_that_start_beyond_the_data() -> None:
    assert entries_up_to(e((1, 0), (2, 50), (3, 90)), 60) == e((1, 0), (2, 50))


def test_epoch_file_round_trip_and_refuses_garbage(tmp_path: pytest.TempPathFactory) -> None:
    from pathlib import Path

    root = Path(str(tmp_path))
    f = EpochFile(root)
    f.load()
    assert f.last_epoch == 0
    f.begin_epoch(1, 0)
    f.begin_epoch(2, 500)
    f.begin_epoch(2, 900)  # same epoch again (restart): unchanged
    g = EpochFile(root)
    g.load()
    assert g.entries == e((1, 0), (2, 500))
    g.path.write_text('[{"epoch": 2, "startOffset": 0}, {"epoch": 1, "startOffset": 5}]')
    with pytest.raises(ValueError, match="strictly increasing"):
        g.load()
    g.path.write_text("{not json")
    with pytest.raises(ValueError, match="unreadable epoch file"):
        g.load()


# --- registration -------------------------------------------------------------------------


def reg(**kw: object) -> Registration:
    base: dict[str, object] = {
        "cluster_name": "c1",
        "broker_name": "b",
        "broker_id": 1,
        "broker_addr": "127.0.0.1:10911",
        "epoch": 0,
    }
    base.update(kw)
    return Registration(**base)  # type: ignore[arg-type]


def test_valid_registration_passes() -> None:
    validate_registration(reg(epoch=3), group_cluster="c1", group_epoch=3, live_addr_of_id=None)


@pytest.mark.parametrize(
    ("registration", "cluster", "epoch", "live", "code", "words"),
    [
        (reg(broker_id=0), None, 0, None, C.CONTROLLER_INVALID_REQUEST, "brokerId 0"),
        (reg(broker_addr="nohost"), None, 0, None, C.CONTROLLER_INVALID_REQUEST, "host:port"),
        (reg(broker_name=" "), None, 0, None, C.CONTROLLER_INVALID_REQUEST, "brokerName"),
        (reg(cluster_name="c2"), "c1", 0, None, C.CONTROLLER_INVALID_REQUEST, "cluster c1"),
        (reg(epoch=9), "c1", 4, None, C.CONTROLLER_FENCED_MASTER_EPOCH, "epoch 9"),
        (reg(), "c1", 0, "127.0.0.1:1", C.CONTROLLER_INVALID_REQUEST, "another brokerId"),
    ],
)
def test_bad_registrations_are_refused_with_a_reason(
    registration: Registration,
    cluster: str | None,
    epoch: int,
    live: str | None,
    code: int,
    words: str,
) -> None:
    with pytest.raises(Refused, match=words) as info:
        validate_registration(
            registration, group_cluster=cluster, group_epoch=epoch, live_addr_of_id=live
        )
    assert info.value.code == code


def test_alter_sync_state_set_fencing() -> None:
    ok: dict[str, object] = {
        "master_id": 1,
        "master_epoch": 3,
        "sync_state_set_epoch": 7,
        "known_ids": {1, 2, 3},
        "request_master_id": 1,
        "request_master_epoch": 3,
        "request_sss_epoch": 7,
        "new_set": {1, 2},
    }
    check_alter_sync_state_set(**ok)  # type: ignore[arg-type]
    changes: list[tuple[dict[str, object], int]] = [
        ({"request_master_id": 2}, C.CONTROLLER_INVALID_MASTER),
        ({"request_master_epoch": 2}, C.CONTROLLER_FENCED_MASTER_EPOCH),
        ({"request_sss_epoch": 6}, C.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH),
        ({"new_set": {2, 3}}, C.CONTROLLER_INVALID_REPLICAS),
        ({"new_set": {1, 9}}, C.CONTROLLER_INVALID_REPLICAS),
        ({"master_id": None}, C.CONTROLLER_INVALID_MASTER),
    ]
    for change, code in changes:
        with pytest.raises(Refused) as info:
            check_alter_sync_state_set(**{**ok, **change})  # type: ignore[arg-type]
        assert info.value.code == code
