"""UPDATE_BROKER_CONFIG is persisted into the broker.conf the broker started from (upstream
Configuration.persist), atomically, keeping the rest of the file; a restart from that file keeps it."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import javaproperties
import pytest
from ferrymq.broker.app import BrokerApp
from ferrymq.broker.broker_conf import load_broker_conf
from ferrymq.broker.config import (
    merge_properties_text,
    persist_properties,
)
from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.broker.processors.admin_broker import BlackListed, plan_update
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand

CONF = """# broker-a, hand-written
brokerName = broker-a
default_topic_queue_nums : 3
# a key this version does not know, kept as is
someFutureKey=keep me \\
    please
namesrvAddr=127.0.0.1:1
"""


def test_merge_keeps_comments_unknown_keys_and_spelling() -> None:
    merged = merge_properties_text(
        CONF, {"defaultTopicQueueNums": "5", "slaveReadEnable": "true", "namesrvAddr": "h:9876"}
    )
    lines = merged.splitlines()
    assert lines[0] == "# broker-a, hand-written" and "brokerName = broker-a" in lines
    assert "default_topic_queue_nums=5" in lines  # the file's own spelling of the key
    assert "someFutureKey=keep me \\" in lines and "    please" in lines
    assert "namesrvAddr=h:9876" in lines
    assert lines[-1] == "slaveReadEnable=true"  # a key the file lacked goes at the end
    props = javaproperties.loads(merged)
    assert props["someFutureKey"] == "keep me please" and props["namesrvAddr"] == "h:9876"
    # unchanged input, unchanged text
    assert merge_properties_text(CONF, {}) == CONF


def test_persist_is_atomic_and_keeps_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text(CONF)
    os.chmod(path, 0o640)
    persist_properties(path, {"defaultTopicQueueNums": "7"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["broker.conf"]  # no .tmp/.bak left
    broker = load_broker_conf(path, env={}).broker
    assert broker.default_topic_queue_nums == 7 and broker.broker_config_path == path
    with pytest.raises(OSError):
        persist_properties(path / "not-a-dir" / "broker.conf", {"defaultTopicQueueNums": "1"})
    # a symlinked broker.conf stays a link; its target gets the update
    (tmp_path / "etc").mkdir()
    link = tmp_path / "etc" / "broker.conf"
    link.symlink_to(path)
    persist_properties(link, {"defaultTopicQueueNums": "8"})
    assert link.is_symlink() and "default_topic_queue_nums=8" in path.read_text().splitlines()


def test_plan_sorts_keys_as_upstream_takes_them(tmp_path: Path) -> None:
    conf = load_broker_conf(None, env={})
    broker, store = conf.broker, conf.store
    models = [broker, store]
    for text, reason in (
        ("brokerPermission=99", "'brokerPermission'"),
        ("slaveReadEnable=perhaps", "'slaveReadEnable'"),
        ("flushIntervalCommitLog=0", "'flushIntervalCommitLog'"),
    ):
        with pytest.raises(ValueError, match=reason):
            plan_update(models, text)
    with pytest.raises(BlackListed, match=r"Can not update config in black list\."):
        plan_update(models, "brokerConfigPath=/etc/x\nslaveReadEnable=true")
    plan = plan_update(
        models,
        "slaveReadEnable=true\nflushIntervalCommitLog=600\nlistenPort=1\n"
        "sendThreadPoolQueueCapacity=5\nnoSuchKey=1\n",
    )
    # applied now (a BrokerConfig and a MessageStoreConfig field), at the next start, kept
    # (upstream-only: reported, not acted on), ignored (nobody knows it, as upstream ignores it)
    assert plan.apply == {(0, "slave_read_enable"): True, (1, "flush_interval_commit_log"): 600}
    assert plan.at_restart == {"listenPort": "1"}
    assert plan.kept == {"sendThreadPoolQueueCapacity": "5"}
    assert plan.ignored == ["noSuchKey"]
    assert plan.persisted(models) == {
        "listenPort": "1",
        "sendThreadPoolQueueCapacity": "5",
        "slaveReadEnable": "true",
        "flushIntervalCommitLog": "600",
    }


async def call(client: RemotingClient, addr: str, code: int, body: bytes | None = None) -> str:
    resp = await client.invoke(addr, RemotingCommand.request(code, None, body))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert resp.remark is None, resp.remark
    return resp.body_bytes().decode() if body is None else ""


def test_update_survives_a_broker_restart(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path,
        groups=1,
        namesrv_port=0,
        broker_port=0,
        mapped_file_size_commit_log=1024 * 1024,
        extra_conf={"defaultTopicQueueNums": "4"},
    )
    with cluster:
        conf = cluster.brokers[0].conf_path
        assert conf is not None
        with open(conf, "a") as fh:
            fh.write("# operator note\nsomeFutureKey=x\n")
        addr = cluster.broker_addrs[0]

        async def update_and_read() -> tuple[str, str]:
            client = RemotingClient()
            try:
                await call(
                    client,
                    addr,
                    RequestCode.UPDATE_BROKER_CONFIG,
                    b"defaultTopicQueueNums=6\nslaveReadEnable=true\nsendThreadPoolQueueCapacity=5\n",
                )
                bad = await client.invoke(
                    addr,
                    RemotingCommand.request(
                        RequestCode.UPDATE_BROKER_CONFIG, None, b"defaultTopicQueueNums=0\n"
                    ),
                )
                assert bad.code == ResponseCode.SYSTEM_ERROR
                assert "defaultTopicQueueNums" in (bad.remark or "")
                before = await call(client, addr, RequestCode.GET_BROKER_CONFIG)
            finally:
                await client.close()
            return before, conf.read_text()

        before, text = asyncio.run(update_and_read())
        assert "defaultTopicQueueNums=6" in before
        lines = text.splitlines()
        assert "defaultTopicQueueNums=6" in lines and "slaveReadEnable=true" in lines
        assert "# operator note" in lines and "someFutureKey=x" in lines
        assert "defaultTopicQueueNums=4" not in lines

        cluster.restart_broker(0)

        async def read() -> str:
            client = RemotingClient()
            try:
                return await call(client, addr, RequestCode.GET_BROKER_CONFIG)
            finally:
                await client.close()

        after = javaproperties.loads(asyncio.run(read()))
        assert after["defaultTopicQueueNums"] == "6" and after["slaveReadEnable"] == "true"
        # an upstream-only key: kept in broker.conf and reported again after the restart
        assert after["sendThreadPoolQueueCapacity"] == "5"


async def test_unwritable_config_file_keeps_the_update_and_says_so(
    broker: BrokerApp, client: RemotingClient, tmp_path: Path
) -> None:
    # e.g. broker.conf on a read-only ConfigMap mount: applied in memory (upstream only logs)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    broker.config.broker_config_path = blocker / "broker.conf"
    resp = await client.invoke(
        broker.addr,
        RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, None, b"slaveReadEnable=true"),
    )
    assert resp.code == ResponseCode.SUCCESS
    assert "not persisted" in (resp.remark or "") and "broker.conf" in (resp.remark or "")
    assert broker.config.slave_read_enable is True
