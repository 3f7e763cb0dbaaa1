"""Spark-on-Kubernetes objects: rendered, validated (Kubernetes schemas, spark-operator CRD schema),
and the files in spark/k8s/ kept in sync with the renderer."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from ferrymq_spark import k8s_manifests as km
from pydantic import ValidationError

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads(
    (Path(__file__).parent / "data" / "sparkapplication-v1beta2.schema.json").read_text()
)
K8S_VERSION = "1.25.0"


def settings(**kw: object) -> km.SparkK8sSettings:
    return km.SparkK8sSettings.model_validate(kw)


@pytest.mark.parametrize("role", ["driver", "executor"])
def test_pod_templates_are_valid_pods(role: str) -> None:
    for s in (settings(), settings(store_claim="broker-a-0-store", store_broker="broker-a")):
        pod = km.pod_template(s, role)  # type: ignore[arg-type]
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
        names = [v["name"] for v in pod["spec"]["volumes"]]
        mounts = {m["name"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
        assert mounts <= set(names)
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


def test_rbac_objects_are_valid() -> None:
    for obj in km.rbac(settings()):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("job", km.JOBS)
def test_spark_application_matches_the_crd_schema(job: str) -> None:
    app = km.spark_application(settings(store_claim="st", store_broker="b"), job)  # type: ignore[arg-type]
    jsonschema.validate(app, SCHEMA)
    spec = app["spec"]
    assert spec["mainApplicationFile"] == "local:///opt/ferrymq/submit.py"
    assert spec["arguments"][0] == job
    # the role volume mounts must name volumes of the application
    names = {v["name"] for v in spec["volumes"]}
    for role in ("driver", "executor"):
        assert {m["name"] for m in spec[role]["volumeMounts"]} <= names
    if job == "backlog":
        assert spec["arguments"][-4:] == ["--store", "/store", "--store-broker", "b"]


def test_schema_rejects_a_misspelt_field() -> None:
    app = km.spark_application(settings(), "backlog")
    app["spec"]["driver"]["memroy"] = "1g"
    with pytest.raises(jsonschema.ValidationError, match="memroy"):
        jsonschema.validate(app, SCHEMA)


def test_spark_submit_line() -> None:
    argv = km.spark_submit_argv(settings(executor_instances=4), "rebalance")
    assert argv[:6] == [
        "spark-submit",
        "--master",
        "k8s://https://kubernetes.default.svc:443",
        "--deploy-mode",
        "cluster",
        "--name",
    ]
    confs = dict(a.split("=", 1) for a in argv[argv.index("--conf") + 1 :: 2] if "=" in a)
    assert confs["spark.executor.instances"] == "4"
    assert confs["spark.kubernetes.driver.podTemplateFile"].endswith("driver-pod-template.yaml")
    assert argv[-5:] == [
        "rebalance",
        "--snapshots",
        "/audit/snapshots",
        "--out",
        "/audit/reports/rebalance",
    ]
    with pytest.raises(ValueError, match="k8s://"):
        km.spark_submit_argv(settings(), "backlog", master="local[*]")


def test_readme_shows_the_generated_submit_line() -> None:
    readme = (ROOT / "spark" / "k8s" / "README.md").read_text()
    for arg in km.spark_submit_argv(km.SparkK8sSettings(), "backlog"):
        assert arg in readme, arg


def test_settings_errors_name_the_key() -> None:
    with pytest.raises(ValidationError, match="executor_memory"):
        settings(executor_memory="lots")
    with pytest.raises(ValidationError, match="namespace"):
        settings(namespace="Not_A_Name")
    with pytest.raises(ValidationError, match="surprise"):
        settings(surprise=1)


def test_files_in_spark_k8s_are_the_rendered_defaults() -> None:
    for name, text in km.render_all().items():
        path = ROOT / "spark" / "k8s" / name
        assert path.read_text() == text, (
            f"{path} is stale: python -m ferrymq_spark.k8s_manifests spark/k8s"
        )
        for doc in yaml.safe_load_all(text):
            assert doc["apiVersion"] and doc["kind"]
