"""Error classes per response code, and route -> queue conversions."""

from __future__ import annotations

import pytest
from ferrymq.client import errors
from ferrymq.client.allocate import MessageQueue
from ferrymq.client.namesrv_api import parse_namesrv_addr
from ferrymq.client.route_cache import RouteCache, publish_queues, subscribe_queues
from ferrymq.remoting.bodies import BrokerData, QueueData, TopicRouteData
from ferrymq.remoting.codes import ResponseCode


@pytest.mark.parametrize(
    ("code", "cls", "retriable", "refresh"),
    [
        (ResponseCode.TOPIC_NOT_EXIST, errors.TopicNotExistError, True, True),
        (ResponseCode.SERVICE_NOT_AVAILABLE, errors.ServiceNotAvailableError, True, True),
        (ResponseCode.SYSTEM_ERROR, errors.BrokerSystemError, True, False),
        (ResponseCode.SYSTEM_BUSY, errors.SystemBusyError, True, False),
        (ResponseCode.NO_PERMISSION, errors.NoPermissionError, True, True),
        (ResponseCode.MESSAGE_ILLEGAL, errors.MessageIllegalError, False, False),
        (
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            errors.SubscriptionGroupNotExistError,
            False,
            False,
        ),
    ],
)
def test_for_code(
    code: int, cls: type[errors.MQResponseError], retriable: bool, refresh: bool
) -> None:
    assert errors.for_code(code) is cls
    exc = errors.response_error(code, "why", "127.0.0.1:1")
    assert isinstance(exc, cls) and isinstance(exc, errors.MQClientError)
    assert (exc.retriable, exc.refresh_route) == (retriable, refresh)
    assert exc.code == code and "why" in str(exc) and "127.0.0.1:1" in str(exc)


def test_unknown_code() -> None:
    exc = errors.response_error(9999, None)
    assert type(exc) is errors.UnknownResponseError
    assert exc.code == 9999 and not exc.retriable and "UNKNOWN_CODE (9999)" in str(exc)


def route() -> TopicRouteData:
    return TopicRouteData(
        queue_datas=[
            QueueData(broker_name="broker-b", read_queue_nums=2, write_queue_nums=3, perm=6),
            QueueData(broker_name="broker-a", read_queue_nums=2, write_queue_nums=2, perm=6),
            QueueData(broker_name="broker-c", read_queue_nums=1, write_queue_nums=1, perm=4),
            QueueData(broker_name="broker-d", read_queue_nums=1, write_queue_nums=1, perm=6),
        ],
        broker_datas=[
            BrokerData(cluster="c", broker_name="broker-a", broker_addrs={0: "127.0.0.1:1"}),
            BrokerData(cluster="c", broker_name="broker-b", broker_addrs={0: "127.0.0.1:2"}),
            BrokerData(cluster="c", broker_name="broker-c", broker_addrs={0: "127.0.0.1:3"}),
            # only a slave: readable, never written
            BrokerData(cluster="c", broker_name="broker-d", broker_addrs={1: "127.0.0.1:4"}),
        ],
    )


def test_publish_queues_writable_masters_sorted() -> None:
    got = [(mq.broker_name, mq.queue_id) for mq in publish_queues("T", route())]
    assert got == [
        ("broker-a", 0),
        ("broker-a", 1),
        ("broker-b", 0),
        ("broker-b", 1),
        ("broker-b", 2),
    ]


def test_subscribe_queues_readable() -> None:
    got = subscribe_queues("T", route())
    assert got == sorted(got)
    assert MessageQueue("T", "broker-c", 0) in got and MessageQueue("T", "broker-d", 0) in got
    assert len(got) == 6


def test_order_topic_conf() -> None:
    r = route()
    r.order_topic_conf = "broker-a:2;broker-b:1"
    assert [(q.broker_name, q.queue_id) for q in publish_queues("T", r)] == [
        ("broker-a", 0),
        ("broker-a", 1),
        ("broker-b", 0),
    ]


def test_route_cache_change_detection_and_addresses() -> None:
    cache = RouteCache()
    assert cache.update("T", route())
    assert not cache.update("T", route())
    assert cache.master_addr("broker-a") == "127.0.0.1:1"
    assert cache.master_addr("broker-d") is None
    assert cache.any_addr("broker-d") == "127.0.0.1:4"
    changed = route()
    changed.queue_datas[0].write_queue_nums = 8
    assert cache.update("T", changed)
    assert len(cache.publish["T"].queues) == 2 + 8


def test_parse_namesrv_addr() -> None:
    assert parse_namesrv_addr("a:1;b:2") == ["a:1", "b:2"]
    assert parse_namesrv_addr(["a:1,b:2"]) == ["a:1", "b:2"]
    with pytest.raises(ValueError, match="not host:port"):
        parse_namesrv_addr("localhost")
    with pytest.raises(ValueError, match="no NameServer"):
        parse_namesrv_addr(" ; ")


@pytest.mark.parametrize("batch", [False, True])
def test_v2_ext_matches_the_generic_header_encoding(batch: bool) -> None:
    from ferrymq.client.broker_api import v2_ext
    from ferrymq.remoting.headers import SendMessageRequestHeader

    header = SendMessageRequestHeader(
        producer_group="pg",
        topic="T",
        queue_id=3,
        sys_flag=1,
        born_timestamp=123,
        flag=7,
        properties=None if batch else "TAGS\x01a\x02",
        reconsume_times=0,
        batch=batch,
        max_reconsume_times=None if batch else 16,
    )
    assert v2_ext(header) == header.to_ext_v2()
