"""What the operator configures, run by real ``ferrymq`` processes with the broker's ACL/TLS.

The NameServer and the broker start from the namesrv.conf / broker.conf the operator builds, with
the Secret volumes laid out as the kubelet does (``..data`` symlink swapped atomically on update)
and the environment of the pod template. Shown:

* the operator's own admin calls (GET_BROKER_RUNTIME_INFO of the roll-out, the topic copy) sign
  with the namespace's account and use TLS, and are refused without;
* the probe the pod runs (``python -m ferrymq.cli.probe``) passes with the pod's environment (the
  operator account, TLS) and fails without it (enforcing refuses plaintext, ACL refuses unsigned);
* a user account from the ACL Secret produces over TLS; rotating that Secret in place (new
  secretKey) reaches the running broker without a restart: the old key is refused, the new one
  accepted, the broker PID unchanged;
* certificates issued by the operator's CA serve the broker's TLS port, and a renewed one written
  into the volume is served to new connections by the same process.
"""

from __future__ import annotations

import asyncio
import datetime
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from cli_process import Proc
from ferrymq.broker.local_cluster import pick_free_port
from ferrymq.client.credentials import ClientSecurity
from ferrymq_operator import broker_admin, lifecycle
from ferrymq_operator.builders import broker as broker_builder
from ferrymq_operator.builders import namesrv as namesrv_builder
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import parse_broker_spec, parse_nameserver_spec
from ferrymq_operator.security import builders, ca, decisions, session
from ferrymq_operator.topics import admin as topics_admin
from pod_emulation import local_paths, pod_env, project, run, write_properties

NOW = datetime.datetime.now(datetime.UTC)
APP_ACL = "accounts:\n  - accessKey: appKey0001\n    secretKey: {sk}\n    defaultTopicPerm: PUB\n"


def _der(pem: str) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem)


