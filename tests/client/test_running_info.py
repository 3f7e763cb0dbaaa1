"""The properties of a GET_CONSUMER_RUNNING_INFO body (upstream ConsumerRunningInfo PROP_*)."""

from __future__ import annotations

from ferrymq.client.running_info import consumer_properties, wall_clock_ms


def test_push_and_pull_consumers_report_upstreams_keys() -> None:
    push = consumer_properties(
        consume_type="CONSUME_PASSIVELY",
        namesrv_addrs=["127.0.0.1:9876", "127.0.0.1:9877"],
        start_timestamp_ms=1_700_000_000_000,
        orderly=True,
        thread_core_size=20,
        fields={"messageModel": "CLUSTERING", "consumeThreadMax": 20},
    )
    assert push == {
        "messageModel": "CLUSTERING",
        "consumeThreadMax": "20",
        "PROP_NAMESERVER_ADDR": "127.0.0.1:9876;127.0.0.1:9877;",
        "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
        "PROP_CLIENT_VERSION": "V5_4_0",
        "PROP_CONSUMER_START_TIMESTAMP": "1700000000000",
        "PROP_CONSUMEORDERLY": "true",
        "PROP_THREADPOOL_CORE_SIZE": "20",
    }
    pull = consumer_properties(
        consume_type="CONSUME_ACTIVELY", namesrv_addrs=[], start_timestamp_ms=5
    )
    assert "PROP_CONSUMEORDERLY" not in pull and pull["PROP_CONSUME_TYPE"] == "CONSUME_ACTIVELY"


def test_monotonic_instants_become_wall_clock_milliseconds() -> None:
    assert wall_clock_ms(0.0, now_monotonic=100.0, now_ms=5_000) == 0  # never
    assert wall_clock_ms(98.5, now_monotonic=100.0, now_ms=5_000) == 3_500
