"""The test environment itself: a real kube-apiserver 1.20 with etcd and the controller-manager.

There is no kubelet and no scheduler: Pods made by the StatefulSet controller stay Pending, and the tests
that need a Ready Pod mark it Ready through the Pod status subresource, as a kubelet would.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polling
import pytest
from kubernetes import client as k8s

from k8s import control_plane
from k8s.control_plane import KubeApi, skip_reason
from k8s.fixtures import namespace_name

wait_for = polling.poll_value  # 60 s unless a call says otherwise


def meta(obj: Any) -> k8s.V1ObjectMeta:
    m: k8s.V1ObjectMeta | None = obj.metadata
    assert m is not None
    return m


def as_dict(obj: object) -> dict[str, Any]:
    """CustomObjectsApi answers plain JSON objects (typed as ``object`` in the client)."""
    assert isinstance(obj, dict)
    return obj


def mark_pod_ready(core: k8s.CoreV1Api, namespace: str, name: str) -> None:
    """What a kubelet would report for a started, ready Pod (there is no kubelet here)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    core.patch_namespaced_pod_status(
        name,
        namespace,
        {
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                ],
            }
        },
    )


@pytest.fixture
def core(k8s_client: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(k8s_client)


def test_skip_reason_names_the_provisioning_script(tmp_path: Path) -> None:
    reason = skip_reason(("etcd", "kube-apiserver"), cache=tmp_path)
    assert reason is not None
    assert "scripts/k8s-control-plane.sh" in reason
    assert "etcd" in reason and "kube-apiserver" in reason


def test_namespace_names_are_valid_labels() -> None:
    name = namespace_name("test_thing[param-ABC/1]" + "x" * 80)
    assert len(name) <= 63
    assert name == name.lower()
    assert name[0].isalnum() and name[-1].isalnum()
    assert namespace_name("same") != namespace_name("same")


def test_server_is_kubernetes_1_20_and_rejects_bad_tokens(kube_api: KubeApi) -> None:
    with kube_api.api_client() as c:
        info = k8s.VersionApi(c).get_code()
        assert (info.major, info.minor) == ("1", "20")
    conf = kube_api.configuration()
    conf.api_key = {"authorization": "not-a-token"}
    with k8s.ApiClient(conf) as bad:
        with pytest.raises(k8s.ApiException) as exc:
            k8s.CoreV1Api(bad).list_namespace()
        assert exc.value.status == 401


def test_kubectl_uses_the_kubeconfig(
    kube_api: KubeApi, kubectl_bin: Path, k8s_namespace: str
) -> None:
    out = subprocess.run(
        [str(kubectl_bin), "get", "namespace", k8s_namespace, "-o", "jsonpath={.status.phase}"],
        env=kube_api.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "Active"


def test_namespace_fixture_creates_a_namespace(core: k8s.CoreV1Api, k8s_namespace: str) -> None:
    ns = core.read_namespace(k8s_namespace)
    assert getattr(ns.status, "phase", None) == "Active"
    # The controller-manager's service-account controller fills every new namespace.
    wait_for(
        "the default ServiceAccount",
        lambda: [
            sa
            for sa in core.list_namespaced_service_account(k8s_namespace).items
            if meta(sa).name == "default"
        ],
    )


def _statefulset(name: str, replicas: int) -> k8s.V1StatefulSet:
    labels = {"app": name}
    return k8s.V1StatefulSet(
        metadata=k8s.V1ObjectMeta(name=name),
        spec=k8s.V1StatefulSetSpec(
            replicas=replicas,
            service_name=name,
            selector=k8s.V1LabelSelector(match_labels=labels),
            template=k8s.V1PodTemplateSpec(
                metadata=k8s.V1ObjectMeta(labels=labels),
                spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="main", image="ferrymq:test")]),
            ),
        ),
    )