def test_operator_configuration_runs_secured_brokers(tmp_path: Path) -> None:
    ns_owner = Owner("ferrymq.io/v1alpha1", "NameServer", "routes", "prod", "uid-ns")
    owner = Owner("ferrymq.io/v1alpha1", "Broker", "orders", "prod", "uid-b")
    ns_spec = parse_nameserver_spec({"tls": {}, "acl": {}})
    spec = parse_broker_spec(
        {
            "nameServerRef": {"name": "routes"},
            "replicasPerGroup": 1,
            "acl": {"secretName": "app-accounts"},
            "tls": {"mode": "enforcing"},
        }
    )
    # the Secrets the operator makes (and the user's)
    secrets: dict[str, dict[str, str]] = {}
    ca_keys: dict[str, str] = {}
    account = decisions.plan_operator_acl(None)
    assert account is not None
    secrets[builders.OPERATOR_ACL_SECRET] = account  # one per namespace
    for who, component in ((ns_owner, "namesrv"), (owner, "broker")):
        tls = spec.tls
        assert tls is not None
        authority = decisions.plan_ca(None, tls, who.name, NOW)
        assert authority is not None
        sans = builders.server_names(who, builders.service_names(who, component), "cluster.local")
        issued = decisions.plan_server_cert(None, authority, tls, who.name, sans, NOW)
        assert issued is not None
        secrets[builders.server_cert_secret(who.name, component)] = issued
        ca_keys[f"{who.name}-{component}"] = authority.key_pem
    secrets["app-accounts"] = {"plain_acl.yml": APP_ACL.format(sk="appSecret-1")}

    def volumes(root: Path, volume_list: list[dict[str, Any]]) -> None:
        for volume in volume_list:
            if "projected" in volume:
                files = {}
                for source in volume["projected"]["sources"]:
                    for item in source["secret"]["items"]:
                        files[item["path"]] = secrets[source["secret"]["name"]][item["key"]]
                project(root / "acl", files)
            elif "secret" in volume:
                project(root / "tls", secrets[volume["secret"]["secretName"]])

    # NameServer
    ns_root = tmp_path / "ns"
    ns_root.mkdir()
    ns_sts = namesrv_builder.statefulset(ns_owner, ns_spec)["spec"]["template"]["spec"]
    volumes(ns_root, ns_sts["volumes"])
    ns_conf = local_paths(namesrv_builder.namesrv_conf(ns_spec), ns_root)
    ns_conf["kvConfigPath"] = str(ns_root / "kv.json")
    ns_env = pod_env(ns_sts["containers"][0]["env"], secrets, ns_root)
    namesrv = Proc(
        [
            "namesrv",
            "-c",
            str(write_properties(ns_root / "namesrv.conf", ns_conf)),
            "--listen-port",
            "0",
            "--bind",
            "127.0.0.1",
        ],
        ns_root,
        ns_env,
    )
    broker: Proc | None = None
    try:
        ns_port = namesrv.wait_line(r"NameServer ready on port (\d+)").group(1)
        ns_addr = f"127.0.0.1:{ns_port}"
        ns_probe = ["-m", "ferrymq.cli.probe", "--role", "namesrv", "--addr", ns_addr]
        assert run(ns_probe, ns_env).returncode == 0

        # Broker
        root = tmp_path / "broker"
        root.mkdir()
        sts = broker_builder.statefulset(owner, spec, ns_addr, 0)["spec"]["template"]["spec"]
        volumes(root, sts["volumes"])
        conf = local_paths(broker_builder.broker_conf(owner, spec, ns_addr, 0, 0), root)
        conf.update(
            {
                "brokerIP1": "127.0.0.1",
                "bindAddress": "127.0.0.1",
                "listenPort": "0",
                "haListenPort": str(pick_free_port("127.0.0.1")),
                "storePathRootDir": str(root / "store"),
                "mappedFileSizeCommitLog": "1048576",
            }
        )
        env = pod_env(sts["containers"][0]["env"], secrets, root)
        broker = Proc(
            ["broker", "-c", str(write_properties(root / "broker.conf", conf))], root, env
        )
        port = broker.wait_line(r"ready on port (\d+)").group(1)
        addr = f"127.0.0.1:{port}"

        probe = ["-m", "ferrymq.cli.probe", "--role", "broker", "--addr", addr, "--timeout", "5"]
        ok = run(probe, env)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        bare = {k: v for k, v in env.items() if not k.startswith("FERRYMQ_")}
        assert run(probe, bare).returncode != 0  # plaintext, unsigned: refused
        no_tls = {k: v for k, v in env.items() if k != "FERRYMQ_TLS_ENABLE"}
        assert run(probe, no_tls).returncode != 0  # enforcing refuses plaintext

        # the operator's own admin calls (roll-out checks, topic copy) sign with the account
        async def runtime_info(security: ClientSecurity | None) -> dict[str, str]:
            session.use(security)
            return await lifecycle.remoting_runtime_info(ns_addr, 5)(addr)

        async def topics(security: ClientSecurity | None) -> list[str]:
            session.use(security)
            found = await broker_admin.RemotingTopicAdmin(5).topics(addr)
            return [t.topic_name for t in found]

        async def topic_names(security: ClientSecurity | None) -> list[str]:
            session.use(security)  # as the Topic reconcile sets it (session.use_for_broker)
            return list(await topics_admin.RemotingObjectAdmin(5).topics(addr))

        operator_security = session.for_cluster(spec, account)
        assert operator_security is not None
        assert "commitLogMaxOffset" in asyncio.run(runtime_info(operator_security))
        assert asyncio.run(topics(operator_security))
        assert asyncio.run(topic_names(operator_security))
        with pytest.raises(Exception, match=r"closed|unreachable"):
            asyncio.run(topic_names(None))
        with pytest.raises(Exception, match="closed"):
            asyncio.run(runtime_info(None))  # plaintext: enforcing closes the connection
        unsigned = ClientSecurity(None, operator_security.tls)
        with pytest.raises(Exception, match=r"NO_PERMISSION|\(16\)|AccessKey"):
            asyncio.run(runtime_info(unsigned))  # TLS but unsigned: refused by the ACL

        def produce(secret_key: str) -> subprocess.CompletedProcess[str]:
            args = ["-m", "ferrymq.cli.main", "--access-key", "appKey0001"]
            args += ["--secret-key", secret_key, "--tls"]
            args += ["produce", "-n", ns_addr, "-t", "payments", "-c", "2"]
            return run(args, bare)

        first = produce("appSecret-1")
        assert first.returncode == 0 and "sent 2/2" in first.stdout, first.stdout + first.stderr

        # rotation: the user edits the Secret; the kubelet swaps the volume; no restart
        pid = broker.proc.pid
        secrets["app-accounts"] = {"plain_acl.yml": APP_ACL.format(sk="appSecret-2")}
        volumes(root, sts["volumes"])
        deadline = time.monotonic() + 30
        while produce("appSecret-1").returncode == 0:
            assert time.monotonic() < deadline, "the old secretKey is still accepted after 30s"
        second = produce("appSecret-2")
        assert second.returncode == 0 and "sent 2/2" in second.stdout, second.stdout
        assert broker.proc.poll() is None and broker.proc.pid == pid

        # certificate renewal: the operator writes a new certificate into the Secret; new
        # connections get it, same process
        served = ssl.get_server_certificate(("127.0.0.1", int(port)), timeout=10)
        old_cert = secrets["orders-broker-tls"]["tls.crt"]
        assert _der(served) == _der(old_cert)
        tls = spec.tls
        assert tls is not None
        authority = ca.CertPair(secrets["orders-broker-tls"]["ca.crt"], ca_keys["orders-broker"])
        sans = builders.server_names(owner, builders.service_names(owner, "broker"), "local")
        renewed = decisions.plan_server_cert(None, authority, tls, "orders", sans, NOW)
        assert renewed is not None
        secrets["orders-broker-tls"] = renewed
        volumes(root, sts["volumes"])
        deadline = time.monotonic() + 30
        while _der(ssl.get_server_certificate(("127.0.0.1", int(port)), timeout=10)) != _der(
            renewed["tls.crt"]
        ):
            assert time.monotonic() < deadline, "the renewed certificate is not served after 30s"
        assert run(probe, env).returncode == 0
        assert broker.proc.poll() is None and broker.proc.pid == pid
    finally:
        if broker is not None:
            broker.stop()
        namesrv.stop()


