"""charts/ferrymq-operator without a cluster: helm lint --strict, values.schema.json, helm template output.

Rendered built-in objects are validated with kubernetes-validate (its oldest schema set, 1.25, and the
latest); Kubernetes 1.20 itself is covered by the server-side dry run in test_chart_cluster.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs in the venv
import kubernetes_validate
import pytest
import yaml

from chart.helm import CHART, ROOT, by_kind, documents, one, run, template

VALIDATE_VERSIONS = ("1.25", kubernetes_validate.latest_version())
WILDCARD = "*"


def rendered(helm: Path, *extra: str, **kw: Any) -> list[dict[str, Any]]:
    return documents(template(helm, *extra, **kw).stdout)


def values_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return schema


def default_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text()) or {}
    return values


def test_values_schema_is_valid_and_accepts_the_defaults() -> None:
    schema = values_schema()
    validator = jsonschema.validators.validator_for(schema)
    validator.check_schema(schema)
    validator(schema).validate(default_values())


def test_helm_lint_strict_passes(helm_bin: Path) -> None:
    out = run([helm_bin, "lint", "--strict", CHART])
    assert "0 chart(s) failed" in out.stdout


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("operator.resyncSeconds=soon", "resyncSeconds"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("watchNamespaces[0]=Not_A_Namespace", "watchNamespaces"),
        ("replicaCount=2", "replicaCount"),  # unknown keys are refused, not ignored
        ("resources.limits=lots", "limits"),
    ],
)
def test_schema_rejects_bad_values_naming_the_key(helm_bin: Path, override: str, key: str) -> None:
    for cmd in (["lint", "--strict"], ["template", "x"]):
        out = run([helm_bin, *cmd, CHART, "--set", override], check=False)
        assert out.returncode != 0, f"helm {cmd[0]} accepted {override}"
        assert key in out.stderr + out.stdout, out.stderr


def test_template_renders_the_operator_objects(helm_bin: Path) -> None:
    docs = rendered(helm_bin)
    deployment = one(docs, "Deployment")
    account = one(docs, "ServiceAccount")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    roles = {(d["kind"], d["metadata"]["name"]) for d in by_kind(docs, "ClusterRole")}
    roles |= {(d["kind"], d["metadata"]["name"]) for d in by_kind(docs, "Role")}
    bindings = by_kind(docs, "ClusterRoleBinding") + by_kind(docs, "RoleBinding")
    assert roles and bindings
    for b in bindings:
        assert (b["roleRef"]["kind"], b["roleRef"]["name"]) in roles, b["metadata"]["name"]
        assert {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": "ferrymq-system",
        } in b["subjects"]
    for d in docs:
        if d["kind"] not in {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}:
            assert d["metadata"].get("namespace", "ferrymq-system") == "ferrymq-system"


def container_args(docs: list[dict[str, Any]]) -> list[str]:
    args: list[str] = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def test_release_namespace_only_by_default(helm_bin: Path) -> None:
    docs = rendered(helm_bin)
    args = container_args(docs)
    assert "--all-namespaces" not in args
    assert [a for a in args if a.startswith("--namespace")] == ["--namespace=ferrymq-system"]
    roles = {r["metadata"]["name"]: r for r in by_kind(docs, "Role")}
    assert {r["metadata"]["namespace"] for r in roles.values()} == {"ferrymq-system"}
    bound = {b["roleRef"]["name"] for b in by_kind(docs, "ClusterRoleBinding")}
    assert bound == {"ferrymq-ferrymq-operator-discovery"}


def test_star_watches_every_namespace_with_a_cluster_role(helm_bin: Path) -> None:
    docs = rendered(helm_bin, "--set", "watchNamespaces={*}")
    args = container_args(docs)
    assert "--all-namespaces" in args
    assert not any(a.startswith("--namespace") for a in args)
    bound = {b["roleRef"]["name"] for b in by_kind(docs, "ClusterRoleBinding")}
    assert "ferrymq-ferrymq-operator" in bound


def test_watched_namespaces_get_a_role_each_and_no_cluster_wide_write(helm_bin: Path) -> None:
    docs = rendered(helm_bin, "--set", "watchNamespaces={team-a,team-b}")
    args = container_args(docs)
    assert "--all-namespaces" not in args
    assert [a for a in args if a.startswith("--namespace")] == [
        "--namespace=team-a",
        "--namespace=team-b",
    ]
    # a Role per watched namespace, and the leader-election Role in the release namespace
    assert sorted(r["metadata"]["namespace"] for r in by_kind(docs, "Role")) == [
        "ferrymq-system",
        "team-a",
        "team-b",
    ]
    assert sorted(b["metadata"]["namespace"] for b in by_kind(docs, "RoleBinding")) == [
        "ferrymq-system",
        "team-a",
        "team-b",
    ]
    # What the operator holds cluster-wide is read-only (discovery of CRDs, StorageClasses);
    # the aggregated self-service roles are not bound to it.
    bound = {b["roleRef"]["name"] for b in by_kind(docs, "ClusterRoleBinding")}
    for role in by_kind(docs, "ClusterRole"):
        if role["metadata"]["name"] not in bound:
            continue
        for rule in role["rules"]:
            assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule


def test_image_and_resources_come_from_values(helm_bin: Path) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    default = one(rendered(helm_bin), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert default["image"] == f"{default_values()['image']['repository']}:{chart['appVersion']}"
    docs = rendered(
        helm_bin,
        values={
            "image.repository": "registry.example/fmq-op",
            "image.tag": "1.2.3",
            "resources.limits.memory": "1Gi",
        },
    )
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/fmq-op:1.2.3"
    assert container["resources"]["limits"]["memory"] == "1Gi"


def test_container_args_are_options_of_the_image_entrypoint(helm_bin: Path) -> None:
    """The chart's args go to operator/Dockerfile's ENTRYPOINT (kopf run ...): kopf must know them."""
    entry = next(
        line.removeprefix("ENTRYPOINT").strip()
        for line in (ROOT / "operator" / "Dockerfile").read_text().splitlines()
        if line.startswith("ENTRYPOINT")
    )
    argv: list[str] = json.loads(entry)
    kopf = Path(sys.executable).with_name(argv[0])
    out = subprocess.run(
        [kopf, *argv[1:], "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    for values in ({}, {"watchNamespaces": "{a,b}", "operator.verbose": "true"}):
        for arg in container_args(rendered(helm_bin, values=values)):
            option = arg.split("=", 1)[0]
            assert option.startswith("--") and option in out.stdout, arg


def test_pdb_api_version_follows_capabilities(helm_bin: Path) -> None:
    """helm's offline capabilities include policy/v1; the 1.20 case is in test_chart_cluster.py."""
    assert {d["apiVersion"] for d in by_kind(rendered(helm_bin), "PodDisruptionBudget")} == {
        "policy/v1"
    }
    assert not by_kind(
        rendered(helm_bin, values={"podDisruptionBudget.enabled": "false"}), "PodDisruptionBudget"
    )


