"""The 5.x client scenarios and what every correct proxy shows for them (the observations the Java
5.0.8 client made against Apache's proxy, shared/evidence/v5-reference.md). Each ``check_*``
asserts on the events of one run of ``V5Scenarios``; the same checks run against Apache's proxy
and ferrymq's, so a difference between them fails one side."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ferrymq.proxy.v2 import definition_pb2 as pb

from proxy.conftest import RENEWAL_CONFIG, Endpoint, dlq_group, fifo_group
from proxy.java5 import by_event, run_scenario
from proxy.raw_client import RawClient, message_id

Events = list[dict[str, Any]]


def run(cp: str, ep: Endpoint, scenario: str, args: list[str], tmp: Path, budget: int) -> Events:
    events = run_scenario(cp, ep.address, scenario, args, tmp / f"{scenario}-{ep.tag}", budget)
    errors = by_event(events, "error")
    assert not errors, f"{scenario} against {ep}: {errors}"
    assert by_event(events, "done"), f"{scenario} against {ep} did not finish: {events}"
    return events


def normal(cp: str, ep: Endpoint, tmp: Path) -> None:
    events = run(cp, ep, "normal", ["V5Normal", f"j5_normal_{ep.tag}"], tmp, 90)
    (sent,) = by_event(events, "sent")
    (got,) = by_event(events, "received")
    assert got["id"] == sent["id"]
    assert len(got["id"]) == 34  # the client's v1 message id, kept through the proxy
    assert (got["body"], got["tag"], got["keys"], got["props"], got["attempt"]) == (
        "normal-1",
        "TagA",
        "k1 k2",
        "{pk=pv}",
        "1",
    )
    assert by_event(events, "acked")


def fifo(cp: str, ep: Endpoint, tmp: Path) -> None:
    events = run(cp, ep, "fifo", ["V5Fifo", fifo_group(ep), "10"], tmp, 150)
    (order,) = by_event(events, "order")
    assert order["bodies"] == ",".join(f"fifo-{i}" for i in range(10))
    assert {e["group"] for e in by_event(events, "received")} == {"g1"}


def delay(cp: str, ep: Endpoint, tmp: Path) -> None:
    events = run(cp, ep, "delay", ["V5Delay", f"j5_delay_{ep.tag}", "5000"], tmp, 90)
    (got,) = by_event(events, "received")
    # never before its delivery time (the same clock on both sides); the received message
    # carries the delivery timestamp it was sent with
    assert int(got["received_at"]) >= int(got["target"])
    assert got["delivery_ts"] == got["target"]


def transaction(cp: str, ep: Endpoint, tmp: Path) -> None:
    events = run(cp, ep, "tx", ["V5Tx", f"j5_tx_{ep.tag}"], tmp, 150)
    received = [e["body"] for e in by_event(events, "received")]
    # commit visible, the orphan visible after the server's check-back answered COMMIT, the
    # rolled-back one never (it was sent first, so it would have come before the others)
    assert sorted(received) == ["commit", "orphan"]
    assert "orphan" in {e["body"] for e in by_event(events, "check")}


def invisible(cp: str, ep: Endpoint, tmp: Path) -> None:
    events = run(cp, ep, "invisible", ["V5Normal", f"j5_inv_{ep.tag}"], tmp, 90)
    (held,) = by_event(events, "held")
    again = [e for e in by_event(events, "again") if e["id"] == held["id"]]
    assert again, f"the unacked message never came back: {events}"
    assert again[0]["attempt"] == "2"
    # the broker's bookkeeping properties (ORIGIN_GROUP, ...) are not shown as user properties
    assert again[0]["props"] == "{}"
    assert len(by_event(events, "received")) == 3


def change_invisible(cp: str, ep: Endpoint, tmp: Path) -> None:
    events = run(cp, ep, "change", ["V5Normal", f"j5_change_{ep.tag}"], tmp, 90)
    (changed,) = by_event(events, "changed")
    assert changed["same_handle"] == "false"  # a new receipt handle
    assert by_event(events, "acked")  # and the ack with it is accepted


def push_to_dlq(cp: str, ep: Endpoint, tmp: Path) -> None:
    events = run(cp, ep, "push_dlq", ["V5Retry", dlq_group(ep), f"j5_dlqr_{ep.tag}", "3"], tmp, 360)
    (sent,) = by_event(events, "sent")
    attempts = [e for e in by_event(events, "attempt") if e["id"] == sent["id"]]
    # retryMaxTimes 2: delivered 3 times, then in %DLQ%<group>
    assert [a["attempt"] for a in attempts] == ["1", "2", "3"], events
    (dlq,) = by_event(events, "dlq")
    assert dlq["id"] == sent["id"]
    assert dlq["attempts_seen"] == "3"


def renew(cp: str, ep: Endpoint, tmp: Path) -> None:
    # the listener holds the message 2.2x the proxies' defaultInvisibleTimeMills (RENEWAL_CONFIG)
    hold_ms = RENEWAL_CONFIG["defaultInvisibleTimeMills"] * 22 // 10
    events = run(
        cp, ep, "renew", ["V5Normal", f"j5_renew_{ep.tag}", str(hold_ms), "6000"], tmp, 120
    )
    (sent,) = by_event(events, "sent")
    assert [a["attempt"] for a in by_event(events, "attempt") if a["id"] == sent["id"]] == ["1"]
    (released,) = by_event(events, "released")
    assert released["deliveries_meanwhile"] == "0"
    (watched,) = by_event(events, "watched")
    assert watched["deliveries"] == "1"  # the ack after the renewals took


def bad_input(cp: str, ep: Endpoint, tmp: Path) -> Events:
    events = run(cp, ep, "bad", ["V5Normal", "V5Fifo", f"j5_bad_{ep.tag}"], tmp, 90)
    (fifo_to_normal,) = by_event(events, "fifo_to_normal")
    assert fifo_to_normal["type"] == "java.lang.IllegalArgumentException"
    assert "actualMessageType=FIFO, acceptMessageTypes=[NORMAL]" in fifo_to_normal["message"]
    (inv,) = by_event(events, "invisible_5s")
    assert inv["type"].endswith("BadRequestException")
    assert "response-code=40011" in inv["message"]
    assert "the invisibleTime is too small. min is 10000" in inv["message"]
    (unknown,) = by_event(events, "unknown_topic")
    assert unknown["type"] == "java.lang.IllegalStateException"
    return events


SCENARIOS: dict[str, Callable[[str, Endpoint, Path], object]] = {
    "normal": normal,
    "fifo": fifo,
    "delay": delay,
    "transaction": transaction,
    "invisible": invisible,
    "change_invisible": change_invisible,
    "push_to_dlq": push_to_dlq,
    "renew": renew,
    "bad_input": bad_input,
}


# --- bad input, as the server answers it (Status in-band) ---------------------------------------
async def bad_answers(address: str, tag: str) -> dict[str, tuple[int, str]]:
    """What a proxy answers to each bad request: (code, message) per case."""
    out: dict[str, tuple[int, str]] = {}
    group = f"raw_bad_{tag}"
    client = RawClient(address)
    try:
        r = await client.query_route("NoSuchTopicRaw")
        out["route_unknown_topic"] = (r.status.code, r.status.message.split("\n")[0][:60])
        s = await client.send("NoSuchTopicRaw")
        out["send_unknown_topic"] = (s.status.code, s.status.message.split("ProxyException: ")[-1])
        s = await client.send("V5Normal", group="g1")
        out["fifo_to_normal"] = (s.status.code, s.status.message.split("ProxyException: ")[-1])
        await client.consumer_settings(group, "V5Normal")
        for seconds, case in ((5, "receive_invisible_5s"), (13 * 3600, "receive_invisible_13h")):
            frames = await client.receive(group, "V5Normal", seconds)
            kinds = [f.WhichOneof("content") for f in frames]
            assert kinds == ["status", "delivery_timestamp"], (case, kinds)
            out[case] = (frames[0].status.code, frames[0].status.message)
        a = await client.ack(group, "V5Normal", "forged-handle")
        out["ack_forged"] = (a.status.code, a.status.message)
        out["ack_forged_entry"] = (a.entries[0].status.code, a.entries[0].status.message[:29])
        a = await client.ack(group, "V5Normal", "0 1000 1000 0 0 broker-a 0 0 0")
        out["ack_expired"] = (a.status.code, a.status.message)
        c = await client.change_invisible(group, "V5Normal", "forged-handle", 30)
        out["change_forged"] = (c.status.code, c.status.message[:29])
        c = await client.change_invisible(group, "V5Normal", "forged-handle", 13 * 3600)
        out["change_13h"] = (c.status.code, c.status.message)
    finally:
        await client.close()
    return out


# --- receipt-handle renewal, at the wire ----------------------------------------------------------
async def renewed_ack(address: str, tag: str) -> dict[str, object]:
    """A push consumer's message (auto_renew) held past the proxy's defaultInvisibleTimeMills,
    then acked with the handle it was received with: the proxy kept it invisible meanwhile and
    acks it with the renewed handle (the first one has expired by then)."""
    group = f"raw_renew_{tag}"
    topic = "V5Normal"
    client, other = RawClient(address), RawClient(address)
    try:
        for c in (client, other):
            await c.consumer_settings(group, topic, pb.PUSH_CONSUMER)
            await c.heartbeat(group, pb.PUSH_CONSUMER)
        body = f"renew-{message_id()}".encode()
        sent = await client.send(topic, body)
        assert sent.status.code == 20000, sent
        held: pb.Message | None = None
        for _ in range(20):  # bounded: earlier scenarios' messages on the topic come first
            for frame in await client.receive(group, topic, 10, auto_renew=True):
                if frame.WhichOneof("content") != "message":
                    continue
                m = frame.message
                if m.body == body:
                    held = m
                else:
                    await client.ack(
                        group,
                        topic,
                        m.system_properties.receipt_handle,
                        m.system_properties.message_id,
                    )
            if held is not None:
                break
        assert held is not None, "the message never came"
        sp = held.system_properties
        first_invisible_ms = RENEWAL_CONFIG["defaultInvisibleTimeMills"]
        # the listener's work: until the handle the client holds has expired
        await asyncio.sleep(first_invisible_ms * 22 / 10 / 1000)
        meanwhile = [
            f.message.body
            for f in await other.receive(group, topic, 10, poll_s=2)
            if f.WhichOneof("content") == "message"
        ]
        a = await client.ack(group, topic, sp.receipt_handle, sp.message_id)
        return {
            "attempt": sp.delivery_attempt,
            "redelivered_meanwhile": body in meanwhile,
            "ack": (a.status.code, a.entries[0].status.code),
        }
    finally:
        await client.close()
        await other.close()


def node_client(ep: Endpoint, tmp: Path) -> None:
    """rocketmq-client-nodejs 1.0.8: send with tag, keys and a property; receive and ack."""
    from proxy.node5 import run_node5

    events = run_node5(ep.address, "V5Normal", f"node5_cg_{ep.tag}", tmp / f"node-{ep.tag}", 120)
    assert not by_event(events, "error"), events
    sent_and_received(events)


def sent_and_received(events: Events) -> None:
    """The one message a Python/Node scenario sent came back as sent, on its first attempt."""
    (sent,) = by_event(events, "sent")
    (got,) = by_event(events, "received")
    assert got["id"] == sent["id"]
    assert (got["tag"], got["keys"], got["props"], got["attempt"]) == (
        "TagA",
        ["k1"],
        {"pk": "pv"},
        1,
    )
