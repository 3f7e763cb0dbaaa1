"""spec.acl / spec.tls / spec.networkPolicy -> broker.conf keys, volumes, env, NetworkPolicy;
checks of the user's Secrets (pure; manifests validated against the Kubernetes schema)."""

from __future__ import annotations

import base64
import datetime
import functools
from typing import Any

import javaproperties
import kubernetes_validate
import pytest
import yaml
from ferrymq_operator.builders import broker, namesrv
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import (
    BrokerStatus,
    InvalidSpec,
    parse_broker_spec,
    parse_nameserver_spec,
)
from ferrymq_operator.security import builders, ca, decisions, netpol, secrets
from ferrymq_operator.status import StatusBuilder

ADDR = "routes-namesrv-0.routes-namesrv-hs.prod.svc.cluster.local:9876"
REF = {"nameServerRef": {"name": "routes"}}
K8S_VERSION = "1.25.0"


def objects(owner: Owner, **spec: Any) -> dict[tuple[str, str], dict[str, Any]]:
    parsed = parse_broker_spec({**REF, **spec})
    built = broker.desired(owner, parsed, ADDR, "policy/v1") + netpol.desired(owner, parsed)
    return {(o["kind"], o["metadata"]["name"]): o for o in built}


def conf(objs: dict[tuple[str, str], dict[str, Any]], group: int = 0) -> dict[str, str]:
    cm = objs[("ConfigMap", f"orders-broker-{group}-config")]
    parsed: dict[str, str] = javaproperties.loads(cm["data"]["broker-0.conf"])
    return parsed


def pod_spec(objs: dict[tuple[str, str], dict[str, Any]], group: int = 0) -> dict[str, Any]:
    result: dict[str, Any] = objs[("StatefulSet", f"orders-broker-{group}")]["spec"]["template"][
        "spec"
    ]
    return result


