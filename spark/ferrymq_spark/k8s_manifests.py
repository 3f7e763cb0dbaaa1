"""Spark-on-Kubernetes objects for the audit jobs (pure: settings -> manifests and argv).

Two ways to run ``ferrymq report backlog|rebalance`` on a cluster, from the same settings:

* ``spark-submit --master k8s://https://<apiserver> --deploy-mode cluster`` with the driver and
  executor pod templates (:func:`spark_submit_argv`);
* a ``SparkApplication`` or ``ScheduledSparkApplication`` (Kubeflow spark-operator,
  ``sparkoperator.k8s.io/v1beta2``) (:func:`spark_application`, :func:`scheduled_spark_application`).

Both run ``submit.py`` (a copy of :mod:`ferrymq_spark.submit` in the image) with the report's
arguments; snapshots are read from, and reports written to, the operator's audit claim
``<broker>-audit`` mounted at ``/audit`` on the driver *and* the executors (executors scan the
store files and write Parquet parts, so the claim must be ReadWriteMany when executors may land on
other nodes). Volumes are declared with Spark's own ``spark.kubernetes.*.volumes.*`` settings, which
Spark applies itself: neither spark-submit nor the spark-operator needs a mutating webhook for
them. The files in ``spark/k8s/`` are :func:`render_all` of the defaults; a test keeps them in sync.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Literal

import yaml
from ferrymq_operator.images import SPARK_IMAGE
from pydantic import BaseModel, ConfigDict, Field, model_validator

AUDIT_DIR = "/audit"
STORE_DIR = "/store"
SUBMIT_FILE = "/opt/ferrymq/submit.py"
IMAGE_PYTHON = "/opt/ferrymq/bin/python"  # the image's venv, with ferrymq and PySpark
# The image's own non-root user (spark/k8s/Dockerfile), as the operator's pods: a uid without a
# passwd entry makes Hadoop's login in the JVM fail ("invalid null input: name").
RUN_AS_USER = 10001
DRIVER_CONTAINER = "spark-kubernetes-driver"
EXECUTOR_CONTAINER = "spark-kubernetes-executor"

Job = Literal["backlog", "rebalance"]
JOBS: tuple[Job, ...] = ("backlog", "rebalance")

_QUANTITY = r"^[0-9]+(\.[0-9]+)?([kmgt]|[KMGT]i?)?$"
_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def audit_claim_name(broker: str) -> str:
    """The operator's audit claim of a Broker (``ferrymq_operator.builders.audit.audit_name``)."""
    return f"{broker}-audit"


