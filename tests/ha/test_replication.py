"""Master -> slave replication over real loopback sockets between two real CommitLogs.

Covers: byte-identical CommitLog files after mixed-size messages across many files, a late-joining
slave starting at the master's last file, slave restart catch-up, divergent slaves refused by the
master, a master sending a wrong offset refused by the slave, SYNC_MASTER acks and timeouts,
housekeeping of a silent slave, and garbage from a peer.
"""

from __future__ import annotations

import asyncio
import random
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from ferrymq.ha.config import HAConfig, Role
from ferrymq.ha.protocol import encode_frame_header, encode_report
from ferrymq.ha.service import HAService
from ferrymq.ha.store_adapter import CommitLogReplication
from ferrymq.store.commit_log import CommitLog
from ferrymq.store.results import PutMessageStatus

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


def put_many(log: CommitLog, count: int, seed: int, start: int = 0) -> list[int]:
    rng = random.Random(seed)
    ends = []
    for i in range(start, start + count):
        size = rng.choice([1, 10, 200, 1000, 5000, 20_000])
        result = log.put_message(message(i, size, queue_id=i % 4))
        ends.append(result.wrote_offset + result.wrote_bytes)
    return ends


async def start_master(log: CommitLog, role: Role = Role.ASYNC_MASTER) -> HAService:
    svc = HAService(HAConfig(role=role, **FAST), CommitLogReplication(log))  # type: ignore[arg-type]
    await svc.start()
    return svc


async def start_slave(log: CommitLog, master: HAService) -> HAService:
    cfg = HAConfig(role=Role.SLAVE, master_ha_address=f"127.0.0.1:{master.listen_port}", **FAST)  # type: ignore[arg-type]
    svc = HAService(cfg, CommitLogReplication(log))
    await svc.start()
    return svc


@pytest.fixture
async def services() -> AsyncIterator[list[HAService]]:
    started: list[HAService] = []
    yield started
    for svc in reversed(started):
        await svc.shutdown()


async def test_slave_commit_log_is_byte_identical(
    tmp_path: Path, services: list[HAService]
) -> None:
    master_log = new_commit_log(tmp_path / "m", FILE_SIZE)
    slave_log = new_commit_log(tmp_path / "s", FILE_SIZE)
    master = await start_master(master_log)
    services.append(master)
    slave = await start_slave(slave_log, master)
    services.append(slave)
    await wait_until(lambda: master.connection_count == 1, 5, "the slave to connect")

    for round_ in range(4):  # interleave writes with transfers
        put_many(master_log, 60, seed=round_, start=round_ * 60)
        master.notify_new_data()
    await wait_until(
        lambda: slave_log.max_offset == master_log.max_offset, 20, "the slave to catch up"
    )
    assert len(master_log.mapped_file_queue.files) > 5  # crossed many files, blank records
    assert file_bytes(tmp_path / "s") == file_bytes(tmp_path / "m")
    # the master saw the slave's final ack
    await wait_until(
        lambda: (
            master.transfer is not None
            and master.transfer.push2slave_max_offset == master_log.max_offset
        ),
        5,
        "the final ack",
    )


async def test_late_joining_slave_starts_at_masters_last_file(
    tmp_path: Path, services: list[HAService]
) -> None:
    master_log = new_commit_log(tmp_path / "m", FILE_SIZE)
    put_many(master_log, 120, seed=7)
    master = await start_master(master_log)
    services.append(master)
    slave_log = new_commit_log(tmp_path / "s", FILE_SIZE)
    services.append(await start_slave(slave_log, master))
    await wait_until(lambda: slave_log.max_offset == master_log.max_offset, 10, "catch-up")
    last_start = master_log.max_offset - master_log.max_offset % FILE_SIZE
    slave_files = file_bytes(tmp_path / "s")
    assert list(slave_files) == [f"{last_start:020d}"]
    assert slave_files == {k: v for k, v in file_bytes(tmp_path / "m").items() if k in slave_files}
    # and it keeps following new writes
    put_many(master_log, 30, seed=8, start=120)
    await wait_until(lambda: slave_log.max_offset == master_log.max_offset, 10, "follow-up")


