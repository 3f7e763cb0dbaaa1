"""The environment of the e2e suite: tool checks, context guard, cluster, images, chart.

Nothing here runs in the default test run (``testpaths`` is ``tests/``); ``.venv/bin/pytest e2e``
runs it. The clusters:

- the kind cluster of ``scripts/kind-cluster.sh`` (``E2E_KIND_NETNS``, set by
  ``scripts/kind-cluster.sh exec .venv/bin/pytest e2e``, which runs the suite inside the cluster's
  network namespace): 3 nodes of Kubernetes 1.34, pods on the pod network, reachable from the
  netns; images named by ``ferrymq_operator.images``, built by ``scripts/build-images.sh`` and
  loaded with ``kind load image-archive`` (``scripts/kind-cluster.sh load``);
- the single-node cluster of ``scripts/k8s-node.sh`` (``E2E_NODE=1``, set by
  ``eval "$(scripts/k8s-node.sh env)"``): Kubernetes 1.20; images built into the node's dockerd by
  ``scripts/build-images.sh``; every pod on the host network (there is no pod network on that
  node), so clients on the host reach the brokers at 127.0.0.1;
- any other kind cluster (a registry-backed kind elsewhere): created by the suite when absent,
  images tagged ``e2e`` and loaded with ``kind load docker-image``.

Where docker or kind is missing the suite skips and says what to install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ferrymq_operator import images

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_NAME = os.environ.get("E2E_KIND_CLUSTER", "ferrymq-e2e")
#: The single-node cluster of scripts/k8s-node.sh: host networking, images in the node's dockerd.
NODE_MODE = os.environ.get("E2E_NODE") == "1"
#: The network namespace of scripts/kind-cluster.sh's cluster (the suite runs inside it).
KIND_NETNS = os.environ.get("E2E_KIND_NETNS", "")
# build-images.sh builds exactly the names the chart and CRD defaults use.
TAG = images.TAG if NODE_MODE or KIND_NETNS else os.environ.get("E2E_IMAGE_TAG", "e2e")
BROKER_IMAGE = f"{images.BROKER_REPOSITORY}:{TAG}"
OPERATOR_IMAGE_REPO = images.OPERATOR_REPOSITORY
OPERATOR_IMAGE = f"{OPERATOR_IMAGE_REPO}:{TAG}"
SPARK_IMAGE = f"{images.SPARK_REPOSITORY}:{TAG}"
# Context names this suite agrees to touch: kind's own, or ones that say they are for tests.
TEST_CONTEXT_MARKERS = ("kind-", "test", "e2e", "ci")

T = TypeVar("T")


class Refused(RuntimeError):
    """The kube context does not look like a test cluster."""


def host_network_fields() -> dict[str, Any]:
    """Pod spec fields of a pod on the node's network that still resolves cluster names."""
    return {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}


def missing_tools(needed: Sequence[str]) -> list[str]:
    return [tool for tool in needed if shutil.which(tool) is None]


def helm_path() -> str | None:
    """helm on PATH, else the one scripts/k8s-control-plane.sh provisions into its cache."""
    found = shutil.which("helm")
    if found:
        return found
    cache = Path(os.environ.get("FERRYMQ_K8S_CACHE", Path.home() / ".cache" / "ferrymq-k8s"))
    candidate = cache / "bin" / "helm"
    return str(candidate) if candidate.exists() else None


def inside_netns(name: str) -> bool:
    """Whether this process runs in network namespace ``name`` (of ``ip netns``)."""
    try:
        return os.stat(f"/run/netns/{name}").st_ino == os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return False


def outside_netns(args: Sequence[str]) -> list[str]:
    """``args`` to run in the network namespace scripts/kind-cluster.sh was started from (the
    host's, which reaches package registries) when the suite runs in the cluster's netns; else
    ``args`` as they are."""
    outside = Path(os.environ.get("FERRYMQ_KIND_CACHE", "/nonexistent")) / "run" / "outside.netns"
    if KIND_NETNS and outside.exists():
        return ["nsenter", f"--net={outside}", *args]
    return list(args)


