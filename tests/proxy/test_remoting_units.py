"""The remoting port's pure decisions (ferrymq/proxy/remoting: dispatch, route, clients)."""

from __future__ import annotations

from ferrymq.proxy.errors import Code, ProxyError, broker_error
from ferrymq.proxy.remoting import dispatch
from ferrymq.proxy.remoting.route import proxied_route
from ferrymq.remoting import bodies, headers
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand


def test_broker_name_from_bname_or_the_v2_send_field() -> None:
    pull = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"bname": "broker-b"})
    send_v2 = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"n": "broker-a", "b": "T"})
    batch = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, {"bname": "broker-a"})
    assert dispatch.broker_name_of(pull) == "broker-b"
    assert dispatch.broker_name_of(send_v2) == "broker-a"
    # a V2 send names its broker in "n" only
    assert dispatch.broker_name_of(batch) is None


def test_a_request_without_broker_name_is_refused_as_upstream() -> None:
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T"})
    answer = dispatch.missing_broker_name(request)
    assert (answer.code, answer.remark) == (
        ResponseCode.VERSION_NOT_SUPPORTED,
        "Request doesn't have field bname",
    )
    assert answer.opaque == request.opaque and answer.is_response


def test_forwarded_request_keeps_header_and_body_with_its_own_opaque() -> None:
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"n": "b"}, b"body", oneway=True)
    request.version = 475
    request.language = "JAVA"
    out = dispatch.forwarded(request)
    assert (out.code, out.ext_fields, out.body, out.version, out.language) == (
        request.code,
        request.ext_fields,
        b"body",
        475,
        "JAVA",
    )
    assert out.opaque != request.opaque and out.is_oneway and not out.is_response


def test_answer_carries_the_brokers_response_under_the_clients_opaque() -> None:
    request = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"bname": "b"})
    broker = RemotingCommand(code=0, ext_fields={"offset": "7"}, opaque=99, flag=1, remark="r")
    out = dispatch.answer(request, broker)
    assert out.opaque == request.opaque and out.is_response
    assert out.ext_fields["offset"] == "7" and out.remark == "r"
    # the proxy's trace switch replaces the broker's (upstream ProxyConfig traceOn, off)
    broker.ext_fields["TRACE_ON"] = "true"
    stamped = dispatch.stamped(dispatch.answer(request, broker), dispatch.Stamp())
    assert stamped.ext_fields["TRACE_ON"] == "false"
    assert stamped.ext_fields["MSG_REGION"] == "DefaultRegion"


def test_error_answers_follow_upstreams_map() -> None:
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {})
    conflict = ProxyError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "TopicMessageType validate")
    assert dispatch.error_answer(request, conflict).code == ResponseCode.MESSAGE_ILLEGAL
    assert dispatch.error_answer(request, ProxyError(Code.FORBIDDEN)).code == 16
    assert dispatch.error_answer(request, ProxyError(Code.PROXY_TIMEOUT)).code == 1
    # a broker's or NameServer's own answer goes through with its code and remark
    remote = dispatch.error_answer(request, broker_error(17, "No topic route info for T"))
    assert (remote.code, remote.remark) == (17, "No topic route info for T")


def test_pull_without_subscription_gets_the_heartbeats() -> None:
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"sysFlag": "3", "bname": "b"})
    assert dispatch.needs_subscription(request)
    sub = bodies.SubscriptionData(topic="T", sub_string="a > 1", expression_type="SQL92")
    out = dispatch.with_subscription(request, sub)
    assert int(out.ext_fields["sysFlag"]) == 3 | headers.PULL_FLAG_SUBSCRIPTION
    assert (out.ext_fields["subscription"], out.ext_fields["expressionType"]) == ("a > 1", "SQL92")
    assert not dispatch.needs_subscription(out)
    assert request.ext_fields["sysFlag"] == "3"  # the client's request is left as it was


def test_route_names_the_proxy_for_every_broker_and_keeps_queues() -> None:
    route = bodies.TopicRouteData(
        queue_datas=[bodies.QueueData(broker_name="a", read_queue_nums=4, write_queue_nums=4)],
        broker_datas=[
            bodies.BrokerData(
                cluster="C", broker_name="a", broker_addrs={0: "10.9.9.1:10911", 1: "x:1"}
            ),
            bodies.BrokerData(cluster="C", broker_name="b", broker_addrs={0: "10.9.9.2:10911"}),
        ],
    )
    out = proxied_route(route, "127.0.0.1:8080")
    assert [(b.broker_name, b.broker_addrs) for b in out.broker_datas] == [
        ("a", {0: "127.0.0.1:8080", 1: "127.0.0.1:8080"}),
        ("b", {0: "127.0.0.1:8080"}),
    ]
    assert out.queue_datas == route.queue_datas
    assert route.broker_datas[0].broker_addrs[0] == "10.9.9.1:10911"
