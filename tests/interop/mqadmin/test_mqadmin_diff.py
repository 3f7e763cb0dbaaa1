"""mqadmin 5.4.0 and 4.9.8 against Apache RocketMQ 5.4.0 (the oracle) and against ferrymq: the same
scenario (:mod:`.scenario`) on both, every step's normalised output compared.

One JVM per mqadmin release runs all of a transcript's commands (:mod:`.runner`); the two
transcripts of a release are made once per module, then each step is its own test, so a report
names every command that differs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ferrymq.broker.local_cluster import LocalCluster

from ..reference import ApacheCluster
from .runner import Mqadmin
from .scenario import Scenario, Transcript

RELEASES = ("5.4.0", "4.9.8")
# every step of the scenario, in order (a test per release and step)
STEPS = [
    "clusterList",
    "updateTopic",
    "updateTopic-broker",
    "topicList",
    "topicRoute",
    "topicStatus-empty",
    "updateTopicPerm",
    "updateSubGroup",
    "updateSubGroup-2",
    "sendMessage-0",
    "sendMessage-1",
    "sendMessage-2",
    "topicStatus",
    "queryMsgByKey",
    "queryMsgByOffset",
    "queryMsgById",
    "queryMsgByUniqueKey",
    "printMsg",
    "consumeMessage",
    "consumerConnection",
    "consumerStatus",
    "consumerStatus-client",
    "consumerStatus-unknown-client",
    "consumerProgress-g-online",
    "producerConnection",
    "queryMsgById-consumed",
    "consumerProgress-g",
    "queryMsgById-offline",
    "consumerProgress",
    "brokerConsumeStats",
    "statsAll",
    "cloneGroupOffset",
    "consumerProgress-g2",
    "resetOffsetByTime-offline",
    "consumerProgress-g2-reset",
    "skipAccumulatedMessage",
    "consumerProgress-g2-skipped",
    "brokerStatus",
    "getBrokerConfig",
    "updateBrokerConfig",
    "updateBrokerConfig-unknown",
    "getNamesrvConfig",
    "updateKvConfig",
    "deleteKvConfig",
    "wipeWritePerm",
    "addWritePerm",
    "clusterRT",
    "sendMsgStatus",
    "deleteSubGroup",
    "deleteTopic",
    "topicRoute-unknown",
    "topicStatus-unknown",
    "consumerProgress-unknown",
    "consumerConnection-unknown",
    "consumerStatus-unknown",
    "brokerStatus-unknown",
]


# Keys ferrymq reports beyond upstream's, on purpose (tests/interop/README.md, mqadmin section):
# its own runtime figures (store recovery, HA, dispatch, group commit) and its own settings.
FERRYMQ_EXTRA_KEYS: dict[str, frozenset[str]] = {
    "brokerStatus": frozenset(
        [
            "brokerPermission",
            "brokerRole",
            "brokerVersion",
            "commitLogCorruptBytesSkipped",
            "commitLogCorruptRecordsSkipped",
            "commitLogFileCount",
            "commitLogFlushedOffset",
            "confirmOffset",
            "consumeQueueCount",
            "consumeQueuesRebuilt",
            "consumerGroups",
            "diskFull",
            "dispatchErrors",
            "dispatchedMessages",
            "flushDiskType",
            "getMessageFoundTotal",
            "getMessageMissTotal",
            "groupCommitFlushes",
            "groupCommitRequests",
            "haConnectionCount",
            "haPush2SlaveMaxOffset",
            "haSlaveAckOffsets",
            "haSlaveNotAvailable",
            "haSyncTimeouts",
            "heldPullRequests",
            "indexFileCount",
            "indexMsgTimestamp",
            "lastExitOk",
            "logicsMsgTimestamp",
            "physicMsgTimestamp",
            "recoverDamagedRecords",
            "recoverDamagedUnitsBlanked",
            "recoverStartFile",
            "recoverStopReason",
            "recoverTimeMs",
            "recoveredCommitLogEnd",
            "recoveredMessages",
            "redispatchedMessages",
            "reputFromOffset",
            "savedConfirmOffset",
        ]
    ),
    "getBrokerConfig": frozenset(
        [
            "bindAddress",
            "clientChannelScanInterval",
            "consumerLagEnable",
            "consumerLagEtaWindow",
            "consumerLagMaxGroupTopics",
            "consumerLagMaxQueueSeries",
            "consumerLagMinSamples",
            "consumerLagPerQueueMetrics",
            "consumerLagSampleInterval",
            "consumerLagTolerance",
            "consumerLagWindow",
            "enableGrpcProxy",
            "fastChannelEnable",
            "grpcServerPort",
            "haSlaveSyncInterval",
            "longPollingCheckInterval",
            "metricsPort",
            "serverMaxUnfinishedFrameBytes",
            "shutdownGraceSeconds",
        ]
    ),
    "getNamesrvConfig": frozenset(
        [
            "brokerChannelExpiredTime",
            "metricsPort",
            "serverMaxUnfinishedFrameBytes",
            "shutdownGraceSeconds",
        ]
    ),
}


@pytest.fixture(scope="module", params=RELEASES)
def transcripts(
    request: pytest.FixtureRequest,
    apache_cluster: ApacheCluster,
    ferrymq_processes: LocalCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, Transcript, Transcript]]:
    release: str = request.param
    prefix = "MQA" + release.replace(".", "")
    home: Path = tmp_path_factory.mktemp(f"mqadmin-{release}")
    mq = Mqadmin(release, home)
    try:
        out = []
        for cluster in (apache_cluster, ferrymq_processes):
            scenario = Scenario(mq, cluster.namesrv_addr, cluster.broker_addrs[0], prefix)
            out.append(scenario.play())
    finally:
        mq.close()
    yield release, out[0], out[1]


@pytest.mark.parametrize("step", STEPS)
def test_same_output_as_apache(transcripts: tuple[str, Transcript, Transcript], step: str) -> None:
    release, apache, ferrymq = transcripts
    assert step in apache.steps, f"the scenario has no step {step}"
    raw = apache.raw.get(step), ferrymq.raw.get(step)
    why = f"mqadmin {release} {step}\nraw apache: {raw[0]}\nraw ferrymq: {raw[1]}"
    if step in FERRYMQ_EXTRA_KEYS:
        # key lists: every key Apache reports, and only documented ferrymq extensions beside
        missing = sorted(set(apache.steps[step]) - set(ferrymq.steps[step]))
        extra = sorted(set(ferrymq.steps[step]) - set(apache.steps[step]))
        assert not missing, f"ferrymq lacks {missing}: {why}"
        assert set(extra) <= FERRYMQ_EXTRA_KEYS[step], f"undocumented ferrymq keys {extra}"
        return
    assert ferrymq.steps[step] == apache.steps[step], f"ferrymq differs from Apache: {why}"


def test_consumer_status_reads_the_running_info(
    transcripts: tuple[str, Transcript, Transcript],
) -> None:
    """The scenario is right: on Apache, consumerStatus gets the live consumer's running info
    through the broker (GET_CONSUMER_RUNNING_INFO) and analyses it. While ferrymq's Python
    consumer lacked upstream's PROP_* keys, the command failed the same way on both brokers."""
    _release, apache, _ = transcripts
    assert "Rebalance OK" in apache.steps["consumerStatus"], apache.raw["consumerStatus"]
    client = apache.steps["consumerStatus-client"]
    assert "PROP_CONSUME_TYPE : CONSUME_PASSIVELY" in client, apache.raw["consumerStatus-client"]
