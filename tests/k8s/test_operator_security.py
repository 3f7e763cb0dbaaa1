"""spec.acl / spec.tls / spec.networkPolicy against a real kube-apiserver 1.20 (operator in-process).

* an ACL Secret and a TLS setting become broker configuration (broker.conf keys, Secret volumes,
  the operator account's env), the cluster CA and the brokers' certificate Secrets are created and
  the status says when each certificate expires; a NetworkPolicy per group;
* editing the user's Secret and renewing a certificate near expiry change no pod template (the
  kubelet updates mounted Secrets; the broker reloads the files);
* bad input (missing Secret, Secret without the key, a user certificate near expiry) becomes a
  clear status condition.
"""

from __future__ import annotations

import base64
import datetime
import functools
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import javaproperties
import pytest
from ferrymq_operator.security import ca
from kopf.testing import KopfRunner
from kubernetes import client as k8s

from k8s.cert_manager_env import install_cert_manager_crds
from k8s.control_plane import KubeApi
from k8s.operator_env import Cluster, ferrymq_crds, operator, wait_for
from k8s.test_operator_rbac import service_account_kubeconfig

__all__ = ["ferrymq_crds", "operator", "service_account_kubeconfig"]

ACL_V1 = "accounts:\n  - accessKey: app\n    secretKey: app-secret-1\n    defaultTopicPerm: PUB\n"
ACL_V2 = "accounts:\n  - accessKey: app\n    secretKey: app-secret-2\n    defaultTopicPerm: PUB\n"


@pytest.fixture
def cluster(kube_api: KubeApi, k8s_namespace: str) -> Iterator[Cluster]:
    with kube_api.api_client() as api_client:
        yield Cluster(api_client, k8s_namespace)


def put_secret(cluster: Cluster, name: str, data: dict[str, str]) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }
    try:
        cluster.core.read_namespaced_secret(name, cluster.ns)
    except k8s.ApiException as exc:
        if exc.status != 404:
            raise
        cluster.core.create_namespaced_secret(cluster.ns, body)
        return
    # patch the data only: the type of an existing Secret is immutable
    cluster.core.patch_namespaced_secret(name, cluster.ns, {"data": body["data"]})


def secret_data(cluster: Cluster, name: str) -> dict[str, str] | None:
    try:
        secret = cluster.core.read_namespaced_secret(name, cluster.ns)
    except k8s.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}


def broker_conf(cluster: Cluster, name: str) -> dict[str, str]:
    cm = wait_for("the ConfigMap", lambda: cluster.configmap(f"{name}-broker-0-config"))
    conf: dict[str, str] = javaproperties.loads(cm.data["broker-0.conf"])
    return conf


def status_of(cluster: Cluster, name: str) -> dict[str, Any]:
    status: dict[str, Any] = (cluster.get("brokers", name) or {}).get("status") or {}
    return status


def network_policy(cluster: Cluster, name: str) -> dict[str, Any] | None:
    api = k8s.NetworkingV1Api(cluster.api_client)
    try:
        policy: dict[str, Any] = cluster.api_client.sanitize_for_serialization(
            api.read_namespaced_network_policy(name, cluster.ns)
        )
    except k8s.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return policy


def policy_gone(cluster: Cluster, name: str) -> bool:
    return network_policy(cluster, name) is None


