"""Row schema of a ferrymq cluster snapshot (the output of ``ferrymq admin snapshot``).

One snapshot = one directory ``<root>/<snapshotId>/`` with ``meta.json`` plus one JSON-lines file
per table below. Every row repeats ``snapshotId`` and ``takenAt`` (epoch ms) so the tables of a
whole history can be read with one glob and never need a join back to the metadata.

The models are the single source of truth: the Spark loader derives its StructTypes from them
(``ferrymq_spark.snapshot``), so a field added here reaches both sides. Field names follow the
upstream admin bodies they come from (TopicRouteData, ConsumeStats/OffsetWrapper,
ConsumerConnection, ConsumerRunningInfo) where one exists.
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION: Final = 1
META_FILE: Final = "meta.json"


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    snapshotId: str = Field(min_length=1)
    takenAt: int = Field(ge=0, description="epoch ms at which the collector started this snapshot")


class RouteRow(_Row):
    """One (topic, broker) of GET_ROUTEINFO_BY_TOPIC: a QueueData joined with its BrokerData."""

    topic: str
    brokerName: str
    cluster: str | None = None
    brokerAddr: str | None = Field(default=None, description="master address (brokerId 0)")
    readQueueNums: int = Field(ge=0)
    writeQueueNums: int = Field(ge=0)
    perm: int = 6


class QueueRow(_Row):
    """One message queue's offsets on its broker (GET_MIN_OFFSET / GET_MAX_OFFSET)."""

    topic: str
    brokerName: str
    queueId: int = Field(ge=0)
    minOffset: int = Field(ge=0)
    maxOffset: int = Field(ge=0)
    lastStoreTimestamp: int | None = Field(
        default=None, description="store time (ms) of the newest message, when known"
    )


class OffsetRow(_Row):
    """One queue of a group's GET_CONSUME_STATS (upstream OffsetWrapper)."""

    group: str
    topic: str
    brokerName: str
    queueId: int = Field(ge=0)
    brokerOffset: int = Field(ge=0, description="the queue's max offset at collection time")
    consumerOffset: int = Field(ge=0)
    lastTimestamp: int = Field(
        default=0, ge=0, description="store time (ms) of the last consumed message, 0 if unknown"
    )
    oldestUnconsumedTimestamp: int | None = Field(
        default=None, description="store time (ms) of the message at consumerOffset, when known"
    )


class ClientRow(_Row):
    """One connected client of a consumer group (GET_CONSUMER_CONNECTION_LIST + running info)."""

    group: str
    clientId: str
    clientAddr: str | None = None
    language: str | None = None
    version: int | None = None
    consumeType: str | None = None
    messageModel: str | None = Field(default=None, description="CLUSTERING or BROADCASTING")
    consumeFromWhere: str | None = None
    allocateStrategy: str | None = Field(
        default=None, description="strategy name as upstream getName(): AVG, AVG_BY_CIRCLE, ..."
    )
    seenConsumerIds: list[str] | None = Field(
        default=None, description="consumer id list the client last rebalanced with, when reported"
    )
    runningInfo: bool = Field(
        default=False, description="whether the client answered GET_CONSUMER_RUNNING_INFO"
    )


class SubscriptionRow(_Row):
    """One subscription of one client (ConsumerConnection.subscriptionTable / running info)."""

    group: str
    clientId: str
    topic: str
    subString: str = "*"
    expressionType: str = "TAG"
    subVersion: int | None = None


class OwnershipRow(_Row):
    """One queue a client reports it owns (ConsumerRunningInfo.mqTable)."""

    group: str
    clientId: str
    topic: str
    brokerName: str
    queueId: int = Field(ge=0)


class ConsumerViewRow(_Row):
    """The consumer id list one broker returns for a group (GET_CONSUMER_LIST_BY_GROUP, 38).

    A client rebalances with the list of one broker of its topic's route; brokers that disagree
    (a missed heartbeat) make clients compute different allocations.
    """

    group: str
    brokerAddr: str
    consumerIds: list[str]


class SnapshotMeta(BaseModel):
    """``meta.json``: what was collected, from where, and what could not be."""

    model_config = ConfigDict(extra="forbid")

    schemaVersion: int = SCHEMA_VERSION
    snapshotId: str = Field(min_length=1)
    takenAt: int = Field(ge=0)
    finishedAt: int = Field(ge=0)
    namesrv: str
    notes: list[str] = Field(default_factory=list)


TABLES: Final[dict[str, type[_Row]]] = {
    "routes": RouteRow,
    "queues": QueueRow,
    "offsets": OffsetRow,
    "clients": ClientRow,
    "subscriptions": SubscriptionRow,
    "ownership": OwnershipRow,
    "views": ConsumerViewRow,
}
"""Table name -> row model; the file of table ``t`` is ``<snapshot dir>/<t>.jsonl``."""


def table_file(table: str) -> str:
    """File name of ``table`` inside a snapshot directory."""
    if table not in TABLES:
        raise KeyError(f"unknown snapshot table {table!r}; known: {', '.join(TABLES)}")
    return f"{table}.jsonl"
