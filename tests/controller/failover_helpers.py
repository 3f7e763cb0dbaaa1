"""Helpers for controller-mode tests on real processes: a 3-replica group with a controller, the
controller's view, a recording producer, and checks on what every replica serves."""

from __future__ import annotations

import asyncio
import contextvars
import random
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from ferrymq.broker.controller_cluster import ControllerLocalCluster
from ferrymq.broker.local_cluster import Child, LocalCluster
from ferrymq.client.broker_api import BrokerApi, PullStatus, SendStatus
from ferrymq.client.errors import MQClientError
from ferrymq.client.producer import Producer
from ferrymq.controller.protocol import ControllerRequestCode as Req
from ferrymq.message import Message, MessageExt, decode_message_id
from ferrymq.remoting import headers
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError

TOPIC = "FailoverTopic"
QUEUES = 4
GROUP = "broker-a"
PULL_FLAG_SUBSCRIPTION = 4


def failover_cluster(
    data_dir: Path, *, all_ack: bool = True, file_size: int = 1024 * 1024
) -> ControllerLocalCluster:
    """One group of 3 replicas (brokerId 1..3), SYNC_FLUSH, small CommitLog files; heartbeat
    timeout 3 s (broker lease 1.5 s), heartbeat every 300 ms, controller scan every 200 ms."""
    return ControllerLocalCluster(
        data_dir,
        groups=1,
        slaves=2,
        namesrv_port=0,
        broker_port=0,
        flush_disk_type="SYNC_FLUSH",
        mapped_file_size_commit_log=file_size,
        extra_conf={"haSlaveSyncInterval": "1000"},
        all_ack_in_sync_state_set=all_ack,
        heartbeat_timeout_ms=3000,
        heartbeat_interval_ms=300,
        scan_interval_ms=200,
    )


def addr_of(cluster: ControllerLocalCluster, broker_id: int) -> str:
    return f"{cluster.host}:{cluster.brokers[broker_id - 1].port}"


async def group_state(client: RemotingClient, controller_addr: str) -> dict[str, Any]:
    reply = await client.invoke(
        controller_addr, RemotingCommand.request(Req.CONTROLLER_GET_SYNC_STATE_DATA), 3.0
    )
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    data: dict[str, Any] = orjson.loads(reply.body_bytes()).get(GROUP, {})
    return data


# Set by a test that runs a DeathWatch: every wait_until poll (in this task and the tasks it
# starts) first checks that no process of the cluster died on its own.
GUARD: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "failover_guard", default=None
)


class DeathWatch:
    """The cluster's processes that ended without the test ending them: a death is never silent
    (its exit code or signal and its last log lines go into the failure)."""

    def __init__(self, cluster: LocalCluster, log_lines: int = 30) -> None:
        self.cluster = cluster
        self.log_lines = log_lines
        self.expected: set[int] = set()  # pids the test killed or stopped itself

    def expect(self, child: Child) -> None:
        self.expected.add(child.pid)

    def everyone(self) -> list[Child]:
        return [*self.cluster.retired, *self.cluster.children]

    def unexpected(self) -> list[Child]:
        return [c for c in self.everyone() if not c.alive() and c.pid not in self.expected]

    def check(self) -> None:
        dead = self.unexpected()
        if dead:
            raise AssertionError("a process died on its own:\n" + self.report(dead))

    def report(self, children: Iterable[Child] | None = None) -> str:
        """One line per process (name, pid, how it ended, its log), then the tails of the logs
        of those that ended on their own."""
        everyone = self.everyone() if children is None else list(children)
        lines = [
            f"{c.name} pid {c.pid}: {c.ending()}"
            f"{' (by the test)' if c.pid in self.expected else ''} (log {c.log_path})"
            for c in everyone
        ]
        for c in everyone:
            if not c.alive() and c.pid not in self.expected:
                lines.append(f"--- end of {c.log_path.name}:\n{self.log_end(c)}")
        return "\n".join(lines)

    def log_end(self, child: Child) -> str:
        """The last lines of the log, from before a faulthandler dump when there is one (the
        dump lists every thread's stack: more lines than a plain tail would show)."""
        try:
            text = child.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"(log unreadable: {exc})"
        lines = text.splitlines()
        fatal = max((i for i, line in enumerate(lines) if "Fatal Python error" in line), default=-1)
        start = len(lines) - self.log_lines if fatal < 0 else fatal - self.log_lines // 3
        return "\n".join(lines[max(0, start) :][: self.log_lines * 5])