def test_acl_and_tls_become_broker_configuration_and_rotation_rolls_nothing(
    cluster: Cluster, operator: KopfRunner
) -> None:
    # the brokers' own calls use TLS in enforcing mode, so the NameServer serves TLS too
    cluster.create("nameservers", "routes", {"replicas": 1, "tls": {}, "acl": {}})
    put_secret(cluster, "app-accounts", {"plain_acl.yml": ACL_V1})
    cluster.create(
        "brokers",
        "secure",
        {
            "nameServerRef": {"name": "routes"},
            "replicasPerGroup": 1,
            "storage": {"size": "1Gi"},
            "acl": {"secretName": "app-accounts"},
            "tls": {"mode": "enforcing", "validityDays": 90, "renewBeforeDays": 10},
            "networkPolicy": True,
        },
    )
    sts = wait_for("the StatefulSet", functools.partial(cluster.statefulset, "secure-broker-0"))
    conf = broker_conf(cluster, "secure")
    assert conf["aclEnable"] == "true"
    assert conf["aclFilePath"] == "/etc/ferrymq-acl"
    assert conf["tls.server.mode"] == "enforcing"
    assert conf["tls.server.certPath"] == "/etc/ferrymq-tls/tls.crt"
    pod = sts.spec.template.spec
    volumes = {v.name: v for v in pod.volumes}
    assert volumes["tls"].secret.secret_name == "secure-broker-tls"
    acl_sources = [s.secret.name for s in volumes["acl"].projected.sources]
    assert acl_sources == ["ferrymq-operator-acl", "app-accounts"]
    env = {e.name: e for e in pod.containers[0].env}
    assert env["FERRYMQ_ACCESS_KEY"].value_from.secret_key_ref.name == "ferrymq-operator-acl"
    assert env["FERRYMQ_TLS_ENABLE"].value == "true"

    # the operator's Secrets: account, cluster CA, the brokers' certificate signed by it
    account = wait_for("the operator account", lambda: secret_data(cluster, "ferrymq-operator-acl"))
    assert account["accessKey"] == "ferrymq-operator" and len(account["secretKey"]) >= 32
    assert account["secretKey"] in account["operator_acl.yml"]
    # one cluster CA per NameServer, signing its Brokers' certificates too (owned by it)
    authority = wait_for("the cluster CA", lambda: secret_data(cluster, "routes-cluster-ca"))
    ca_meta = cluster.core.read_namespaced_secret("routes-cluster-ca", cluster.ns).metadata
    assert [(r.kind, r.name) for r in ca_meta.owner_references] == [("NameServer", "routes")]
    server = wait_for("the certificate", lambda: secret_data(cluster, "secure-broker-tls"))
    assert server["ca.crt"] == authority["ca.crt"]
    assert ca.signed_by(server["tls.crt"], authority["ca.crt"])
    info = ca.info(server["tls.crt"])
    assert f"*.secure-broker-hs.{cluster.ns}.svc.cluster.local" in info.names
    tls_type = cluster.core.read_namespaced_secret("secure-broker-tls", cluster.ns).type
    assert tls_type == "kubernetes.io/tls"

    # status: which certificate expires when, and not within the renewal window
    certs = wait_for(
        "status.certificates",
        lambda: {c["secret"]: c for c in status_of(cluster, "secure").get("certificates") or []},
    )
    assert set(certs) == {"routes-cluster-ca", "secure-broker-tls"}
    assert certs["secure-broker-tls"]["notAfter"] == info.not_after.strftime("%Y-%m-%dT%H:%M:%SZ")
    cluster.wait_condition("brokers", "secure", "CertificateExpiring", "False", "Valid")

    # the NameServer: its own certificate (SANs of its Services), ACL keys, status
    ns_cert = wait_for(
        "the NameServer certificate", lambda: secret_data(cluster, "routes-namesrv-tls")
    )
    assert ca.signed_by(ns_cert["tls.crt"], authority["ca.crt"])  # the same CA
    assert ns_cert["ca.crt"] == authority["ca.crt"]
    assert secret_data(cluster, "routes-namesrv-ca") is None  # no per-component CA any more
    assert secret_data(cluster, "secure-broker-ca") is None
    assert f"routes-namesrv.{cluster.ns}.svc.cluster.local" in ca.info(ns_cert["tls.crt"]).names
    ns_conf = javaproperties.loads(
        wait_for("namesrv.conf", lambda: cluster.configmap("routes-namesrv-config")).data[
            "namesrv.conf"
        ]
    )
    assert ns_conf["tls.server.mode"] == "permissive" and ns_conf["aclEnable"] == "true"
    wait_for(
        "the NameServer's status.certificates",
        lambda: (
            len(
                (cluster.get("nameservers", "routes") or {}).get("status", {}).get("certificates")
                or []
            )
            == 2
        ),
    )

    policy = wait_for("the NetworkPolicy", lambda: network_policy(cluster, "secure-broker-0"))
    public, ha = policy["spec"]["ingress"]
    # 5557: the metrics port (metricsPromExporterPort), for Prometheus in another namespace
    assert sorted(p["port"] for p in public["ports"]) == [5557, 10909, 10911]
    assert [p["port"] for p in ha["ports"]] == [10912] and ha["from"]

    # rotation: the user's accounts change, and the brokers' certificate is 5 days from expiry
    # (renewBeforeDays 10): the operator renews it, yet no pod template changes, so nothing rolls
    before = cluster.statefulset("secure-broker-0")
    put_secret(cluster, "app-accounts", {"plain_acl.yml": ACL_V2})
    signer = ca.CertPair(authority["ca.crt"], authority["ca.key"])
    now = datetime.datetime.now(datetime.UTC)
    short = ca.issue(signer, "short", list(info.names), now, 5)
    put_secret(
        cluster,
        "secure-broker-tls",
        {"tls.crt": short.cert_pem, "tls.key": short.key_pem, "ca.crt": authority["ca.crt"]},
    )
    renewed = wait_for(
        "a renewed certificate",
        lambda: (
            (secret_data(cluster, "secure-broker-tls") or {}).get("tls.crt")
            not in (
                None,
                short.cert_pem,
            )
            and secret_data(cluster, "secure-broker-tls")
        ),
    )
    renewed_info = ca.info(renewed["tls.crt"])
    assert renewed_info.not_after - now > datetime.timedelta(days=80)
    assert ca.signed_by(renewed["tls.crt"], authority["ca.crt"])
    wait_for(
        "status to show the renewed certificate",
        lambda: any(
            c["secret"] == "secure-broker-tls"
            and c["notAfter"] == renewed_info.not_after.strftime("%Y-%m-%dT%H:%M:%SZ")
            for c in status_of(cluster, "secure").get("certificates") or []
        ),
    )
    cluster.wait_event("secure", "SecretWritten")
    after = cluster.statefulset("secure-broker-0")
    assert after.metadata.generation == before.metadata.generation
    assert after.spec.template == before.spec.template
    assert secret_data(cluster, "routes-cluster-ca") == authority  # the CA was kept
    assert secret_data(cluster, "ferrymq-operator-acl") == account  # the account too


