"""The mqadmin scenario: the same commands, in the same order, against one cluster; every output
recorded through the one normaliser (:mod:`.normalise`). Run once against Apache RocketMQ and once
against ferrymq, the two transcripts must be equal step by step.

Live clients (a producer and a push consumer, ferrymq's Python client, the same against both) are
up for the steps that need them (connections, consumer status, progress with lag), and stopped
for the steps about offline groups.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ferrymq.client import ConsumeFromWhere, Message, Producer, PushConsumer
from ferrymq.client.admin import AdminClient

from . import normalise as n
from .runner import Mqadmin, Result

View = Callable[[Result], list[str]]


def full(result: Result, addrs: dict[str, str]) -> list[str]:
    return n.lines(n.substitute(result.out + result.err, addrs))


@dataclass
class Transcript:
    """step name -> normalised view; ``raw`` keeps the unnormalised results for failure messages."""

    steps: dict[str, list[str]] = field(default_factory=dict)
    raw: dict[str, Result] = field(default_factory=dict)

    def record(
        self,
        name: str,
        result: Result,
        addrs: dict[str, str],
        view: Callable[[list[str]], list[str]] | None = None,
    ) -> Result:
        """Step ``name``: the whole output normalised (then ``view`` of it), and the raw result."""
        found = full(result, addrs)
        self.steps[name] = view(found) if view else found
        self.raw[name] = result
        return result


class Loop:
    """An asyncio loop in a thread, for the live clients beside the blocking mqadmin calls."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 120) -> Any:
        fut: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


async def _wait(
    check: Callable[[], Coroutine[Any, Any, bool]], what: str, within: float = 60
) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {within:.0f} s for {what}")
        await asyncio.sleep(0.2)  # polling broker state with a deadline


