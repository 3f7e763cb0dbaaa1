"""RouteTable decisions, without sockets: registration, slaves, expiry, unregistration, permissions."""

from __future__ import annotations

from ferrymq.namesrv.housekeeping import scan_not_active_brokers
from ferrymq.namesrv.route_table import RouteTable
from ferrymq.remoting.bodies import DataVersion, TopicConfig, TopicConfigSerializeWrapper


def wrapper(*topics: str, counter: int = 1, queues: int = 4) -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper(
        topic_config_table={
            t: TopicConfig(topic_name=t, read_queue_nums=queues, write_queue_nums=queues)
            for t in topics
        },
        data_version=DataVersion(timestamp=1, counter=counter),
    )


def register(
    rt: RouteTable,
    name: str,
    addr: str,
    bid: int,
    w: TopicConfigSerializeWrapper,
    now: int = 0,
    ha: str | None = None,
) -> object:
    return rt.register_broker(
        cluster_name="c",
        broker_addr=addr,
        broker_name=name,
        broker_id=bid,
        ha_server_addr=ha,
        topic_config_wrapper=w,
        filter_server_list=[],
        now_ms=now,
    )


def test_master_registration_builds_routes() -> None:
    rt = RouteTable()
    register(rt, "b1", "h:1", 0, wrapper("T", "TBW102"))
    register(rt, "b2", "h:2", 0, wrapper("T", queues=2))
    route = rt.pickup_topic_route_data("T")
    assert route is not None
    assert [q.broker_name for q in route.queue_datas] == ["b1", "b2"]
    assert [q.write_queue_nums for q in route.queue_datas] == [4, 2]
    assert {b.broker_name: b.broker_addrs for b in route.broker_datas} == {
        "b1": {0: "h:1"},
        "b2": {0: "h:2"},
    }
    assert rt.pickup_topic_route_data("nope") is None
    assert rt.cluster_info().cluster_addr_table == {"c": ["b1", "b2"]}
    assert rt.topics_by_cluster("c").topic_list == ["T", "TBW102"]


def test_slave_gets_master_ha_address_and_does_not_change_topics() -> None:
    rt = RouteTable()
    register(rt, "b1", "h:1", 0, wrapper("T"), ha="h:3")
    res = register(rt, "b1", "h:2", 1, wrapper("T", "ONLY_ON_SLAVE"))
    assert (res.master_addr, res.ha_server_addr) == ("h:1", "h:3")  # type: ignore[attr-defined]
    assert rt.pickup_topic_route_data("ONLY_ON_SLAVE") is None
    route = rt.pickup_topic_route_data("T")
    assert route is not None and route.broker_datas[0].broker_addrs == {0: "h:1", 1: "h:2"}


def test_reregistration_drops_topics_the_broker_no_longer_has() -> None:
    rt = RouteTable()
    register(rt, "b1", "h:1", 0, wrapper("A", "B", counter=1))
    register(rt, "b1", "h:1", 0, wrapper("A", counter=2))
    assert rt.pickup_topic_route_data("B") is None
    assert rt.pickup_topic_route_data("A") is not None


def test_unregister_removes_broker_and_its_topics() -> None:
    rt = RouteTable()
    register(rt, "b1", "h:1", 0, wrapper("A"))
    register(rt, "b2", "h:2", 0, wrapper("A", "B"))
    removed = rt.unregister_broker(
        cluster_name="c", broker_addr="h:2", broker_name="b2", broker_id=0
    )
    assert removed.topics_removed == ["A", "B"]
    assert rt.pickup_topic_route_data("B") is None
    route = rt.pickup_topic_route_data("A")
    assert route is not None and [b.broker_name for b in route.broker_datas] == ["b1"]
    assert "h:2" not in rt.broker_live_table
    assert rt.cluster_info().cluster_addr_table == {"c": ["b1"]}


def test_expiry_after_120s_of_silence() -> None:
    rt = RouteTable()
    register(rt, "b1", "h:1", 0, wrapper("A"), now=0)
    register(rt, "b2", "h:2", 0, wrapper("A"), now=100_000)
    assert scan_not_active_brokers(rt, 120_000, 120_000) == []
    gone = scan_not_active_brokers(rt, 120_001, 120_000)
    assert [g.broker_addr for g in gone] == ["h:1"]
    route = rt.pickup_topic_route_data("A")
    assert route is not None and [b.broker_name for b in route.broker_datas] == ["b2"]
    # a registration refreshes liveness
    register(rt, "b2", "h:2", 0, wrapper("A"), now=230_000)
    assert scan_not_active_brokers(rt, 300_000, 120_000) == []


def test_wipe_and_add_write_perm() -> None:
    rt = RouteTable()
    register(rt, "b1", "h:1", 0, wrapper("A", "B"))
    assert rt.wipe_write_perm_of_broker("b1") == 2
    route = rt.pickup_topic_route_data("A")
    assert route is not None and route.queue_datas[0].perm == 4
    assert rt.add_write_perm_of_broker("b1") == 2
    route = rt.pickup_topic_route_data("A")
    assert route is not None and route.queue_datas[0].perm == 6
    assert rt.wipe_write_perm_of_broker("unknown") == 0


def test_role_switch_same_address_new_id() -> None:
    rt = RouteTable()
    register(rt, "b1", "h:1", 0, wrapper("A"))
    register(rt, "b1", "h:2", 1, wrapper("A"))
    # the slave is promoted and registers as master with the same address
    register(rt, "b1", "h:2", 0, wrapper("A"))
    assert rt.broker_addr_table["b1"].broker_addrs == {0: "h:2"}