def test_bad_security_secrets_become_conditions(cluster: Cluster, operator: KopfRunner) -> None:
    cluster.create("nameservers", "routes", {"replicas": 1})
    cluster.create(
        "brokers",
        "guarded",
        {
            "nameServerRef": {"name": "routes"},
            "replicasPerGroup": 1,
            "storage": {"size": "1Gi"},
            "acl": {"secretName": "missing-accounts"},
        },
    )
    cond = cluster.wait_condition(
        "brokers", "guarded", "ReconcileFailed", "True", "AclSecretInvalid"
    )
    assert "'missing-accounts' does not exist" in cond["message"]
    assert cluster.statefulset("guarded-broker-0") is None  # no pods that could not start

    put_secret(cluster, "missing-accounts", {"acl.yaml": ACL_V1})
    wait_for(
        "the missing-key message",
        lambda: (
            "has no key plain_acl.yml"
            in (cluster.condition("brokers", "guarded", "ReconcileFailed") or {}).get("message", "")
        ),
    )
    put_secret(cluster, "missing-accounts", {"plain_acl.yml": ACL_V1})
    wait_for("the StatefulSet", functools.partial(cluster.statefulset, "guarded-broker-0"))
    cluster.wait_condition("brokers", "guarded", "ReconcileFailed", "False")

    # a user certificate without its key, then a complete one that expires soon
    cluster.patch_spec("brokers", "guarded", {"tls": {"secretName": "user-certs"}})
    now = datetime.datetime.now(datetime.UTC)
    authority = ca.new_ca("user CA", now, 30)
    pair = ca.issue(authority, "user", ["localhost"], now, 5)
    put_secret(cluster, "user-certs", {"tls.crt": pair.cert_pem})
    cond = cluster.wait_condition(
        "brokers", "guarded", "ReconcileFailed", "True", "TlsSecretInvalid"
    )
    assert "lacks tls.key, ca.crt" in cond["message"]
    put_secret(
        cluster,
        "user-certs",
        {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem, "ca.crt": authority.cert_pem},
    )
    cond = cluster.wait_condition(
        "brokers", "guarded", "CertificateExpiring", "True", "WithinRenewalWindow"
    )
    assert "user-certs" in cond["message"] and "renew it" in cond["message"]
    [cert] = status_of(cluster, "guarded")["certificates"]
    assert cert["secret"] == "user-certs" and cert["issuedByOperator"] is False
    sts = cluster.statefulset("guarded-broker-0")
    volumes = {v.name: v for v in sts.spec.template.spec.volumes}
    assert volumes["tls"].secret.secret_name == "user-certs"
    assert secret_data(cluster, "guarded-broker-ca") is None  # no CA with a user's certificate
    assert secret_data(cluster, "routes-cluster-ca") is None


