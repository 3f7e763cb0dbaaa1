"""Spark-on-Kubernetes objects: rendered, validated (Kubernetes schemas, spark-operator CRD schema),
and the files in spark/k8s/ kept in sync with the renderer."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from ferrymq_operator.builders import audit as operator_audit
from ferrymq_operator.builders import pod as operator_pod
from ferrymq_operator.images import SPARK_IMAGE
from ferrymq_spark import k8s_manifests as km
from pydantic import ValidationError

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
SCHEMA = json.loads((DATA / "sparkapplication-v1beta2.schema.json").read_text())
SCHEDULED_SCHEMA = json.loads((DATA / "scheduledsparkapplication-v1beta2.schema.json").read_text())
K8S_VERSION = "1.25.0"


def settings(**kw: object) -> km.SparkK8sSettings:
    return km.SparkK8sSettings.model_validate(kw)


@pytest.mark.parametrize("role", ["driver", "executor"])
def test_pod_templates_are_valid_pods(role: str) -> None:
    for s in (settings(), settings(host_network=True, audit_host_path="/srv/audit")):
        pod = km.pod_template(s, role)  # type: ignore[arg-type]
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
        spec = pod["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == km.RUN_AS_USER
        if s.host_network:
            assert spec["hostNetwork"] is True
            assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
        else:
            assert "hostNetwork" not in spec


def test_pods_run_as_the_image_user_of_the_operator() -> None:
    assert km.RUN_AS_USER == operator_pod.RUN_AS_USER
    assert km.SparkK8sSettings().image == SPARK_IMAGE


@pytest.mark.parametrize("broker", ["ferrymq", "broker-a", "mq-prod"])
def test_audit_claim_is_the_operators(broker: str) -> None:
    s = settings(broker=broker)
    assert s.claim == operator_audit.audit_name(broker)
    conf = km.spark_conf(s)
    for role in ("driver", "executor"):
        prefix = f"spark.kubernetes.{role}.volumes.persistentVolumeClaim.audit"
        assert conf[f"{prefix}.options.claimName"] == f"{broker}-audit"
        assert conf[f"{prefix}.mount.path"] == "/audit"
    assert settings(broker=broker, audit_claim="other").claim == "other"


def test_volumes_are_spark_settings_on_both_roles() -> None:
    conf = km.spark_conf(settings(audit_host_path="/srv/audit", store_claim="broker-a-0-store"))
    for role in ("driver", "executor"):
        v = f"spark.kubernetes.{role}.volumes"
        assert conf[f"{v}.hostPath.audit.options.path"] == "/srv/audit"
        assert conf[f"{v}.emptyDir.spark-tmp.mount.path"] == "/tmp"
        assert conf[f"{v}.persistentVolumeClaim.store.options.claimName"] == "broker-a-0-store"
        assert conf[f"{v}.persistentVolumeClaim.store.mount.readOnly"] == "true"
        assert not any(k.startswith(f"{v}.persistentVolumeClaim.audit") for k in conf)


def test_host_network_executors_declare_no_port() -> None:
    plain = km.spark_conf(settings())
    host = km.spark_conf(settings(host_network=True, driver_port=40001))
    assert "spark.blockManager.port" not in plain
    assert host["spark.blockManager.port"] == "0"
    assert host["spark.shuffle.readHostLocalDisk"] == "false"
    assert "spark.shuffle.readHostLocalDisk" not in plain
    assert host["spark.driver.port"] == "40001"
    # the pods run the image's interpreter, not the submitting side's PYSPARK_PYTHON
    assert plain["spark.pyspark.python"] == host["spark.pyspark.driver.python"] == km.IMAGE_PYTHON
    pod = km.pod_template(settings(host_network=True), "executor")
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["SPARK_LOCAL_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


def test_rbac_objects_are_valid() -> None:
    for obj in km.rbac(settings()):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def _check_application_spec(spec: dict[str, object], job: str) -> None:
    assert spec["mainApplicationFile"] == "local:///opt/ferrymq/submit.py"
    args = spec["arguments"]
    assert isinstance(args, list) and args[0] == job
    if job == "backlog":
        assert args[-4:] == ["--store", "/store", "--store-broker", "b"]
    conf = spec["sparkConf"]
    assert isinstance(conf, dict)
    assert conf[
        "spark.kubernetes.executor.volumes.persistentVolumeClaim.audit.options.claimName"
    ] == ("mq-audit")
    # no webhook-only volume fields
    assert "volumes" not in spec
    for role in ("driver", "executor"):
        role_spec = spec[role]
        assert isinstance(role_spec, dict)
        assert "volumeMounts" not in role_spec
        kubernetes_validate.validate(role_spec["template"], K8S_VERSION, strict=True)
        assert role_spec["hostNetwork"] is True
        assert role_spec["template"]["spec"]["hostNetwork"] is True


@pytest.mark.parametrize("job", km.JOBS)
def test_spark_application_matches_the_crd_schema(job: str) -> None:
    s = settings(broker="mq", store_claim="st", store_broker="b", host_network=True)
    app = km.spark_application(s, job)  # type: ignore[arg-type]
    jsonschema.validate(app, SCHEMA)
    _check_application_spec(app["spec"], job)


@pytest.mark.parametrize("job", km.JOBS)
def test_scheduled_spark_application_matches_the_crd_schema(job: str) -> None:
    s = settings(
        broker="mq", store_claim="st", store_broker="b", host_network=True, schedule="0 * * * *"
    )
    app = km.scheduled_spark_application(s, job)  # type: ignore[arg-type]
    jsonschema.validate(app, SCHEDULED_SCHEMA)
    assert app["kind"] == "ScheduledSparkApplication"
    assert app["spec"]["schedule"] == "0 * * * *"
    assert app["spec"]["concurrencyPolicy"] == "Forbid"
    _check_application_spec(app["spec"]["template"], job)
    # the template is a full SparkApplication spec: required fields of the CRD present
    jsonschema.validate({"metadata": {}, "spec": app["spec"]["template"]}, SCHEMA)


def test_scheduled_schema_rejects_misspelt_fields() -> None:
    app = km.scheduled_spark_application(settings(), "backlog")
    app["spec"]["shedule"] = "0 * * * *"
    with pytest.raises(jsonschema.ValidationError, match="shedule"):
        jsonschema.validate(app, SCHEDULED_SCHEMA)
    app = km.scheduled_spark_application(settings(), "backlog")
    app["spec"]["template"]["driver"]["memroy"] = "1g"
    with pytest.raises(jsonschema.ValidationError, match="memroy"):
        jsonschema.validate(app, SCHEDULED_SCHEMA)


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
    with pytest.raises(ValidationError, match="exclusive"):
        settings(audit_claim="a-audit", audit_host_path="/srv/audit")
    with pytest.raises(ValidationError, match="schedule"):
        settings(schedule="every five minutes")
    with pytest.raises(ValidationError, match="driver_port"):
        settings(driver_port=80)


def test_files_in_spark_k8s_are_the_rendered_defaults() -> None:
    for name, text in km.render_all().items():
        path = ROOT / "spark" / "k8s" / name
        assert path.read_text() == text, (
            f"{path} is stale: python -m ferrymq_spark.k8s_manifests spark/k8s"
        )
        for doc in yaml.safe_load_all(text):
            assert doc["apiVersion"] and doc["kind"]
