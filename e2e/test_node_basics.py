"""The single-node cluster itself (scripts/k8s-node.sh): a kubelet that runs real pods on the host
network, with cluster DNS, the in-cluster API address and local persistent volumes.

Only on that cluster (``E2E_NODE=1``); the operator is not involved.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from e2e.kind_env import NODE_MODE, Kube, host_network_fields, wait_for

pytestmark = pytest.mark.skipif(
    not NODE_MODE, reason='only on the scripts/k8s-node.sh cluster (eval "$(k8s-node.sh env)")'
)

BASE_IMAGE = "ferrymq-base:bookworm"  # debootstrap rootfs, imported by scripts/build-images.sh

PROBE = r"""
import json, os, socket, ssl, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
ctx = ssl.create_default_context(cafile=f"{sa}/ca.crt")
host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
req = urllib.request.Request(
    f"https://{host}:{port}/version",
    headers={"Authorization": "Bearer " + open(f"{sa}/token").read()},
)
version = json.load(urllib.request.urlopen(req, timeout=10, context=ctx))
print(json.dumps({
    "hostname": socket.gethostname(),
    "os": [l for l in open("/etc/os-release") if l.startswith("PRETTY_NAME")][0].strip(),
    "dns": socket.gethostbyname("anything.somewhere.svc.cluster.local"),
    "api": f"{host}:{port}",
    "git": version["gitVersion"],
}))
"""


def pod_phase(kube: Kube, name: str) -> str | None:
    phase = kube.get_json("pod", name).get("status", {}).get("phase")
    if phase == "Failed":
        raise AssertionError(f"pod {name} failed:\n{kube.ns('logs', name, check=False)}")
    return phase if phase == "Succeeded" else None


def pod(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            **host_network_fields(),
            "containers": [
                {
                    "name": "main",
                    "image": BASE_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": command,
                    **spec.pop("container", {}),
                }
            ],
            **spec,
        },
    }


def test_a_pod_runs_on_the_host_network_with_cluster_dns_and_the_api(bare_kube: Kube) -> None:
    bare_kube.apply(pod("probe", ["python3", "-c", PROBE]))
    wait_for("the probe pod to succeed", lambda: pod_phase(bare_kube, "probe"), timeout=180)
    out = json.loads(bare_kube.ns("logs", "probe").strip().splitlines()[-1])
    assert out["hostname"] == socket.gethostname()  # the host's network (and UTS) namespace
    assert "Debian GNU/Linux 12" in out["os"]
    assert out["dns"] == "127.0.0.1"  # dnsmasq answers *.cluster.local with the node address
    assert out["api"] == "127.0.0.1:443"  # the `kubernetes` Service, no kube-proxy needed
    assert out["git"].startswith("v1.20.")
    body = bare_kube.get_json("pod", "probe")
    assert body["spec"]["nodeName"] == "127.0.0.1"
    assert body["status"]["hostIP"] == "127.0.0.1"


def test_a_claim_binds_a_local_volume_and_the_pod_writes_to_it(bare_kube: Kube) -> None:
    bare_kube.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
    )
    marker = f"written-by-{bare_kube.namespace}"
    bare_kube.apply(
        pod(
            "writer",
            ["sh", "-c", f"echo {marker} > /data/marker && id -u"],
            container={
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "securityContext": {"runAsUser": 10001, "runAsGroup": 10001},
            },
            securityContext={"fsGroup": 10001},
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        )
    )
    wait_for("the writer pod to succeed", lambda: pod_phase(bare_kube, "writer"), timeout=180)
    assert bare_kube.ns("logs", "writer").strip() == "10001"
    claim = bare_kube.get_json("pvc", "data")
    assert claim["spec"]["storageClassName"] == "local-storage"  # the default class
    volume = bare_kube.kubectl("get", "pv", claim["spec"]["volumeName"], "-o", "json")
    path = Path(json.loads(volume)["spec"]["local"]["path"])
    assert (path / "marker").read_text().strip() == marker
