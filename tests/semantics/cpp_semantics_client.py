"""The upstream C++ client (rocketmq==0.4.4) driving delay, retry and ordered features, one mode per
process so a crash in the native library cannot take the test run down. Prints JSON lines.

    python cpp_semantics_client.py produce_delay NAMESRV TOPIC COUNT LEVEL
    python cpp_semantics_client.py produce_orderly NAMESRV TOPIC KEYS PER_KEY
    python cpp_semantics_client.py produce_big NAMESRV TOPIC COUNT SIZE
    python cpp_semantics_client.py consume_retry NAMESRV TOPIC GROUP COUNT FAILURES TIMEOUT_S
    python cpp_semantics_client.py consume_orderly NAMESRV TOPIC GROUP TOTAL TIMEOUT_S
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _emit(event: dict[str, Any]) -> None:
    print(json.dumps(event), flush=True)


def produce_delay(namesrv: str, topic: str, count: int, level: int) -> int:
    from rocketmq.client import Message, Producer

    producer = Producer("PID_cpp_delay")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        for i in range(count):
            msg = Message(topic)
            msg.set_body(f"delayed-{i}")
            msg.set_delay_time_level(level)
            result = producer.send_sync(msg)
            _emit({"sent": i, "status": int(result.status)})
    finally:
        producer.shutdown()
    return 0


def produce_big(namesrv: str, topic: str, count: int, size: int) -> int:
    from rocketmq.client import Message, Producer

    producer = Producer("PID_cpp_big", compress_level=5)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        for i in range(count):
            msg = Message(topic)
            msg.set_body(_big_body(i, size))
            result = producer.send_sync(msg)
            _emit({"sent": i, "status": int(result.status)})
    finally:
        producer.shutdown()
    return 0


def _big_body(i: int, size: int) -> str:
    line = f"big message {i}: the quick brown fox jumps over the lazy dog\n"
    return (line * (size // len(line) + 1))[:size]


def produce_orderly(namesrv: str, topic: str, keys: int, per_key: int) -> int:
    from rocketmq.client import Message, Producer

    producer = Producer("PID_cpp_orderly")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        for seq in range(per_key):
            for k in range(keys):
                msg = Message(topic)
                msg.set_keys(f"key-{k}")
                msg.set_body(f"key-{k}:{seq}")
                result = producer.send_orderly(msg, k)  # hashing selector: arg % queue count
                _emit({"sent": f"key-{k}:{seq}", "status": int(result.status)})
    finally:
        producer.shutdown()
    return 0


def _consumer(group: str, namesrv: str, orderly: bool) -> Any:
    from rocketmq.client import PushConsumer

    consumer = PushConsumer(group, orderly=orderly)
    consumer.set_namesrv_addr(namesrv)
    consumer.set_thread_count(2)
    return consumer


def _subscribe(consumer: Any, topic: str, handler: Any) -> None:
    """Subscribe with a callback returning the consume status itself (0 success, 1 later): the
    wrapper's own subscribe() turns a raised exception into an ignored ctypes error."""
    from rocketmq.client import _to_bytes, dll, ffi_check

    def on_message(_consumer: Any, msg: Any) -> int:
        from rocketmq.client import RecvMessage

        try:
            return 0 if handler(RecvMessage(msg)) else 1
        except Exception as exc:  # keep the native library alive; report and retry later
            _emit({"error": repr(exc)})
            return 1

    ffi_check(dll.Subscribe(consumer._handle, _to_bytes(topic), _to_bytes("*")))
    consumer._register_callback(on_message)


def consume_retry(
    namesrv: str, topic: str, group: str, count: int, failures: int, timeout: float
) -> int:
    done = threading.Event()
    succeeded: set[str] = set()
    lock = threading.Lock()

    def handle(msg: Any) -> bool:
        body = _text(msg.body)
        reconsume = int(msg.reconsume_times)
        ok = reconsume >= failures
        with lock:
            _emit(
                {
                    "body": body,
                    "reconsume": reconsume,
                    "topic": _text(msg.topic),
                    "ok": ok,
                    "offset": int(msg.commit_log_offset),
                    "queue_offset": int(msg.queue_offset),
                }
            )
            if ok:
                succeeded.add(body)
                if len(succeeded) >= count:
                    done.set()
        return ok

    consumer = _consumer(group, namesrv, orderly=False)
    _subscribe(consumer, topic, handle)
    consumer.start()
    finished = done.wait(timeout)
    consumer.shutdown()
    _emit({"done": len(succeeded)})
    return 0 if finished else 3


def consume_orderly(namesrv: str, topic: str, group: str, total: int, timeout: float) -> int:
    done = threading.Event()
    seen: set[str] = set()
    lock = threading.Lock()

    def handle(msg: Any) -> bool:
        body = _text(msg.body)
        with lock:
            _emit({"body": body, "queue": int(msg.queue_id)})
            seen.add(body)
            if len(seen) >= total:
                done.set()
        return True

    consumer = _consumer(group, namesrv, orderly=True)
    _subscribe(consumer, topic, handle)
    consumer.start()
    finished = done.wait(timeout)
    consumer.shutdown()
    _emit({"done": len(seen)})
    return 0 if finished else 3


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "produce_delay":
        sys.exit(produce_delay(args[0], args[1], int(args[2]), int(args[3])))
    if mode == "produce_big":
        sys.exit(produce_big(args[0], args[1], int(args[2]), int(args[3])))
    if mode == "produce_orderly":
        sys.exit(produce_orderly(args[0], args[1], int(args[2]), int(args[3])))
    if mode == "consume_retry":
        sys.exit(
            consume_retry(args[0], args[1], args[2], int(args[3]), int(args[4]), float(args[5]))
        )
    if mode == "consume_orderly":
        sys.exit(consume_orderly(args[0], args[1], args[2], int(args[3]), float(args[4])))
    sys.exit(f"unknown mode {mode}")
