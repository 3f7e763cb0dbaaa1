"""The controller-mode mqadmin scenario (getControllerMetaData, getSyncStateSet, getBrokerEpoch,
electMaster) against one cluster: a NameServer, a controller and one broker group of two
replicas in controller mode. Recorded through the one normaliser, run against Apache RocketMQ
and ferrymq, compared step by step (as :mod:`.scenario`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from . import normalise as n
from .runner import Mqadmin, Result
from .scenario import Transcript

GROUP = "broker-a"
CLUSTER = "DefaultCluster"


class ControllerScenario:
    def __init__(
        self, mq: Mqadmin, namesrv: str, controller: str, replicas: dict[int, str]
    ) -> None:
        """``replicas``: the controller's brokerId -> address of each replica (both clusters
        number them 1 and 2 in start order)."""
        self.mq = mq
        self.ns = namesrv
        self.ctl = controller
        self.replicas = replicas
        self.addrs = {
            namesrv: "<NS>",
            controller: "<CONTROLLER>",
            **{addr: f"<REPLICA{i}>" for i, addr in replicas.items()},
        }
        self.out = Transcript()

    def run(self, *args: str) -> Result:
        return self.mq.run(*args, "-n", self.ns)

    def step(
        self, name: str, *args: str, view: Callable[[list[str]], list[str]] | None = None
    ) -> Result:
        return self.out.record(name, self.run(*args), self.addrs, view)

    def wait_sync_state_set(self, master: int, members: int, within: float = 90) -> None:
        """Until the controller names ``master`` with ``members`` replicas in the SyncStateSet
        (a slave joins once it caught up; after an election the new master starts alone)."""
        deadline = time.monotonic() + within
        while True:
            out = self.run("getSyncStateSet", "-a", self.ctl, "-b", GROUP).out
            if f"#MasterBrokerId\t{master}\n" in out and f"#SyncStateSetNums\t{members}\n" in out:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {within:.0f} s for master {master}, {members} in sync")
            time.sleep(0.5)  # polling the controller's state with a deadline

    def wait_route(self, master_addr: str, within: float = 90) -> None:
        """Until the NameServer lists ``master_addr`` as brokerId 0 of the group."""
        deadline = time.monotonic() + within
        while True:
            rows = n.route_view(n.lines(self.run("clusterList").out))
            if any(r.split(" ")[2:4] == ["0", master_addr] for r in rows):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {within:.0f} s for {master_addr} listed as master")
            time.sleep(0.5)  # polling the NameServer's route with a deadline

    def play(self) -> Transcript:
        ctl = self.ctl
        self.wait_sync_state_set(1, 2)
        self.step("clusterList", "clusterList", view=n.route_view)
        self.step("getControllerMetaData", "getControllerMetaData", "-a", ctl)
        self.step("getSyncStateSet", "getSyncStateSet", "-a", ctl, "-b", GROUP)
        self.step("getSyncStateSet-c", "getSyncStateSet", "-a", ctl, "-c", CLUSTER)
        self.step("getBrokerEpoch", "getBrokerEpoch", "-b", GROUP, view=n.epoch_view)
        self.step("getBrokerEpoch-c", "getBrokerEpoch", "-c", CLUSTER, view=n.epoch_view)
        # bad input
        self.step("getSyncStateSet-unknown", "getSyncStateSet", "-a", ctl, "-b", "noSuchBroker")
        self.step("getBrokerEpoch-unknown", "getBrokerEpoch", "-b", "noSuchBroker")
        elect = ("electMaster", "-a", ctl, "-c", CLUSTER)
        self.step("electMaster-unknown", *elect, "-bn", "noSuchBroker", "-b", "2")
        self.step("electMaster-not-in-set", *elect, "-bn", GROUP, "-b", "7")
        self.step("electMaster-current", *elect, "-bn", GROUP, "-b", "1")
        # the slave becomes master; the old master rejoins as a slave
        self.step("electMaster", *elect, "-bn", GROUP, "-b", "2")
        self.wait_route(self.replicas[2])
        self.wait_sync_state_set(2, 2)
        self.step("clusterList-elected", "clusterList", view=n.route_view)
        self.step("getSyncStateSet-elected", "getSyncStateSet", "-a", ctl, "-b", GROUP)
        self.step("getBrokerEpoch-elected", "getBrokerEpoch", "-b", GROUP, view=n.epoch_view)
        return self.out