def test_operator_pod_is_hardened_and_probed(helm_bin: Path) -> None:
    pod = one(rendered(helm_bin), "Deployment")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    security = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
    assert security.get("runAsNonRoot") is True
    assert container.get("securityContext", {}).get("allowPrivilegeEscalation") is False
    probe = container["livenessProbe"]["httpGet"]
    # with leader election (default) a waiting replica runs no kopf: /metrics answers for it
    assert (probe["path"], probe["port"]) == ("/metrics", "metrics")
    single = one(
        rendered(helm_bin, "--set", "replicas=1", "--set", "leaderElection.enabled=false"),
        "Deployment",
    )
    probe = single["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]
    assert probe["path"] == "/healthz"
    out = run(
        [helm_bin, "template", "x", CHART, "--set", "leaderElection.enabled=false"], check=False
    )
    assert out.returncode != 0 and "needs leaderElection.enabled" in out.stderr
    assert container.get("resources")


@pytest.mark.parametrize("version", VALIDATE_VERSIONS)
def test_rendered_objects_validate_against_kubernetes_schemas(helm_bin: Path, version: str) -> None:
    docs = rendered(helm_bin, "--include-crds")
    assert docs
    for d in docs:
        try:
            kubernetes_validate.validate(d, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{d['kind']}/{d['metadata']['name']} invalid for {version}: {exc.message}")


def test_chart_crds_are_the_generated_ones(helm_bin: Path) -> None:
    in_chart = {
        d["metadata"]["name"]: d
        for d in rendered(helm_bin, "--include-crds")
        if d["kind"] == "CustomResourceDefinition"
    }
    generated = {}
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        for d in documents(path.read_text()):
            generated[d["metadata"]["name"]] = d
    assert generated, "crds/ is empty"
    assert in_chart == generated


def _rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for d in by_kind(docs, "ClusterRole") + by_kind(docs, "Role") for r in d["rules"]]


def grants(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", [])
        and resource in r.get("resources", [])
        and verb in r["verbs"]
        for r in rules
    )


def test_rbac_has_no_wildcards_and_covers_what_the_operator_does(helm_bin: Path) -> None:
    rules = _rules(rendered(helm_bin))
    for r in rules:
        for k in ("apiGroups", "resources", "verbs"):
            assert WILDCARD not in r.get(k, []), f"wildcard in {k}: {r}"
        assert "nonResourceURLs" not in r
    for resource in ("nameservers", "brokers", "topics", "consumergroups"):
        for verb in ("get", "list", "watch", "patch"):
            assert grants(rules, "ferrymq.io", resource, verb), (resource, verb)
        assert grants(rules, "ferrymq.io", f"{resource}/status", "patch"), resource
    children = [
        ("apps", "statefulsets"),
        ("", "services"),
        ("", "configmaps"),
        ("policy", "poddisruptionbudgets"),
    ]
    for group, resource in children:
        for verb in ("get", "list", "watch", "create", "patch"):
            assert grants(rules, group, resource, verb), (group, resource, verb)
    assert grants(rules, "", "events", "create") or grants(
        rules, "events.k8s.io", "events", "create"
    )
    # Secrets: spec.acl/spec.tls read the user's Secrets and create/renew the operator's own (CA,
    # certificates, its ACL account). Never watch (every credential streamed to the operator) and
    # never delete (owned ones are garbage-collected; users' are theirs).
    secret_verbs = {v for r in rules if "secrets" in r.get("resources", []) for v in r["verbs"]}
    assert {"get", "create", "patch"} <= secret_verbs
    assert not secret_verbs & {"watch", "delete", "deletecollection", WILDCARD}, secret_verbs


def test_host_network_value(helm_bin: Path) -> None:
    default = one(rendered(helm_bin), "Deployment")["spec"]["template"]["spec"]
    assert "hostNetwork" not in default and "dnsPolicy" not in default
    pod = one(rendered(helm_bin, values={"hostNetwork": "true"}), "Deployment")["spec"]["template"][
        "spec"
    ]
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"


def test_image_names_agree_with_images_py() -> None:
    """One source of truth (issue 16, defect 5): the chart's operator image and the CRDs' image
    defaults are the names images.py gives scripts/build-images.sh."""
    from ferrymq_operator import images

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert default_values()["image"]["repository"] == images.OPERATOR_REPOSITORY
    assert chart["appVersion"] == images.TAG
    assert f"{images.OPERATOR_REPOSITORY}:{chart['appVersion']}" == images.OPERATOR_IMAGE
    for crds in (ROOT / "crds", CHART / "crds"):
        brokers = yaml.safe_load((crds / "ferrymq.io_brokers.yaml").read_text())
        spec = brokers["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        assert spec["properties"]["image"]["default"] == images.BROKER_IMAGE
        audit = spec["properties"]["audit"]["properties"]["image"]
        assert audit["default"] == images.SPARK_IMAGE
        nameservers = yaml.safe_load((crds / "ferrymq.io_nameservers.yaml").read_text())
        ns_spec = nameservers["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
        assert ns_spec["spec"]["properties"]["image"]["default"] == images.BROKER_IMAGE
    shell = dict(
        line.split("=", 1) for line in images.shell_assignments().splitlines() if "=" in line
    )
    assert shell["OPERATOR_IMAGE"] == images.OPERATOR_IMAGE
    assert shell["SPARK_IMAGE"] == images.SPARK_IMAGE