async def test_slave_restart_catches_up(tmp_path: Path, services: list[HAService]) -> None:
    master_log = new_commit_log(tmp_path / "m", FILE_SIZE)
    slave_log = new_commit_log(tmp_path / "s", FILE_SIZE)
    master = await start_master(master_log)
    services.append(master)
    slave = await start_slave(slave_log, master)
    await wait_until(lambda: master.connection_count == 1, 5, "connect")
    put_many(master_log, 50, seed=1)
    await wait_until(lambda: slave_log.max_offset == master_log.max_offset, 10, "first catch-up")
    await slave.shutdown()
    await wait_until(lambda: master.connection_count == 0, 5, "the master to notice")

    put_many(master_log, 80, seed=2, start=50)  # written while the slave is down
    slave_log.mapped_file_queue.shutdown()
    reopened = new_commit_log(tmp_path / "s", FILE_SIZE)
    # what recovery would establish: positions at the end of the replicated data
    last = reopened.mapped_file_queue.get_last_mapped_file()
    assert last is not None
    for mf in reopened.mapped_file_queue.files:
        mf.set_positions(FILE_SIZE)
    last.set_positions(slave_log_end(tmp_path / "s", last.file_from_offset))
    services.append(await start_slave(reopened, master))
    await wait_until(lambda: reopened.max_offset == master_log.max_offset, 10, "catch-up")
    assert file_bytes(tmp_path / "s") == file_bytes(tmp_path / "m")


def slave_log_end(path: Path, file_from: int) -> int:
    """End of the records in one file (what CommitLog recovery computes), by walking sizes."""
    data = (path / f"{file_from:020d}").read_bytes()
    pos = 0
    while pos + 8 <= len(data):
        total, magic = struct.unpack_from(">iI", data, pos)
        if total <= 0 or magic == 0:
            break
        pos += total
    return pos


async def test_divergent_slaves_are_refused(tmp_path: Path, services: list[HAService]) -> None:
    master_log = new_commit_log(tmp_path / "m", FILE_SIZE)
    put_many(master_log, 20, seed=3)
    master = await start_master(master_log)
    services.append(master)

    # ahead of the master
    ahead = new_commit_log(tmp_path / "ahead", FILE_SIZE)
    put_many(ahead, 40, seed=3)
    ahead_max = ahead.max_offset
    services.append(await start_slave(ahead, master))
    await wait_until(lambda: len(master.refusals) >= 1, 5, "a refusal")
    assert "ahead" in master.refusals[-1].reason

    # same length range, different records: its end falls inside a master record
    other = new_commit_log(tmp_path / "other", FILE_SIZE)
    other.put_message(message(0, 3))
    services.append(await start_slave(other, master))
    await wait_until(lambda: len(master.refusals) >= 2, 5, "a second refusal")
    assert "inside a record" in master.refusals[-1].reason

    await asyncio.sleep(0)
    assert ahead.max_offset == ahead_max  # nothing was written into a refused slave
    assert "haLastRefusal" in master.runtime_info()


