"""GET_BROKER_CONFIG / GET_NAMESRV_CONFIG report upstream's keys (ferrymq.upstream_config): the
values ferrymq runs with, kept values of upstream-only keys, else upstream's defaults."""

from __future__ import annotations

from ferrymq.broker.broker_conf import kept_broker_conf
from ferrymq.broker.config import BrokerConfig
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.store.config import MessageStoreConfig
from ferrymq.upstream_config import BROKER_DEFAULTS, HOST_DEPENDENT, NAMESRV_DEFAULTS, report


def test_tables_hold_upstreams_keys() -> None:
    # 5.4.0: BrokerConfig + NettyServerConfig + NettyClientConfig + MessageStoreConfig
    assert len(BROKER_DEFAULTS) > 400 and len(NAMESRV_DEFAULTS) > 35
    assert BROKER_DEFAULTS["flushIntervalCommitLog"] == "500"
    assert BROKER_DEFAULTS["sendThreadPoolQueueCapacity"] == "10000"
    assert NAMESRV_DEFAULTS["listenPort"] == "9876"
    assert all(BROKER_DEFAULTS[k] == "" for k in HOST_DEPENDENT & BROKER_DEFAULTS.keys())


def test_report_layers_applied_over_kept_over_defaults() -> None:
    broker = BrokerConfig(brokerName="b1", brokerIP1="127.0.0.1", defaultTopicQueueNums=3)
    store = MessageStoreConfig(flushIntervalCommitLog=700)
    kept = {"sendThreadPoolQueueCapacity": "5", "defaultTopicQueueNums": "9"}
    out = report(BROKER_DEFAULTS, [broker, store], kept)
    assert set(BROKER_DEFAULTS) <= set(out)
    assert out["brokerName"] == "b1" and out["brokerIP1"] == "127.0.0.1"
    assert out["flushIntervalCommitLog"] == "700"  # applied: what the broker runs with
    assert out["defaultTopicQueueNums"] == "3"  # a model's value beats a kept one
    assert out["sendThreadPoolQueueCapacity"] == "5"  # kept
    assert out["pullThreadPoolQueueCapacity"] == BROKER_DEFAULTS["pullThreadPoolQueueCapacity"]
    assert out["flushDiskType"] == "ASYNC_FLUSH" and out["autoCreateTopicEnable"] == "true"

    ns = report(NAMESRV_DEFAULTS, [NamesrvConfig(listenPort=9000)], {})
    assert ns["listenPort"] == "9000" and set(NAMESRV_DEFAULTS) <= set(ns)


def test_broker_conf_keys_only_upstream_has_are_kept(tmp_path) -> None:  # type: ignore[no-untyped-def]
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "brokerName=b\nsendMessageThreadPoolNums=4\nnoSuchKey=1\nflushIntervalCommitLog=9\n"
    )
    assert kept_broker_conf(conf) == {"sendMessageThreadPoolNums": "4"}
    assert kept_broker_conf(None) == {}