def images_missing_on_kind_nodes(images: Sequence[str]) -> list[str]:
    """Those of ``images`` that some node of the kind cluster lacks in its containerd (where
    ``kind load`` puts them and ``imagePullPolicy: Never`` looks)."""
    docker = "/usr/bin/docker" if os.access("/usr/bin/docker", os.X_OK) else "docker"
    nodes = run(["kind", "get", "nodes", "--name", CLUSTER_NAME]).stdout.split()
    missing: list[str] = []
    for node in nodes:
        listed = run([docker, "exec", node, "ctr", "-n", "k8s.io", "images", "ls", "-q"]).stdout
        present = set(listed.split())
        missing += [i for i in images if f"docker.io/{i}" not in present and i not in missing]
    return missing


def is_test_context(name: str) -> bool:
    lowered = name.lower()
    return any(marker in lowered for marker in TEST_CONTEXT_MARKERS)


def check_context(context: str) -> None:
    if not is_test_context(context):
        raise Refused(
            f"refusing to run the e2e suite against kube context {context!r}: it creates and "
            f"deletes workloads; use a context whose name contains one of "
            f"{', '.join(TEST_CONTEXT_MARKERS)}"
        )


def run(
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 600,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        list(args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        )
    return proc


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 300) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            result = probe()
        except RuntimeError as error:  # a kubectl call failing now may succeed later
            last = error
            result = None
        else:
            last = result
        if result:
            return result
        time.sleep(2)  # polling interval of an external cluster, not synchronisation
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


@dataclass
class Kube:
    """kubectl against one kubeconfig + context, in one namespace."""

    kubeconfig: str
    context: str
    namespace: str

    def kubectl(
        self, *args: str, timeout: float = 300, check: bool = True, stdin: str | None = None
    ) -> str:
        cmd = ["kubectl", f"--kubeconfig={self.kubeconfig}", f"--context={self.context}", *args]
        proc = subprocess.run(
            cmd, input=stdin, capture_output=True, text=True, timeout=timeout, cwd=ROOT
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-2000:]}")
        return proc.stdout

    def ns(self, *args: str, **kwargs: Any) -> str:
        return self.kubectl("-n", self.namespace, *args, **kwargs)

    def get_json(self, *args: str) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.ns("get", *args, "-o", "json"))
        return out

    def apply(self, manifest: dict[str, Any]) -> None:
        self.ns("apply", "-f", "-", stdin=json.dumps(manifest))

    def condition(self, plural: str, name: str, kind: str) -> dict[str, Any] | None:
        try:
            body = self.get_json(plural, name)
        except RuntimeError:
            return None
        for cond in (body.get("status") or {}).get("conditions") or []:
            if cond.get("type") == kind:
                return dict(cond)
        return None

    def run_pod(self, name: str, image: str, args: Sequence[str], timeout: float = 300) -> str:
        """Run the ferrymq CLI in a pod inside the cluster (brokers advertise pod IPs, reachable
        only from inside); returns its log once it succeeded."""
        self.ns("delete", "pod", name, "--ignore-not-found", "--wait=true")
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "containers": [
                {"name": name, "image": image, "imagePullPolicy": "Never", "args": list(args)}
            ],
        }
        if NODE_MODE:
            spec.update(host_network_fields())
        overrides = {"spec": spec}
        self.ns(
            "run", name, f"--image={image}", "--restart=Never", "--image-pull-policy=Never",
            f"--overrides={json.dumps(overrides)}",
        )  # fmt: skip

        def finished() -> str | None:
            phase = self.get_json("pod", name).get("status", {}).get("phase")
            if phase == "Failed":
                raise AssertionError(f"pod {name} failed:\n{self.ns('logs', name, check=False)}")
            return phase if phase == "Succeeded" else None

        wait_for(f"pod {name} to finish", finished, timeout=timeout)
        return self.ns("logs", name)
