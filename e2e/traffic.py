"""Producer and consumer of the real-node suite, run from the host as their own processes
(``python -m e2e.traffic ...``) so they keep going while the test kills and rolls pods.

One JSON object per line on stdout:

    produce NAMESRV TOPIC --count N --prefix P [--stop-file F] [--deadline S]
        {"acked": "<body>", "queue": "<broker>:<queueId>"} for every SEND_OK,
        {"error": "..."} for a failed send (it keeps going: failures during a kill are expected;
        only acknowledged bodies are promised), then {"done": <acked count>}. Each send's line
        also has "at" (UTC wall clock of its start, to line up with pod logs) and "ms" (how long
        it took: a stall shorter than the client's timeout shows there too).
    consume NAMESRV TOPIC GROUP (--count N | --until-file F) --timeout S [--from-first]
        {"body": ..., "tags": ..., "keys": [...]} per message (duplicates included), then
        {"done": <distinct bodies>}; exit 3 when fewer than N distinct bodies arrived in time.
        With --until-file it runs until F appears (a JSON list of bodies, written by the test
        once the producer stopped) and every body listed there has arrived.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path


def _emit(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)


def produce(args: argparse.Namespace) -> int:
    from ferrymq.client import Message, SyncProducer
    from ferrymq.client.broker_api import SendStatus

    stop = Path(args.stop_file) if args.stop_file else None
    deadline = time.monotonic() + args.deadline
    acked = 0
    i = 0
    with SyncProducer(f"{args.prefix}-producer", args.namesrv) as producer:
        while acked < args.count and time.monotonic() < deadline:
            if stop is not None and stop.exists():
                break
            body = f"{args.prefix}-{i}"
            msg = Message(args.topic, body.encode())
            msg.tags = f"Tag{i % 3}"
            msg.keys = [f"key-{args.prefix}-{i}"]
            i += 1
            started = time.monotonic()
            when = {"at": _utc_now()}
            try:
                result = producer.send(msg)
            except Exception as error:  # every send failure is reported, then retried
                _emit({"error": f"{type(error).__name__}: {error}", **when, "ms": _ms(started)})
                time.sleep(0.2)  # back off while a broker is down; not a synchronisation
                continue
            if result.status is SendStatus.SEND_OK:
                acked += 1
                queue = f"{result.queue.broker_name}:{result.queue.queue_id}"
                _emit({"acked": body, "queue": queue, **when, "ms": _ms(started)})
            else:
                _emit({"error": f"status {result.status.name} for {body}", **when})
            if args.interval:
                time.sleep(args.interval)  # paces a background load; not a synchronisation
    _emit({"done": acked})
    return 0 if acked >= args.count or stop is not None else 3


async def _consume(args: argparse.Namespace) -> int:
    from ferrymq.client.consume_service import ConsumeContext
    from ferrymq.client.push_consumer import PushConsumer
    from ferrymq.message import MessageExt
    from ferrymq.remoting.bodies import ConsumeFromWhere

    seen: set[str] = set()
    done = asyncio.Event()
    expected: set[str] | None = None
    until = Path(args.until_file) if args.until_file else None

    def check() -> None:
        if args.count is not None and len(seen) >= args.count:
            done.set()
        if expected is not None and expected <= seen:
            done.set()

    def on_messages(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        for msg in msgs:
            body = msg.body.decode("utf-8", "replace")
            _emit({"body": body, "tags": msg.tags, "keys": list(msg.keys)})
            seen.add(body)
        check()

    async def watch_until_file() -> None:
        nonlocal expected
        while until is not None and expected is None:
            if until.exists():
                expected = set(json.loads(until.read_text()))
                check()
                return
            await asyncio.sleep(0.5)  # polls for the test's file; not a synchronisation

    consumer = PushConsumer(
        args.group,
        args.namesrv,
        consume_from_where=(
            ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
            if args.from_first
            else ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
        ),
        run_sync_listener_in_thread=False,
    )
    consumer.subscribe(args.topic, "*")
    consumer.register_listener(on_messages)
    await consumer.start()
    watcher = asyncio.create_task(watch_until_file())
    try:
        await asyncio.wait_for(done.wait(), args.timeout)
    except TimeoutError:
        pass
    finally:
        watcher.cancel()
        await consumer.shutdown()
    _emit({"done": len(seen)})
    return 0 if done.is_set() else 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.traffic")
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("produce")
    p.add_argument("namesrv")
    p.add_argument("topic")
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--stop-file")
    p.add_argument("--deadline", type=float, default=300.0)
    p.add_argument("--interval", type=float, default=0.0)
    c = sub.add_parser("consume")
    c.add_argument("namesrv")
    c.add_argument("topic")
    c.add_argument("group")
    target = c.add_mutually_exclusive_group(required=True)
    target.add_argument("--count", type=int)
    target.add_argument("--until-file")
    c.add_argument("--timeout", type=float, default=120.0)
    c.add_argument("--from-first", action="store_true")
    args = parser.parse_args(argv)
    if args.mode == "produce":
        return produce(args)
    from ferrymq.remoting.eventloop import run

    return int(run(_consume(args)))


if __name__ == "__main__":
    sys.exit(main())
