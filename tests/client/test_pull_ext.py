"""The pull service's reused PULL_MESSAGE ext fields equal a freshly encoded header every time."""

from __future__ import annotations

from ferrymq.client.allocate import MessageQueue
from ferrymq.client.instance import ClientInstance
from ferrymq.client.offset_store import OffsetStore
from ferrymq.client.pull_service import PullConfig, PullService, pull_sys_flag
from ferrymq.client.push_consumer import build_subscription
from ferrymq.remoting import headers


class _NoBackend:
    async def load(self, mq: MessageQueue) -> int:
        return -1

    async def save(self, offsets: dict[MessageQueue, int]) -> None:
        return None


def _expected(
    config: PullConfig, mq: MessageQueue, sub: object, offset: int, commit: int
) -> dict[str, str]:
    return headers.PullMessageRequestHeader(
        consumer_group=config.group,
        topic=mq.topic,
        queue_id=mq.queue_id,
        queue_offset=offset,
        max_msg_nums=config.pull_batch_size,
        sys_flag=pull_sys_flag(commit > 0, True, True),
        commit_offset=commit,
        suspend_timeout_millis=int(config.suspend_s * 1000),
        subscription=sub.sub_string,  # type: ignore[attr-defined]
        sub_version=sub.sub_version,  # type: ignore[attr-defined]
        expression_type=sub.expression_type,  # type: ignore[attr-defined]
    ).to_ext()


async def test_reused_ext_matches_a_fresh_header() -> None:
    config = PullConfig(group="g1", pull_batch_size=17, suspend_s=12.5)
    instance = ClientInstance(["127.0.0.1:9"])
    subs = {"T": build_subscription("T", "a || b")}
    service = PullService(config, instance, OffsetStore(_NoBackend()), subs.get, lambda *_: None)
    mq = MessageQueue("T", "broker-a", 3)
    for offset, commit in [(0, 0), (5, 0), (1234567890123, 99), (7, 3)]:
        got = service._pull_ext(mq, subs["T"], offset, commit)
        assert got == _expected(config, mq, subs["T"], offset, commit)
    # a new subscription (re-subscribe) is encoded again, not served from the cache
    subs["T"] = build_subscription("T", "c")
    got = service._pull_ext(mq, subs["T"], 8, 4)
    assert got == _expected(config, mq, subs["T"], 8, 4)
    assert got["subscription"] == "c"
    # each pull gets its own dict: changing one does not change the next
    got["queueOffset"] = "-1"
    assert service._pull_ext(mq, subs["T"], 9, 4)["queueOffset"] == "9"