def test_operator_calls_and_probes_under_mutual_tls(tmp_path: Path) -> None:
    """``needClientAuth: require``: the operator's admin calls (roll-out check, topic create and
    read, the namesrvAddr push) present the certificate of the pods' Secret, as the probes do;
    without one the broker refuses the handshake and the caller says so."""
    from ferrymq_operator.topics.plan import TopicState

    ns_owner = Owner("ferrymq.io/v1alpha1", "NameServer", "routes", "prod", "uid-ns")
    owner = Owner("ferrymq.io/v1alpha1", "Broker", "orders", "prod", "uid-b")
    ns_spec = parse_nameserver_spec({"tls": {}, "acl": {}})
    spec = parse_broker_spec(
        {
            "nameServerRef": {"name": "routes"},
            "replicasPerGroup": 1,
            "acl": {},
            "tls": {"mode": "enforcing", "needClientAuth": "require"},
        }
    )
    tls = spec.tls
    assert tls is not None
    secrets: dict[str, dict[str, str]] = {}
    account = decisions.plan_operator_acl(None)
    assert account is not None
    secrets[builders.OPERATOR_ACL_SECRET] = account
    for who, component in ((ns_owner, "namesrv"), (owner, "broker")):
        authority = decisions.plan_ca(None, tls, who.name, NOW)
        assert authority is not None
        sans = builders.server_names(who, builders.service_names(who, component), "cluster.local")
        issued = decisions.plan_server_cert(None, authority, tls, who.name, sans, NOW)
        assert issued is not None
        secrets[builders.server_cert_secret(who.name, component)] = issued

    def volumes(root: Path, volume_list: list[dict[str, Any]]) -> None:
        for volume in volume_list:
            if "projected" in volume:
                files = {}
                for source in volume["projected"]["sources"]:
                    for item in source["secret"]["items"]:
                        files[item["path"]] = secrets[source["secret"]["name"]][item["key"]]
                project(root / "acl", files)
            elif "secret" in volume:
                project(root / "tls", secrets[volume["secret"]["secretName"]])

    ns_root = tmp_path / "ns"
    ns_root.mkdir()
    ns_sts = namesrv_builder.statefulset(ns_owner, ns_spec)["spec"]["template"]["spec"]
    volumes(ns_root, ns_sts["volumes"])
    ns_conf = local_paths(namesrv_builder.namesrv_conf(ns_spec), ns_root)
    ns_conf["kvConfigPath"] = str(ns_root / "kv.json")
    ns_env = pod_env(ns_sts["containers"][0]["env"], secrets, ns_root)
    ns_args = ["namesrv", "-c", str(write_properties(ns_root / "namesrv.conf", ns_conf))]
    namesrv = Proc([*ns_args, "--listen-port", "0", "--bind", "127.0.0.1"], ns_root, ns_env)
    broker: Proc | None = None
    try:
        ns_port = namesrv.wait_line(r"NameServer ready on port (\d+)").group(1)
        ns_addr = f"127.0.0.1:{ns_port}"
        root = tmp_path / "broker"
        root.mkdir()
        sts = broker_builder.statefulset(owner, spec, ns_addr, 0)["spec"]["template"]["spec"]
        volumes(root, sts["volumes"])
        conf = local_paths(broker_builder.broker_conf(owner, spec, ns_addr, 0, 0), root)
        assert conf["tls.server.need.client.auth"] == "require"
        conf.update(
            {
                "brokerIP1": "127.0.0.1",
                "bindAddress": "127.0.0.1",
                "listenPort": "0",
                "haListenPort": str(pick_free_port("127.0.0.1")),
                "storePathRootDir": str(root / "store"),
                "mappedFileSizeCommitLog": "1048576",
            }
        )
        env = pod_env(sts["containers"][0]["env"], secrets, root)
        broker = Proc(
            ["broker", "-c", str(write_properties(root / "broker.conf", conf))], root, env
        )
        port = broker.wait_line(r"ready on port (\d+)").group(1)
        addr = f"127.0.0.1:{port}"

        # the pod's probe presents the pod's certificate (FERRYMQ_TLS_CERT_PATH/KEY_PATH)
        probe = ["-m", "ferrymq.cli.probe", "--role", "broker", "--addr", addr, "--timeout", "5"]
        ok = run(probe, env)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        no_cert = {
            k: v
            for k, v in env.items()
            if k not in (builders.ENV_TLS_CERT_PATH, builders.ENV_TLS_KEY_PATH)
        }
        refused_probe = run(probe, no_cert)
        assert refused_probe.returncode != 0, refused_probe.stdout

        pods_tls = secrets[builders.server_cert_secret("orders", "broker")]
        client_cert = decisions.client_certificate(pods_tls)
        assert client_cert is not None
        with_cert = session.for_cluster(spec, account, client_cert)
        assert with_cert is not None and with_cert.tls is not None
        assert with_cert.tls.cert_path is not None
        assert oct(with_cert.tls.cert_path.parent.stat().st_mode & 0o777) == "0o700"
        assert oct(Path(str(with_cert.tls.key_path)).stat().st_mode & 0o777) == "0o600"
        without_cert = session.for_cluster(spec, account, None)

        async def calls(security: ClientSecurity | None) -> tuple[dict[str, str], list[str]]:
            session.use(security)
            info = await lifecycle.remoting_runtime_info(ns_addr, 5)(addr)
            objects = topics_admin.RemotingObjectAdmin(5)
            await objects.put_topic(addr, "mtls-orders", TopicState(4, 4, 6, False), None)
            await lifecycle.remoting_config_update(ns_addr, 5)(addr, {"namesrvAddr": ns_addr})
            return info, list(await objects.topics(addr))

        info, topic_list = asyncio.run(calls(with_cert))
        assert "commitLogMaxOffset" in info
        assert "mtls-orders" in topic_list

        # without the client certificate: the handshake is refused, and the error says TLS
        with pytest.raises(Exception, match=r"(?i)certificate|TLS|handshake") as refused:
            asyncio.run(calls(without_cert))
        print("refusal without a client certificate:", refused.value)
        assert broker.proc.poll() is None  # the broker keeps serving
        assert run(probe, env).returncode == 0
    finally:
        if broker is not None:
            broker.stop()
        namesrv.stop()
