"""Helpers for the operator's integration tests: CRDs from crds/, the operator in-process
(kopf.testing.KopfRunner), custom-object shortcuts and polling with a deadline.

There is no kubelet in this environment: Pods created by the StatefulSet controller stay Pending,
and tests that need ready pods mark them Ready through the Pod status subresource, as a kubelet would.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polling
import pytest
import yaml
from kopf.testing import KopfRunner
from kubernetes import client as k8s
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from k8s.control_plane import KubeApi

ROOT = Path(__file__).resolve().parents[2]
GROUP, VERSION = "ferrymq.io", "v1alpha1"


wait_for = polling.poll_value  # 60 s unless a call says otherwise


def install_crds(api_client: k8s.ApiClient) -> list[str]:
    """Create (or replace) the generated CRDs and wait until the server serves them."""
    ext = k8s.ApiextensionsV1Api(api_client)
    names = []
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        name = body["metadata"]["name"]
        names.append(name)
        try:
            existing = ext.read_custom_resource_definition(name)
            assert existing.metadata is not None
            body["metadata"]["resourceVersion"] = existing.metadata.resource_version
            ext.replace_custom_resource_definition(name, body)
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise
            ext.create_custom_resource_definition(body)

    def established() -> bool:
        for name in names:
            status = ext.read_custom_resource_definition(name).status
            conds = (status.conditions if status else None) or []
            if not any(c.type == "Established" and c.status == "True" for c in conds):
                return False
        return True

    wait_for("the CRDs to be established", established)
    return names


@pytest.fixture(scope="module")
def ferrymq_crds(kube_api: KubeApi) -> Iterator[list[str]]:
    with kube_api.api_client() as api_client:
        yield install_crds(api_client)


@pytest.fixture(scope="module")
def operator(kube_api: KubeApi, ferrymq_crds: list[str]) -> Iterator[KopfRunner]:
    """The operator, in-process, watching all namespaces, with short retry/resync intervals."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUBECONFIG", str(kube_api.kubeconfig_path))
        mp.setenv("FERRYMQ_OPERATOR_RESYNC_SECONDS", "5")
        mp.setenv("FERRYMQ_OPERATOR_RETRY_DELAY_SECONDS", "2")
        mp.setenv("FERRYMQ_OPERATOR_ADMIN_TIMEOUT_SECONDS", "1")
        args = ["run", "--standalone", "--all-namespaces", "-m", "ferrymq_operator.handlers"]
        # stopping waits for kopf's event-post retries into namespaces being deleted (its
        # backoffs add up to about a minute), so give teardown more than that
        with KopfRunner(args, timeout=180) as runner:
            yield runner
    assert runner.exception is None, runner.output
    assert runner.exit_code == 0, runner.output


@pytest.fixture
def cluster(kube_api: KubeApi, k8s_namespace: str) -> Iterator[Cluster]:
    """Shortcuts over the test's own namespace (import it with the module's other fixtures)."""
    with kube_api.api_client() as api_client:
        yield Cluster(api_client, k8s_namespace)


