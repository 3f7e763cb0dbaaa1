"""Bad requests to the semantics processors get a clear error response, never a crash or hang."""

from __future__ import annotations

from pathlib import Path

import pytest
from ferrymq.client import Message, Producer
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand

from semantics.cluster import semantics_cluster

pytestmark = pytest.mark.timeout(60)


async def test_malformed_semantics_requests_are_answered_with_reasons(tmp_path: Path) -> None:
    async with semantics_cluster(tmp_path) as cluster:
        await cluster.create_topic("T", queues=1)
        async with Producer("bad-p", cluster.namesrv_addr) as producer:
            sent = await producer.send(Message("T", b"x"))
        client = RemotingClient()

        async def call(
            code: int, ext: dict[str, object] | None, body: bytes | None = None
        ) -> RemotingCommand:
            return await client.invoke(
                cluster.broker_addr, RemotingCommand.request(code, ext, body)
            )

        try:
            r = await call(RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "g"})
            assert r.code == ResponseCode.SYSTEM_ERROR and "offset" in (r.remark or "")
            r = await call(
                RequestCode.CONSUMER_SEND_MSG_BACK,
                {"offset": "abc", "group": "g", "delayLevel": "0"},
            )
            assert r.code == ResponseCode.SYSTEM_ERROR and "offset" in (r.remark or "")
            r = await call(
                RequestCode.CONSUMER_SEND_MSG_BACK,
                {"offset": "999999", "group": "g", "delayLevel": "0"},
            )
            assert r.code == ResponseCode.SYSTEM_ERROR and "look message by offset" in (
                r.remark or ""
            )
            r = await call(RequestCode.END_TRANSACTION, {"producerGroup": "pg"})
            assert r.code == ResponseCode.SYSTEM_ERROR and "missing header field" in (
                r.remark or ""
            )
            end = {
                "producerGroup": "pg",
                "tranStateTableOffset": "0",
                "commitLogOffset": "0",
                "msgId": sent.msg_id,
            }
            r = await call(RequestCode.END_TRANSACTION, {**end, "commitOrRollback": "5"})
            assert r.code == ResponseCode.SYSTEM_ERROR and "not 0, 8 or 12" in (r.remark or "")
            # a normal message is not a half message: committing it must not re-publish it
            r = await call(RequestCode.END_TRANSACTION, {**end, "commitOrRollback": "8"})
            assert r.code == ResponseCode.SYSTEM_ERROR and "no half message" in (r.remark or "")
            r = await call(RequestCode.UNLOCK_BATCH_MQ, None, b"[1, 2]")
            assert r.code == ResponseCode.SYSTEM_ERROR and r.remark
            r = await call(RequestCode.CHECK_CLIENT_CONFIG, None, b"not json")
            assert r.code == ResponseCode.SYSTEM_ERROR and r.remark
            # internal topics cannot be written by clients (they would re-publish anywhere)
            for internal in (
                "SCHEDULE_TOPIC_XXXX",
                "RMQ_SYS_TRANS_HALF_TOPIC",
                "RMQ_SYS_TRANS_OP_HALF_TOPIC",
            ):
                send = {
                    "a": "evil-p",
                    "b": internal,
                    "c": "TBW102",
                    "d": "4",
                    "e": "0",
                    "f": "0",
                    "g": "0",
                    "h": "0",
                    "i": "REAL_TOPIC\x01T\x02REAL_QID\x010\x02DELAY\x011\x02",
                    "j": "0",
                    "k": "false",
                }
                r = await call(RequestCode.SEND_MESSAGE_V2, send, b"injected")
                assert r.code != ResponseCode.SUCCESS and "forbidden" in (r.remark or ""), (
                    internal,
                    r,
                )
            r = await call(RequestCode.GET_ALL_DELAY_OFFSET, None)
            assert r.code == ResponseCode.SUCCESS and b"offsetTable" in r.body_bytes()
        finally:
            await client.close()
        store = cluster.broker.store
        assert store is not None and store.get_max_offset_in_queue("T", 0) == 1
