"""Helpers for controller-mode tests on real processes: a 3-replica group with a controller, the
controller's view, a recording producer, and checks on what every replica serves."""

from __future__ import annotations

import asyncio
import bisect
import contextvars
import hashlib
import itertools
import random
import statistics
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pulling
from ferrymq.broker.controller_cluster import ControllerLocalCluster
from ferrymq.broker.local_cluster import Child, LocalCluster
from ferrymq.client.allocate import MessageQueue
from ferrymq.client.broker_api import BrokerApi, SendStatus
from ferrymq.client.errors import MQClientError
from ferrymq.client.producer import Producer
from ferrymq.controller.protocol import ControllerRequestCode as Req
from ferrymq.message import Message, MessageExt, decode_message_id
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError

TOPIC = "FailoverTopic"
QUEUES = 4
GROUP = "broker-a"


# a frozen member stays in the SyncStateSet (tests of what a held member means for writes and
# reads; by default it leaves after haMaxTimeSlaveNotCatchup, 3 s: test_lost_replica.py)
KEEP_FROZEN_MEMBERS = {"haMaxTimeSlaveNotCatchup": "600000"}


def failover_cluster(
    data_dir: Path,
    *,
    all_ack: bool = True,
    file_size: int = 1024 * 1024,
    extra_conf: dict[str, str] | None = None,
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
        extra_conf={"haSlaveSyncInterval": "1000", **(extra_conf or {})},
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


async def pull_queue(
    api: BrokerApi, addr: str, queue_id: int, offset: int = 0, *, limit: int | None = None
) -> list[MessageExt]:
    """Queue ``queue_id`` of TOPIC from ``offset`` to its end (or ``limit`` messages)."""
    return await pulling.pull_queue(
        api, addr, TOPIC, queue_id, offset, group="failover_checker", limit=limit
    )


@dataclass
class Recorder:
    """Every acknowledged send: (queue, offset) -> body, and when acks happened."""

    acks: dict[tuple[int, int], bytes] = field(default_factory=dict)
    ack_times: list[float] = field(default_factory=list)
    # (time, storing broker "ip:port", CommitLog offset) of every ack, from its offset msgId
    writers: list[tuple[float, str, int]] = field(default_factory=list)
    failures: int = 0
    tried: int = 0
    # ((queue, offset), first body, second body): two acks for one queue offset (one is lost)
    clashes: list[tuple[tuple[int, int], bytes, bytes]] = field(default_factory=list)

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
                key = (result.queue.queue_id, result.queue_offset)
                if key in rec.acks:
                    rec.clashes.append((key, rec.acks[key], body))
                else:
                    rec.acks[key] = body
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


# --- incremental verification: what every round checks, reading only what was appended ---


def body_id(body: bytes) -> int:
    """A message's identity in the ledgers: a 64-bit hash of the whole body (bodies are unique;
    a changed byte is a changed message). Kept instead of the bodies: 100 rounds store ~400k."""
    return int.from_bytes(hashlib.blake2b(body, digest_size=8).digest(), "little")


@dataclass(frozen=True)
class Stored:
    """What a ledger keeps of one message read from a replica."""

    queue_offset: int
    id: int
    commit_log_offset: int
    host: str


def stored(m: MessageExt) -> Stored:
    return Stored(
        m.queue_offset,
        body_id(m.body),
        m.commit_log_offset,
        f"{m.store_host[0]!s}:{m.store_host[1]}",
    )


@dataclass
class AckIndex:
    """The acknowledged sends, in arrival order (queue, offset, body id), and per queue the
    sorted acked offsets. Fed from ``Recorder.acks`` (insertion-ordered) with ``update``."""

    order: list[tuple[int, int, int]] = field(default_factory=list)
    offsets: dict[int, list[int]] = field(default_factory=dict)
    ids: dict[tuple[int, int], int] = field(default_factory=dict)

    def update(self, acks: dict[tuple[int, int], bytes]) -> None:
        if len(acks) < len(self.order):
            raise ValueError("acks only grow")
        for (q, o), body in itertools.islice(acks.items(), len(self.order), None):
            self.add(q, o, body_id(body))

    def add(self, q: int, o: int, ident: int) -> None:
        if (q, o) in self.ids:
            raise ValueError(f"queue {q} offset {o} acknowledged twice")
        self.order.append((q, o, ident))
        self.ids[(q, o)] = ident
        bisect.insort(self.offsets.setdefault(q, []), o)

    def tail(self, q: int) -> int:
        """The highest acked offset of queue ``q`` (-1: none)."""
        offs = self.offsets.get(q)
        return offs[-1] if offs else -1


@dataclass
class ReplicaLedger:
    """Everything verified so far of one replica's queues (pure: fed with what was read, no I/O).

    Per queue the message ids at offsets 0..n-1 (``ids``), their CommitLog offsets and storing
    hosts; the set of ids held (exactly once across all queues of the replica). A read from
    offset ``start`` (at most n) overlapping the verified messages is compared with them: at the
    first difference, or where the read ends below n, the queue was truncated: the verified tail
    from there is dropped and re-verified from what was read. Acks are checked incrementally:
    ``ack_ok_below[q]`` says every ack of queue q below it matched (lowered by a truncation)."""

    ids: dict[int, array[int]] = field(default_factory=dict)
    clos: dict[int, array[int]] = field(default_factory=dict)
    hosts: dict[int, list[str]] = field(default_factory=dict)
    held: set[int] = field(default_factory=set)
    truncations: list[tuple[int, int, int]] = field(default_factory=list)  # (queue, from, to)
    ack_ok_below: dict[int, int] = field(default_factory=dict)
    acks_seen: int = 0  # how many of AckIndex.order were looked at
    _writers: dict[int, set[str]] = field(default_factory=dict)
    _writers_epochs: list[tuple[int, int]] | None = None
    _writers_below: dict[int, int] = field(default_factory=dict)

    def verified(self, q: int) -> int:
        return len(self.ids.get(q, ()))

    def resume_offset(self, q: int) -> int:
        """Where the next read of ``q`` starts: at the last verified message, so that the read
        shows it unchanged (or the queue truncated)."""
        return max(0, self.verified(q) - 1)

    def matches(self, q: int, m: Stored) -> bool:
        ids = self.ids.get(q)
        return (
            ids is not None
            and m.queue_offset < len(ids)
            and ids[m.queue_offset] == m.id
            and self.clos[q][m.queue_offset] == m.commit_log_offset
        )

    def apply(self, q: int, start: int, msgs: Sequence[Stored]) -> list[str]:
        """Take in ``msgs``: queue ``q`` read from ``start`` to its end. Returns the problems (a
        gap, offsets not contiguous, an id already held: a duplicate); the ledger keeps only the
        messages before the first problem."""
        ids = self.ids.setdefault(q, array("Q"))
        clos = self.clos.setdefault(q, array("q"))
        hosts = self.hosts.setdefault(q, [])
        if start > len(ids):
            return [f"queue {q}: read from {start}, beyond the {len(ids)} verified"]
        overlap = min(len(msgs), len(ids) - start)
        keep = next(
            (
                i
                for i in range(overlap)
                if not self.matches(q, msgs[i]) or msgs[i].queue_offset != start + i
            ),
            overlap,
        )
        cut = start + keep
        if cut < len(ids):
            self.truncations.append((q, len(ids), cut))
            self.held.difference_update(ids[cut:])
            del ids[cut:], clos[cut:], hosts[cut:]
            self.ack_ok_below[q] = min(self.ack_ok_below.get(q, 0), cut)
            self._writers_epochs = None  # recount the writers of every epoch
        for m in msgs[keep:]:
            if m.queue_offset != len(ids):
                return [f"queue {q}: offset {m.queue_offset} read where {len(ids)} was due"]
            if m.id in self.held:
                return [f"queue {q} offset {m.queue_offset}: a message held twice (id {m.id:x})"]
            ids.append(m.id)
            clos.append(m.commit_log_offset)
            hosts.append(m.host)
            self.held.add(m.id)
        return []

    def check_acks(self, acks: AckIndex) -> tuple[list[str], bool]:
        """(problems: an ack whose offset holds another message; whether every ack is held).
        Looks only at new acks below an already checked offset, and at offsets verified since
        the last call (or re-verified after a truncation)."""
        problems: list[str] = []
        for q, o, ident in itertools.islice(acks.order, self.acks_seen, None):
            # acked after its offset was verified here: compare it now (or again below)
            if o < self.ack_ok_below.get(q, 0) and self.ids[q][o] != ident:
                self.ack_ok_below[q] = o
        self.acks_seen = len(acks.order)
        holds_all = True
        for q, offs in acks.offsets.items():
            ids = self.ids.get(q, array("Q"))
            lo = self.ack_ok_below.get(q, 0)
            bad = [
                o
                for o in offs[bisect.bisect_left(offs, lo) : bisect.bisect_left(offs, len(ids))]
                if ids[o] != acks.ids[(q, o)]
            ]
            problems += [f"acked message at queue {q} offset {o}: another one read" for o in bad]
            # a mismatch stays below the checked mark: it is reported again until it is gone
            self.ack_ok_below[q] = bad[0] if bad else len(ids)
            if offs[-1] >= len(ids):
                holds_all = False
        return problems, holds_all

    def epoch_writers(self, epochs: list[tuple[int, int]]) -> list[str]:
        """Every message inside one epoch's CommitLog range was stored by one broker: the
        writers of each epoch, counted incrementally (from scratch when the epochs changed or
        a queue was truncated)."""
        if self._writers_epochs != epochs:
            self._writers, self._writers_below = {}, {}
            self._writers_epochs = list(epochs)
        starts = sorted(epochs, key=lambda e: e[1])
        offsets = [s for _, s in starts]
        for q, clos in self.clos.items():
            hosts = self.hosts[q]
            for i in range(self._writers_below.get(q, 0), len(clos)):
                at = bisect.bisect_right(offsets, clos[i]) - 1
                epoch = starts[at][0] if at >= 0 else 0
                self._writers.setdefault(epoch, set()).add(hosts[i])
            self._writers_below[q] = len(clos)
        return [f"epoch {e} written by {sorted(w)}" for e, w in self._writers.items() if len(w) > 1]

    def differs_from(self, other: ReplicaLedger) -> list[int]:
        """Queues whose common verified prefix differs between the two replicas."""
        out = []
        for q, ids in other.ids.items():
            mine = self.ids.get(q, array("Q"))
            common = min(len(mine), len(ids))
            if mine[:common] != ids[:common]:
                out.append(q)
        return out


async def catch_up(api: BrokerApi, addr: str, ledger: ReplicaLedger, q: int) -> list[str]:
    """Read queue ``q`` of the replica at ``addr`` from its last verified message on; if that
    message is gone or changed (the queue was truncated), step back (1, 2, 4, ... messages)
    to an offset still holding the verified message and re-verify from there."""
    n = ledger.verified(q)
    start = ledger.resume_offset(q)
    msgs = [stored(m) for m in await pull_queue(api, addr, q, start)]
    if n and not msgs:
        # nothing served at the last verified offset: truncated only if the queue now ends
        # below it (a replica not serving yet, or not confirmed that far, is no truncation)
        end = await api.get_max_offset(addr, MessageQueue(TOPIC, GROUP, q))
        if end >= n:
            return [f"queue {q}: nothing read at offset {start} of {end}"]
    if n and not (msgs and ledger.matches(q, msgs[0])):
        step = 1
        while start > 0:
            start = max(0, start - step)
            step *= 2
            probe = [stored(m) for m in await pull_queue(api, addr, q, start, limit=1)]
            if probe and ledger.matches(q, probe[0]):
                break
        msgs = [stored(m) for m in await pull_queue(api, addr, q, start)]
    return ledger.apply(q, start, msgs)


async def catch_up_all(api: BrokerApi, addr: str, ledger: ReplicaLedger) -> list[str]:
    problems: list[str] = []
    for q in range(QUEUES):
        problems += await catch_up(api, addr, ledger, q)
    return problems
