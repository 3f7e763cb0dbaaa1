"""Metadata notices on the HA connection (ha/protocol.py, ha/handshake.py): codecs, the features
handshake, a master notifying a slave that asked over real loopback sockets, a 4.x-style slave
seeing the plain stream, and a slave falling back when an older master hangs up on the handshake."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from ferrymq.ha.config import HAConfig, Role
from ferrymq.ha.handshake import (
    FEATURE_METADATA_NOTICE,
    FEATURES_MAGIC,
    encode_features,
    encode_handshake,
    read_handshake,
)
from ferrymq.ha.protocol import (
    METADATA_NOTICE_OFFSET,
    FrameReader,
    HAProtocolError,
    MetadataVersions,
    TransferFrame,
    encode_frame_header,
    encode_metadata_notice,
    encode_report,
)
from ferrymq.ha.service import HAService
from ferrymq.ha.slave_sync import CONSUMER_OFFSET, SUBSCRIPTION_GROUP, TOPIC_CONFIG, moved_items
from ferrymq.ha.store_adapter import CommitLogReplication
from hypothesis import given
from hypothesis import strategies as st

from .ha_helpers import file_bytes, message, new_commit_log, wait_until

FILE_SIZE = 64 * 1024
FAST = {
    "listen_host": "127.0.0.1",
    "listen_port": 0,
    "heartbeat_interval_s": 0.2,
    "housekeeping_interval_s": 1.5,
    "reconnect_interval_s": 0.2,
    "sync_flush_timeout_s": 2.0,
}

_item = st.one_of(
    st.tuples(st.integers(0, 2**60), st.binary(max_size=200)).map(lambda t: TransferFrame(*t)),
    st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**62), st.integers(0, 2**62)).map(
        lambda t: MetadataVersions(*t)
    ),
)


def _encode(item: TransferFrame | MetadataVersions) -> bytes:
    if isinstance(item, MetadataVersions):
        return encode_metadata_notice(item)
    return encode_frame_header(item.offset, len(item.body)) + item.body


@given(st.lists(_item, min_size=1, max_size=12), st.data())
def test_notices_and_frames_round_trip_under_any_split(
    items: list[TransferFrame | MetadataVersions], data: st.DataObject
) -> None:
    stream = b"".join(_encode(i) for i in items)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    reader = FrameReader(accept_notices=True)
    out: list[TransferFrame | MetadataVersions] = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        out.extend(reader.feed(stream[prev:cut]))
        prev = cut
    assert out == items
    assert reader.buffered == 0


def test_a_longer_notice_from_a_later_master_is_read_and_its_tail_skipped() -> None:
    body = struct.pack(">qqq", 1, 2, 3) + b"future fields"
    stream = struct.pack(">qi", METADATA_NOTICE_OFFSET, len(body)) + body
    stream += encode_frame_header(64, 2) + b"ab"
    assert FrameReader(accept_notices=True).feed(stream) == [
        MetadataVersions(1, 2, 3),
        TransferFrame(64, b"ab"),
    ]


@pytest.mark.parametrize("size", [0, 23, 4097])
def test_bad_notice_sizes_are_refused(size: int) -> None:
    with pytest.raises(HAProtocolError, match="bad metadata notice"):
        FrameReader(accept_notices=True).feed(struct.pack(">qi", METADATA_NOTICE_OFFSET, size))


def test_a_slave_that_did_not_ask_refuses_a_notice() -> None:
    with pytest.raises(HAProtocolError, match="out of sync"):
        FrameReader().feed(encode_metadata_notice(MetadataVersions(1, 2, 3)))


def test_moved_items() -> None:
    v = MetadataVersions(1, 2, 3)
    assert moved_items(None, v) == {TOPIC_CONFIG, SUBSCRIPTION_GROUP, CONSUMER_OFFSET}
    assert moved_items(v, v) == set()
    assert moved_items(v, MetadataVersions(5, 2, 3)) == {TOPIC_CONFIG}
    assert moved_items(v, MetadataVersions(1, 9, 0)) == {SUBSCRIPTION_GROUP, CONSUMER_OFFSET}


async def _handshake_of(data: bytes) -> tuple[int | None, int, bytes]:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    shake = await read_handshake(reader, 1.0)
    return shake.broker_id, shake.features, shake.pending


async def test_read_handshake_blocks() -> None:
    report = encode_report(4096)
    assert await _handshake_of(report) == (None, 0, report)
    assert await _handshake_of(encode_features(1) + report) == (None, 1, report)
    assert await _handshake_of(encode_handshake(2) + report) == (2, 0, b"")
    assert await _handshake_of(encode_features(1) + encode_handshake(3) + report) == (3, 1, b"")
    with pytest.raises(HAProtocolError, match="closed the connection"):
        await _handshake_of(encode_features(1)[:12])


@pytest.fixture
async def services() -> AsyncIterator[list[HAService]]:
    started: list[HAService] = []
    yield started
    for svc in reversed(started):
        await svc.shutdown()


async def test_master_notifies_a_slave_that_asked_and_not_a_plain_one(
    tmp_path: Path, services: list[HAService]
) -> None:
    versions = [MetadataVersions(1, 1, 100)]
    master_log = new_commit_log(tmp_path / "m", FILE_SIZE)
    master = HAService(
        HAConfig(role=Role.ASYNC_MASTER, **FAST),  # type: ignore[arg-type]
        CommitLogReplication(master_log),
        metadata_versions=lambda: versions[-1],
    )
    await master.start()
    services.append(master)
    address = f"127.0.0.1:{master.listen_port}"
    slaves: list[HAService] = []
    for name in ("asks", "plain"):
        cfg = HAConfig(role=Role.SLAVE, master_ha_address=address, **FAST)  # type: ignore[arg-type]
        slave = HAService(cfg, CommitLogReplication(new_commit_log(tmp_path / name, FILE_SIZE)))
        slaves.append(slave)
    heard: list[MetadataVersions] = []
    assert slaves[0].client is not None
    slaves[0].client.metadata_listener = heard.append
    for slave in slaves:
        await slave.start()
        services.append(slave)
    await wait_until(lambda: master.connection_count == 2, 5, "both slaves to connect")
    await wait_until(lambda: heard == [MetadataVersions(1, 1, 100)], 5, "the notice on connect")

    for i in range(20):
        master_log.put_message(message(i, 3000))
    master.notify_new_data()
    versions.append(MetadataVersions(2, 1, 100))
    await wait_until(lambda: heard[-1] == versions[-1], 5, "the notice of the topic change")
    versions.append(MetadataVersions(2, 1, 101))
    await wait_until(lambda: heard[-1] == versions[-1], 5, "the notice of the offset change")
    end = master_log.max_offset
    await wait_until(
        lambda: all(s.port.max_offset() == end for s in slaves), 10, "both slaves to catch up"
    )
    # one notice per change, none repeated while nothing moves
    assert heard == [MetadataVersions(1, 1, 100), versions[1], versions[2]]
    for name in ("asks", "plain"):
        assert file_bytes(tmp_path / name) == file_bytes(tmp_path / "m")
    sent = sorted(c.notices_sent for c in master.master.connections)  # type: ignore[union-attr]
    assert sent == [0, 3]
    assert slaves[1].client is not None and slaves[1].client.notices_received == 0


async def test_slave_falls_back_when_an_older_master_hangs_up_on_the_handshake(
    tmp_path: Path, services: list[HAService]
) -> None:
    """A stand-in for a ferrymq master from before the features block (it reads the magic as a
    negative offset report and hangs up); it records the first 8 bytes of each connection."""
    firsts: list[int] = []

    async def older_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            (value,) = struct.unpack(">q", await reader.readexactly(8))
            firsts.append(value)
            if value >= 0:
                await reader.read(1024)  # a plain slave's session: hold it open
        finally:
            writer.close()

    server = await asyncio.start_server(older_master, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        cfg = HAConfig(role=Role.SLAVE, master_ha_address=f"127.0.0.1:{port}", **FAST)  # type: ignore[arg-type]
        slave = HAService(cfg, CommitLogReplication(new_commit_log(tmp_path / "s", FILE_SIZE)))
        assert slave.client is not None
        slave.client.metadata_listener = lambda v: None
        await slave.start()
        services.append(slave)
        await wait_until(lambda: len(firsts) >= 2, 5, "the slave to connect twice")
        assert firsts[:2] == [FEATURES_MAGIC, 0]  # asked, was hung up on, then plain
        assert slave.client.features_fallbacks >= 1
        assert FEATURE_METADATA_NOTICE == 1
    finally:
        server.close()


async def test_a_refused_slave_keeps_asking_for_notices(
    tmp_path: Path, services: list[HAService]
) -> None:
    """A current master refusing a diverged slave has answered its handshake first, so the slave
    does not mistake the refusal for an older master and keeps asking on every connection."""
    master_log = new_commit_log(tmp_path / "m", FILE_SIZE)
    master_log.put_message(message(0, 100))
    master = HAService(
        HAConfig(role=Role.ASYNC_MASTER, **FAST),  # type: ignore[arg-type]
        CommitLogReplication(master_log),
        metadata_versions=lambda: MetadataVersions(1, 1, 1),
    )
    await master.start()
    services.append(master)
    ahead_log = new_commit_log(tmp_path / "ahead", FILE_SIZE)
    for i in range(5):
        ahead_log.put_message(message(i, 500))
    cfg = HAConfig(  # type: ignore[arg-type]
        role=Role.SLAVE, master_ha_address=f"127.0.0.1:{master.listen_port}", **FAST
    )
    slave = HAService(cfg, CommitLogReplication(ahead_log))
    heard: list[MetadataVersions] = []
    assert slave.client is not None
    slave.client.metadata_listener = heard.append
    await slave.start()
    services.append(slave)
    await wait_until(lambda: len(master.refusals) >= 3, 10, "three refusals")
    assert "ahead" in master.refusals[-1].reason
    assert slave.client.features_fallbacks == 0
    assert len(heard) >= 3  # one answer per connection
