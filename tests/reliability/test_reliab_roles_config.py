"""Issue 23 item 5 and issue 16 defect 8: brokerId and brokerRole must agree (refused at start
with exit code 2 and a message; the NameServer refuses a SLAVE claiming brokerId 0, keeping the
live master's route), and a normal broker.conf starts without "unknown configuration keys"."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.register import BrokerRegistration, build_register_request
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.remoting.bodies import TopicConfig, TopicConfigSerializeWrapper
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from reliab_helpers import broker_conf, refusing_address, spawn, wait_exit, wait_ready, write_conf


@pytest.mark.parametrize(
    ("role", "broker_id", "hint"),
    [
        ("SLAVE", "0", "brokerRole=SLAVE needs a brokerId other than 0"),
        ("SYNC_MASTER", "1", "brokerRole=SYNC_MASTER needs brokerId=0"),
        ("ASYNC_MASTER", "2", "brokerRole=ASYNC_MASTER needs brokerId=0"),
    ],
)
def test_mismatched_role_and_id_refused_with_exit_2(
    tmp_path: Path, role: str, broker_id: str, hint: str
) -> None:
    holder, namesrv = refusing_address()
    try:
        conf = write_conf(
            tmp_path / "broker.conf",
            broker_conf(tmp_path, namesrv, brokerRole=role, brokerId=broker_id),
        )
        done = subprocess.run(
            [sys.executable, "-m", "ferrymq.cli.main", "broker", "-c", str(conf)],
            capture_output=True,
            timeout=60,
        )
    finally:
        holder.close()
    assert done.returncode == 2, done.stderr.decode()
    assert hint in done.stderr.decode()
    assert not (tmp_path / "store").exists()  # refused before touching the store


def test_normal_broker_conf_warns_of_no_unknown_key(tmp_path: Path) -> None:
    holder, namesrv = refusing_address()
    conf = write_conf(
        tmp_path / "broker.conf",
        broker_conf(
            tmp_path,
            namesrv,
            haSendHeartbeatInterval="5000",
            transactionTimeOut="6000",
            deleteWhen="04",
            fileReservedTime="48",
            serverChannelMaxIdleTimeSeconds="120",
            shutdownGraceSeconds="10",
            consumerLagSampleInterval="10000",
        ),
    )
    log = tmp_path / "broker.log"
    proc = spawn(["broker", "-c", str(conf)], log)
    try:
        wait_ready(proc, log)
        proc.send_signal(signal.SIGTERM)
        assert wait_exit(proc, 30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        holder.close()
    text = log.read_text()
    assert "unknown configuration keys" not in text, text
    # a key really unknown is still reported (the check itself works)
    conf.write_text(conf.read_text() + "noSuchKey=1\nbrokerId=7\n")
    done = subprocess.run(
        [sys.executable, "-m", "ferrymq.cli.main", "broker", "-c", str(conf)],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2  # brokerId 7 with a master role
    assert "ignoring unknown configuration keys: noSuchKey" in done.stderr.decode()


def _register(addr: str, broker_id: int, role: str, topic: str) -> RemotingCommand:
    config = BrokerConfig(
        broker_cluster_name="C",
        broker_name="broker-x",
        broker_id=broker_id,
        broker_ip1="127.0.0.1",
        listen_port=int(addr.rpartition(":")[2]),
    )
    wrapper = TopicConfigSerializeWrapper(
        topic_config_table={topic: TopicConfig(topic_name=topic, read_queue_nums=4)}
    )
    return build_register_request(config, wrapper, "127.0.0.1:1", role)


async def test_namesrv_refuses_a_slave_claiming_the_live_masters_id(tmp_path: Path) -> None:
    app = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", kv_config_path=tmp_path / "kv")
    )
    await app.start()
    master, impostor = RemotingClient(), RemotingClient()
    try:
        ok = await master.invoke(app.addr, _register("127.0.0.1:20001", 0, "SYNC_MASTER", "T"))
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        refused = await impostor.invoke(app.addr, _register("127.0.0.1:20003", 0, "SLAVE", "T"))
        assert refused.code == ResponseCode.NO_PERMISSION
        assert "would replace the live master 127.0.0.1:20001" in (refused.remark or "")
        # the route still sends writers to the master
        route = await master.invoke(
            app.addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
        )
        assert route.code == ResponseCode.SUCCESS
        datas = orjson.loads(route.body_bytes())["brokerDatas"]
        assert datas[0]["brokerAddrs"] == {"0": "127.0.0.1:20001"}
        # a real slave (brokerId 1) is welcome; a broker without a role field (upstream) is not
        # judged by it
        slave = await impostor.invoke(app.addr, _register("127.0.0.1:20003", 1, "SLAVE", "T"))
        assert slave.code == ResponseCode.SUCCESS, slave.remark
    finally:
        await master.close()
        await impostor.close()
        await app.stop()


async def test_broker_logs_the_namesrv_refusal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The refusal reaches the broker's registration as a failed outcome, logged at ERROR."""
    app = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", kv_config_path=tmp_path / "kv")
    )
    await app.start()
    client = RemotingClient()
    try:
        config = BrokerConfig(
            broker_name="broker-y", broker_ip1="127.0.0.1", listen_port=20011, namesrv_addr=app.addr
        )
        registration = BrokerRegistration(
            config, client, TopicConfigSerializeWrapper, broker_role="SLAVE"
        )
        outcomes = await registration.register_all()
        assert [o.ok for o in outcomes] == [False]
        assert "brokerId 0 is the master's" in (outcomes[0].error or "")
        assert any(
            r.levelname == "ERROR" and "refused registration (code 16)" in r.getMessage()
            for r in caplog.records
        )
    finally:
        await client.close()
        await app.stop()
