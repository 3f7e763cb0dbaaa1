"""CPU cost per message of each stage of a send, measured in one process on a real broker.

A NameServer and a broker (``BrokerApp``, ASYNC_FLUSH, a store in a temporary directory) run in
this process; the frames are what the upstream Java client sends for ``DefaultMQProducer.send``
(SEND_MESSAGE_V2, JSON header, a 1 KiB body, TAGS/UNIQ_KEY/WAIT properties). Each stage is run
on its own over the same N frames, and its time per message reported (the minimum of
``--repeat`` passes; CPU time of the thread, ``time.thread_time_ns``, so other processes on the machine do not count):

    decode     decode_command(frame): header JSON -> RemotingCommand
    header     SendMessageRequestHeader.from_ext: the V2 fields
    checks     the processor's checks (slave, permission, topic name, topic config, queue id)
    append     the store's put_message_nowait of a built message (the processor's send store:
               semantics checks, CommitLog encode into the mmap, queue offset, msgId)
    handle     the whole SendMessageProcessor.handle (header, checks, properties, build, append,
               response), which contains header + checks + append
    encode     the response's RemotingCommand.encode (header JSON and frame mark)
    dispatch   the reput of those messages: ConsumeQueue entries, index keys, listeners
    channel    Channel.data_received with all N frames in one read, answers corked (everything
               above but the reput, plus the write of the answers to a socket pair)

Usage::

    .venv/bin/python bench/stage_costs.py [--messages 20000] [--repeat 5] [--size 1024]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ferrymq.broker.app import BrokerApp
from ferrymq.broker.config import BrokerConfig
from ferrymq.message import (
    MessageConst,
    MessageInner,
    decode_properties,
    tags_string_to_tags_code,
)
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.remoting.bodies import TopicConfig
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import RemotingCommand, decode_command
from ferrymq.remoting.eventloop import run
from ferrymq.remoting.headers import SendMessageRequestHeader
from ferrymq.store.config import MessageStoreConfig
from ferrymq.store.results import PutMessageResult

TOPIC = "StageCosts"


def java_like_frames(n: int, size: int) -> list[bytes]:
    """SEND_MESSAGE_V2 frames shaped as the upstream client's (header fields a..n, JSON)."""
    body = b"x" * size
    frames = []
    for i in range(n):
        props = (
            f"{MessageConst.PROPERTY_TAGS}\x01bench\x02"
            f"{MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX}\x017F000001{i:024X}\x02"
            f"{MessageConst.PROPERTY_WAIT_STORE_MSG_OK}\x01true\x02"
        )
        header = SendMessageRequestHeader(
            producer_group="bench_group",
            topic=TOPIC,
            default_topic="TBW102",
            default_topic_queue_nums=4,
            queue_id=i % 8,
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            flag=0,
            properties=props,
            reconsume_times=0,
            unit_mode=False,
            batch=False,
        )
        cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.to_ext_v2(), body)
        cmd.language = "JAVA"
        cmd.version = 475  # the 5.x client's version code
        frames.append(cmd.to_bytes()[4:])  # without the length prefix: what the decoder yields
    return frames


def per_message(fn: Callable[[], object], n: int, repeat: int) -> float:
    """Microseconds per message: the fastest of ``repeat`` passes over ``n`` messages."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.thread_time_ns()
        fn()
        best = min(best, time.thread_time_ns() - t0)
    return best / n / 1000


class Sink(asyncio.Protocol):
    """The client end of the socket pair: reads and drops the answers."""

    def data_received(self, data: bytes) -> None:
        pass


async def measure(messages: int, repeat: int, size: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="stage_costs_"))
    ns = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", kv_config_path=tmp / "kv.json")
    )
    await ns.start()
    cfg = BrokerConfig(
        broker_cluster_name="StageCostsCluster",
        broker_name="broker-a",
        broker_ip1="127.0.0.1",
        bind_address="127.0.0.1",
        listen_port=0,
        namesrv_addr=ns.addr,
    )
    store_cfg = MessageStoreConfig(
        store_path_root_dir=tmp / "store", mapped_file_size_commit_log=1024 * 1024 * 1024
    )
    app = BrokerApp(cfg, store_cfg)
    await app.start()
    try:
        app.topics.update(TopicConfig(topic_name=TOPIC, read_queue_nums=8, write_queue_nums=8))
        frames = java_like_frames(messages, size)
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        transport, channel = await loop.create_connection(
            lambda: Channel(app.server.processors, name="bench"), sock=a
        )
        sink_transport, _ = await loop.create_connection(Sink, sock=b)
        store = app.store
        reput = store.reput
        send = app.send
        cmds = [decode_command(f) for f in frames]
        headers = [SendMessageRequestHeader.from_ext(c.ext_fields) for c in cmds]
        responses: list[RemotingCommand] = []

        def decode() -> None:
            for f in frames:
                decode_command(f)

        def header() -> None:
            for c in cmds:
                SendMessageRequestHeader.from_ext(c.ext_fields)

        def checks() -> None:
            for c, h in zip(cmds, headers, strict=True):
                send._check(c, h)

        def handle() -> None:
            responses.clear()
            for c in cmds:
                r = send.handle(channel, c)
                assert isinstance(r, RemotingCommand) and r.code == 0, r
                responses.append(r)

        def encode() -> None:
            for r in responses:
                r.encode()

        def dispatch() -> None:
            while reput.behind() > 0:
                reput.do_reput()

        # the messages as the processor builds them (same fields), for the append alone
        inners = [
            MessageInner(
                topic=h.topic,
                queue_id=h.queue_id,
                body=c.body_bytes(),
                flag=h.flag,
                properties=decode_properties(h.properties or ""),
                properties_string=h.properties or "",
                tags_code=tags_string_to_tags_code("bench"),
                sys_flag=h.sys_flag,
                born_timestamp=h.born_timestamp,
                born_host=("127.0.0.1", 50000),
                reconsume_times=0,
            )
            for c, h in zip(cmds, headers, strict=True)
        ]

        def append() -> None:
            for m in inners:
                result = send.store.put_message_nowait(m)
                assert isinstance(result, PutMessageResult) and result.is_ok, result

        stream = b"".join(len(f).to_bytes(4, "big") + f for f in frames)

        def whole_channel() -> None:
            channel.data_received(stream)

        out: dict[str, Any] = {"messages": messages, "body_size": size}
        out["decode"] = per_message(decode, messages, repeat)
        out["header"] = per_message(header, messages, repeat)
        out["checks"] = per_message(checks, messages, repeat)
        for _ in range(repeat):
            # handle and dispatch alternate, so each reput pass has exactly N records to follow
            out["handle"] = min(out.get("handle", 1e9), per_message(handle, messages, 1))
            out["dispatch"] = min(out.get("dispatch", 1e9), per_message(dispatch, messages, 1))
        out["encode"] = per_message(encode, messages, repeat)
        for _ in range(repeat):
            out["append"] = min(out.get("append", 1e9), per_message(append, messages, 1))
            dispatch()
        for _ in range(repeat):
            out["channel"] = min(out.get("channel", 1e9), per_message(whole_channel, messages, 1))
            await asyncio.sleep(0.05)  # let the transport write the corked answers out
            dispatch()
        transport.close()
        sink_transport.close()
        return out
    finally:
        await app.stop()
        await ns.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--json", default="")
    args = p.parse_args()
    out = run(measure(args.messages, args.repeat, args.size))
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