class SparkK8sSettings(BaseModel):
    """What a cluster operator chooses; every field is validated with the key named on error."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = Field(default="ferrymq", pattern=_NAME, max_length=63)
    name: str = Field(default="ferrymq-audit", pattern=_NAME, max_length=40)
    broker: str = Field(
        default="ferrymq", pattern=_NAME, description="the Broker CR whose audit claim is read"
    )
    image: str = Field(default=SPARK_IMAGE, min_length=1)
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    service_account: str = Field(default="ferrymq-spark", pattern=_NAME)
    spark_version: str = Field(default="4.3.0", pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$")
    audit_claim: str | None = Field(
        default=None, pattern=_NAME, description="PVC at /audit; default: <broker>-audit"
    )
    audit_host_path: str | None = Field(
        default=None,
        pattern=r"^/",
        description="a node directory at /audit instead of the claim (single-node clusters)",
    )
    store_claim: str | None = Field(
        default=None, pattern=_NAME, description="a broker store PVC, mounted read-only at /store"
    )
    store_broker: str | None = Field(default=None, description="brokerName of the store claim")
    window: int = Field(default=10, ge=1)
    host_network: bool = Field(
        default=False, description="pods on the host network (clusters without a pod network)"
    )
    # Spark's own defaults on Kubernetes; the driver declares them as container ports, which on
    # the host network are host ports: two drivers on one node need different ones.
    driver_port: int = Field(default=7078, ge=1024, le=65535)
    driver_block_manager_port: int = Field(default=7079, ge=1024, le=65535)
    ui_port: int = Field(default=4040, ge=1024, le=65535)
    driver_cores: int = Field(default=1, ge=1)
    driver_request_cores: str | None = Field(default=None, pattern=_QUANTITY)
    driver_memory: str = Field(default="1g", pattern=r"^[0-9]+[kmgt]$")
    executor_instances: int = Field(default=2, ge=1)
    executor_cores: int = Field(default=1, ge=1)
    executor_request_cores: str | None = Field(default=None, pattern=_QUANTITY)
    executor_memory: str = Field(default="2g", pattern=r"^[0-9]+[kmgt]$")
    schedule: str = Field(
        default="*/30 * * * *",
        pattern=r"^(@(hourly|daily|weekly|monthly|yearly|every \S+)|(\S+\s+){4}\S+)$",
        description="cron schedule of the ScheduledSparkApplication",
    )

    @model_validator(mode="after")
    def _one_audit_volume(self) -> SparkK8sSettings:
        if self.audit_claim and self.audit_host_path:
            raise ValueError("audit_claim and audit_host_path are exclusive: set one")
        return self

    @property
    def claim(self) -> str:
        return self.audit_claim or audit_claim_name(self.broker)


def labels(s: SparkK8sSettings, role: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "ferrymq",
        "app.kubernetes.io/instance": s.name,
        "app.kubernetes.io/component": f"spark-{role}",
        "app.kubernetes.io/managed-by": "ferrymq",
    }


def job_arguments(s: SparkK8sSettings, job: Job) -> list[str]:
    """Arguments of ``submit.py``: the same as ``ferrymq report <job>``."""
    args = [job, "--snapshots", f"{AUDIT_DIR}/snapshots", "--out", f"{AUDIT_DIR}/reports/{job}"]
    if job == "backlog":
        args += ["--window", str(s.window)]
        if s.store_claim:
            args += ["--store", STORE_DIR]
            if s.store_broker:
                args += ["--store-broker", s.store_broker]
    return args


def _volumes(s: SparkK8sSettings) -> list[tuple[str, str, str, dict[str, str], bool]]:
    """(kind, name, mount path, options, read-only) of each volume, in Spark's vocabulary."""
    audit: tuple[str, str, str, dict[str, str], bool]
    if s.audit_host_path:
        audit = ("hostPath", "audit", AUDIT_DIR, {"path": s.audit_host_path}, False)
    else:
        audit = ("persistentVolumeClaim", "audit", AUDIT_DIR, {"claimName": s.claim}, False)
    out = [audit, ("emptyDir", "spark-tmp", "/tmp", {}, False)]
    if s.store_claim:
        out.append(
            ("persistentVolumeClaim", "store", STORE_DIR, {"claimName": s.store_claim}, True)
        )
    return out


def volume_conf(s: SparkK8sSettings) -> dict[str, str]:
    """``spark.kubernetes.{driver,executor}.volumes.*``: Spark mounts these itself (no webhook)."""
    conf: dict[str, str] = {}
    for role in ("driver", "executor"):
        for kind, name, path, options, read_only in _volumes(s):
            prefix = f"spark.kubernetes.{role}.volumes.{kind}.{name}"
            conf[f"{prefix}.mount.path"] = path
            conf[f"{prefix}.mount.readOnly"] = str(read_only).lower()
            for key, value in options.items():
                conf[f"{prefix}.options.{key}"] = value
    return conf