def test_network_policy_follows_the_groups_and_the_switch(
    cluster: Cluster, operator: KopfRunner
) -> None:
    cluster.create("nameservers", "routes", {"replicas": 1})
    spec = {
        "nameServerRef": {"name": "routes"},
        "groups": 2,
        "replicasPerGroup": 1,
        "storage": {"size": "1Gi", "deleteClaimOnScaleDown": True},
        "networkPolicy": True,
    }
    cluster.create("brokers", "fenced", spec)
    for group in range(2):
        wait_for(
            f"policy {group}", functools.partial(network_policy, cluster, f"fenced-broker-{group}")
        )
    cluster.patch_spec("brokers", "fenced", {"networkPolicy": False})
    for group in range(2):
        name = f"fenced-broker-{group}"
        wait_for(f"{name} to be deleted", functools.partial(policy_gone, cluster, name))
    cluster.wait_event("fenced", "Deleted")


def test_chart_rbac_covers_secrets_and_network_policies(
    kube_api: KubeApi,
    ferrymq_crds: list[str],
    k8s_namespace: str,
    service_account_kubeconfig: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The operator with only the chart's RBAC creates and renews its Secrets, reads the user's,
    and creates and deletes NetworkPolicies."""
    caplog.set_level(logging.INFO)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUBECONFIG", str(service_account_kubeconfig))
        mp.setenv("FERRYMQ_OPERATOR_RETRY_DELAY_SECONDS", "2")
        mp.setenv("FERRYMQ_OPERATOR_RESYNC_SECONDS", "5")
        # the chart's default RBAC: the release namespace only (here the test's namespace)
        args = ["run", "--standalone", "--namespace", k8s_namespace]
        args += ["-m", "ferrymq_operator.handlers"]
        with kube_api.api_client() as admin_client, KopfRunner(args, timeout=180) as runner:
            cluster = Cluster(admin_client, k8s_namespace)
            put_secret(cluster, "accounts", {"plain_acl.yml": ACL_V1})
            cluster.create("nameservers", "routes", {"replicas": 1, "tls": {}, "acl": {}})
            cluster.create(
                "brokers",
                "held",
                {
                    "nameServerRef": {"name": "routes"},
                    "replicasPerGroup": 1,
                    "storage": {"size": "1Gi"},
                    "acl": {"secretName": "accounts"},
                    "tls": {},
                    "networkPolicy": True,
                },
            )
            for name in ("routes-namesrv-tls", "held-broker-tls", "ferrymq-operator-acl"):
                wait_for(name, functools.partial(secret_data, cluster, name))
            wait_for("the policy", functools.partial(network_policy, cluster, "held-broker-0"))
            wait_for("the StatefulSet", functools.partial(cluster.statefulset, "held-broker-0"))
            cluster.patch_spec("brokers", "held", {"networkPolicy": False})
            wait_for("the policy deleted", functools.partial(policy_gone, cluster, "held-broker-0"))
    assert runner.exception is None
    denied = [
        r.getMessage()
        for r in caplog.records
        if "forbidden" in r.getMessage().lower() and "system:serviceaccount" in r.getMessage()
    ]
    assert not denied, denied


def test_cert_manager_certificate_then_its_secret(cluster: Cluster, operator: KopfRunner) -> None:
    ext = k8s.ApiextensionsV1Api(cluster.api_client)
    custom = k8s.CustomObjectsApi(cluster.api_client)
    cluster.create("nameservers", "routes", {"replicas": 1})
    spec = {
        "nameServerRef": {"name": "routes"},
        "replicasPerGroup": 1,
        "storage": {"size": "1Gi"},
        "tls": {"issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}},
    }
    installed = False
    try:
        ext.read_custom_resource_definition("certificates.cert-manager.io")
        installed = True
    except k8s.ApiException as exc:
        if exc.status != 404:
            raise
    if not installed:
        # without cert-manager: a condition says so, nothing is created
        cluster.create("brokers", "issued", spec)
        cond = cluster.wait_condition(
            "brokers", "issued", "ReconcileFailed", "True", "CertManagerMissing"
        )
        assert "install cert-manager" in cond["message"]
        install_cert_manager_crds(cluster.api_client)  # cert-manager's own CRDs
    else:
        cluster.create("brokers", "issued", spec)
    try:

        def certificate() -> dict[str, Any] | None:
            try:
                got: dict[str, Any] = custom.get_namespaced_custom_object(
                    "cert-manager.io", "v1", cluster.ns, "certificates", "issued-broker-tls"
                )
            except k8s.ApiException as exc:
                if exc.status == 404:
                    return None
                raise
            return got

        cert = wait_for("the Certificate", certificate, timeout=120)
        assert cert["spec"]["issuerRef"]["kind"] == "ClusterIssuer"
        assert cert["spec"]["secretName"] == "issued-broker-tls"
        cond = cluster.wait_condition(
            "brokers", "issued", "ReconcileFailed", "True", "CertificatePending"
        )
        assert "issued-broker-tls" in cond["message"]
        assert cluster.statefulset("issued-broker-0") is None  # pods would wait for the Secret

        # cert-manager's part: the Secret with the issued certificate
        now = datetime.datetime.now(datetime.UTC)
        authority = ca.new_ca("corp CA", now, 400)
        pair = ca.issue(authority, "issued", cert["spec"]["dnsNames"], now, 90)
        put_secret(
            cluster,
            "issued-broker-tls",
            {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem, "ca.crt": authority.cert_pem},
        )
        sts = wait_for("the StatefulSet", functools.partial(cluster.statefulset, "issued-broker-0"))
        volumes = {v.name: v for v in sts.spec.template.spec.volumes}
        assert volumes["tls"].secret.secret_name == "issued-broker-tls"
        cluster.wait_condition("brokers", "issued", "ReconcileFailed", "False")
        [reported] = wait_for(
            "status.certificates", lambda: status_of(cluster, "issued").get("certificates")
        )
        assert reported["secret"] == "issued-broker-tls"
        assert reported["notAfter"] == ca.info(pair.cert_pem).not_after.strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
    finally:
        cluster.delete("brokers", "issued")


def test_broker_its_nameserver_would_refuse_is_a_condition(
    cluster: Cluster, operator: KopfRunner
) -> None:
    cluster.create("nameservers", "locked", {"replicas": 1, "acl": {}})
    base = {"nameServerRef": {"name": "locked"}, "replicasPerGroup": 1, "storage": {"size": "1Gi"}}
    cluster.create("brokers", "unsigned", base)
    cond = cluster.wait_condition(
        "brokers", "unsigned", "ReconcileFailed", "True", "NameServerRefusesBroker"
    )
    assert "NameServer 'locked' has spec.acl" in cond["message"]
    assert "add spec.acl to this Broker" in cond["message"]
    assert cluster.statefulset("unsigned-broker-0") is None  # pods that could never register

    cluster.patch_spec("brokers", "unsigned", {"acl": {}})
    wait_for("the StatefulSet", functools.partial(cluster.statefulset, "unsigned-broker-0"))
    cluster.wait_condition("brokers", "unsigned", "ReconcileFailed", "False")

    # mutual TLS: both issued by the operator's cluster CA register; a user's certificate on
    # one side only is still refused, naming both sources
    mtls = {"mode": "enforcing", "needClientAuth": "require"}
    cluster.create("nameservers", "mutual", {"replicas": 1, "tls": mtls})
    mutual_base = {**base, "nameServerRef": {"name": "mutual"}}
    cluster.create("brokers", "paired", {**mutual_base, "tls": mtls})
    wait_for("the StatefulSet", functools.partial(cluster.statefulset, "paired-broker-0"))
    cluster.wait_condition("brokers", "paired", "ReconcileFailed", "False")
    put_secret(cluster, "paired-user", {"tls.crt": "x"})
    cluster.patch_spec("brokers", "paired", {"tls": {**mtls, "secretName": "paired-user"}})
    cond = cluster.wait_condition(
        "brokers", "paired", "ReconcileFailed", "True", "NameServerRefusesBroker"
    )
    assert "Secret 'paired-user'" in cond["message"] and "cluster CA" in cond["message"]


def test_a_former_per_component_ca_is_migrated_to_the_cluster_ca(
    cluster: Cluster, operator: KopfRunner
) -> None:
    """Secrets of an operator version before the cluster CA (``<name>-broker-ca`` and the
    certificate it signed): the certificate is re-issued from the cluster CA, and the former CA
    stays in ca.crt while its Secret exists, so pods not yet reloaded keep being accepted."""
    now = datetime.datetime.now(datetime.UTC)
    old = ca.new_ca("moved ferrymq cluster CA", now, 180)
    old_leaf = ca.issue(old, "moved", ["localhost"], now, 90)
    put_secret(cluster, "moved-broker-ca", {"ca.crt": old.cert_pem, "ca.key": old.key_pem})
    leaf = {"tls.crt": old_leaf.cert_pem, "tls.key": old_leaf.key_pem, "ca.crt": old.cert_pem}
    cluster.core.create_namespaced_secret(
        cluster.ns,
        {
            "metadata": {"name": "moved-broker-tls"},
            "type": "kubernetes.io/tls",  # as the operator wrote it
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in leaf.items()},
        },
    )
    cluster.create("nameservers", "hub", {"replicas": 1})
    mtls = {"mode": "enforcing", "needClientAuth": "require"}
    base = {"nameServerRef": {"name": "hub"}, "replicasPerGroup": 1, "storage": {"size": "1Gi"}}
    cluster.create("brokers", "moved", {**base, "tls": mtls})
    authority = wait_for("the cluster CA", lambda: secret_data(cluster, "hub-cluster-ca"))
    migrated = wait_for(
        "the re-issued certificate",
        lambda: (
            (d := secret_data(cluster, "moved-broker-tls"))
            and d["tls.crt"] != old_leaf.cert_pem
            and d
        ),
    )
    assert ca.signed_by(migrated["tls.crt"], authority["ca.crt"])
    assert migrated["ca.crt"] == authority["ca.crt"] + old.cert_pem  # both trusted meanwhile
    assert secret_data(cluster, "moved-broker-ca") == {
        "ca.crt": old.cert_pem,
        "ca.key": old.key_pem,
    }
    wait_for("the StatefulSet", functools.partial(cluster.statefulset, "moved-broker-0"))
