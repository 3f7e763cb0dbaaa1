"""A scenario of the Python 5.x client (rocketmq-python-client 5.1.2), run in its own venv (its
``rocketmq`` package would shadow the 4.x C++ client's of the test venv):
``python python5_client.py <endpoint> <topic> <group> <budget_s>``.

A producer sends one message; a SimpleConsumer receives right after ``startup()``, without
waiting for the server's Settings (the client does not wait either: the race the evidence
describes), and acks. One JSON line per observation."""

from __future__ import annotations

import json
import sys
import time
import uuid

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def main() -> None:
    endpoint, topic, group, budget = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    deadline = time.monotonic() + budget
    nonce = uuid.uuid4().hex
    config = ClientConfiguration(endpoint, Credentials())
    producer = Producer(config, (topic,))
    producer.startup()
    try:
        msg = Message()
        msg.topic = topic
        msg.body = f"{nonce}:py-1".encode()
        msg.tag = "TagA"
        msg.keys = "k1"
        msg.add_property("pk", "pv")
        receipt = producer.send(msg)
        emit("sent", id=receipt.message_id)
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")})
    consumer.startup()
    try:
        errors = []
        while time.monotonic() < deadline:
            try:
                messages = consumer.receive(16, 15)
            except Exception as exc:  # the first receive is where the settings race shows
                errors.append(f"{type(exc).__name__}: {exc}")
                emit("receive_error", error=errors[-1])
                continue
            for m in messages or []:
                consumer.ack(m)
                if m.body.decode(errors="replace").startswith(nonce):
                    emit(
                        "received",
                        id=m.message_id,
                        tag=m.tag,
                        keys=list(m.keys or []),
                        props=dict(m.properties or {}),
                        attempt=m.delivery_attempt,
                    )
                    emit("done", receive_errors=len(errors))
                    return
    finally:
        consumer.shutdown()
    emit("timeout")


if __name__ == "__main__":
    main()
