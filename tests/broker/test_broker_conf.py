"""One broker.conf, parsed once into BrokerConf and its parts (issue 21).

A bad value in any part is one clear error naming the key, the value and what is expected, and
``ferrymq broker`` exits 2 on it before touching the store; a key every part ignores is warned
about once, and no key a part reads is ever called unknown.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from ferrymq.acl.settings import AclSettings
from ferrymq.broker.broker_conf import BrokerConf, load_broker_conf, parse_broker_conf
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.controller_mode_config import ControllerModeSettings
from ferrymq.broker.lag.config import LagConfig
from ferrymq.broker.pop.settings import PopTimerSettings
from ferrymq.broker.semantics_config import SemanticsConfig
from ferrymq.ha.config import HASettings
from ferrymq.properties import ConfigError, known_keys
from ferrymq.remoting.tls import TlsMode, TlsSettings
from ferrymq.store.config import FlushDiskType, MessageStoreConfig

# part -> (a bad line, the key it names, words of what is expected)
BAD_VALUE_BY_PART = {
    "broker": ("listenPort=ninety", "listenPort", "valid integer"),
    "store": ("flushDiskType=SOMETIMES", "flushDiskType", "ASYNC_FLUSH"),
    "ha": ("haTransferBatchSize=0", "haTransferBatchSize", "greater than or equal to 1"),
    "semantics": ("transactionCheckMax=0", "transactionCheckMax", "greater than or equal to 1"),
    "pop": ("reviveQueueNum=0", "reviveQueueNum", "greater than or equal to 1"),
    "lag": ("consumerLagEnable=perhaps", "consumerLagEnable", "valid boolean"),
    "controller_mode": ("brokerHeartbeatInterval=x", "brokerHeartbeatInterval", "valid integer"),
    "acl": ("aclReloadInterval=-1", "aclReloadInterval", "greater than 0"),
    "tls": ("tls.server.mode=sometimes", "tls.server.mode", "'disabled'"),
}


def test_parts_are_every_model_read_from_broker_conf() -> None:
    assert BrokerConf.parts() == {
        "broker": BrokerConfig,
        "store": MessageStoreConfig,
        "ha": HASettings,
        "semantics": SemanticsConfig,
        "pop": PopTimerSettings,
        "lag": LagConfig,
        "controller_mode": ControllerModeSettings,
        "acl": AclSettings,
        "tls": TlsSettings,
    }
    assert set(BAD_VALUE_BY_PART) == set(BrokerConf.parts())


def test_one_file_fills_every_part(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "brokerName=broker-x\nbrokerId=1\nbrokerRole=SLAVE\nflushDiskType=SYNC_FLUSH\n"
        "haListenPort=30912\ntransactionTimeOut=1500\nconsumerLagWindow=60000\n"
        "controllerHeartBeatTimeoutMills=9000\naclEnable=true\ntls.ha.enable=false\n"
    )
    with caplog.at_level(logging.WARNING):
        parsed = load_broker_conf(conf, env={"FERRYMQ_brokerName": "broker-y"})
    assert "unknown" not in caplog.text
    assert parsed.unknown_keys == ()
    assert parsed.broker.broker_name == "broker-y"  # the environment over the file
    assert parsed.broker.broker_config_path == conf
    assert parsed.store.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert parsed.ha.ha_listen_port == 30912
    assert parsed.semantics.transaction_time_out == 1500
    assert parsed.lag.consumer_lag_window == 60_000
    assert parsed.controller_mode.controller_heart_beat_timeout_mills == 9000
    assert parsed.acl.acl_enable
    assert parsed.tls.server_mode is TlsMode.DISABLED


def test_unknown_keys_are_those_no_part_knows_warned_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # keys of four parts, each known to one part only
    file_values = {"haListenPort": "1", "transactionTimeOut": "1", "aclEnable": "false"}
    assert all(
        sum(key in known_keys(model) for model in BrokerConf.parts().values()) == 1
        for key in (*file_values, "consumerLagEnable")
    )
    with caplog.at_level(logging.WARNING):
        parsed = parse_broker_conf(
            {**file_values, "bogusKey": "1"},
            # FERRYMQ_<lowerCamelCase> only: upper-case FERRYMQ_* variables are other tools'
            {
                "FERRYMQ_consumerLagEnable": "false",
                "FERRYMQ_otherTool": "x",
                "FERRYMQ_REQUIRE_ALL": "1",
                "FERRYMQ_ListenPort": "1",
            },
            {"namesrvAddr": "127.0.0.1:9876", "noSuchOption": "1"},
            source="b.conf",
        )
    warnings = [r.getMessage() for r in caplog.records if "unknown" in r.getMessage()]
    assert warnings == [
        "ignoring unknown configuration keys: bogusKey (b.conf), "
        "otherTool (environment FERRYMQ_otherTool), noSuchOption (command line)"
    ]
    assert parsed.broker.namesrv_addr == "127.0.0.1:9876"
    assert parsed.broker.listen_port == 10911
    assert parsed.lag.consumer_lag_enable is False


def test_bad_values_in_several_parts_are_one_error_naming_each(tmp_path: Path) -> None:
    lines = [bad for bad, _key, _expected in BAD_VALUE_BY_PART.values()]
    with pytest.raises(ConfigError) as caught:
        parse_broker_conf(dict(line.split("=", 1) for line in lines), {}, source="b.conf")
    assert len(caught.value.problems) == len(BAD_VALUE_BY_PART)
    message = str(caught.value)
    for bad, key, expected in BAD_VALUE_BY_PART.values():
        value = bad.split("=", 1)[1]
        assert f"{key}={value!r}" in message and expected in message, (key, message)
    assert message.count("(from b.conf)") == len(BAD_VALUE_BY_PART)


def test_controller_mode_and_role_are_checked_across_parts() -> None:
    with pytest.raises(ConfigError, match="brokerRole=SLAVE needs a brokerId other than 0"):
        parse_broker_conf({"brokerRole": "SLAVE"}, {})
    controller = {"enableControllerMode": "true", "controllerAddr": "127.0.0.1:9878"}
    with pytest.raises(ConfigError, match=r"brokerId=0: with enableControllerMode=true"):
        parse_broker_conf(controller, {})
    # the controller decides the role: a replica id with a master role is fine there
    assert parse_broker_conf({**controller, "brokerId": "2"}, {}).broker.broker_id == 2


@pytest.mark.parametrize("part", sorted(BAD_VALUE_BY_PART))
def test_broker_exits_2_with_one_error_naming_the_key(tmp_path: Path, part: str) -> None:
    bad, key, expected = BAD_VALUE_BY_PART[part]
    store = tmp_path / "store"
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"brokerName=b\nlistenPort=0\nbindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\n"
        f"storePathRootDir={store}\n{bad}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "ferrymq.cli.main", "broker", "-c", str(conf)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    value = bad.split("=", 1)[1]
    assert f"{key}={value!r}" in errors[0] and expected in errors[0], errors[0]
    assert str(conf) in errors[0]
    assert "unknown" not in done.stderr
    assert not store.exists()  # refused before the store is touched
