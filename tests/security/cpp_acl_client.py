"""The upstream C++ client (rocketmq==0.4.4) with session credentials, in its own process.
Credentials come from CPP_ACCESS_KEY / CPP_SECRET_KEY (none: no credentials). One JSON line
per event.

    python cpp_acl_client.py produce NAMESRV TOPIC COUNT
    python cpp_acl_client.py consume NAMESRV TOPIC GROUP COUNT TIMEOUT_S
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any


def _credentials(client: Any) -> None:
    access_key = os.environ.get("CPP_ACCESS_KEY")
    if access_key:
        # upstream API: (accessKey, secretKey, onsChannel); the channel is signed too
        client.set_session_credentials(access_key, os.environ["CPP_SECRET_KEY"], "ALIYUN")


def produce(namesrv: str, topic: str, count: int) -> int:
    from rocketmq.client import Message, Producer

    producer = Producer("PID_cpp_acl")
    producer.set_namesrv_addr(namesrv)
    _credentials(producer)
    producer.start()
    try:
        for i in range(count):
            msg = Message(topic)
            msg.set_keys(f"k{i}")
            msg.set_body(f"acl-body-{i}")
            try:
                result = producer.send_sync(msg)
            except Exception as exc:  # the C++ client raises on a refused send
                print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
                continue
            print(json.dumps({"sent": i, "status": int(result.status)}), flush=True)
    finally:
        producer.shutdown()
    return 0


def consume(namesrv: str, topic: str, group: str, count: int, timeout: float) -> int:
    from rocketmq.client import PushConsumer

    seen: set[str] = set()
    lock = threading.Lock()
    done = threading.Event()

    def on_message(msg: Any) -> None:
        body = msg.body.decode() if isinstance(msg.body, bytes) else str(msg.body)
        with lock:
            seen.add(body)
            print(json.dumps({"body": body}), flush=True)
            if len(seen) >= count:
                done.set()

    consumer = PushConsumer(group)
    consumer.set_namesrv_addr(namesrv)
    _credentials(consumer)
    consumer.subscribe(topic, on_message)
    consumer.start()
    ok = done.wait(timeout)
    consumer.shutdown()
    print(json.dumps({"done": len(seen)}), flush=True)
    return 0 if ok else 3


if __name__ == "__main__":
    if sys.argv[1] == "produce":
        sys.exit(produce(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    sys.exit(consume(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), float(sys.argv[6])))
