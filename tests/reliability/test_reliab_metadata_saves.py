"""Issue 23 item 8: concurrent KV config changes on a NameServer are all persisted (one writer at
a time, unique temp files, fsync, rename) and survive a restart; the shared atomic-write helper of
every metadata file takes concurrent writers of one path."""

from __future__ import annotations

import asyncio
import signal
import threading
from pathlib import Path

import orjson
from ferrymq.remoting.bodies import KVTable
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.store.json_file import read_json, write_json
from reliab_helpers import spawn, wait_exit, wait_ready, write_conf

NS = "ORDER_TOPIC_CONFIG"
PAIRS = 20


def _put(key: str, value: str) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.PUT_KV_CONFIG, {"namespace": NS, "key": key, "value": value}
    )


def _delete(key: str) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, {"namespace": NS, "key": key})


async def _kv_list(client: RemotingClient, addr: str) -> dict[str, str]:
    reply = await client.invoke(
        addr, RemotingCommand.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": NS})
    )
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    return dict(KVTable.decode(reply.body_bytes()).table)


async def test_pipelined_kv_changes_all_persist_and_survive_restart(tmp_path: Path) -> None:
    kv_path = tmp_path / "namesrv" / "kvConfig.json"
    conf = write_conf(
        tmp_path / "namesrv.conf",
        {"listenPort": "0", "bindAddress": "127.0.0.1", "kvConfigPath": str(kv_path)},
    )
    log = tmp_path / "namesrv.log"
    proc = spawn(["namesrv", "-c", str(conf)], log)
    clients = [RemotingClient() for _ in range(4)]
    try:
        addr = f"127.0.0.1:{await asyncio.to_thread(wait_ready, proc, log)}"
        # PAIRS pipelined pairs over four connections: put Topic<i>, then delete the odd ones
        calls = []
        for i in range(PAIRS):
            # Topic<2k> and Topic<2k+1> go over one connection (its requests apply in order;
            # across connections there is no order, so a delete could overtake its put)
            client = clients[(i // 2) % len(clients)]
            calls.append(client.invoke(addr, _put(f"Topic{i}", f"broker-a:{i}"), 10))
            calls.append(client.invoke(addr, _delete(f"Topic{i - 1 if i % 2 else i + 1000}"), 10))
        replies = await asyncio.gather(*calls)
        assert [r.code for r in replies] == [ResponseCode.SUCCESS] * (2 * PAIRS), [
            r.remark for r in replies if r.code
        ]
        # odd i deleted Topic<i-1>, even i a key that never existed: the odd topics remain
        expected = {f"Topic{i}": f"broker-a:{i}" for i in range(PAIRS) if i % 2 == 1}
        # every answer came after its change was on disk: the file holds the final table now
        on_disk = orjson.loads(kv_path.read_bytes())["configTable"][NS]
        assert on_disk == await _kv_list(clients[0], addr) == expected
        assert not [p.name for p in kv_path.parent.iterdir() if p.name.endswith(".tmp")]
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(wait_exit, proc, 30) == 0
        assert "persist failed" not in log.read_text()

        log2 = tmp_path / "namesrv2.log"
        proc = spawn(["namesrv", "-c", str(conf)], log2)
        addr = f"127.0.0.1:{await asyncio.to_thread(wait_ready, proc, log2)}"
        fresh = RemotingClient()
        clients.append(fresh)
        assert await _kv_list(fresh, addr) == expected
    finally:
        for client in clients:
            await client.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            if wait_exit(proc, 30) is None:
                proc.kill()


def test_concurrent_writers_of_one_metadata_file(tmp_path: Path) -> None:
    """Eight threads replacing topics.json 25 times each: no write fails, the file always parses
    as one whole version, no temp file is left behind."""
    path = tmp_path / "config" / "topics.json"
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def writer(n: int) -> None:
        start.wait()
        for i in range(25):
            try:
                write_json(path, {"writer": n, "round": i, "pad": "x" * (n * 500)})
            except BaseException as exc:  # collected: the assertion below names them
                errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors[:3]
    data = read_json(path)
    # the write that finished last is some writer's last one
    assert data["round"] == 24
    assert data["pad"] == "x" * (data["writer"] * 500)
    assert sorted(p.name for p in path.parent.iterdir()) == ["topics.json", "topics.json.bak"]
