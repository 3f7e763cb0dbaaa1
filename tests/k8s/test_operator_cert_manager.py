"""spec.tls.issuerRef with cert-manager's real CRDs, and the operator's calls under mutual TLS, on a
real kube-apiserver 1.20 with a real ``ferrymq`` broker on 127.0.0.1.

cert-manager's CRDs (Certificate, Issuer, ClusterIssuer; trimmed copies of the upstream YAML in
``cert_manager/``, source noted in each file) are installed into the API server. cert-manager's
controller cannot run here (no image, no registry), so ``MockCertManagerController``, a mock of
that controller, plays its part for CA Issuers: it signs each Certificate with the Issuer's CA
into ``spec.secretName`` and sets the Certificate's Ready condition, and re-signs on request (a
renewal). There is no kubelet either: the test plays it for one broker pod, writing the pod's
Secret volumes from the API server as the kubelet does and starting ``ferrymq broker`` from the
ConfigMap and the env the operator wrote.

Shown: the operator creates a Certificate with the right dnsNames/usages/secretName, waits for it,
the broker serves the Secret's certificate, status.certificates shows its expiry, and a renewal
reaches the running broker without a restart. With ``needClientAuth: require`` the operator's own
admin calls (a Topic created on the broker) present the pods' certificate and sign with the
operator account; a Broker that does not ask for client certificates gets its Topic refused,
with a condition that says a client certificate is required.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import importlib
import os
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import javaproperties
import kopf
import pytest
from cli_process import Proc
from ferrymq.broker.local_cluster import pick_free_port
from ferrymq.client.admin import AdminClient
from ferrymq.client.credentials import ClientSecurity, SessionCredentials
from ferrymq.remoting.certs import make_ca, make_cert
from ferrymq.remoting.tls import ClientTls
from ferrymq_operator.builders import names
from ferrymq_operator.security import ca
from kubernetes import client as k8s
from pod_emulation import local_paths, pod_env, project, write_properties

from k8s.cert_manager_env import (
    CM_GROUP,
    CM_VERSION,
    MockCertManagerController,
    b64,
    install_cert_manager_crds,
    secret_data,
    uninstall_cert_manager_crds,
)
from k8s.control_plane import KubeApi
from k8s.operator_env import GROUP, VERSION, Cluster, ferrymq_crds, wait_for

__all__ = ["ferrymq_crds"]

CLOSED_PORT = "127.0.0.1:9"


@dataclass
class LiveAddresses:
    """Stand-in for cluster DNS (no cluster network here): Broker name -> the local broker that
    plays its group 0; filled in once that broker runs."""

    brokers: dict[str, str] = field(default_factory=dict)
    namesrv_addr: str | None = None

    def broker(self, broker: str, namespace: str, group: int) -> str:
        return self.brokers.get(broker, CLOSED_PORT) if group == 0 else CLOSED_PORT

    def namesrv(self, broker_body: Any) -> str | None:
        return self.namesrv_addr


@pytest.fixture(scope="module")
def addresses() -> LiveAddresses:
    return LiveAddresses()


@pytest.fixture(scope="module")
def mtls_operator(
    kube_api: KubeApi, ferrymq_crds: list[str], addresses: LiveAddresses
) -> Iterator[None]:
    """The whole operator in a thread, with ``addresses`` in its memo (topic admin calls)."""
    with kube_api.api_client() as api_client:
        install_cert_manager_crds(api_client)
    failures: list[BaseException] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUBECONFIG", str(kube_api.kubeconfig_path))
        mp.setenv("FERRYMQ_OPERATOR_RESYNC_SECONDS", "3")
        mp.setenv("FERRYMQ_OPERATOR_RETRY_DELAY_SECONDS", "1")
        mp.setenv("FERRYMQ_OPERATOR_ADMIN_TIMEOUT_SECONDS", "3")
        importlib.import_module("ferrymq_operator.handlers")
        stop, ready = threading.Event(), threading.Event()
        memo = kopf.Memo(topic_addresses=addresses)

        def target() -> None:
            try:
                asyncio.run(
                    kopf.operator(
                        clusterwide=True,
                        standalone=True,
                        memo=memo,
                        stop_flag=stop,
                        ready_flag=ready,
                    )
                )
            except BaseException as error:  # reported by the fixture's teardown
                failures.append(error)

        thread = threading.Thread(target=target, name="ferrymq-operator", daemon=True)
        thread.start()
        assert ready.wait(60), f"the operator did not start: {failures}"
        try:
            yield
        finally:
            stop.set()
            thread.join(180)
    with kube_api.api_client() as api_client:
        uninstall_cert_manager_crds(api_client)
    assert not thread.is_alive(), "the operator did not stop"
    assert not failures, failures


@pytest.fixture
def cluster(kube_api: KubeApi, k8s_namespace: str) -> Iterator[Cluster]:
    with kube_api.api_client() as api_client:
        yield Cluster(api_client, k8s_namespace)


def create_custom(cluster: Cluster, kind: str, plural: str, name: str, spec: Any) -> None:
    group, version = (CM_GROUP, CM_VERSION) if kind.endswith("Issuer") else (GROUP, VERSION)
    body = {
        "apiVersion": f"{group}/{version}",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }
    cluster.custom.create_namespaced_custom_object(group, version, cluster.ns, plural, body)


def reason_of(cluster: Cluster, plural: str, name: str, reason: str) -> dict[str, Any] | None:
    body = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, cluster.ns, plural, name)
    for cond in (body.get("status") or {}).get("conditions") or []:
        if cond.get("reason") == reason:
            found: dict[str, Any] = cond
            return found
    return None


def served_certificate(addr: str, client: ClientTls) -> bytes:
    """DER of the certificate a TLS server presents (handshake with ``client``'s context)."""
    host, port = addr.rsplit(":", 1)
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        client.context().wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


class BrokerPod:
    """The kubelet's part for pod ``<broker>-broker-0-0``: Secret volumes from the API server,
    the ConfigMap's broker.conf with the mount points moved under ``root``, the container env."""

    def __init__(self, cluster: Cluster, broker: str, root: Path) -> None:
        self.cluster, self.root = cluster, root
        sts = cluster.statefulset(f"{broker}-broker-0")
        self.pod = cluster.api_client.sanitize_for_serialization(sts)["spec"]["template"]["spec"]
        cm = cluster.configmap(f"{broker}-broker-0-config")
        self.conf: dict[str, str] = javaproperties.loads(cm.data["broker-0.conf"])
        self.secrets: dict[str, dict[str, str]] = {}
        root.mkdir()

    def sync_volumes(self) -> bool:
        """Write every Secret volume as the kubelet does; True when a Secret changed."""
        changed = False
        for volume in self.pod["volumes"]:
            refs = []
            if "projected" in volume:
                refs = [s["secret"] for s in volume["projected"]["sources"] if "secret" in s]
            elif "secret" in volume:
                refs = [{"name": volume["secret"]["secretName"]}]
            if not refs:
                continue
            files: dict[str, str] = {}
            for ref in refs:
                data = secret_data(self.cluster.core, self.cluster.ns, ref["name"])
                assert data is not None, f"Secret {ref['name']} of volume {volume['name']}"
                if self.secrets.get(ref["name"]) != data:
                    self.secrets[ref["name"]] = data
                    changed = True
                items = ref.get("items")
                files.update({i["path"]: data[i["key"]] for i in items} if items else dict(data))
            if changed or not (self.root / volume["name"]).exists():
                project(self.root / volume["name"], files)
        return changed

    def start(self, namesrv_addr: str) -> Proc:
        self.sync_volumes()
        conf = local_paths(self.conf, self.root)
        conf.update(
            {
                "brokerIP1": "127.0.0.1",
                "bindAddress": "127.0.0.1",
                "listenPort": "0",
                "haListenPort": str(pick_free_port("127.0.0.1")),
                "namesrvAddr": namesrv_addr,
                "storePathRootDir": str(self.root / "store"),
                "mappedFileSizeCommitLog": "1048576",
            }
        )
        env = pod_env(self.pod["containers"][0]["env"], self.secrets, self.root)
        self.env = env
        return Proc(
            ["broker", "-c", str(write_properties(self.root / "broker.conf", conf))], self.root, env
        )


def test_cert_manager_issues_and_renews_and_the_operator_speaks_mutual_tls(
    cluster: Cluster, mtls_operator: None, addresses: LiveAddresses, tmp_path: Path
) -> None:
    ns = cluster.ns
    now = datetime.datetime.now(datetime.UTC)
    corp = ca.new_ca("corp CA", now, 400)
    cluster.core.create_namespaced_secret(
        ns,
        {
            "metadata": {"name": "corp-ca-keypair"},
            "type": "kubernetes.io/tls",
            "data": b64({"tls.crt": corp.cert_pem, "tls.key": corp.key_pem}),
        },
    )
    create_custom(
        cluster, "Issuer", "issuers", "corp-ca", {"ca": {"secretName": "corp-ca-keypair"}}
    )
    cluster.create("nameservers", "routes", {"replicas": 1})
    tls_spec = {
        "mode": "enforcing",
        "needClientAuth": "require",
        "issuerRef": {"name": "corp-ca", "kind": "Issuer"},
    }
    base = {"nameServerRef": {"name": "routes"}, "replicasPerGroup": 1, "storage": {"size": "1Gi"}}
    cluster.create("brokers", "issued", {**base, "acl": {}, "tls": tls_spec})

    # the local NameServer the broker registers with (TLS: the pod's calls use TLS under
    # enforcing), with a certificate of its own
    pki = tmp_path / "pki"
    pki.mkdir()
    ns_ca = make_ca(pki)
    ns_cert = make_cert(pki, ns_ca, "namesrv", hosts=("127.0.0.1",))
    ns_conf = tmp_path / "namesrv.conf"
    ns_conf.write_text(
        f"tls.server.mode=permissive\ntls.server.certPath={ns_cert.cert}\n"
        f"tls.server.keyPath={ns_cert.key}\n"
    )
    procs: list[Proc] = []
    with MockCertManagerController(cluster.api_client, ns) as controller:
        try:
            plain_env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMQ_")}
            namesrv = Proc(
                ["namesrv", "-c", str(ns_conf), "--listen-port", "0", "--bind", "127.0.0.1"],
                tmp_path,
                plain_env,
            )
            procs.append(namesrv)
            ns_port = namesrv.wait_line(r"NameServer ready on port (\d+)").group(1)
            ns_addr = f"127.0.0.1:{ns_port}"
            addresses.namesrv_addr = ns_addr

            # the Certificate the operator asks for
            def certificate() -> dict[str, Any] | None:
                try:
                    got: dict[str, Any] = cluster.custom.get_namespaced_custom_object(
                        CM_GROUP, CM_VERSION, ns, "certificates", "issued-broker-tls"
                    )
                except k8s.ApiException as exc:
                    if exc.status == 404:
                        return None
                    raise
                return got

            cert = wait_for("the Certificate", certificate, timeout=120)
            spec = cert["spec"]
            assert spec["secretName"] == "issued-broker-tls"
            assert spec["issuerRef"] == {"name": "corp-ca", "kind": "Issuer", "group": CM_GROUP}
            assert spec["usages"] == ["server auth", "client auth"]
            svc = f"{names.broker_headless_service('issued')}.{ns}.svc"
            assert f"*.{svc}.cluster.local" in spec["dnsNames"]
            assert f"*.{svc}" in spec["dnsNames"] and "localhost" in spec["dnsNames"]
            assert spec["ipAddresses"] == ["127.0.0.1"]
            assert spec["privateKey"]["algorithm"] == "ECDSA"  # kept by the real schema

            # signed by the mock controller; the operator goes on and reports the expiry
            wait_for("the StatefulSet", lambda: cluster.statefulset("issued-broker-0"))
            issued = secret_data(cluster.core, ns, "issued-broker-tls")
            assert issued is not None and ca.signed_by(issued["tls.crt"], corp.cert_pem)
            first_expiry = ca.info(issued["tls.crt"]).not_after.strftime("%Y-%m-%dT%H:%M:%SZ")

            def reported() -> list[str] | None:
                status = (cluster.get("brokers", "issued") or {}).get("status") or {}
                found = [c["notAfter"] for c in status.get("certificates") or []]
                return found or None

            assert wait_for("status.certificates", reported) == [first_expiry]

            # the broker pod, from what the operator wrote
            pod = BrokerPod(cluster, "issued", tmp_path / "pod")
            assert pod.conf["tls.server.need.client.auth"] == "require"
            broker = pod.start(ns_addr)
            procs.append(broker)
            port = broker.wait_line(r"ready on port (\d+)").group(1)
            addr = f"127.0.0.1:{port}"
            pid = broker.proc.pid
            own = ClientTls(
                cert_path=pod.root / "tls" / "tls.crt", key_path=pod.root / "tls" / "tls.key"
            )
            assert served_certificate(addr, own) == ssl.PEM_cert_to_DER_cert(issued["tls.crt"])

            # the operator's admin calls under mutual TLS + ACL: a Topic created on the broker
            addresses.brokers["issued"] = addr
            create_custom(
                cluster,
                "Topic",
                "topics",
                "payments",
                {"brokerRef": {"name": "issued"}, "name": "mtls-payments", "queues": 4},
            )
            cluster.wait_condition("topics", "payments", "Ready", "True")
            account = pod.secrets["ferrymq-operator-acl"]
            security = ClientSecurity(
                SessionCredentials(account["accessKey"], account["secretKey"]), own
            )

            async def topics() -> set[str]:
                async with AdminClient(ns_addr, timeout=5, security=security) as admin:
                    wrapper = await admin.instance.broker.get_all_topic_config(addr)
                return set(wrapper.topic_config_table)

            assert "mtls-payments" in asyncio.run(topics())

            # a Broker that does not ask for client certificates: the operator presents none,
            # the broker refuses, the Topic's condition says why
            cluster.create(
                "brokers",
                "nocert",
                {**base, "acl": {}, "tls": {**tls_spec, "needClientAuth": "none"}},
            )
            addresses.brokers["nocert"] = addr
            create_custom(
                cluster,
                "Topic",
                "topics",
                "refused",
                {"brokerRef": {"name": "nocert"}, "name": "refused-topic", "queues": 1},
            )
            cond = wait_for(
                "the refused Topic's condition",
                lambda: reason_of(cluster, "topics", "refused", "BrokerUnavailable"),
            )
            assert "client certificate" in cond["message"], cond
            assert "refused-topic" not in asyncio.run(topics())

            # renewal: cert-manager rewrites the Secret; the kubelet updates the volume; the
            # running broker serves the new certificate, and the status shows the new expiry
            controller.renew("issued-broker-tls")
            renewed = wait_for(
                "the renewed Secret",
                lambda: (
                    (d := secret_data(cluster.core, ns, "issued-broker-tls"))
                    and d["tls.crt"] != issued["tls.crt"]
                    and d
                ),
            )
            assert isinstance(renewed, dict)
            wait_for("the kubelet's volume update", lambda: pod.sync_volumes() or None)
            wait_for(
                "the renewed certificate served",
                lambda: (
                    served_certificate(addr, own) == ssl.PEM_cert_to_DER_cert(renewed["tls.crt"])
                    or None
                ),
            )
            assert broker.proc.poll() is None and broker.proc.pid == pid  # no restart
            new_expiry = ca.info(renewed["tls.crt"]).not_after.strftime("%Y-%m-%dT%H:%M:%SZ")
            assert new_expiry > first_expiry
            wait_for("the new expiry in the status", lambda: reported() == [new_expiry] or None)
            assert not controller.errors, controller.errors
        finally:
            for proc in reversed(procs):
                proc.stop()


class NamesrvPod(BrokerPod):
    """The kubelet's part for pod ``<namesrv>-namesrv-0``, as ``BrokerPod`` for a broker."""

    def __init__(self, cluster: Cluster, namesrv: str, root: Path) -> None:
        self.cluster, self.root = cluster, root
        sts = cluster.statefulset(names.namesrv_statefulset(namesrv))
        self.pod = cluster.api_client.sanitize_for_serialization(sts)["spec"]["template"]["spec"]
        cm = cluster.configmap(names.namesrv_configmap(namesrv))
        self.conf = javaproperties.loads(cm.data["namesrv.conf"])
        self.secrets = {}
        root.mkdir()

    def start(self, namesrv_addr: str = "") -> Proc:
        self.sync_volumes()
        conf = local_paths(self.conf, self.root)
        conf["kvConfigPath"] = str(self.root / "kv.json")
        self.env = pod_env(self.pod["containers"][0]["env"], self.secrets, self.root)
        path = write_properties(self.root / "namesrv.conf", conf)
        args = ["namesrv", "-c", str(path), "--listen-port", "0", "--bind", "127.0.0.1"]
        return Proc(args, self.root, self.env)


def test_one_cluster_ca_lets_operator_issued_nameserver_and_broker_speak_mutual_tls(
    cluster: Cluster, mtls_operator: None, addresses: LiveAddresses, tmp_path: Path
) -> None:
    """A NameServer with ``needClientAuth: require`` and a Broker, both with operator-issued
    certificates: one cluster CA (Secret ``<nameserver>-cluster-ca``) signs both, so the broker
    registers and the operator's calls work with no user action; a renewal of the CA reaches
    both running processes (new certificates served, the broker registers again), no restart."""
    ns = cluster.ns
    mtls = {"mode": "enforcing", "needClientAuth": "require"}
    cluster.create("nameservers", "hub", {"replicas": 1, "tls": mtls})
    cluster.create(
        "brokers",
        "spoke",
        {"nameServerRef": {"name": "hub"}, "replicasPerGroup": 1, "storage": {"size": "1Gi"}}
        | {"tls": mtls},
    )
    wait_for("the NameServer StatefulSet", lambda: cluster.statefulset("hub-namesrv"))
    wait_for("the Broker StatefulSet", lambda: cluster.statefulset("spoke-broker-0"))
    cluster.wait_condition("brokers", "spoke", "ReconcileFailed", "False")
    authority = wait_for("the cluster CA", lambda: secret_data(cluster.core, ns, "hub-cluster-ca"))
    for secret in ("hub-namesrv-tls", "spoke-broker-tls"):
        data = wait_for(secret, functools.partial(secret_data, cluster.core, ns, secret))
        assert data["ca.crt"] == authority["ca.crt"], secret
        assert ca.signed_by(data["tls.crt"], authority["ca.crt"]), secret
    assert secret_data(cluster.core, ns, "hub-namesrv-ca") is None
    assert secret_data(cluster.core, ns, "spoke-broker-ca") is None

    procs: list[Proc] = []
    try:
        ns_pod = NamesrvPod(cluster, "hub", tmp_path / "ns-pod")
        assert ns_pod.conf["tls.server.need.client.auth"] == "require"
        namesrv = ns_pod.start()
        procs.append(namesrv)
        ns_port = namesrv.wait_line(r"NameServer ready on port (\d+)").group(1)
        ns_addr = f"127.0.0.1:{ns_port}"
        addresses.namesrv_addr = ns_addr
        pod = BrokerPod(cluster, "spoke", tmp_path / "broker-pod")
        broker = pod.start(ns_addr)
        procs.append(broker)
        port = broker.wait_line(r"ready on port (\d+)").group(1)
        addr = f"127.0.0.1:{port}"
        addresses.brokers["spoke"] = addr
        ns_pid, broker_pid = namesrv.proc.pid, broker.proc.pid
        own = ClientTls(
            cert_path=pod.root / "tls" / "tls.crt", key_path=pod.root / "tls" / "tls.key"
        )

        async def route(topic: str) -> str:
            async with AdminClient(ns_addr, timeout=5, security=ClientSecurity(None, own)) as a:
                found = await a.instance.namesrv.get_route(topic)
            return str(found.to_json_obj()) if found is not None else ""

        async def registered() -> str:
            async with AdminClient(ns_addr, timeout=5, security=ClientSecurity(None, own)) as a:
                return str((await a.cluster_info()).to_json_obj())

        # the broker's registration over mutual TLS was accepted by the NameServer
        wait_for("the registration", lambda: addr in asyncio.run(registered()) or None)
        # the operator's calls present the pods' certificate: a Topic created on the broker,
        # and the broker's registration after the topic change reaches the NameServer
        create_custom(
            cluster, "Topic", "topics", "hub-a", {"brokerRef": {"name": "spoke"}, "queues": 2}
        )
        cluster.wait_condition("topics", "hub-a", "Ready", "True")
        wait_for("the route of hub-a", lambda: addr in asyncio.run(route("hub-a")) or None)

        # without a client certificate the NameServer refuses the handshake
        async def no_client_cert() -> None:
            bare = ClientSecurity(None, ClientTls())
            async with AdminClient(ns_addr, timeout=5, security=bare) as admin:
                await admin.cluster_info()

        with pytest.raises(Exception, match=r"(?i)certificate|TLS|handshake") as refused:
            asyncio.run(no_client_cert())
        print("the NameServer without a client certificate:", refused.value)

        # renewal: the CA is 5 days from expiry; the operator renews it (same key) and re-issues
        # both certificates; the kubelet updates both volumes; both processes reload them
        key = authority["ca.key"]
        now = datetime.datetime.now(datetime.UTC)
        short = ca.new_ca("hub ferrymq cluster CA", now, 5, key_pem=key)
        cluster.core.patch_namespaced_secret(
            "hub-cluster-ca", ns, {"data": b64({"ca.crt": short.cert_pem, "ca.key": key})}
        )
        renewed = wait_for(
            "the renewed CA",
            lambda: (
                (d := secret_data(cluster.core, ns, "hub-cluster-ca"))
                and d["ca.crt"] not in (authority["ca.crt"], short.cert_pem)
                and d
            ),
        )
        assert renewed["ca.key"] == key  # what was issued before stays trusted
        leaves = {}
        for secret in ("hub-namesrv-tls", "spoke-broker-tls"):
            leaves[secret] = wait_for(
                f"{secret} from the renewed CA",
                lambda s=secret: (
                    (d := secret_data(cluster.core, ns, s))
                    and d["ca.crt"] == renewed["ca.crt"]
                    and d
                ),
            )
        wait_for("the NameServer's volume update", lambda: ns_pod.sync_volumes() or None)
        wait_for("the broker's volume update", lambda: pod.sync_volumes() or None)
        for served_addr, secret in ((ns_addr, "hub-namesrv-tls"), (addr, "spoke-broker-tls")):
            want = ssl.PEM_cert_to_DER_cert(leaves[secret]["tls.crt"])
            wait_for(
                f"the renewed certificate served at {secret}",
                lambda a=served_addr, w=want: served_certificate(a, own) == w or None,
            )
        # a new topic: the operator's call and the broker's registration, with the new certs
        create_custom(
            cluster, "Topic", "topics", "hub-b", {"brokerRef": {"name": "spoke"}, "queues": 2}
        )
        cluster.wait_condition("topics", "hub-b", "Ready", "True")
        wait_for("the route of hub-b", lambda: addr in asyncio.run(route("hub-b")) or None)
        assert namesrv.proc.pid == ns_pid and broker.proc.pid == broker_pid
        assert namesrv.proc.poll() is None and broker.proc.poll() is None
    finally:
        for proc in reversed(procs):
            proc.stop()