def _security() -> tuple[dict[str, Any], dict[str, Any]]:
    pod = {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_USER,
        "fsGroup": RUN_AS_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    container = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    return pod, container


def pod_template(s: SparkK8sSettings, role: Literal["driver", "executor"]) -> dict[str, Any]:
    """Driver or executor pod template: Spark fills in image, command, cores, memory (it sets the
    container's memory request and limit from spark.*.memory plus overhead itself) and the
    volumes of :func:`volume_conf`."""
    pod_sec, container_sec = _security()
    env: list[dict[str, Any]] = [{"name": "HOME", "value": "/tmp"}]
    if s.host_network:
        # Spark would pick the address of the host's first interface for what it does not bind
        # explicitly; the pod's address is the node's, which is where its ports are reachable.
        env.append(
            {"name": "SPARK_LOCAL_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        )
    container = {
        "name": DRIVER_CONTAINER if role == "driver" else EXECUTOR_CONTAINER,
        "securityContext": container_sec,
        "env": env,
    }
    spec: dict[str, Any] = {"securityContext": pod_sec, "containers": [container]}
    if s.host_network:
        # Without it a host-network pod gets the node's resolv.conf, which cannot resolve the
        # driver's Service (executors) or kubernetes.default.svc (the driver).
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if role == "driver":
        spec["serviceAccountName"] = s.service_account
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"labels": labels(s, role)},
        "spec": spec,
    }


def spark_conf(s: SparkK8sSettings) -> dict[str, str]:
    """Settings shared by spark-submit and the SparkApplication."""
    conf = {
        "spark.kubernetes.namespace": s.namespace,
        "spark.kubernetes.container.image.pullPolicy": s.image_pull_policy,
        "spark.kubernetes.authenticate.driver.serviceAccountName": s.service_account,
        "spark.sql.shuffle.partitions": str(max(4, 2 * s.executor_instances * s.executor_cores)),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.driver.port": str(s.driver_port),
        "spark.driver.blockManager.port": str(s.driver_block_manager_port),
        "spark.ui.port": str(s.ui_port),
        # the image's interpreter, whatever PYSPARK_PYTHON the submitting side has
        "spark.pyspark.python": IMAGE_PYTHON,
        "spark.pyspark.driver.python": IMAGE_PYTHON,
    }
    if s.host_network:
        # Executors declare no port when theirs is 0 (a random one): on the host network a fixed
        # declared port is a host port, and a second executor on the node would stay Pending.
        conf["spark.blockManager.port"] = "0"
        # Executors on one node share its address, so Spark takes them for one host and reads
        # another executor's shuffle files from its local directory, which is that pod's own
        # emptyDir: fetch over the network instead.
        conf["spark.shuffle.readHostLocalDisk"] = "false"
    if s.driver_request_cores:
        conf["spark.kubernetes.driver.request.cores"] = s.driver_request_cores
    if s.executor_request_cores:
        conf["spark.kubernetes.executor.request.cores"] = s.executor_request_cores
    return conf | volume_conf(s)


def spark_submit_argv(
    s: SparkK8sSettings,
    job: Job,
    master: str = "k8s://https://kubernetes.default.svc:443",
    template_dir: str = "/opt/ferrymq/k8s",
) -> list[str]:
    """The ``spark-submit`` command line for ``job`` in cluster mode."""
    if not master.startswith("k8s://"):
        raise ValueError(f"master {master!r} must be a k8s:// URL")
    conf = spark_conf(s) | {
        "spark.kubernetes.container.image": s.image,
        "spark.kubernetes.driver.podTemplateFile": f"{template_dir}/driver-pod-template.yaml",
        "spark.kubernetes.executor.podTemplateFile": f"{template_dir}/executor-pod-template.yaml",
        "spark.kubernetes.driver.podTemplateContainerName": DRIVER_CONTAINER,
        "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
        "spark.executor.instances": str(s.executor_instances),
        "spark.executor.cores": str(s.executor_cores),
        "spark.executor.memory": s.executor_memory,
        "spark.driver.cores": str(s.driver_cores),
        "spark.driver.memory": s.driver_memory,
        "spark.app.name": f"{s.name}-{job}",
    }
    argv = [
        "spark-submit",
        "--master",
        master,
        "--deploy-mode",
        "cluster",
        "--name",
        f"{s.name}-{job}",
    ]
    for key, value in sorted(conf.items()):
        argv += ["--conf", f"{key}={value}"]
    return [*argv, f"local://{SUBMIT_FILE}", *job_arguments(s, job)]


def _application_spec(s: SparkK8sSettings, job: Job) -> dict[str, Any]:
    def role(r: Literal["driver", "executor"]) -> dict[str, Any]:
        # fresh objects per role: shared ones would be dumped as YAML anchors
        pod_sec, container_sec = _security()
        out: dict[str, Any] = {
            "cores": s.driver_cores if r == "driver" else s.executor_cores,
            "memory": s.driver_memory if r == "driver" else s.executor_memory,
            "labels": labels(s, r),
            # spark-operator 2.x hands the template to Spark (no webhook); the fields below
            # say the same for operators that apply them with their webhook.
            "template": pod_template(s, r),
            "podSecurityContext": pod_sec,
            "securityContext": container_sec,
            "env": [{"name": "HOME", "value": "/tmp"}],
        }
        if s.host_network:
            out["hostNetwork"] = True
        if r == "driver":
            out["serviceAccount"] = s.service_account
        else:
            out["instances"] = s.executor_instances
        return out

    return {
        "type": "Python",
        "pythonVersion": "3",
        "mode": "cluster",
        "image": s.image,
        "imagePullPolicy": s.image_pull_policy,
        "mainApplicationFile": f"local://{SUBMIT_FILE}",
        "arguments": job_arguments(s, job),
        "sparkVersion": s.spark_version,
        "sparkConf": spark_conf(s),
        "restartPolicy": {"type": "Never"},
        "driver": role("driver"),
        "executor": role("executor"),
    }


def spark_application(s: SparkK8sSettings, job: Job) -> dict[str, Any]:
    """A ``SparkApplication`` (``sparkoperator.k8s.io/v1beta2``) running ``job`` once."""
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {
            "name": f"{s.name}-{job}",
            "namespace": s.namespace,
            "labels": labels(s, "application"),
        },
        "spec": _application_spec(s, job),
    }


