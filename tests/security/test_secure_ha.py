"""A SYNC_MASTER/SLAVE pair with everything on: ACL on both brokers, TLS enforcing with mutual
authentication on the remoting ports, and TLS on the HA link (tls.ha.enable). The slave
replicates over TLS (its CommitLog equals the master's), copies metadata from the master through
the signed, TLS outer client, and a plaintext peer cannot reach the HA port."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from ferrymq.acl.settings import AclSettings
from ferrymq.broker.app import BrokerApp
from ferrymq.broker.config import BrokerConfig
from ferrymq.client.credentials import ClientSecurity, SessionCredentials
from ferrymq.client.instance import ClientInstance
from ferrymq.client.producer import Producer
from ferrymq.ha.config import HASettings
from ferrymq.message import Message
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.remoting.tls import ClientTls, TlsSettings
from ferrymq.store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from security_helpers import ADMIN_AK, ADMIN_SK, PLAIN_ACL, CertFiles, make_ca, make_cert, wait_for


def digest(directory: Path) -> list[tuple[str, str]]:
    return [
        (p.name, hashlib.sha256(p.read_bytes()).hexdigest()) for p in sorted(directory.iterdir())
    ]


@pytest.fixture
async def secure_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[NamesrvApp, BrokerApp, BrokerApp, dict[str, CertFiles]]]:
    ca = make_ca(tmp_path)
    pki = {
        "ca": ca,
        "master": make_cert(tmp_path, ca, "master"),
        "slave": make_cert(tmp_path, ca, "slave"),
        "client": make_cert(tmp_path, ca, "client", server=False),
    }
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(PLAIN_ACL)
    # the brokers' own calls (slave sync, registration) sign with these credentials
    monkeypatch.setenv("FERRYMQ_ACCESS_KEY", ADMIN_AK)
    monkeypatch.setenv("FERRYMQ_SECRET_KEY", ADMIN_SK)
    namesrv = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", kv_config_path=tmp_path / "kv"),
        acl_settings=AclSettings(acl_enable=True, acl_file_path=acl),
        tls_settings=TlsSettings.model_validate(
            {
                "tls.server.mode": "enforcing",
                "tls.server.certPath": str(pki["master"].cert),
                "tls.server.keyPath": str(pki["master"].key),
            }
        ),
    )
    await namesrv.start()

    def broker(name: str, broker_id: int, role: BrokerRole) -> BrokerApp:
        tls = TlsSettings.model_validate(
            {
                "tls.server.mode": "enforcing",
                "tls.server.certPath": str(pki[name].cert),
                "tls.server.keyPath": str(pki[name].key),
                "tls.server.trustCertPath": str(ca.cert),
                "tls.server.need.client.auth": "require",
                "tls.ha.enable": "true",
                "tls.enable": "true",
                "tls.client.certPath": str(pki[name].cert),
                "tls.client.keyPath": str(pki[name].key),
                "tls.client.trustCertPath": str(ca.cert),
                "tls.client.authServer": "true",
            }
        )
        return BrokerApp(
            BrokerConfig(
                broker_cluster_name="SecureCluster",
                broker_name="broker-secure",
                broker_id=broker_id,
                broker_ip1="127.0.0.1",
                bind_address="127.0.0.1",
                listen_port=0,
                namesrv_addr=namesrv.addr,
            ),
            MessageStoreConfig(
                store_path_root_dir=tmp_path / name,
                mapped_file_size_commit_log=256 * 1024,
                mapped_file_size_consume_queue=20 * 1000,
                broker_role=role,
                flush_disk_type=FlushDiskType.SYNC_FLUSH,
            ),
            ha_settings=HASettings(ha_listen_port=0, ha_slave_sync_interval=200),
            acl_settings=AclSettings(acl_enable=True, acl_file_path=acl),
            tls_settings=tls,
        )

    master = broker("master", 0, BrokerRole.SYNC_MASTER)
    await master.start()
    slave = broker("slave", 1, BrokerRole.SLAVE)
    await slave.start()
    try:
        yield namesrv, master, slave, pki
    finally:
        await slave.stop()
        await master.stop()
        await namesrv.stop()


async def test_replication_and_metadata_sync_over_tls_with_acl(
    secure_pair: tuple[NamesrvApp, BrokerApp, BrokerApp, dict[str, CertFiles]],
) -> None:
    namesrv, master, slave, pki = secure_pair
    await wait_for(
        lambda: master.ha is not None and master.ha.service.connection_count == 1, 30, "slave"
    )
    instance = ClientInstance(
        namesrv.addr,
        security=ClientSecurity(
            SessionCredentials("appKey0001", "appSecret001"),
            ClientTls(
                trust_cert_path=pki["ca"].cert,
                auth_server=True,
                cert_path=pki["client"].cert,
                key_path=pki["client"].key,
            ),
        ),
    )
    producer = Producer("pg", instance=instance)
    await producer.start()
    try:
        for i in range(30):
            result = await producer.send(Message("allowed", f"secure-{i}".encode() * 50))
            assert result.status.name == "SEND_OK", result
    finally:
        await producer.shutdown()
        await instance.shutdown()
    assert master.store is not None and slave.store is not None
    await wait_for(
        lambda: (
            slave.store is not None
            and master.store is not None
            and slave.store.max_phy_offset == master.store.max_phy_offset
        ),
        30,
        "replica",
    )
    assert digest(slave.store.config.commit_log_dir) == digest(master.store.config.commit_log_dir)
    # the slave copied the topic (created on the master by the first send) through the
    # signed TLS outer client
    await wait_for(lambda: "allowed" in slave.topics.table, 30, "slave metadata sync")

    # the HA port speaks TLS only: a plaintext peer gets no replication stream
    ha_port = master.ha.service.master.port if master.ha and master.ha.service.master else 0
    reader, writer = await asyncio.open_connection("127.0.0.1", ha_port)
    writer.write((0).to_bytes(8, "big"))  # a slave's offset report, in plaintext
    await writer.drain()
    data = await asyncio.wait_for(reader.read(100), 10)
    assert not data.startswith((0).to_bytes(8, "big"))  # no transfer frame; a TLS alert or EOF
    writer.close()
    assert master.ha is not None and master.ha.service.connection_count == 1