class Cluster:
    """Shortcuts over one namespace of the test API server."""

    def __init__(self, api_client: k8s.ApiClient, namespace: str) -> None:
        self.ns = namespace
        self.custom = k8s.CustomObjectsApi(api_client)
        self.apps = k8s.AppsV1Api(api_client)
        self.core = k8s.CoreV1Api(api_client)
        self.dynamic = DynamicClient(api_client)  # type: ignore[no-untyped-call]
        self.api_client = api_client

    # --- custom resources ---

    def create(self, plural: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        kind = {"nameservers": "NameServer", "brokers": "Broker", "consoles": "Console"}[plural]
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": kind,
            "metadata": {"name": name},
            "spec": spec,
        }
        created = self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, plural, body)
        assert isinstance(created, dict)
        return created

    def get(self, plural: str, name: str) -> dict[str, Any] | None:
        try:
            got = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, plural, name)
        except k8s.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        assert isinstance(got, dict)
        return got

    def patch_spec(self, plural: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        patched = self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.ns, plural, name, {"spec": spec}
        )
        assert isinstance(patched, dict)
        return patched

    def delete(self, plural: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, plural, name)

    def condition(self, plural: str, name: str, kind: str) -> dict[str, Any] | None:
        body = self.get(plural, name) or {}
        for cond in (body.get("status") or {}).get("conditions") or []:
            if cond["type"] == kind:
                found: dict[str, Any] = cond
                return found
        return None

    def wait_condition(
        self,
        plural: str,
        name: str,
        kind: str,
        status: str,
        reason: str | None = None,
        generation: int | None = None,
    ) -> dict[str, Any]:
        """Wait for a condition; with ``generation``, one computed for that spec generation."""

        def probe() -> dict[str, Any] | None:
            cond = self.condition(plural, name, kind)
            if (
                cond
                and cond["status"] == status
                and (reason is None or cond["reason"] == reason)
                and (generation is None or cond.get("observedGeneration") == generation)
            ):
                return cond
            return None

        return wait_for(f"{plural}/{name} condition {kind}={status} ({reason})", probe)

    # --- children ---

    def statefulset(self, name: str) -> Any:
        try:
            return self.apps.read_namespaced_stateful_set(name, self.ns)
        except k8s.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def deployment(self, name: str) -> Any:
        try:
            return self.apps.read_namespaced_deployment(name, self.ns)
        except k8s.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def configmap(self, name: str) -> Any:
        try:
            return self.core.read_namespaced_config_map(name, self.ns)
        except k8s.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def service(self, name: str) -> Any:
        try:
            return self.core.read_namespaced_service(name, self.ns)
        except k8s.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def pdb(self, name: str) -> dict[str, Any] | None:
        """Read through the generic client: 1.20 serves PodDisruptionBudget in policy/v1beta1 only."""
        resource = self.dynamic.resources.get(
            api_version="policy/v1beta1", kind="PodDisruptionBudget"
        )
        try:
            obj = resource.get(name=name, namespace=self.ns)
        except NotFoundError:
            return None
        result: dict[str, Any] = obj.to_dict()
        return result

    def delete_child(self, api_version: str, kind: str, name: str) -> None:
        """Delete through the dynamic client (the typed client cannot parse some delete answers)."""
        resource = self.dynamic.resources.get(api_version=api_version, kind=kind)
        resource.delete(name=name, namespace=self.ns)

    def pods(self, selector: str) -> list[Any]:
        items: list[Any] = self.core.list_namespaced_pod(self.ns, label_selector=selector).items
        return items

    def mark_ready(self, pod_name: str, ready: bool = True) -> None:
        """What a kubelet would report for a started pod (there is no kubelet here)."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        flag = "True" if ready else "False"
        self.core.patch_namespaced_pod_status(
            pod_name,
            self.ns,
            {
                "status": {
                    "phase": "Running",
                    "conditions": [
                        {"type": "Ready", "status": flag, "lastTransitionTime": now},
                        {"type": "ContainersReady", "status": flag, "lastTransitionTime": now},
                    ],
                }
            },
        )

    def wait_pods_and_mark_ready(self, names: list[str]) -> None:
        for name in names:
            wait_for(f"pod {name}", functools.partial(self._pod_exists, name))
            self.mark_ready(name)

    def _pod_exists(self, name: str) -> bool:
        try:
            self.core.read_namespaced_pod(name, self.ns)
        except k8s.ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def wait_event(self, name: str, reason: str, event_type: str | None = None) -> None:
        """Events are posted asynchronously by kopf: poll for one with this reason."""

        def probe() -> bool:
            return any(
                e.reason == reason and (event_type is None or e.type == event_type)
                for e in self.events_for(name)
            )

        wait_for(f"a {reason} event on {name}", probe)

    def events_for(self, name: str) -> list[Any]:
        items: list[Any] = self.core.list_namespaced_event(
            self.ns, field_selector=f"involvedObject.name={name}"
        ).items
        return items