def scheduled_spark_application(s: SparkK8sSettings, job: Job) -> dict[str, Any]:
    """A ``ScheduledSparkApplication`` running ``job`` on ``s.schedule``, one run at a time (a
    report reads the whole history; overlapping runs would write the same output)."""
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "ScheduledSparkApplication",
        "metadata": {
            "name": f"{s.name}-{job}",
            "namespace": s.namespace,
            "labels": labels(s, "application"),
        },
        "spec": {
            "schedule": s.schedule,
            "concurrencyPolicy": "Forbid",
            "successfulRunHistoryLimit": 1,
            "failedRunHistoryLimit": 3,
            "template": _application_spec(s, job),
        },
    }


def rbac(s: SparkK8sSettings) -> list[dict[str, Any]]:
    """ServiceAccount and Role for the driver, which creates and deletes its executor pods."""
    meta = {"namespace": s.namespace, "labels": labels(s, "driver")}
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": s.service_account, **meta},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": s.service_account, **meta},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["pods", "services", "configmaps", "persistentvolumeclaims"],
                    "verbs": [
                        "create",
                        "get",
                        "list",
                        "watch",
                        "delete",
                        "deletecollection",
                        "patch",
                    ],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": s.service_account, **meta},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": s.service_account,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": s.service_account, "namespace": s.namespace}
            ],
        },
    ]


def render_all(s: SparkK8sSettings | None = None) -> dict[str, str]:
    """File name -> YAML text of every object, as kept in ``spark/k8s/``."""
    s = s or SparkK8sSettings()
    files = {
        "driver-pod-template.yaml": pod_template(s, "driver"),
        "executor-pod-template.yaml": pod_template(s, "executor"),
    }
    for job in JOBS:
        files[f"sparkapplication-{job}.yaml"] = spark_application(s, job)
        files[f"scheduledsparkapplication-{job}.yaml"] = scheduled_spark_application(s, job)
    header = "# Generated by `python -m ferrymq_spark.k8s_manifests spark/k8s`; do not edit.\n"
    out = {
        name: header + yaml.safe_dump(obj, sort_keys=False, default_flow_style=False)
        for name, obj in files.items()
    }
    out["rbac.yaml"] = header + yaml.safe_dump_all(rbac(s), sort_keys=False)
    return out


def main(argv: list[str]) -> int:
    """Write :func:`render_all` of the defaults into the directory ``argv[0]``."""
    if len(argv) != 1:
        print("usage: python -m ferrymq_spark.k8s_manifests OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name, text in render_all().items():
        (out / name).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
