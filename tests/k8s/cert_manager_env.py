"""cert-manager on the test API server: its real CRDs (trimmed copies under ``cert_manager/``,
source noted in each file) and ``MockCertManagerController``, a mock of cert-manager's controller
(which cannot run here: no image, no registry) that signs Certificates for CA Issuers."""

from __future__ import annotations

import base64
import datetime
import threading
from pathlib import Path
from typing import Any

import yaml
from ferrymq_operator.security import ca
from kubernetes import client as k8s

from k8s.operator_env import wait_for

CRD_DIR = Path(__file__).with_name("cert_manager")
CM_GROUP, CM_VERSION = "cert-manager.io", "v1"


def install_cert_manager_crds(api_client: k8s.ApiClient) -> None:
    """cert-manager's Certificate/Issuer/ClusterIssuer CRDs (idempotent), Established."""
    ext = k8s.ApiextensionsV1Api(api_client)
    names = []
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        names.append(crd["metadata"]["name"])
        try:
            ext.create_custom_resource_definition(crd)
        except k8s.ApiException as exc:
            if exc.status != 409:
                raise
            # a stand-in of an older test run: replace it with the real schema
            current: Any = ext.read_custom_resource_definition(crd["metadata"]["name"])
            crd["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(crd["metadata"]["name"], crd)

    def established() -> bool:
        for name in names:
            status: Any = ext.read_custom_resource_definition(name).status
            conds = getattr(status, "conditions", None) or []
            if not any(c.type == "Established" and c.status == "True" for c in conds):
                return False
        return True

    wait_for("cert-manager CRDs established", lambda: established() or None)


def uninstall_cert_manager_crds(api_client: k8s.ApiClient) -> None:
    """Remove the CRDs again (other tests start from a cluster without cert-manager)."""
    ext = k8s.ApiextensionsV1Api(api_client)
    names = [yaml.safe_load(p.read_text())["metadata"]["name"] for p in CRD_DIR.glob("*.yaml")]
    for name in names:
        try:
            ext.delete_custom_resource_definition(name)
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise

    def gone() -> bool:
        for name in names:
            try:
                ext.read_custom_resource_definition(name)
            except k8s.ApiException as exc:
                if exc.status == 404:
                    continue
                raise
            return False
        return True

    wait_for("cert-manager CRDs removed", lambda: gone() or None)


def secret_data(core: k8s.CoreV1Api, ns: str, name: str) -> dict[str, str] | None:
    try:
        secret = core.read_namespaced_secret(name, ns)
    except k8s.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}


def b64(data: dict[str, str]) -> dict[str, str]:
    return {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}


def _hours(duration: str) -> float:
    """cert-manager durations as the operator writes them (``<n>h``)."""
    assert duration.endswith("h"), duration
    return float(duration[:-1])


class MockCertManagerController:
    """A mock of cert-manager's controller for CA Issuers in one namespace: polls Certificates,
    signs each new one (and each one asked to ``renew``) with the CA of its Issuer's
    ``spec.ca.secretName``, writes ``tls.crt``/``tls.key``/``ca.crt`` into ``spec.secretName``
    (type kubernetes.io/tls) and sets the Certificate's status (Ready, notAfter, revision)."""

    def __init__(self, api_client: k8s.ApiClient, namespace: str) -> None:
        self.custom = k8s.CustomObjectsApi(api_client)
        self.core = k8s.CoreV1Api(api_client)
        self.ns = namespace
        self.revisions: dict[str, int] = {}
        self._renew: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mock-cert-manager", daemon=True)
        self.errors: list[BaseException] = []

    def __enter__(self) -> MockCertManagerController:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def renew(self, certificate: str) -> None:
        with self._lock:
            self._renew.add(certificate)

    def _run(self) -> None:
        # a controller's poll cadence (the real one watches); the tests wait on state
        while not self._stop.wait(0.3):
            try:
                self._pass()
            except Exception as error:  # kept for the test to report
                self.errors.append(error)

    def _pass(self) -> None:
        listed: Any = self.custom.list_namespaced_custom_object(
            CM_GROUP, CM_VERSION, self.ns, "certificates"
        )
        for cert in listed["items"]:
            name = cert["metadata"]["name"]
            spec = cert["spec"]
            with self._lock:
                asked = name in self._renew
                self._renew.discard(name)
            if secret_data(self.core, self.ns, spec["secretName"]) is None or asked:
                self._sign(cert)

    def _issuer_ca(self, ref: dict[str, Any]) -> ca.CertPair:
        plural = "clusterissuers" if ref.get("kind") == "ClusterIssuer" else "issuers"
        issuer: Any = self.custom.get_namespaced_custom_object(
            CM_GROUP, CM_VERSION, self.ns, plural, ref["name"]
        )
        keypair = secret_data(self.core, self.ns, issuer["spec"]["ca"]["secretName"])
        assert keypair is not None, "the Issuer's CA Secret is missing"
        return ca.CertPair(keypair["tls.crt"], keypair["tls.key"])

    def _sign(self, cert: dict[str, Any]) -> None:
        spec = cert["spec"]
        authority = self._issuer_ca(spec["issuerRef"])
        now = datetime.datetime.now(datetime.UTC)
        days = max(1, round(_hours(spec["duration"]) / 24))
        sans = [*spec.get("dnsNames", []), *spec.get("ipAddresses", [])]
        pair = ca.issue(
            authority, spec.get("commonName", cert["metadata"]["name"]), sans, now, days
        )
        data = {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem, "ca.crt": authority.cert_pem}
        secret = spec["secretName"]
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": secret,
                "annotations": {"cert-manager.io/certificate-name": cert["metadata"]["name"]},
            },
            "type": "kubernetes.io/tls",
            "data": b64(data),
        }
        if secret_data(self.core, self.ns, secret) is None:
            self.core.create_namespaced_secret(self.ns, body)
        else:
            self.core.patch_namespaced_secret(secret, self.ns, {"data": body["data"]})
        name = cert["metadata"]["name"]
        self.revisions[name] = self.revisions.get(name, 0) + 1
        not_after = ca.info(pair.cert_pem).not_after.strftime("%Y-%m-%dT%H:%M:%SZ")
        status = {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Ready",
                    "message": "Certificate is up to date and has not expired",
                    "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "observedGeneration": cert["metadata"].get("generation", 1),
                }
            ],
            "notAfter": not_after,
            "revision": self.revisions[name],
        }
        self.custom.patch_namespaced_custom_object_status(
            CM_GROUP, CM_VERSION, self.ns, "certificates", name, {"status": status}
        )
