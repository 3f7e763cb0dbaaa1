"""Fuzzed frames (hypothesis) against a live broker and NameServer process: malformed bytes, bad
headers, unknown codes, random header fields and bodies for real codes. Each gets an answer or a
closed connection, never a hang or a crash; the servers keep serving."""

from __future__ import annotations

import socket
import struct

import orjson
from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import RemotingCommand, decode_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ_SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# ext field names the processors read, plus junk
FIELD_NAMES = st.sampled_from(
    [
        "topic",
        "queueId",
        "queueOffset",
        "consumerGroup",
        "producerGroup",
        "maxMsgNums",
        "sysFlag",
        "commitOffset",
        "subscription",
        "subVersion",
        "expressionType",
        "a",
        "b",
        "c",
        "d",
        "e",
        "f",
        "g",
        "h",
        "i",
        "j",
        "k",
        "m",
        "key",
        "maxNum",
        "offset",
        "timestamp",
        "clientID",
        "brokerName",
        "brokerAddr",
        "clusterName",
        "brokerId",
        "bodyCrc32",
        "readQueueNums",
        "writeQueueNums",
        "perm",
        "groupName",
        "namespace",
        "value",
        "x\u00e9",
        "",
    ]
)
FIELD_VALUES = st.one_of(
    st.text(max_size=40),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(
        ["-1", "0", "1", "true", "false", "TBW102", "%RETRY%g", "*", "a || b", "SQL92", "TAG"]
    ),
)
CODES = st.one_of(st.sampled_from([int(c) for c in RequestCode]), st.integers(-40000, 40000))


def addr_tuple(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


def exchange(addr: str, payload: bytes, expect_opaque: int | None) -> None:
    """Send ``payload``; read until a response with ``expect_opaque`` or the server closes."""
    with socket.create_connection(addr_tuple(addr), timeout=20) as sock:
        sock.sendall(payload)
        if expect_opaque is None:
            sock.shutdown(socket.SHUT_WR)
        buf = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                return
            if not chunk:
                return  # closed by the server: an accepted outcome for bad input
            buf += chunk
            while len(buf) >= 4:
                (length,) = struct.unpack_from(">i", buf)
                if len(buf) < 4 + length:
                    break
                cmd = decode_command(buf[4 : 4 + length])
                buf = buf[4 + length :]
                assert cmd.is_response
                if expect_opaque is not None and cmd.opaque == expect_opaque:
                    assert all(isinstance(v, str) for v in cmd.ext_fields.values())
                    return


def assert_serving(cluster: LocalCluster) -> None:
    for child in cluster.children:
        assert child.alive(), f"{child.name} died:\n{child.log_tail()}"
    for addr, code in (
        (cluster.broker_addrs[0], RequestCode.GET_BROKER_RUNTIME_INFO),
        (cluster.namesrv_addr, RequestCode.GET_BROKER_CLUSTER_INFO),
    ):
        req = RemotingCommand.request(code)
        with socket.create_connection(addr_tuple(addr), timeout=20) as sock:
            sock.sendall(req.to_bytes())
            data = b""
            while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
                chunk = sock.recv(65536)
                assert chunk, f"{addr} closed a valid request"
                data += chunk
        resp = decode_command(data[4:])
        assert resp.opaque == req.opaque and resp.code == 0


@FUZZ_SETTINGS
@given(st.binary(max_size=4096))
def test_random_bytes(cluster: LocalCluster, raw: bytes) -> None:
    exchange(cluster.broker_addrs[0], raw, None)


@FUZZ_SETTINGS
@given(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**31), 2**31 - 1), st.binary(max_size=512))
def test_bad_lengths_and_headers(cluster: LocalCluster, total: int, mark: int, rest: bytes) -> None:
    exchange(cluster.broker_addrs[0], struct.pack(">ii", total, mark) + rest, None)


@FUZZ_SETTINGS
@given(
    CODES,
    st.dictionaries(FIELD_NAMES, FIELD_VALUES, max_size=12),
    st.one_of(
        st.none(),
        st.binary(max_size=600),
        st.sampled_from([b"{}", b"[]", b'{"clientID":1}', b"null", b'{"a":{{}}}']),
    ),
    st.sampled_from(["broker", "namesrv"]),
)
def test_random_requests(
    cluster: LocalCluster, code: int, ext: dict[str, str], body: bytes | None, target: str
) -> None:
    if ext.get("sysFlag") is not None:
        ext["suspendTimeoutMillis"] = "50"  # a held pull is legitimate, just keep it short
    header = orjson.dumps(
        {
            "code": code,
            "language": "JAVA",
            "version": 399,
            "opaque": 77,
            "flag": 0,
            "extFields": ext,
        }
    )
    frame = struct.pack(">ii", 4 + len(header) + len(body or b""), len(header)) + header
    addr = cluster.broker_addrs[0] if target == "broker" else cluster.namesrv_addr
    exchange(addr, frame + (body or b""), 77)


def test_oversized_frame_closes_connection_and_servers_still_serve(cluster: LocalCluster) -> None:
    exchange(cluster.broker_addrs[0], struct.pack(">i", 64 * 1024 * 1024) + b"\0" * 64, None)
    assert_serving(cluster)


def test_servers_still_serving_after_fuzzing(cluster: LocalCluster) -> None:
    assert_serving(cluster)