async def test_slave_refuses_frame_at_wrong_offset(
    tmp_path: Path, services: list[HAService]
) -> None:
    slave_log = new_commit_log(tmp_path / "s", FILE_SIZE)
    put_many(slave_log, 3, seed=4)
    before = file_bytes(tmp_path / "s")
    sent: list[bytes] = []

    async def rogue_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sent.append(await reader.readexactly(8))
        writer.write(encode_frame_header(slave_log.max_offset + 100, 4) + b"oops")
        await writer.drain()
        await reader.read()  # until the slave hangs up
        writer.close()

    server = await asyncio.start_server(rogue_master, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    cfg = HAConfig(role=Role.SLAVE, master_ha_address=f"127.0.0.1:{port}", **FAST)  # type: ignore[arg-type]
    slave = HAService(cfg, CommitLogReplication(slave_log))
    services.append(slave)
    await slave.start()
    await wait_until(
        lambda: "diverged" in (slave.client.last_error if slave.client else ""), 5, "refusal"
    )
    assert struct.unpack(">q", sent[0])[0] == slave_log.max_offset  # reported its max on connect
    assert file_bytes(tmp_path / "s") == before
    server.close()


async def test_sync_master_waits_for_the_slave(tmp_path: Path, services: list[HAService]) -> None:
    master_log = new_commit_log(tmp_path / "m", FILE_SIZE)
    master = await start_master(master_log, Role.SYNC_MASTER)
    services.append(master)

    # no slave: SLAVE_NOT_AVAILABLE at once
    end = put_many(master_log, 1, seed=5)[-1]
    assert await master.wait_for_replica(end) is PutMessageStatus.SLAVE_NOT_AVAILABLE

    slave_log = new_commit_log(tmp_path / "s", FILE_SIZE)
    services.append(await start_slave(slave_log, master))
    await wait_until(lambda: master.connection_count == 1, 5, "connect")
    for i in range(20):
        end = put_many(master_log, 1, seed=6, start=i + 1)[-1]
        assert await master.wait_for_replica(end) is PutMessageStatus.PUT_OK
        assert slave_log.max_offset >= end  # acked means the slave has it


async def test_stuck_slave_gives_flush_slave_timeout_then_is_dropped(
    tmp_path: Path, services: list[HAService]
) -> None:
    master_log = new_commit_log(tmp_path / "m", FILE_SIZE)
    master = await start_master(master_log, Role.SYNC_MASTER)
    services.append(master)
    # a slave that reports once, reads nothing and never acks again
    _reader, writer = await asyncio.open_connection("127.0.0.1", master.listen_port)
    writer.write(encode_report(0))
    await writer.drain()
    await wait_until(lambda: master.connection_count == 1, 5, "connect")
    end = put_many(master_log, 1, seed=9)[-1]
    assert await master.wait_for_replica(end) is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    # housekeeping (1.5 s here, 20 s by default) drops it
    await wait_until(lambda: master.connection_count == 0, 5, "housekeeping")
    writer.close()


async def test_garbage_from_a_slave_closes_only_that_connection(
    tmp_path: Path, services: list[HAService]
) -> None:
    master_log = new_commit_log(tmp_path / "m", FILE_SIZE)
    master = await start_master(master_log)
    services.append(master)
    slave_log = new_commit_log(tmp_path / "s", FILE_SIZE)
    services.append(await start_slave(slave_log, master))
    await wait_until(lambda: master.connection_count == 1, 5, "connect")

    reader, writer = await asyncio.open_connection("127.0.0.1", master.listen_port)
    writer.write(struct.pack(">q", -42))
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the master
    writer.close()

    put_many(master_log, 10, seed=10)
    await wait_until(lambda: slave_log.max_offset == master_log.max_offset, 10, "good slave served")


async def test_slave_follows_a_new_master_address(
    tmp_path: Path, services: list[HAService]
) -> None:
    first_log = new_commit_log(tmp_path / "m1", FILE_SIZE)
    first = await start_master(first_log)
    services.append(first)
    slave_log = new_commit_log(tmp_path / "s", FILE_SIZE)
    slave = await start_slave(slave_log, first)
    services.append(slave)
    await wait_until(lambda: first.connection_count == 1, 5, "first master")

    # a second master with the same bytes (a restarted master on another port)
    second_log = new_commit_log(tmp_path / "m2", FILE_SIZE)
    second = await start_master(second_log)
    services.append(second)
    slave.update_master_address(f"127.0.0.1:{second.listen_port}")
    await wait_until(lambda: second.connection_count == 1, 5, "second master")
    await wait_until(lambda: first.connection_count == 0, 5, "first connection closed")
    put_many(second_log, 20, seed=11)
    await wait_until(lambda: slave_log.max_offset == second_log.max_offset, 10, "catch-up")
    assert slave.client is not None and slave.client.connects == 2


async def test_slave_behind_expired_master_files_is_refused(
    tmp_path: Path, services: list[HAService]
) -> None:
    master_log = new_commit_log(tmp_path / "m", FILE_SIZE)
    slave_log = new_commit_log(tmp_path / "s", FILE_SIZE)
    master = await start_master(master_log)
    services.append(master)
    slave = await start_slave(slave_log, master)
    await wait_until(lambda: master.connection_count == 1, 5, "connect")
    put_many(master_log, 10, seed=12)
    await wait_until(lambda: slave_log.max_offset == master_log.max_offset, 10, "catch-up")
    await slave.shutdown()
    behind = slave_log.max_offset

    # the master moves on for several files and retention deletes the oldest ones
    put_many(master_log, 150, seed=13, start=10)
    deleted = master_log.mapped_file_queue.delete_files_before(
        lambda mf: mf.file_from_offset + FILE_SIZE > behind + 2 * FILE_SIZE, 0
    )
    assert deleted >= 1 and master_log.min_offset > behind

    services.append(await start_slave(slave_log, master))
    await wait_until(lambda: len(master.refusals) >= 1, 5, "a refusal")
    assert "cannot catch up" in master.refusals[-1].reason
    assert slave_log.max_offset == behind
