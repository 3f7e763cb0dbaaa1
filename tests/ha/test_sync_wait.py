"""SYNC_MASTER replica waits (ferrymq.ha.sync_wait) on a real event loop."""

from __future__ import annotations

import asyncio

import pytest
from ferrymq.ha.sync_wait import GroupTransferService, replica_precheck
from ferrymq.store.results import PutMessageStatus

MiB = 1024 * 1024


def test_precheck_rules() -> None:
    assert replica_precheck(0, 100, 0, 256 * MiB) is PutMessageStatus.SLAVE_NOT_AVAILABLE
    assert replica_precheck(1, 256 * MiB, 0, 256 * MiB) is PutMessageStatus.SLAVE_NOT_AVAILABLE
    assert replica_precheck(1, 256 * MiB - 1, 0, 256 * MiB) is None
    assert replica_precheck(2, 100, 90, 256 * MiB) is None


def _service(timeout: float = 5.0, slaves: int = 1) -> GroupTransferService:
    return GroupTransferService(
        timeout_s=timeout, max_gap=256 * MiB, connection_count=lambda: slaves
    )


async def test_waiters_wake_in_offset_order_when_acked() -> None:
    svc = _service()
    w100 = asyncio.create_task(svc.wait_for_replica(100))
    w200 = asyncio.create_task(svc.wait_for_replica(200))
    await asyncio.sleep(0)  # let both register
    assert svc.pending == 2
    svc.notify_transfer_some(150)
    assert await asyncio.wait_for(w100, 1) is PutMessageStatus.PUT_OK
    assert not w200.done()
    svc.notify_transfer_some(120)  # a lower report never lowers the mark
    assert svc.push2slave_max_offset == 150
    svc.notify_transfer_some(200)
    assert await asyncio.wait_for(w200, 1) is PutMessageStatus.PUT_OK
    assert svc.pending == 0


async def test_already_acked_returns_at_once() -> None:
    svc = _service(slaves=0)
    svc.notify_transfer_some(500)
    assert await svc.wait_for_replica(500) is PutMessageStatus.PUT_OK


async def test_timeout_gives_flush_slave_timeout() -> None:
    svc = _service(timeout=0.05)
    assert await svc.wait_for_replica(10) is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    assert svc.timeouts == 1 and svc.pending == 0


async def test_no_slave_or_big_gap_is_slave_not_available() -> None:
    assert await _service(slaves=0).wait_for_replica(10) is PutMessageStatus.SLAVE_NOT_AVAILABLE
    svc = _service()
    assert await svc.wait_for_replica(300 * MiB) is PutMessageStatus.SLAVE_NOT_AVAILABLE


async def test_close_releases_waiters_as_timeouts() -> None:
    svc = _service()
    waiter = asyncio.create_task(svc.wait_for_replica(10))
    await asyncio.sleep(0)
    svc.close()
    assert await asyncio.wait_for(waiter, 1) is PutMessageStatus.FLUSH_SLAVE_TIMEOUT


async def test_cancelled_waiter_leaves_no_live_entry() -> None:
    svc = _service()
    waiter = asyncio.create_task(svc.wait_for_replica(10))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert svc.pending == 0


async def test_timed_out_entries_do_not_pile_up() -> None:
    svc = _service(timeout=0.001)
    await asyncio.gather(*(svc.wait_for_replica(10 + i) for i in range(500)))
    assert len(svc._waiters) <= 2 * 64 + 2


def test_bad_timeout_is_refused() -> None:
    with pytest.raises(ValueError, match="syncFlushTimeout"):
        GroupTransferService(timeout_s=0, max_gap=1, connection_count=lambda: 1)