def test_statefulset_controller_creates_pods_in_order(
    k8s_client: k8s.ApiClient, core: k8s.CoreV1Api, k8s_namespace: str
) -> None:
    """OrderedReady: pod-1 is created only once pod-0 is Ready, which this test reports by hand."""
    apps = k8s.AppsV1Api(k8s_client)
    apps.create_namespaced_stateful_set(k8s_namespace, _statefulset("web", 2))

    def pods() -> list[Any]:
        return sorted(
            core.list_namespaced_pod(k8s_namespace, label_selector="app=web").items,
            key=lambda p: p.metadata.name,
        )

    first = wait_for("pod web-0", lambda: [p for p in pods() if p.metadata.name == "web-0"])[0]
    assert first.status.phase == "Pending"  # no kubelet, no scheduler
    # ServiceAccount admission mounted the namespace's default account token.
    assert first.spec.service_account_name == "default"
    mounts = first.spec.containers[0].volume_mounts or []
    assert any(m.mount_path == "/var/run/secrets/kubernetes.io/serviceaccount" for m in mounts)
    assert [p.metadata.name for p in pods()] == ["web-0"]

    mark_pod_ready(core, k8s_namespace, "web-0")
    wait_for("pod web-1", lambda: [p for p in pods() if p.metadata.name == "web-1"])
    mark_pod_ready(core, k8s_namespace, "web-1")
    wait_for(
        "statefulset readyReplicas == 2",
        lambda: (
            getattr(
                apps.read_namespaced_stateful_set_status("web", k8s_namespace).status,
                "ready_replicas",
                0,
            )
            == 2
        ),
    )


def test_statefulset_scale_in_removes_highest_ordinal(
    k8s_client: k8s.ApiClient, core: k8s.CoreV1Api, k8s_namespace: str
) -> None:
    apps = k8s.AppsV1Api(k8s_client)
    sts = _statefulset("db", 2)
    sts.spec.pod_management_policy = "Parallel"
    apps.create_namespaced_stateful_set(k8s_namespace, sts)

    def names() -> list[str]:
        items = core.list_namespaced_pod(k8s_namespace, label_selector="app=db").items
        return sorted(str(meta(p).name) for p in items if meta(p).deletion_timestamp is None)

    wait_for("both pods (Parallel)", lambda: names() == ["db-0", "db-1"])
    apps.patch_namespaced_stateful_set_scale("db", k8s_namespace, {"spec": {"replicas": 1}})
    # Without a kubelet a deleted Pod keeps its deletionTimestamp until the grace period ends;
    # the controller has done its part once it asked for the deletion of db-1 only.
    wait_for("db-1 marked for deletion", lambda: names() == ["db-0"])


def test_garbage_collector_deletes_owned_objects(core: k8s.CoreV1Api, k8s_namespace: str) -> None:
    owner = core.create_namespaced_config_map(
        k8s_namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="owner"))
    )
    ref = k8s.V1OwnerReference(
        api_version="v1", kind="ConfigMap", name="owner", uid=meta(owner).uid
    )
    core.create_namespaced_config_map(
        k8s_namespace,
        k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="child", owner_references=[ref])),
    )
    core.delete_namespaced_config_map("owner", k8s_namespace)

    def child_gone() -> bool:
        try:
            core.read_namespaced_config_map("child", k8s_namespace)
        except k8s.ApiException as exc:
            return bool(exc.status == 404)
        return False

    wait_for("the garbage collector to delete the child", child_gone)


GROUP = "envtest.ferrymq.io"


@pytest.fixture(scope="module")
def widget_crd(kube_api: KubeApi) -> Iterator[str]:
    """A CRD with a schema and a status subresource, shared by this module's tests.

    Module-scoped because a CRD deletion finishes asynchronously (its CRs are removed first), so
    re-creating the same name right after a delete would conflict.
    """
    with kube_api.api_client() as c:
        yield from _widget_crd(k8s.ApiextensionsV1Api(c))


