"""Broker ``spec.audit`` -> a CronJob that collects a snapshot and writes the reports, and the
claim that keeps the snapshot history between runs (pure).

Each run: ``ferrymq admin snapshot --namesrv <addr> --out /audit/snapshots`` (one timestamped
snapshot appended to the history), then, with ``reports``, ``ferrymq report backlog`` and
``ferrymq report rebalance`` over the whole history into ``/audit/reports``. The CronJob's API
version comes from discovery (batch/v1 from Kubernetes 1.21, batch/v1beta1 on 1.20).
"""

from __future__ import annotations

import shlex
from typing import Any

from ferrymq_operator.builders import names, pod
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import AuditSpec, BrokerSpec

AUDIT_DIR = "/audit"
COMPONENT_AUDIT = "audit"


def audit_name(cr_name: str) -> str:
    """CronJob and claim name (CronJob names are limited to 52 characters: 40 + 6)."""
    return f"{cr_name}-audit"


def labels(owner: Owner) -> dict[str, str]:
    return names.common_labels(owner, COMPONENT_AUDIT)


def script(namesrv_addr: str, audit: AuditSpec) -> str:
    """The shell script of one run; every step must succeed (``set -e``)."""
    snapshots = f"{AUDIT_DIR}/snapshots"
    reports = f"{AUDIT_DIR}/reports"
    steps = [
        "set -eu",
        f"mkdir -p {snapshots} {reports}",
        f"ferrymq admin snapshot --namesrv {shlex.quote(namesrv_addr)} --out {snapshots}",
    ]
    if audit.reports:
        steps += [
            f"ferrymq report backlog --snapshots {snapshots} --out {reports}/backlog",
            f"ferrymq report rebalance --snapshots {snapshots} --out {reports}/rebalance",
        ]
    return "\n".join(steps)


def claim(owner: Owner, audit: AuditSpec) -> dict[str, Any]:
    """The snapshot history and reports. No owner reference: like the store claims of a
    StatefulSet, the history outlives the Broker (deleting the Broker keeps it; re-creating the
    Broker continues it), so only a person deletes it."""
    spec = pod.claim_spec(audit.storage)
    metadata = names.metadata(owner, audit_name(owner.name), labels(owner))
    del metadata["ownerReferences"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": spec,
    }


def cronjob(
    owner: Owner, spec: BrokerSpec, audit: AuditSpec, namesrv_addr: str, api_version: str
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "audit",
        "image": audit.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": ["/bin/sh", "-c", script(namesrv_addr, audit)],
        "env": [
            {"name": "HOME", "value": pod.HOME},
            {"name": "SPARK_LOCAL_IP", "value": "127.0.0.1"},
        ],
        "securityContext": pod.container_security_context(),
        "volumeMounts": [
            {"name": "audit", "mountPath": AUDIT_DIR},
            {"name": "home", "mountPath": pod.HOME},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    requests, limits = audit.resources.requests, audit.resources.limits
    if requests or limits:
        container["resources"] = {
            **({"requests": dict(requests)} if requests else {}),
            **({"limits": dict(limits)} if limits else {}),
        }
    pod_spec: dict[str, Any] = {
        # on a host-network cluster a pod off the node's network has no network at all
        **pod.host_network(spec.host_network),
        "restartPolicy": "Never",
        "securityContext": pod.pod_security_context(),
        "containers": [container],
        "volumes": [
            {"name": "audit", "persistentVolumeClaim": {"claimName": audit_name(owner.name)}},
            {"name": "home", "emptyDir": {}},
            {"name": "tmp", "emptyDir": {}},
        ],
    }
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod_spec["tolerations"] = [
            t.model_dump(by_alias=True, exclude_none=True) for t in spec.tolerations
        ]
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in spec.image_pull_secrets]
    return {
        "apiVersion": api_version,
        "kind": "CronJob",
        "metadata": names.metadata(owner, audit_name(owner.name), labels(owner)),
        "spec": {
            "schedule": audit.schedule,
            "suspend": audit.suspend,
            # One run at a time: two collectors would write interleaved snapshot histories.
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 300,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": labels(owner)},
                "spec": {
                    "backoffLimit": 2,
                    "template": {"metadata": {"labels": labels(owner)}, "spec": pod_spec},
                },
            },
        },
    }


def desired(
    owner: Owner, spec: BrokerSpec, namesrv_addr: str, cronjob_api_version: str
) -> list[dict[str, Any]]:
    """The audit objects when ``spec.audit`` is set (claim before the CronJob), else none."""
    if spec.audit is None:
        return []
    return [
        claim(owner, spec.audit),
        cronjob(owner, spec, spec.audit, namesrv_addr, cronjob_api_version),
    ]
