"""Runs the upstream C++ client (rocketmq==0.4.4) in its own process, so a crash in the native
library cannot take the test run down. Prints one JSON line per event.

    python cpp_client.py produce NAMESRV TOPIC COUNT
    python cpp_client.py consume NAMESRV TOPIC GROUP COUNT TIMEOUT_S
"""

from __future__ import annotations

import json
import sys
import threading


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def produce(namesrv: str, topic: str, count: int) -> int:
    from rocketmq.client import Message, Producer

    producer = Producer("PID_cpp_interop")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        for i in range(count):
            msg = Message(topic)
            msg.set_keys(f"cpp-key-{i}")
            msg.set_tags("TagCpp")
            msg.set_body(f"cpp-body-{i}")
            result = producer.send_sync(msg)
            print(
                json.dumps({"sent": i, "status": int(result.status), "msg_id": result.msg_id}),
                flush=True,
            )
    finally:
        producer.shutdown()
    return 0


def consume(namesrv: str, topic: str, group: str, count: int, timeout: float) -> int:
    from rocketmq.client import PushConsumer

    seen: set[str] = set()
    lock = threading.Lock()
    done = threading.Event()

    def on_message(msg: object) -> None:
        body = _text(msg.body)  # type: ignore[attr-defined]
        with lock:
            print(
                json.dumps(
                    {
                        "body": body,
                        "tags": _text(msg.tags),  # type: ignore[attr-defined]
                        "keys": _text(msg.keys),  # type: ignore[attr-defined]
                        "topic": _text(msg.topic),
                    }
                ),
                flush=True,
            )  # type: ignore[attr-defined]
            seen.add(body)
            if len(seen) >= count:
                done.set()

    consumer = PushConsumer(group)
    consumer.set_namesrv_addr(namesrv)
    consumer.subscribe(topic, on_message)
    consumer.start()
    ok = done.wait(timeout)
    consumer.shutdown()
    print(json.dumps({"done": len(seen)}), flush=True)
    return 0 if ok else 3


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "produce":
        sys.exit(produce(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    sys.exit(consume(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), float(sys.argv[6])))