def _widget_crd(ext: k8s.ApiextensionsV1Api) -> Iterator[str]:
    name = f"widgets.{GROUP}"
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["replicas"],
                "properties": {
                    "replicas": {"type": "integer", "minimum": 1, "maximum": 16},
                    "mode": {"type": "string", "enum": ["SYNC_MASTER", "ASYNC_MASTER"]},
                },
            },
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }
    body = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                }
            ],
        },
    }
    ext.create_custom_resource_definition(body)  # type: ignore[arg-type]  # a plain dict is accepted

    def established() -> bool:
        conditions = getattr(ext.read_custom_resource_definition(name).status, "conditions", None)
        return any(c.type == "Established" and c.status == "True" for c in conditions or [])

    wait_for("the CRD to be Established", established)
    try:
        yield name
    finally:
        ext.delete_custom_resource_definition(name)


def _widget(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_custom_resource_create_and_status(
    k8s_client: k8s.ApiClient, widget_crd: str, k8s_namespace: str
) -> None:
    """The first custom-resource create is what crashed the apiserver with the vendored reflect2."""
    co = k8s.CustomObjectsApi(k8s_client)
    args = (GROUP, "v1alpha1", k8s_namespace, "widgets")
    created = as_dict(co.create_namespaced_custom_object(*args, _widget("w1", {"replicas": 2})))
    assert created["metadata"]["generation"] == 1
    co.patch_namespaced_custom_object_status(
        *args, "w1", {"status": {"observedGeneration": 1, "phase": "Ready"}}
    )
    got = as_dict(co.get_namespaced_custom_object(*args, "w1"))
    assert got["spec"] == {"replicas": 2}
    assert got["status"] == {"observedGeneration": 1, "phase": "Ready"}
    # A status write does not bump the generation; a spec write does.
    assert got["metadata"]["generation"] == 1
    co.patch_namespaced_custom_object(*args, "w1", {"spec": {"replicas": 3}})
    again = as_dict(co.get_namespaced_custom_object(*args, "w1"))
    assert again["metadata"]["generation"] == 2


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"replicas": 0}, "spec.replicas"),
        ({"replicas": "two"}, "spec.replicas"),
        ({"replicas": 1, "mode": "MASTERISH"}, "spec.mode"),
        ({}, "spec.replicas"),
    ],
)
def test_server_side_validation_rejects_bad_custom_resources(
    k8s_client: k8s.ApiClient, widget_crd: str, k8s_namespace: str, spec: dict[str, Any], field: str
) -> None:
    co = k8s.CustomObjectsApi(k8s_client)
    with pytest.raises(k8s.ApiException) as exc:
        co.create_namespaced_custom_object(
            GROUP, "v1alpha1", k8s_namespace, "widgets", _widget("bad", spec)
        )
    assert exc.value.status == 422
    assert field in str(exc.value.body)


def test_start_retries_when_a_picked_port_is_taken(
    kube_api: KubeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real collision: the first port handed to etcd is held by a listening socket here.

    ``kube_api`` is only requested so this test skips (or fails in CI) like the others when the
    binaries are missing; it starts a second, private control plane.
    """
    picks: list[int] = []
    real_pick = control_plane.pick_free_ports
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()

        def pick_free_ports(host: str, count: int) -> list[int]:
            ports = real_pick(host, count)
            if not picks:  # the first attempt's etcd client port is the taken one
                ports[0] = taken.getsockname()[1]
            picks.extend(ports)
            return ports

        monkeypatch.setattr(control_plane, "pick_free_ports", pick_free_ports)
        with control_plane.running_control_plane(tmp_path) as api, api.api_client() as c:
            assert k8s.VersionApi(c).get_code().minor == "20"
            assert api.workdir == tmp_path / "attempt-2"
            pids = list(api.pids().values())
    etcd_log = (tmp_path / "attempt-1" / "etcd.log").read_text()
    assert "address already in use" in etcd_log
    for pid in pids:  # stopped on exit
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
