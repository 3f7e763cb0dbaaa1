"""The proxy's receipt-handle renewal (ferrymq.proxy.receipt_renewal): the pure decision, the
retry schedules, and the renewer's bookkeeping against a recording stand-in for the broker's
CHANGE_MESSAGE_INVISIBLETIME (the end-to-end behaviour, against Apache's proxy too, is in
test_apache_broker.py / test_ferrymq_broker.py)."""

from __future__ import annotations

import asyncio

from ferrymq.broker.pop.extra_info import build_extra_info
from ferrymq.proxy.backend import DEFAULT_CUSTOMIZED_NEXT_MS, GroupConfig, GroupRetryPolicy
from ferrymq.proxy.config import ProxyConfig
from ferrymq.proxy.errors import Code, ProxyError
from ferrymq.proxy.processor.consumer import now_ms
from ferrymq.proxy.receipt_renewal import (
    Decision,
    HeldMessage,
    ReceiptHandleRenewer,
    decide,
    renew_delay_ms,
)

CONFIG = ProxyConfig.model_validate(
    {"renewAheadTimeMillis": 10_000, "renewMaxTimeMillis": 60_000, "maxRenewRetryTimes": 2}
)


def handle(pop_time: int, invisible_ms: int, offset: int = 7) -> str:
    # startOffset popTime invisibleTime reviveQid topicType brokerName queueId queueOffset
    return f"{build_extra_info(offset, pop_time, invisible_ms, 0, '0', 'broker-a', 1)} {offset}"


def held(received_at: int = 80_000, failed: int = 0) -> HeldMessage:
    return HeldMessage("g", "t", "m1", handle(0, 60_000), 0, received_at, failed_renewals=failed)


# --- the decision -------------------------------------------------------------------------------
def test_decide_waits_until_the_handle_is_near_expiry() -> None:
    assert decide(held(), 100_000, 89_999, CONFIG) is Decision.WAIT
    assert decide(held(), 100_000, 90_000, CONFIG) is Decision.RENEW


def test_decide_stops_renewing_after_renew_max_time() -> None:
    assert decide(held(received_at=0), 100_000, 90_000, CONFIG) is Decision.STOP
    assert decide(held(received_at=40_000), 100_000, 95_000, CONFIG) is Decision.RENEW


def test_decide_gives_up_after_max_renew_retry_times() -> None:
    assert decide(held(failed=1), 100_000, 95_000, CONFIG) is Decision.RENEW
    assert decide(held(failed=2), 100_000, 95_000, CONFIG) is Decision.GIVE_UP


def test_renew_delays_are_upstreams_renew_strategy() -> None:
    assert [renew_delay_ms(n) for n in (-1, 0, 1, 2, 5, 9)] == [
        60_000,
        60_000,
        180_000,
        300_000,
        3_600_000,
        3_600_000,
    ]


def test_retry_policies_next_delay_as_upstream() -> None:
    custom = GroupRetryPolicy(None, DEFAULT_CUSTOMIZED_NEXT_MS)
    # the first retry is delay level 3 (10 s); past the list, its last entry
    assert [custom.next_delay_ms(n) for n in (-3, 0, 1, 14, 15, 99)] == [
        10_000,
        10_000,
        30_000,
        3_600_000,
        7_200_000,
        7_200_000,
    ]
    exp = GroupRetryPolicy((1_000, 60_000, 2), DEFAULT_CUSTOMIZED_NEXT_MS)
    assert [exp.next_delay_ms(n) for n in (0, 1, 5, 6, 40)] == [
        1_000,
        2_000,
        32_000,
        60_000,
        60_000,
    ]


