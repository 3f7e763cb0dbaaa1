"""GET_BROKER_EPOCH_CACHE's body is upstream's EpochEntryCache: mqadmin getBrokerEpoch prints
the answering broker's cluster, name and id from it (ferrymq's answer lacked them: "null")."""

from __future__ import annotations

import orjson
from ferrymq.broker.controller_client import epoch_cache_body, parse_epoch_cache
from ferrymq.ha.epoch_file import EpochEntry, truncate_offset, upstream_entries


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
        "ferrymqEpochList": [{"epoch": 1, "startOffset": 0}, {"epoch": 2, "startOffset": 4096}],
    }


def test_a_broker_with_no_epoch_yet_answers_an_empty_list() -> None:
    body = orjson.loads(epoch_cache_body([], 0, broker_name="broker-a"))
    assert (body["epochList"], body["maxOffset"], body["brokerName"]) == ([], 0, "broker-a")


def test_an_epoch_that_starts_where_the_last_did_is_listed_as_upstream_lists_it() -> None:
    """Upstream's EpochFileCache.appendEntry refuses an epoch whose start offset is not past the
    last entry's (Apache 5.4.0, after electing the slave of an empty group: epoch 1 only). The
    body lists what upstream would; ferrymq's replicas read every entry from ferrymqEpochList."""
    entries = [EpochEntry(1, 0), EpochEntry(2, 0), EpochEntry(3, 0), EpochEntry(4, 700)]
    body = orjson.loads(epoch_cache_body(entries, 900, broker_name="broker-a"))
    assert body["epochList"] == [
        {"epoch": 1, "startOffset": 0, "endOffset": 700},
        {"epoch": 4, "startOffset": 700, "endOffset": 2**63 - 1},
    ]
    assert body["ferrymqEpochList"] == [
        {"epoch": e.epoch, "startOffset": e.start_offset} for e in entries
    ]
    assert upstream_entries(entries) == [EpochEntry(1, 0), EpochEntry(4, 700)]


def test_a_replica_truncates_by_the_epochs_upstream_does_not_list() -> None:
    """The old master of epoch 1 wrote up to 500 that nobody received; the slave, elected for
    epoch 2 at offset 0, wrote up to 300. Upstream's list names epoch 1 only, as if the new
    master's data were epoch 1's: cut at min(500, 300). From the whole list: cut at 0."""
    body = epoch_cache_body([EpochEntry(1, 0), EpochEntry(2, 0)], 300)
    cache = parse_epoch_cache(body)
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(2, 0)]
    assert truncate_offset([EpochEntry(1, 0)], 500, cache.entries, cache.max_offset) == 0
    listed_only = orjson.loads(body)
    del listed_only["ferrymqEpochList"]
    upstream_view = parse_epoch_cache(orjson.dumps(listed_only))  # an Apache master's answer
    assert upstream_view.entries == [EpochEntry(1, 0)]
