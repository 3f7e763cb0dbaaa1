"""Least privilege asked of the real API server (SubjectAccessReview): with the chart's default
values the operator's ServiceAccount cannot read Secrets outside its namespace (and can inside);
with watchNamespaces ["*"] it can; the aggregated roles let a namespace editor create Topics."""

from __future__ import annotations

import functools
import secrets
from collections.abc import Iterator
from pathlib import Path

import polling
import pytest
import yaml
from k8s.control_plane import KubeApi
from kubernetes import client as k8s

from chart.helm import by_kind, documents, run, template

pytestmark = pytest.mark.k8s

RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def allowed(
    api: k8s.ApiClient, user: str, verb: str, resource: str, namespace: str, group: str = ""
) -> bool:
    review = k8s.V1SubjectAccessReview(
        spec=k8s.V1SubjectAccessReviewSpec(
            user=user,
            groups=["system:serviceaccounts", "system:authenticated"],
            resource_attributes=k8s.V1ResourceAttributes(
                verb=verb, resource=resource, namespace=namespace, group=group
            ),
        )
    )
    answer = k8s.AuthorizationV1Api(api).create_subject_access_review(review)
    return bool(answer.status.allowed)


# the aggregation controller works in the background: a coarser step than the default
wait_until = functools.partial(polling.poll_value, every=0.5)


@pytest.fixture
def other_namespace(kube_api: KubeApi) -> Iterator[str]:
    name = f"other-{secrets.token_hex(3)}"
    with kube_api.api_client() as api:
        core = k8s.CoreV1Api(api)
        core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
        yield name
        core.delete_namespace(name, propagation_policy="Background")


def apply_rbac(
    helm: Path, kubectl: Path, kube_api: KubeApi, namespace: str, *extra: str
) -> tuple[str, list[dict[str, object]]]:
    docs = documents(template(helm, *extra, namespace=namespace).stdout)
    rbac = [d for d in docs if d["kind"] in RBAC_KINDS]
    # cluster-scoped names carry the release: unique per test
    suffix = secrets.token_hex(3)
    for d in rbac:
        meta = d["metadata"]
        if d["kind"].startswith("Cluster"):
            meta["name"] = f"{meta['name']}-{suffix}"  # type: ignore[index]
        if d["kind"] == "ClusterRoleBinding":
            d["roleRef"]["name"] = f"{d['roleRef']['name']}-{suffix}"  # type: ignore[index]
    run([kubectl, "apply", "-f", "-"], env=kube_api.env(), stdin=yaml.safe_dump_all(rbac))
    account = by_kind(docs, "ServiceAccount")[0]["metadata"]["name"]  # type: ignore[index]
    return f"system:serviceaccount:{namespace}:{account}", rbac


def test_default_rbac_cannot_read_secrets_outside_its_namespace(
    helm_bin: Path, kubectl_bin: Path, kube_api: KubeApi, k8s_namespace: str, other_namespace: str
) -> None:
    user, _ = apply_rbac(helm_bin, kubectl_bin, kube_api, k8s_namespace)
    with kube_api.api_client() as api:
        assert allowed(api, user, "get", "secrets", k8s_namespace)
        assert allowed(api, user, "create", "statefulsets", k8s_namespace, "apps")
        # a Broker's spec.proxy: ConfigMap, Service, Deployment, PodDisruptionBudget
        for verb in ("create", "patch", "delete"):
            for resource, group in (
                ("deployments", "apps"),
                ("services", ""),
                ("configmaps", ""),
                ("poddisruptionbudgets", "policy"),
            ):
                assert allowed(api, user, verb, resource, k8s_namespace, group), (verb, resource)
        for verb in ("get", "list", "watch", "create"):
            assert not allowed(api, user, verb, "secrets", other_namespace), verb
        assert not allowed(api, user, "list", "secrets", "")  # cluster-wide
        assert not allowed(
            api, user, "create", "rolebindings", other_namespace, "rbac.authorization.k8s.io"
        )
        assert not allowed(api, user, "list", "brokers", other_namespace, "ferrymq.io")


def test_all_namespaces_mode_grants_cluster_wide(
    helm_bin: Path, kubectl_bin: Path, kube_api: KubeApi, k8s_namespace: str, other_namespace: str
) -> None:
    # the same question can be answered "yes": the check above is not vacuous
    user, _ = apply_rbac(
        helm_bin, kubectl_bin, kube_api, k8s_namespace, "--set", "watchNamespaces={*}"
    )
    with kube_api.api_client() as api:
        wait_until(
            "the ClusterRoleBinding", lambda: allowed(api, user, "get", "secrets", other_namespace)
        )
        assert allowed(api, user, "list", "brokers", other_namespace, "ferrymq.io")


def test_aggregated_roles_let_namespace_editors_manage_topics(
    helm_bin: Path, kubectl_bin: Path, kube_api: KubeApi, k8s_namespace: str
) -> None:
    apply_rbac(helm_bin, kubectl_bin, kube_api, k8s_namespace)
    with kube_api.api_client() as api:
        rbac = k8s.RbacAuthorizationV1Api(api)
        for role, user in (("edit", "alice"), ("view", "bob")):
            rbac.create_namespaced_role_binding(
                k8s_namespace,
                k8s.V1RoleBinding(
                    metadata=k8s.V1ObjectMeta(name=f"{user}-{role}"),
                    role_ref=k8s.V1RoleRef(
                        api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=role
                    ),
                    subjects=[
                        k8s.RbacV1Subject(
                            kind="User", name=user, api_group="rbac.authorization.k8s.io"
                        )
                    ],
                ),
            )

        def editor_may_create() -> bool:
            return allowed(api, "alice", "create", "topics", k8s_namespace, "ferrymq.io")

        # the clusterrole-aggregation controller copies the rules into edit/view
        wait_until("edit to include topics", editor_may_create)
        assert allowed(api, "alice", "delete", "consumergroups", k8s_namespace, "ferrymq.io")
        assert not allowed(api, "alice", "create", "brokers", k8s_namespace, "ferrymq.io")
        wait_until(
            "view to include brokers",
            lambda: allowed(api, "bob", "list", "brokers", k8s_namespace, "ferrymq.io"),
        )
        assert not allowed(api, "bob", "create", "topics", k8s_namespace, "ferrymq.io")