# --- the renewer, with a recording stand-in for the broker ----------------------------------------
class Broker:
    """Records CHANGE_MESSAGE_INVISIBLETIME calls and answers a new handle, or raises."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, int]] = []
        self.fail_with: Code | None = None

    async def change(self, group: str, topic: str, text: str, invisible_ms: int) -> str:
        self.calls.append((group, topic, text, invisible_ms))
        if self.fail_with is not None:
            raise ProxyError(self.fail_with, "refused")
        return handle(now_ms(), invisible_ms, offset=7)


async def no_group(_: str) -> GroupConfig | None:
    return GroupConfig("g", retry_policy=GroupRetryPolicy(None, DEFAULT_CUSTOMIZED_NEXT_MS))


def renewer(broker: Broker, online: set[str], **cfg: object) -> ReceiptHandleRenewer:
    config = ProxyConfig.model_validate({"renewAheadTimeMillis": 10_000, **cfg})
    return ReceiptHandleRenewer(config, broker.change, no_group, online.__contains__)


async def test_a_due_handle_is_renewed_and_the_ack_takes_the_current_one() -> None:
    broker = Broker()
    r = renewer(broker, {"c1"})
    first = handle(now_ms(), 5_000)  # within renewAheadTimeMillis already
    r.add("c1", "g", "t", "m1", first, 0)
    await r.scan()
    assert [c[2:] for c in broker.calls] == [(first, 60_000)]
    await r.scan()  # renewed for 60 s: not due again
    assert len(broker.calls) == 1
    current = await r.take("c1", "g", "m1", first)
    assert current != first and current.split(" ")[2] == "60000"
    assert r.held_count() == 0
    # a message the proxy does not hold keeps the client's handle
    assert await r.take("c1", "g", "m2", "other") == "other"


async def test_a_handle_not_yet_due_is_left_alone() -> None:
    broker = Broker()
    r = renewer(broker, {"c1"})
    r.add("c1", "g", "t", "m1", handle(now_ms(), 60_000), 0)
    await r.scan()
    assert broker.calls == [] and r.held_count() == 1


async def test_an_offline_client_s_messages_come_back_after_invisible_time_when_clear() -> None:
    broker = Broker()
    r = renewer(broker, set(), invisibleTimeMillisWhenClear=1_500)
    r.add("gone", "g", "t", "m1", handle(now_ms(), 60_000), 0)
    await r.scan()
    await r.stop()  # waits for the clearing it started
    assert [c[3] for c in broker.calls] == [1_500]
    assert r.held_count() == 0


async def test_client_termination_and_proxy_stop_hand_messages_back() -> None:
    broker = Broker()
    r = renewer(broker, {"c1", "c2"})
    r.add("c1", "g", "t", "m1", handle(now_ms(), 60_000), 0)
    r.add("c2", "g", "t", "m2", handle(now_ms(), 60_000), 0)
    r.clear_client("c1")
    assert r.held_count() == 1
    await r.stop()
    assert sorted(c[3] for c in broker.calls) == [1_000, 1_000]


async def test_held_past_renew_max_time_goes_back_to_the_retry_schedule() -> None:
    broker = Broker()
    r = renewer(broker, {"c1"}, renewMaxTimeMillis=1)
    r.add("c1", "g", "t", "m1", handle(now_ms(), 5_000), 3)
    await asyncio.sleep(0.005)  # past renewMaxTimeMillis (1 ms) on the clock
    await r.scan()
    # reconsumed 3 times: the customized list's entry 3 + 2 (2 min)
    assert [c[3] for c in broker.calls] == [120_000]
    assert r.held_count() == 0


async def test_failed_renewals_are_retried_then_given_up_and_a_bad_handle_is_dropped() -> None:
    broker = Broker()
    broker.fail_with = Code.PROXY_TIMEOUT
    r = renewer(broker, {"c1"}, maxRenewRetryTimes=2)
    r.add("c1", "g", "t", "m1", handle(now_ms(), 5_000), 0)
    for _ in range(3):
        await r.scan()
    assert len(broker.calls) == 2 and r.held_count() == 0  # two tries, then given up
    broker.fail_with = Code.INVALID_RECEIPT_HANDLE
    r.add("c1", "g", "t", "m2", handle(now_ms(), 5_000), 0)
    await r.scan()
    assert len(broker.calls) == 3 and r.held_count() == 0  # not retried
