"""mqadmin 5.4.0's controller-mode commands against Apache RocketMQ 5.4.0 (the oracle) and
against ferrymq: a NameServer, a controller and one broker group (two replicas, controller mode)
of each, started once for this module; the scenario (:mod:`.controller_scenario`) runs on both
and every step's normalised output is compared (a test per step).

mqadmin 4.9.8 has none of these commands (controller mode is 5.x).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ferrymq.broker.controller_cluster import ControllerLocalCluster

from ..reference import ApacheCluster
from .controller_scenario import GROUP, ControllerScenario
from .runner import Mqadmin
from .scenario import Transcript

# the module's first test sets up both pairs (Apache: NameServer, DLedger controller, two
# replicas; ferrymq the same) one after the other and plays both transcripts: 296 s for the whole
# module alone at load average ~25, over the 300 s default in the full interop run at load 70
pytestmark = pytest.mark.timeout(900)

STEPS = [
    "clusterList",
    "getControllerMetaData",
    "getSyncStateSet",
    "getSyncStateSet-c",
    "getBrokerEpoch",
    "getBrokerEpoch-c",
    "getSyncStateSet-unknown",
    "getBrokerEpoch-unknown",
    "electMaster-unknown",
    "electMaster-not-in-set",
    "electMaster-current",
    "electMaster",
    "clusterList-elected",
    "getSyncStateSet-elected",
    "getBrokerEpoch-elected",
]
# the controller's DLedger group and id (Apache); ferrymq's controller reports the same keys
CONTROLLER_ID = {"controllerDLegerGroup": "group1", "controllerDLegerSelfId": "n0"}


def apache_transcript(mq: Mqadmin, data_dir: Path) -> Transcript:
    with ApacheCluster(data_dir, groups=0) as cluster:
        _, port = cluster.start_controller(CONTROLLER_ID["controllerDLegerSelfId"])
        controller = f"{cluster.host}:{port}"
        conf = {
            "enableControllerMode": "true",
            "controllerAddr": controller,
            "brokerRole": "ASYNC_MASTER",  # the controller decides; not SLAVE for id > 0
        }
        # the controller numbers replicas 1, 2 in the order they apply for an id
        replicas = {
            i: f"{cluster.host}:{cluster.start_broker(GROUP, i, **conf).port}" for i in (1, 2)
        }
        return ControllerScenario(mq, cluster.namesrv_addr, controller, replicas).play()


def ferrymq_transcript(mq: Mqadmin, data_dir: Path) -> Transcript:
    cluster = ControllerLocalCluster(
        data_dir,
        groups=1,
        slaves=1,
        namesrv_port=0,
        broker_port=0,
        mapped_file_size_commit_log=8 * 1024 * 1024,
        controller_conf=CONTROLLER_ID,
    )
    with cluster:
        replicas = dict(enumerate(cluster.broker_addrs, start=1))
        return ControllerScenario(
            mq, cluster.namesrv_addr, cluster.controller_addr, replicas
        ).play()


@pytest.fixture(scope="module")
def transcripts(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Transcript, Transcript]]:
    """Each cluster lives only for its own transcript: one at a time on the shared cores."""
    mq = Mqadmin("5.4.0", tmp_path_factory.mktemp("mqadmin-controller"))
    try:
        apache = apache_transcript(mq, tmp_path_factory.mktemp("apache-controller"))
        ferrymq = ferrymq_transcript(mq, tmp_path_factory.mktemp("ferrymq-controller"))
    finally:
        mq.close()
    yield apache, ferrymq


@pytest.mark.parametrize(
    "step",
    STEPS,
)
def test_same_output_as_apache(transcripts: tuple[Transcript, Transcript], step: str) -> None:
    apache, ferrymq = transcripts
    assert step in apache.steps, f"the scenario has no step {step}"
    raw = apache.raw.get(step), ferrymq.raw.get(step)
    why = f"mqadmin 5.4.0 {step}\nraw apache: {raw[0]}\nraw ferrymq: {raw[1]}"
    assert ferrymq.steps[step] == apache.steps[step], f"ferrymq differs from Apache: {why}"
