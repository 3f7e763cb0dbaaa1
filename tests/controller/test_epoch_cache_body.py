"""GET_BROKER_EPOCH_CACHE's body is upstream's EpochEntryCache: mqadmin getBrokerEpoch prints
the answering broker's cluster, name and id from it (ferrymq's answer lacked them: "null")."""

from __future__ import annotations

import orjson
from ferrymq.broker.controller_client import epoch_cache_body
from ferrymq.ha.epoch_file import EpochEntry


def test_the_body_names_the_broker_that_answers() -> None:
    body = orjson.loads(
        epoch_cache_body(
            [EpochEntry(1, 0), EpochEntry(2, 4096)],
            8192,
            cluster_name="DefaultCluster",
            broker_name="broker-a",
            broker_id=0,
        )
    )
    assert body == {
        "clusterName": "DefaultCluster",
        "brokerName": "broker-a",
        "brokerId": 0,
        "epochList": [
            {"epoch": 1, "startOffset": 0, "endOffset": 4096},
            {"epoch": 2, "startOffset": 4096, "endOffset": 2**63 - 1},
        ],
        "maxOffset": 8192,
    }


def test_a_broker_with_no_epoch_yet_answers_an_empty_list() -> None:
    body = orjson.loads(epoch_cache_body([], 0, broker_name="broker-a"))
    assert (body["epochList"], body["maxOffset"], body["brokerName"]) == ([], 0, "broker-a")