def test_acl_secret_becomes_acl_conf_and_a_projected_volume(broker_owner: Owner) -> None:
    objs = objects(broker_owner, acl={"secretName": "orders-accounts"})
    c = conf(objs)
    assert c["aclEnable"] == "true"
    assert c["aclFilePath"] == builders.ACL_DIR
    spec = pod_spec(objs)
    [volume] = [v for v in spec["volumes"] if v["name"] == builders.ACL_VOLUME]
    sources = [s["secret"] for s in volume["projected"]["sources"]]
    assert sources == [
        {
            "name": "ferrymq-operator-acl",
            "items": [{"key": "operator_acl.yml", "path": "operator_acl.yml"}],
        },
        {"name": "orders-accounts", "items": [{"key": "plain_acl.yml", "path": "plain_acl.yml"}]},
    ]
    container = spec["containers"][0]
    assert {"name": "acl", "mountPath": builders.ACL_DIR, "readOnly": True} in container[
        "volumeMounts"
    ]
    env = {e["name"]: e for e in container["env"]}
    assert env["FERRYMQ_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "ferrymq-operator-acl",
        "key": "accessKey",
    }
    assert env["FERRYMQ_SECRET_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "secretKey"
    for obj in objs.values():
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_acl_without_user_secret_mounts_only_the_operator_account(broker_owner: Owner) -> None:
    objs = objects(broker_owner, acl={})
    [volume] = [v for v in pod_spec(objs)["volumes"] if v["name"] == builders.ACL_VOLUME]
    assert [s["secret"]["name"] for s in volume["projected"]["sources"]] == ["ferrymq-operator-acl"]


def test_tls_keys_and_secret_volume(broker_owner: Owner) -> None:
    objs = objects(broker_owner, tls={"mode": "enforcing", "needClientAuth": "require"})
    c = conf(objs)
    assert c["tls.server.mode"] == "enforcing"
    assert c["tls.server.certPath"] == f"{builders.TLS_DIR}/tls.crt"
    assert c["tls.server.keyPath"] == f"{builders.TLS_DIR}/tls.key"
    assert c["tls.server.trustCertPath"] == f"{builders.TLS_DIR}/ca.crt"
    assert c["tls.server.need.client.auth"] == "require"
    spec = pod_spec(objs)
    assert {"name": "tls", "secret": {"secretName": "orders-broker-tls"}} in spec["volumes"]
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    # enforcing refuses plaintext probes: the probe (and the broker's own calls) use TLS
    assert env["FERRYMQ_TLS_ENABLE"] == "true"
    assert env["FERRYMQ_TLS_CERT_PATH"] == f"{builders.TLS_DIR}/tls.crt"
    user = objects(broker_owner, tls={"secretName": "my-certs"})
    assert {"name": "tls", "secret": {"secretName": "my-certs"}} in pod_spec(user)["volumes"]
    env_names = {e["name"] for e in pod_spec(user)["containers"][0]["env"]}
    assert "FERRYMQ_TLS_ENABLE" not in env_names  # permissive: plaintext probes still answered
    for obj in objs.values():
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_secret_names_do_not_change_the_template_hash_but_switching_tls_on_does(
    broker_owner: Owner,
) -> None:
    """Secret content never reaches the template; only turning a feature on or off rolls."""
    plain = broker.template_hash(broker_owner, parse_broker_spec(REF), 0)
    with_tls = broker.template_hash(broker_owner, parse_broker_spec({**REF, "tls": {}}), 0)
    assert plain != with_tls
    again = broker.template_hash(broker_owner, parse_broker_spec({**REF, "tls": {}}), 0)
    assert with_tls == again


def test_spec_config_may_not_set_what_acl_or_tls_decide() -> None:
    with pytest.raises(InvalidSpec, match="aclFilePath"):
        parse_broker_spec({**REF, "acl": {}, "config": {"aclFilePath": "/x"}})
    with pytest.raises(InvalidSpec, match=r"tls\.server\.mode"):
        parse_broker_spec({**REF, "tls": {}, "config": {"tls.server.mode": "disabled"}})
    with pytest.raises(InvalidSpec, match="renewBeforeDays"):
        parse_broker_spec({**REF, "tls": {"validityDays": 10, "renewBeforeDays": 10}})
    # without spec.acl/spec.tls the keys stay the user's
    parse_broker_spec({**REF, "config": {"aclEnable": "true"}})


def test_network_policy_admits_client_and_metrics_ports_and_ha_only_from_the_group(
    broker_owner: Owner,
) -> None:
    objs = objects(broker_owner, groups=2, networkPolicy=True, config={"metricsPort": "5557"})
    policy = objs[("NetworkPolicy", "orders-broker-1")]
    kubernetes_validate.validate(policy, K8S_VERSION, strict=True)
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector["ferrymq.io/broker-group"] == "orders-broker-1"
    public, ha = policy["spec"]["ingress"]
    assert "from" not in public
    assert sorted(p["port"] for p in public["ports"]) == [5557, 10909, 10911]
    assert ha["from"] == [{"podSelector": {"matchLabels": selector}}]
    assert [p["port"] for p in ha["ports"]] == [10912]
    assert policy["spec"]["policyTypes"] == ["Ingress"]


def test_network_policy_per_pod_ports_and_opt_out(broker_owner: Owner) -> None:
    objs = objects(
        broker_owner,
        networkPolicy=True,
        externalAccess={"type": "NodePort", "nodePortBase": 30100},
    )
    policy = objs[("NetworkPolicy", "orders-broker-0")]
    assert sorted(p["port"] for p in policy["spec"]["ingress"][0]["ports"]) == [
        5557,  # metrics, on by default, per pod like every port with per-pod ports
        5567,
        30098,
        30100,
        30108,
        30110,
    ]
    assert sorted(p["port"] for p in policy["spec"]["ingress"][1]["ports"]) == [30101, 30111]
    assert not [k for k in objects(broker_owner) if k[0] == "NetworkPolicy"]
    # pods on the node network are not subject to NetworkPolicy: none is made
    host = objects(broker_owner, networkPolicy=True, hostNetwork=True)
    assert not [k for k in host if k[0] == "NetworkPolicy"]


def test_operator_account_is_an_upstream_admin_account() -> None:
    first = decisions.plan_operator_acl(None)
    assert first is not None
    doc = yaml.safe_load(first["operator_acl.yml"])
    [account] = doc["accounts"]
    assert account == {
        "accessKey": "ferrymq-operator",
        "secretKey": first["secretKey"],
        "admin": True,
    }
    assert len(first["secretKey"]) >= 32
    assert decisions.plan_operator_acl(first) is None  # made once, kept
    partial = {k: v for k, v in first.items() if k != "operator_acl.yml"}
    repaired = decisions.plan_operator_acl(partial)
    assert repaired is not None and repaired["secretKey"] == first["secretKey"]
    assert decisions.plan_operator_acl(None) != first  # random per cluster


def test_user_secret_checks_name_the_secret_and_key() -> None:
    missing = decisions.check_user_acl("acc", None)
    assert missing is not None and "'acc' does not exist" in missing
    no_key = decisions.check_user_acl("acc", {"acl.yaml": "x"})
    assert no_key is not None and "no key plain_acl.yml" in no_key and "acl.yaml" in no_key
    bad = decisions.check_user_acl("acc", {"plain_acl.yml": "accounts: {a: [1"})
    assert bad is not None and "not YAML" in bad
    assert decisions.check_user_acl("acc", {"plain_acl.yml": "accounts: []\n"}) is None
    no_tls = decisions.check_user_tls("crt", {"tls.crt": "x"})
    assert no_tls is not None and "lacks tls.key, ca.crt" in no_tls
    garbage = decisions.check_user_tls("crt", {"tls.crt": "x", "tls.key": "y", "ca.crt": "z"})
    assert garbage is not None and "not a PEM certificate" in garbage


def test_secret_object_round_trips_through_decode(broker_owner: Owner) -> None:
    obj = builders.secret_object(broker_owner, "broker", "s", {"a": "text\n"}, "Opaque")
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    assert obj["data"] == {"a": base64.b64encode(b"text\n").decode()}
    assert decisions.decode(obj) == {"a": "text\n"}
    assert decisions.decode(None) is None


def test_expiring_condition_names_the_certificates() -> None:
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    far = decisions.CertificateReport("a", "CN=a", now + datetime.timedelta(days=90), True)
    near = decisions.CertificateReport("b", "CN=b", now + datetime.timedelta(days=5), False)
    soon, message = decisions.expiring([far], now, 30)
    assert not soon and "2026-04-01" in message
    soon, message = decisions.expiring([far, near], now, 30)
    assert soon and "b (2026-01-06T00:00:00Z)" in message and "renew it" in message
    assert near.status()["notAfter"] == "2026-01-06T00:00:00Z"
    assert ca.needs_renewal(near.not_after, now, 30)


def test_nameserver_acl_and_tls(namesrv_owner: Owner) -> None:
    spec = parse_nameserver_spec({"acl": {"secretName": "ops"}, "tls": {"mode": "enforcing"}})
    built = {
        (o["kind"], o["metadata"]["name"]): o
        for o in namesrv.desired(namesrv_owner, spec, "policy/v1")
    }
    text = built[("ConfigMap", "routes-namesrv-config")]["data"]["namesrv.conf"]
    c = javaproperties.loads(text)
    assert c["aclEnable"] == "true" and c["tls.server.mode"] == "enforcing"
    assert c["listenPort"] == "9876"
    pod = built[("StatefulSet", "routes-namesrv")]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "routes-namesrv-tls"
    sources = [s["secret"]["name"] for s in volumes["acl"]["projected"]["sources"]]
    assert sources == ["ferrymq-operator-acl", "ops"]
    env = {e["name"] for e in pod["containers"][0]["env"]}
    assert {"FERRYMQ_ACCESS_KEY", "FERRYMQ_SECRET_KEY", "FERRYMQ_TLS_ENABLE"} <= env
    for obj in built.values():
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    sans = builders.server_names(
        namesrv_owner, builders.service_names(namesrv_owner, "namesrv"), "cluster.local"
    )
    assert "routes-namesrv.prod.svc.cluster.local" in sans
    assert "*.routes-namesrv-hs.prod.svc.cluster.local" in sans


def test_user_tls_secret_with_a_key_of_another_certificate_is_refused() -> None:
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    authority = ca.new_ca("user CA", now, 30)
    first = ca.issue(authority, "a", ["localhost"], now, 10)
    second = ca.issue(authority, "b", ["localhost"], now, 10)
    good = {"tls.crt": first.cert_pem, "tls.key": first.key_pem, "ca.crt": authority.cert_pem}
    assert decisions.check_user_tls("certs", good) is None
    swapped = decisions.check_user_tls("certs", {**good, "tls.key": second.key_pem})
    assert swapped is not None and "is not the key of tls.crt" in swapped
    garbage = decisions.check_user_tls("certs", {**good, "tls.key": "-----BEGIN nothing"})
    assert garbage is not None and "not an unencrypted PEM private key" in garbage


def test_status_certificates_condition_and_warning_event_once() -> None:
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    spec = parse_broker_spec({**REF, "tls": {"secretName": "certs", "renewBeforeDays": 30}})
    near = decisions.CertificateReport("certs", "CN=b", now + datetime.timedelta(days=5), False)
    outcome = secrets.SecurityOutcome(checked=True, certificates=[near])
    first = StatusBuilder(BrokerStatus, BrokerStatus(), 1, "t0")
    events = secrets.decorate_status(first, outcome, spec, now)
    status = first.patch()
    assert events == [("Warning", "CertificateExpiring", status["conditions"][0]["message"])]
    assert status["certificates"] == [
        {
            "secret": "certs",
            "subject": "CN=b",
            "notAfter": "2026-01-06T00:00:00Z",
            "issuedByOperator": False,
        }
    ]
    previous = BrokerStatus.model_validate(status)
    again = StatusBuilder(BrokerStatus, previous, 1, "t1")
    assert secrets.decorate_status(again, outcome, spec, now) == []
    assert again.patch()["conditions"][0]["lastTransitionTime"] == "t0"  # no flip: time kept
    # a pass that failed before checking the Secrets keeps what the last one found
    kept = StatusBuilder(BrokerStatus, previous, 2, "t2")
    secrets.decorate_status(kept, secrets.SecurityOutcome(), spec, now)
    assert kept.patch()["certificates"] == status["certificates"]
    assert [c["type"] for c in kept.patch()["conditions"]] == ["CertificateExpiring"]


def test_cert_manager_certificate(broker_owner: Owner) -> None:
    spec = parse_broker_spec(
        {**REF, "tls": {"issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}}}
    )
    assert spec.tls is not None
    sans = builders.server_names(
        broker_owner, builders.service_names(broker_owner, "broker"), "cluster.local"
    )
    cert = builders.certificate_object(broker_owner, "broker", spec.tls, sans)
    assert cert["apiVersion"] == "cert-manager.io/v1"
    assert cert["spec"]["secretName"] == "orders-broker-tls"
    assert cert["spec"]["issuerRef"] == {
        "name": "corp-ca",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }
    assert "*.orders-broker-hs.prod.svc.cluster.local" in cert["spec"]["dnsNames"]
    assert cert["spec"]["ipAddresses"] == ["127.0.0.1"]
    assert (cert["spec"]["duration"], cert["spec"]["renewBefore"]) == ("8760h", "720h")
    # the pods mount the Secret cert-manager writes
    objs = objects(broker_owner, tls={"issuerRef": {"name": "corp-ca"}})
    assert {"name": "tls", "secret": {"secretName": "orders-broker-tls"}} in pod_spec(objs)[
        "volumes"
    ]
    with pytest.raises(InvalidSpec, match="keep one"):
        parse_broker_spec({**REF, "tls": {"secretName": "x", "issuerRef": {"name": "y"}}})


def test_operator_client_certificate_only_when_the_brokers_ask_for_one() -> None:
    from ferrymq_operator.security import session

    now = datetime.datetime.now(datetime.UTC)
    authority = ca.new_ca("test CA", now, 30)
    pair = ca.issue(authority, "orders", ["localhost"], now, 10)
    data = {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem, "ca.crt": authority.cert_pem}
    cert = decisions.client_certificate(data)
    assert cert == (pair.cert_pem, pair.key_pem)
    assert decisions.client_certificate({"tls.crt": pair.cert_pem}) is None
    assert decisions.client_certificate(None) is None
    account = decisions.plan_operator_acl(None)

    def tls_of(**tls: Any) -> Any:
        security = session.for_cluster(parse_broker_spec({**REF, "tls": tls}), account, cert)
        return security.tls if security is not None else None

    assert tls_of(mode="permissive", needClientAuth="require") is None  # plaintext is served
    assert tls_of(mode="enforcing").cert_path is None  # no client auth: no certificate sent
    required = tls_of(mode="enforcing", needClientAuth="require")
    optional = tls_of(mode="enforcing", needClientAuth="optional")
    assert required.cert_path == optional.cert_path  # same content, same files
    assert required.cert_path.read_text() == pair.cert_pem
    assert required.key_path.read_text() == pair.key_pem
    assert required.key_path.stat().st_mode & 0o777 == 0o600
    assert required.cert_path.parent.stat().st_mode & 0o777 == 0o700
    required.context()  # loads: the files are a matching pair

    renewed = ca.issue(authority, "orders", ["localhost"], now, 10)
    again = session.for_cluster(
        parse_broker_spec({**REF, "tls": {"mode": "enforcing", "needClientAuth": "require"}}),
        account,
        (renewed.cert_pem, renewed.key_pem),
    )
    assert again is not None and again.tls is not None
    assert again.tls.cert_path != required.cert_path  # a renewal never rewrites files in use
    assert required.cert_path.read_text() == pair.cert_pem


def test_brokers_that_could_not_register_with_their_nameserver() -> None:
    def ns(**spec: Any) -> Any:
        return parse_nameserver_spec(spec)

    def br(**spec: Any) -> Any:
        return parse_broker_spec({**REF, **spec})

    check = functools.partial(decisions.check_namesrv_registration, "routes")
    assert check(ns(), br()) is None
    assert check(ns(acl={}), br(acl={})) is None
    refused = check(ns(acl={}), br())
    assert refused is not None and "add spec.acl to this Broker" in refused
    assert check(ns(tls={}), br()) is None  # permissive serves plaintext registrations
    enforcing = check(ns(tls={"mode": "enforcing"}), br(tls={}))
    assert enforcing is not None and "spec.tls.mode enforcing" in enforcing
    assert check(ns(tls={"mode": "enforcing"}), br(tls={"mode": "enforcing"})) is None
    mtls = {"mode": "enforcing", "needClientAuth": "require"}
    no_cert = check(ns(tls=mtls), br(tls={"mode": "enforcing"}))
    assert no_cert is not None and "needClientAuth optional or require" in no_cert
    # both issued by the operator: one cluster CA signs both, the registration works
    assert check(ns(tls=mtls), br(tls=mtls)) is None
    issuer = {"issuerRef": {"name": "corp", "kind": "ClusterIssuer"}}
    assert check(ns(tls={**mtls, **issuer}), br(tls={**mtls, **issuer})) is None
    shared = {"secretName": "corp-certs"}
    assert check(ns(tls={**mtls, **shared}), br(tls={**mtls, **shared})) is None
    # one side from the cluster CA, the other from the user's CA: still refused, both named
    mixed = check(ns(tls={**mtls, **shared}), br(tls=mtls))
    assert mixed is not None and "Secret 'corp-certs'" in mixed and "cluster CA" in mixed
    mixed = check(ns(tls=mtls), br(tls={**mtls, **issuer}))
    assert mixed is not None and "cert-manager ClusterIssuer 'corp'" in mixed
    # a permissive Broker registers in plaintext, which a permissive NameServer serves
    assert check(ns(tls={"needClientAuth": "require", **shared}), br(tls={})) is None


def test_nameserver_metrics_port(namesrv_owner: Owner) -> None:
    def ports(**spec: Any) -> list[dict[str, Any]]:
        sts = namesrv.statefulset(namesrv_owner, parse_nameserver_spec(spec))
        found: list[dict[str, Any]] = sts["spec"]["template"]["spec"]["containers"][0]["ports"]
        return found

    assert [p["name"] for p in ports()] == ["namesrv", "metrics"]  # 5557 by default
    assert [p["name"] for p in ports(config={"metricsPort": "0"})] == ["namesrv"]
    with_metrics = ports(config={"metricsPort": "9877"})
    assert {"name": "metrics", "containerPort": 9877, "protocol": "TCP"} in with_metrics
    conf = javaproperties.loads(
        namesrv.configmap(
            namesrv_owner, parse_nameserver_spec({"config": {"metricsPort": "9877"}})
        )["data"]["namesrv.conf"]
    )
    assert conf["metricsPort"] == "9877"
