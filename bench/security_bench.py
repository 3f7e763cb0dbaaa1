"""Cost of ACL and TLS on the hot paths: acked single sends and batched produce, plain vs ACL vs
TLS vs ACL+TLS, in one run, as ratios to plain.

For each set-up a NameServer and one broker (ASYNC_FLUSH) start as child processes
(``LocalCluster``; broker.conf gets ``aclEnable``/``aclFilePath`` and/or
``tls.server.mode=enforcing`` with certificates made for the run). The raw remoting client then
sends, with the signing hook and/or a TLS context as the set-up needs: acked single sends of
1 KiB (one in flight) and batches of 64 x 1 KiB (SEND_BATCH_MESSAGE, 16 in flight). Reported:
msgs/s, the broker's CPU time per message (from /proc) and the ratio to plain. Every loop is
bounded by a count and a time cap. Usage::

    .venv/bin/python bench/security_bench.py [--singles 3000] [--batched 64000] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from ferrymq.acl.signature import sign_fields
from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.message import Message, encode_batch
from ferrymq.remoting.certs import make_ca, make_cert
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.eventloop import run
from ferrymq.remoting.headers import CreateTopicRequestHeader, SendMessageRequestHeader
from ferrymq.remoting.tls import ClientTls

TOPIC = "SecurityBench"
BODY = b"x" * 1024
AK, SK = "benchAccess", "benchSecret"
ACL = f"""\
accounts:
  - accessKey: {AK}
    secretKey: {SK}
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(pid: int, name: str, job: Any) -> dict[str, Any]:
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    n = await job
    seconds = time.perf_counter() - t0
    cpu = cpu_seconds(pid) - cpu0
    return {
        "name": name,
        "messages": n,
        "seconds": round(seconds, 3),
        "msgs_per_s": round(n / seconds, 1),
        "broker_cpu_us_per_msg": round(cpu / max(1, n) * 1e6, 1),
    }


async def send_single(client: RemotingClient, addr: str, count: int, cap: float) -> int:
    deadline = time.perf_counter() + cap
    for i in range(count):
        ext = SendMessageRequestHeader(producer_group="bench", topic=TOPIC, queue_id=0).to_ext_v2()
        resp = await client.invoke(
            addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, BODY)
        )
        assert resp.code == 0, resp.remark
        if time.perf_counter() > deadline:
            return i + 1
    return count


async def send_batched(client: RemotingClient, addr: str, count: int, cap: float) -> int:
    body = encode_batch([Message(TOPIC, BODY) for _ in range(64)])
    window = asyncio.Semaphore(16)
    deadline = time.perf_counter() + cap
    sent = 0

    async def one(queue_id: int) -> None:
        nonlocal sent
        if time.perf_counter() > deadline:
            return
        ext = SendMessageRequestHeader(
            producer_group="bench", topic=TOPIC, queue_id=queue_id, batch=True
        ).to_ext_v2()
        async with window:
            resp = await client.invoke(
                addr, RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, ext, body), 60
            )
            assert resp.code == 0, resp.remark
            sent += 64

    await asyncio.gather(*(one(i % 8) for i in range(count // 64)))
    return sent


def signer(request: RemotingCommand) -> None:
    sign_fields(request.ext_fields, request.body_bytes() or None, AK, SK)


async def bench_one(
    name: str, addr: str, pid: int, acl: bool, tls: ClientTls | None, singles: int, batched: int
) -> list[dict[str, Any]]:
    client = RemotingClient(
        rpc_hook=signer if acl else None, ssl_context=tls.context() if tls else None
    )
    try:
        header = CreateTopicRequestHeader(topic=TOPIC, read_queue_nums=8, write_queue_nums=8)
        resp = await client.invoke(
            addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext())
        )
        assert resp.code == 0, resp.remark
        # warm-up: connection, handshake, first appends
        await send_single(client, addr, 200, 10)
        return [
            {
                "setup": name,
                **await measure(pid, "send_single", send_single(client, addr, singles, 20)),
            },
            {
                "setup": name,
                **await measure(pid, "send_batched", send_batched(client, addr, batched, 60)),
            },
        ]
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--singles", type=int, default=3000)
    parser.add_argument("--batched", type=int, default=64_000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="security-bench-") as tmp:
        root = Path(tmp)
        ca = make_ca(root)
        server = make_cert(root, ca, "server")
        (root / "plain_acl.yml").write_text(ACL)
        acl_conf = {"aclEnable": "true", "aclFilePath": str(root / "plain_acl.yml")}
        tls_conf = {
            "tls.server.mode": "enforcing",
            "tls.server.certPath": str(server.cert),
            "tls.server.keyPath": str(server.key),
        }
        client_tls = ClientTls(trust_cert_path=ca.cert, auth_server=True)
        setups: list[tuple[str, dict[str, str], bool, ClientTls | None]] = [
            ("plain", {}, False, None),
            ("acl", acl_conf, True, None),
            ("tls", tls_conf, False, client_tls),
            ("acl+tls", {**acl_conf, **tls_conf}, True, client_tls),
        ]
        for name, conf, acl, tls in setups:
            with LocalCluster(
                root / name,
                groups=1,
                namesrv_port=0,
                broker_port=0,
                mapped_file_size_commit_log=256 * 1024 * 1024,
                extra_conf=conf,
            ) as cluster:
                pid = cluster.brokers[0].pid
                addr = cluster.broker_addrs[0]
                results.extend(
                    run(bench_one(name, addr, pid, acl, tls, args.singles, args.batched))
                )
    base = {r["name"]: r["msgs_per_s"] for r in results if r["setup"] == "plain"}
    base_cpu = {r["name"]: r["broker_cpu_us_per_msg"] for r in results if r["setup"] == "plain"}
    for r in results:
        r["ratio_to_plain"] = round(r["msgs_per_s"] / base[r["name"]], 2)
        r["cpu_ratio_to_plain"] = round(
            r["broker_cpu_us_per_msg"] / max(0.1, base_cpu[r["name"]]), 2
        )
    out = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_average": os.getloadavg(),
        "results": results,
    }
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
