"""Helpers shared by the broker tests (a module name unique across the test tree)."""

from __future__ import annotations

from pathlib import Path

from ferrymq.broker.config import BrokerConfig
from ferrymq.store.config import MessageStoreConfig


def broker_configs(
    root: Path, namesrv_addr: str | None, name: str = "broker-a", **extra: object
) -> tuple[BrokerConfig, MessageStoreConfig]:
    broker = BrokerConfig(
        broker_cluster_name="TestCluster",
        broker_name=name,
        broker_ip1="127.0.0.1",
        bind_address="127.0.0.1",
        listen_port=0,
        namesrv_addr=namesrv_addr,
        **extra,  # type: ignore[arg-type]
    )
    store = MessageStoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=1024 * 1024,
        mapped_file_size_consume_queue=20 * 1000,
    )
    return broker, store