class Scenario:
    def __init__(self, mq: Mqadmin, namesrv: str, broker_addr: str, prefix: str) -> None:
        self.mq = mq
        self.ns = namesrv
        self.broker = broker_addr
        self.p = prefix
        self.topic = f"{prefix}_T"
        self.topic2 = f"{prefix}_T2"
        self.group = f"{prefix}_G"
        self.group2 = f"{prefix}_G2"
        self.pgroup = f"{prefix}_PG"
        self.addrs = {namesrv: "<NS>", broker_addr: "<BROKER>"}
        self.out = Transcript()
        self.loop = Loop()

    # --- recording ------------------------------------------------------------------------------
    def run(self, *args: str) -> Result:
        """One mqadmin command; again (3 tries) when the client timed out waiting, which
        measures the machine's load, not the answer (a loaded JVM took 1.2 s to answer).
        A first argument ``@stopAfter=<ms>`` is the driver's: interrupt the command then."""
        for _ in range(3):
            result = self.mq.run(*args, "-n", self.ns)
            if "RemotingTimeoutException" not in result.out + result.err:
                break
        return result

    def step(
        self, name: str, *args: str, view: Callable[[list[str]], list[str]] | None = None
    ) -> Result:
        return self.out.record(name, self.run(*args), self.addrs, view)

    def keys_step(self, name: str, *args: str, sep: str) -> Result:
        result = self.run(*args)
        self.out.steps[name] = n.keys_view(n.substitute(result.out, self.addrs), sep) + n.lines(
            n.substitute(result.err, self.addrs)
        )
        self.out.raw[name] = result
        return result

    # --- live clients -----------------------------------------------------------------------------
    async def _start_clients(self) -> tuple[Producer, PushConsumer]:
        producer = Producer(self.pgroup, self.ns)
        await producer.start()
        consumer = PushConsumer(
            self.group, self.ns, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        )
        consumer.subscribe(self.topic, "*")
        consumer.register_listener(lambda msgs, ctx: None)
        await consumer.start()
        return producer, consumer

    async def _committed(self, want: int) -> None:
        """Until the group has committed every one of the topic's ``want`` messages."""
        async with AdminClient(self.ns) as admin:

            async def done() -> bool:
                try:
                    stats = await admin.consume_stats(self.group, self.topic)
                except Exception:  # the group's stats appear with its first commit
                    return False
                table = stats.offset_table.values()
                return (
                    sum(w.consumer_offset for w in table)
                    == sum(w.broker_offset for w in table)
                    == want
                )

            await _wait(done, f"{self.group} committing {want} messages")

    async def _send(self, producer: Producer, count: int, start: int) -> None:
        for i in range(start, start + count):
            msg = Message(self.topic, f"body-{i}".encode())
            msg.tags = "tagA"
            msg.keys = f"{self.p}_key{i}"
            await producer.send(msg)

    # --- the scenario -------------------------------------------------------------------------------
    def play(self) -> Transcript:
        try:
            self._play()
        finally:
            self.loop.close()
        return self.out

    def _play(self) -> None:
        t, t2, g, g2, b = self.topic, self.topic2, self.group, self.group2, self.broker
        mine = n.only_lines_with([self.p])
        self.step("clusterList", "clusterList", view=n.without_rates)
        self.step(
            "updateTopic", "updateTopic", "-c", "DefaultCluster", "-t", t, "-r", "4", "-w", "4"
        )
        self.step("updateTopic-broker", "updateTopic", "-b", b, "-t", t2)
        self.step("topicList", "topicList", view=mine)
        self.step("topicRoute", "topicRoute", "-t", t)
        self.step("topicStatus-empty", "topicStatus", "-t", t)
        self.step("updateTopicPerm", "updateTopicPerm", "-c", "DefaultCluster", "-t", t2, "-p", "4")
        self.step("updateSubGroup", "updateSubGroup", "-c", "DefaultCluster", "-g", g)
        self.step("updateSubGroup-2", "updateSubGroup", "-b", b, "-g", g2)
        for i in range(3):
            self.step(
                f"sendMessage-{i}",
                "sendMessage",
                "-t",
                t,
                "-p",
                f"mqadmin-{i}",
                "-k",
                f"{self.p}_mk{i}",
                "-c",
                "tagM",
                "-b",
                "broker-a",
                "-i",
                "0",
            )
        self.step("topicStatus", "topicStatus", "-t", t)
        self.step("queryMsgByKey", "queryMsgByKey", "-t", t, "-k", f"{self.p}_mk1")
        found = self.step(
            "queryMsgByOffset", "queryMsgByOffset", "-t", t, "-b", "broker-a", "-i", "0", "-o", "1"
        )
        offset_id = next(
            (
                ln.split(":", 1)[1].strip()
                for ln in found.out.splitlines()
                if ln.startswith("OffsetID:")
            ),
            "none",
        )
        uniq = next(
            (
                ln.split(":", 1)[1].strip()
                for ln in found.out.splitlines()
                if ln.startswith("Msg ID:")
            ),
            "none",
        )
        # 5.x wants the topic too
        topic_opt = ("-t", t) if self.mq.release.startswith("5") else ()
        self.step("queryMsgById", "queryMsgById", "-i", offset_id, *topic_opt)
        self.step("queryMsgByUniqueKey", "queryMsgByUniqueKey", "-t", t, "-i", uniq)
        self.step("printMsg", "printMsg", "-t", t, "-c", "UTF-8")
        self.step(
            "consumeMessage",
            "consumeMessage",
            "-t",
            t,
            "-b",
            "broker-a",
            "-i",
            "0",
            "-o",
            "0",
            "-c",
            "2",
        )

        # a live producer and consumer: 3 more messages, all consumed and committed
        producer, consumer = self.loop.run(self._start_clients())
        try:
            self.loop.run(self._send(producer, 3, 0))
            self.loop.run(self._committed(6))
            self.step("consumerConnection", "consumerConnection", "-g", g)
            self.step("consumerStatus", "consumerStatus", "-g", g, view=n.without_rates)
            # one client's running info as the broker relays it (GET_CONSUMER_RUNNING_INFO 307)
            client_id = consumer.instance.client_id
            self.step(
                "consumerStatus-client",
                "consumerStatus",
                "-g",
                g,
                "-i",
                client_id,
                view=n.running_info_view,
            )
            self.step(
                "consumerStatus-unknown-client",
                "consumerStatus",
                "-g",
                g,
                "-i",
                f"{client_id}-gone",
            )
            self.step(
                "consumerProgress-g-online", "consumerProgress", "-g", g, view=n.progress_view
            )
            self.step("producerConnection", "producerConnection", "-g", self.pgroup, "-t", t)
            # the message track of a consumed message, with its group online
            self.step("queryMsgById-consumed", "queryMsgById", "-i", offset_id, *topic_opt)
            # the group goes offline, 2 more messages: lag 2
            self.loop.run(consumer.shutdown())
            self.loop.run(self._send(producer, 2, 3))
        finally:
            self.loop.run(consumer.shutdown())
            self.loop.run(producer.shutdown())
        self.step("consumerProgress-g", "consumerProgress", "-g", g, view=n.progress_view)
        self.step("queryMsgById-offline", "queryMsgById", "-i", offset_id, *topic_opt)
        self.step("consumerProgress", "consumerProgress", view=mine)
        self.step("brokerConsumeStats", "brokerConsumeStats", "-b", b, view=mine)
        self.step("statsAll", "statsAll", "-t", t, view=n.stats_all_view)
        self.step("cloneGroupOffset", "cloneGroupOffset", "-s", g, "-d", g2, "-t", t)
        self.step("consumerProgress-g2", "consumerProgress", "-g", g2)
        self.step("resetOffsetByTime-offline", "resetOffsetByTime", "-g", g2, "-t", t, "-s", "0")
        self.step("consumerProgress-g2-reset", "consumerProgress", "-g", g2)
        self.step("skipAccumulatedMessage", "skipAccumulatedMessage", "-g", g2, "-t", t)
        self.step("consumerProgress-g2-skipped", "consumerProgress", "-g", g2)

        self.keys_step("brokerStatus", "brokerStatus", "-b", b, sep=":")
        self.keys_step("getBrokerConfig", "getBrokerConfig", "-b", b, sep="=")
        self.step(
            "updateBrokerConfig",
            "updateBrokerConfig",
            "-b",
            b,
            "-k",
            "flushIntervalCommitLog",
            "-v",
            "600",
        )
        self.step(
            "updateBrokerConfig-unknown",
            "updateBrokerConfig",
            "-b",
            b,
            "-k",
            "noSuchKey",
            "-v",
            "1",
        )
        self.keys_step("getNamesrvConfig", "getNamesrvConfig", sep="=")
        self.step("updateKvConfig", "updateKvConfig", "-s", f"{self.p}_ns", "-k", "k1", "-v", "v1")
        self.step("deleteKvConfig", "deleteKvConfig", "-s", f"{self.p}_ns", "-k", "k1")
        self.step("wipeWritePerm", "wipeWritePerm", "-b", "broker-a", view=n.perm_count_view)
        self.step("addWritePerm", "addWritePerm", "-b", "broker-a", view=n.perm_count_view)
        # clusterRT repeats every -i seconds until stopped: one round, then interrupted
        self.step(
            "clusterRT",
            "@stopAfter=15000",
            "clusterRT",
            "-a",
            "3",
            "-s",
            "64",
            "-c",
            "DefaultCluster",
            "-i",
            "600",
            view=n.without_rates,
        )
        self.step(
            "sendMsgStatus",
            "sendMsgStatus",
            "-b",
            "broker-a",
            "-s",
            "64",
            "-c",
            "2",
            view=n.without_rates,
        )
        self.step("deleteSubGroup", "deleteSubGroup", "-c", "DefaultCluster", "-g", g2)
        self.step("deleteTopic", "deleteTopic", "-c", "DefaultCluster", "-t", t2)
        # bad input
        self.step("topicRoute-unknown", "topicRoute", "-t", f"{self.p}_NoSuchTopic")
        self.step("topicStatus-unknown", "topicStatus", "-t", f"{self.p}_NoSuchTopic")
        self.step("consumerProgress-unknown", "consumerProgress", "-g", f"{self.p}_NoSuchGroup")
        self.step("consumerConnection-unknown", "consumerConnection", "-g", f"{self.p}_NoSuchGroup")
        self.step("consumerStatus-unknown", "consumerStatus", "-g", f"{self.p}_NoSuchGroup")
        self.step("brokerStatus-unknown", "brokerStatus", "-b", "127.0.0.1:1")
