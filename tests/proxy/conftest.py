"""Fixtures of the proxy tests: brokers (Apache RocketMQ 5.4.0 through the reference launcher, or
ferrymq's process cluster), proxies in front of them (Apache's ``ProxyStartup -pm cluster`` and
``ferrymq proxy -pc ... -pm cluster``), and the topics and groups the 5.x scenarios use."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from ferrymq.remoting import bodies, headers
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import RemotingCommand
from subprocess_helpers import popen

# the scenario checks live in a helper module: let pytest show their values on failure (before
# the test modules import it)
pytest.register_assert_rewrite("proxy.scenarios")

# topic -> message.type (the evidence's set-up: V5Normal, V5Fifo, V5Delay, V5Tx); V5Retry holds
# only the retry-to-DLQ scenario's message
TOPICS = {
    "V5Normal": "NORMAL",
    "V5Retry": "NORMAL",
    "V5Fifo": "FIFO",
    "V5Delay": "DELAY",
    "V5Tx": "TRANSACTION",
}
READY = re.compile(r"Proxy ready on gRPC port (\d+)")
REMOTING_READY = re.compile(r"Proxy ready on remoting port (\d+)")
# every proxy under test, Apache's and ferrymq's: a PushConsumer's message is popped invisible for
# 5 s and renewed from 3 s before that (a scan each second), so the renewal scenarios hold a
# message past its first invisible time within seconds (upstream defaults: 60 s, 10 s, 5 s)
RENEWAL_CONFIG = {
    "defaultInvisibleTimeMills": 5000,
    "renewAheadTimeMillis": 3000,
    "renewSchedulePeriodMillis": 1000,
}


@dataclass(frozen=True)
class Endpoint:
    """A proxy under test: which implementation, in front of which broker, where."""

    proxy: str  # "apache" | "ferrymq"
    broker: str  # "apache" | "ferrymq"
    address: str  # host:port of the gRPC port

    @property
    def tag(self) -> str:
        """A suffix for group names, so that runs against two proxies never share a group."""
        return f"{self.proxy[0]}{self.broker[0]}"


def fifo_group(ep: Endpoint) -> str:
    return f"v5_fifo_cg_{ep.tag}"


def dlq_group(ep: Endpoint) -> str:
    return f"v5_dlq_cg_{ep.tag}"


async def _setup_async(namesrv: str, tags: list[str]) -> None:
    client = RemotingClient(name="setup")
    deadline = time.monotonic() + 120
    try:
        while True:
            response = await client.invoke(
                namesrv, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 10
            )
            info = bodies.ClusterInfo.decode(response.body_bytes())
            masters = [
                d.broker_addrs[0] for d in info.broker_addr_table.values() if 0 in d.broker_addrs
            ]
            if masters:
                break
            assert time.monotonic() < deadline, f"no broker master registered with {namesrv}"
            await asyncio.sleep(0.5)  # polling the NameServer's state with a deadline

        async def call(
            addr: str, code: int, ext: dict[str, str] | None, body: bytes | None
        ) -> None:
            r = await client.invoke(addr, RemotingCommand.request(code, ext, body), 10)
            assert r.code == 0, f"setup request {code} to {addr}: {r.code} {r.remark}"

        for addr in masters:
            for topic, kind in TOPICS.items():
                header = headers.CreateTopicRequestHeader(
                    topic=topic,
                    read_queue_nums=4,
                    write_queue_nums=4,
                    attributes=f"+message.type={kind}",
                )
                await call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext(), None)
            for tag in tags:
                for group, cfg in (
                    (f"v5_fifo_cg_{tag}", {"consume_message_orderly": True}),
                    (f"v5_dlq_cg_{tag}", {"retry_max_times": 2}),
                ):
                    body = bodies.SubscriptionGroupConfig(group_name=group, **cfg).encode()
                    await call(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, body)
        # the proxy reads routes from the NameServer: wait until it lists every topic
        for topic in TOPICS:
            while True:
                r = await client.invoke(
                    namesrv,
                    RemotingCommand.request(
                        RequestCode.GET_ROUTEINFO_BY_TOPIC,
                        headers.GetRouteInfoRequestHeader(topic=topic).to_ext(),
                    ),
                    10,
                )
                if r.code == 0:
                    break
                assert time.monotonic() < deadline, f"{topic} never reached the NameServer"
                await asyncio.sleep(0.5)  # polling the NameServer's state with a deadline
    finally:
        await client.close()


def create_topics_and_groups(namesrv: str, tags: list[str]) -> None:
    asyncio.run(_setup_async(namesrv, tags))


@dataclass
class FerrymqProxy:
    proc: object
    port: int  # gRPC
    log: Path
    remoting_port: int


def start_ferrymq_proxy(run_dir: Path, namesrv: str, **extra: object) -> Iterator[FerrymqProxy]:
    """``ferrymq proxy -pc rmq-proxy.json -pm cluster`` until the generator is closed."""
    run_dir.mkdir(parents=True, exist_ok=True)
    conf = run_dir / "rmq-proxy.json"
    conf.write_text(
        json.dumps(
            {
                "rocketMQClusterName": "DefaultCluster",
                "namesrvAddr": namesrv,
                "grpcServerPort": 0,
                "remotingListenPort": 0,
                "bindAddress": "127.0.0.1",
                **RENEWAL_CONFIG,
                **extra,
            }
        )
    )
    log = run_dir / "proxy.out"
    with open(log, "wb") as out:
        proc = popen(
            [sys.executable, "-m", "ferrymq.cli.main", "proxy", "-pc", str(conf), "-pm", "cluster"],
            stdout=out,
            stderr=out,
        )
    try:
        # generous: a Python process importing grpc on a loaded 2-core machine starts slowly
        deadline = time.monotonic() + 240
        while True:
            m = READY.search(log.read_text(errors="replace"))
            if m:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"ferrymq proxy did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)  # polling the child's output with a deadline
        remoting = REMOTING_READY.search(log.read_text(errors="replace"))
        assert remoting is not None, "the proxy announced its gRPC port but no remoting port"
        yield FerrymqProxy(proc, int(m.group(1)), log, int(remoting.group(1)))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except Exception:
            proc.kill()
            proc.wait(timeout=30)


@pytest.fixture(scope="session")
def java5_classpath() -> str:
    from proxy.java5 import scenario_classpath

    return scenario_classpath()