async def wait_until(what: str, check: Any, timeout: float) -> Any:
    """Poll the coroutine function ``check`` until it returns a truthy value (or fail)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    guard = GUARD.get()
    while time.monotonic() < deadline:
        if guard is not None:
            guard()
        try:
            last = await check()
        except (RemotingError, OSError, MQClientError, AssertionError) as exc:
            last = exc
        else:
            if last:
                return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")


async def wait_healthy(
    client: RemotingClient, cluster: ControllerLocalCluster, members: int = 3, timeout: float = 60
) -> dict[str, Any]:
    """The group has a master and ``members`` replicas in its SyncStateSet, all alive."""

    async def check() -> dict[str, Any] | None:
        state = await group_state(client, cluster.controller_addr)
        ok = (
            state.get("masterBrokerId") is not None
            and len(state.get("syncStateSet", [])) >= members
            and len(state.get("alive", [])) >= members
        )
        return state if ok else None

    result: dict[str, Any] = await wait_until(f"{members} in-sync replicas", check, timeout)
    return result


async def runtime_info(client: RemotingClient, addr: str) -> dict[str, str]:
    api = BrokerApi(client)
    return await api.get_broker_runtime_info(addr)


async def create_topic(client: RemotingClient, addr: str) -> None:
    request = RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {
            "topic": TOPIC,
            "defaultTopic": "TBW102",
            "readQueueNums": QUEUES,
            "writeQueueNums": QUEUES,
            "perm": 6,
            "topicFilterType": "SINGLE_TAG",
        },
    )
    reply = await client.invoke(addr, request)
    assert reply.code == ResponseCode.SUCCESS, reply.remark


async def has_topic(client: RemotingClient, addr: str) -> bool:
    wrapper = await BrokerApi(client).get_all_topic_config(addr)
    return TOPIC in wrapper.topic_config_table


async def pull_queue(api: BrokerApi, addr: str, queue_id: int) -> list[MessageExt]:
    out: list[MessageExt] = []
    offset = 0
    while True:
        header = headers.PullMessageRequestHeader(
            consumer_group="failover_checker",
            topic=TOPIC,
            queue_id=queue_id,
            queue_offset=offset,
            max_msg_nums=32,
            sys_flag=PULL_FLAG_SUBSCRIPTION,
            subscription="*",
            expression_type="TAG",
        )
        result = await api.pull_message(addr, header, 5.0)
        if result.status is not PullStatus.FOUND or not result.messages:
            return out
        out.extend(result.messages)
        offset = result.next_begin_offset


@dataclass
class Recorder:
    """Every acknowledged send: (queue, offset) -> body, and when acks happened."""

    acks: dict[tuple[int, int], bytes] = field(default_factory=dict)
    ack_times: list[float] = field(default_factory=list)
    # (time, storing broker "ip:port", CommitLog offset) of every ack, from its offset msgId
    writers: list[tuple[float, str, int]] = field(default_factory=list)
    failures: int = 0
    tried: int = 0

    def first_ack_after(self, moment: float, not_stored_by: str | None = None) -> float | None:
        """When the first ack after ``moment`` came; with ``not_stored_by`` (a broker's
        "ip:port"), the first of a message another broker stored: an ack of the killed master
        still in flight at the kill does not end the outage."""
        if not_stored_by is None:
            return next((t for t in self.ack_times if t > moment), None)
        return next((t for t, w, _ in self.writers if t > moment and w != not_stored_by), None)


async def produce(namesrv: str, rec: Recorder, stop: asyncio.Event, seed: int) -> None:
    """Send until stopped, one at a time, no client retries: an attempt either is acknowledged
    (SEND_OK, recorded) or not; every body is unique, so a message read twice shows."""
    rng = random.Random(seed)
    producer = Producer(
        "failover_producer", namesrv, send_msg_timeout=3.0, retry_times_when_send_failed=0
    )
    await producer.start()
    try:
        while not stop.is_set():
            rec.tried += 1
            body = f"fo-{seed}-{rec.tried}-".encode() + b"x" * rng.choice([10, 200, 2000])
            try:
                result = await producer.send(Message(TOPIC, body))
            except (MQClientError, RemotingError, OSError, TimeoutError):
                rec.failures += 1
                await asyncio.sleep(0.02)
                continue
            if result.status is SendStatus.SEND_OK:
                rec.acks[(result.queue.queue_id, result.queue_offset)] = body
                now = time.monotonic()
                rec.ack_times.append(now)
                ip, port, offset = decode_message_id(result.offset_msg_id)
                rec.writers.append((now, f"{ip}:{port}", offset))
            else:
                rec.failures += 1
                await asyncio.sleep(0.02)
    finally:
        await producer.shutdown()


async def read_all(api: BrokerApi, addr: str) -> dict[int, list[MessageExt]]:
    return {q: await pull_queue(api, addr, q) for q in range(QUEUES)}


def check_acks_exactly_once(
    acks: dict[tuple[int, int], bytes], queues: dict[int, list[MessageExt]]
) -> list[str]:
    """Problems: a queue not contiguous from 0, an acked message missing or elsewhere, any body
    present twice (unique bodies: a duplicate is a re-delivery of an acknowledged write)."""
    problems: list[str] = []
    seen: dict[bytes, int] = {}
    for qid, msgs in queues.items():
        offsets = [m.queue_offset for m in msgs]
        if offsets != list(range(len(msgs))):
            problems.append(f"queue {qid}: offsets not contiguous from 0")
        for m in msgs:
            seen[m.body] = seen.get(m.body, 0) + 1
    twice = [b for b, n in seen.items() if n > 1]
    if twice:
        problems.append(f"{len(twice)} bodies stored twice, e.g. {twice[0][:30]!r}")
    for (qid, qoff), body in acks.items():
        msgs = queues.get(qid, [])
        if qoff >= len(msgs) or msgs[qoff].body != body:
            found = msgs[qoff].body[:24] if qoff < len(msgs) else b"(nothing)"
            problems.append(
                f"acked message at queue {qid} offset {qoff}: {body[:24]!r} expected, {found!r} read"
            )
    return problems


def check_one_writer_per_epoch(
    epochs: list[tuple[int, int]], queues: dict[int, list[MessageExt]]
) -> list[str]:
    """Every message inside one epoch's CommitLog range was stored by one broker (storeHost):
    no two brokers ever wrote (so never acknowledged) in the same epoch."""
    writers: dict[int, set[str]] = {}
    starts = sorted(epochs, key=lambda e: e[1])
    for msgs in queues.values():
        for m in msgs:
            epoch = 0
            for number, start in starts:
                if m.commit_log_offset >= start:
                    epoch = number
            host = f"{m.store_host[0]!s}:{m.store_host[1]}"
            writers.setdefault(epoch, set()).add(host)
    return [f"epoch {e} written by {sorted(w)}" for e, w in writers.items() if len(w) > 1]


def parse_epochs(text: str) -> list[tuple[int, int]]:
    pairs = [p.split(":") for p in text.split(",") if p]
    return [(int(a), int(b)) for a, b in pairs]


def outage_summary(outages: list[float]) -> str:
    if not outages:
        return "no failovers"
    return (
        f"{len(outages)} failovers: write outage p50 {statistics.median(outages):.2f}s, "
        f"max {max(outages):.2f}s"
    )
