"""One interface over the two brokers a differential test runs against: Apache RocketMQ (the
oracle, :class:`ApacheCluster`) and ferrymq (its own process harness,
:class:`ferrymq.broker.local_cluster.LocalCluster`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.client.credentials import ClientSecurity

from .apache import ApacheCluster

TARGETS = ("apache", "ferrymq")


def ferrymq_cluster(
    data_dir: Path,
    groups: int = 1,
    broker_conf: Mapping[str, object] | None = None,
    namesrv_conf: Mapping[str, object] | None = None,
) -> LocalCluster:
    """ferrymq's process cluster as the Apache one is set up: loopback, picked ports, 8 MiB files."""
    return LocalCluster(
        data_dir,
        groups=groups,
        namesrv_port=0,
        broker_port=0,
        mapped_file_size_commit_log=8 * 1024 * 1024,
        extra_conf={k: str(v) for k, v in (broker_conf or {}).items()},
        namesrv_conf={k: str(v) for k, v in (namesrv_conf or {}).items()},
    )


@dataclass
class Target:
    """A running cluster and which implementation it is ("apache" or "ferrymq")."""

    name: str
    cluster: ApacheCluster | LocalCluster
    # what the harness's own admin calls (creating topics) need at a broker with ACL or TLS
    security: ClientSecurity | None = None

    @property
    def namesrv_addr(self) -> str:
        return self.cluster.namesrv_addr

    @property
    def broker_addrs(self) -> list[str]:
        return self.cluster.broker_addrs

    def kill_broker(self, index: int) -> None:
        """SIGKILL broker ``index`` and leave it down."""
        if isinstance(self.cluster, ApacheCluster):
            self.cluster.kill_broker(index)
        else:
            proc = self.cluster.brokers[index].proc
            proc.kill()
            proc.wait(timeout=30)

    def restart_broker(self, index: int, *, kill: bool = False) -> None:
        """Stop (SIGTERM, or SIGKILL when ``kill``) and start broker ``index`` on the same port
        and store, waiting until it is ready."""
        self.cluster.restart_broker(index, kill=kill)

    def __str__(self) -> str:
        return self.name
