"""Fixtures of the e2e suite (run with ``.venv/bin/pytest e2e``; not part of the default run).

- With ``E2E_KUBECONFIG`` set, that cluster is used (its current context, or ``E2E_CONTEXT``), and
  nothing is created or deleted outside the suite's namespaces; the context name must look like a
  test cluster (``kind-*``, or containing test/e2e/ci), else the suite refuses to run.
- ``E2E_KIND_NETNS`` (with ``scripts/kind-cluster.sh exec .venv/bin/pytest e2e``, which also sets
  the two above): the 3-node kind cluster of Kubernetes 1.34, the suite inside its network
  namespace. Images are built by scripts/build-images.sh and loaded into every node
  (``scripts/kind-cluster.sh load broker operator``).
- ``E2E_NODE=1`` (with ``eval "$(scripts/k8s-node.sh env)"``, which also sets the two above): the
  single-node cluster on 127.0.0.1. Images are built into its dockerd by scripts/build-images.sh
  (names from ``ferrymq_operator.images``); the operator is installed with ``hostNetwork=true``.
- Otherwise a kind cluster ``ferrymq-e2e`` is created (and deleted at the end unless
  ``E2E_KEEP_CLUSTER=1``); this needs docker and kind. Without them the suite skips, saying so.

On kind, images are built from this tree (broker_image/Dockerfile, operator/Dockerfile) and loaded
into kind (``kind load docker-image``). ``E2E_SKIP_BUILD=1`` reuses images already there.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e.kind_env import (
    BROKER_IMAGE,
    CLUSTER_NAME,
    KIND_NETNS,
    NODE_MODE,
    OPERATOR_IMAGE,
    OPERATOR_IMAGE_REPO,
    ROOT,
    SPARK_IMAGE,
    TAG,
    Kube,
    Refused,
    check_context,
    helm_path,
    images_missing_on_kind_nodes,
    inside_netns,
    missing_tools,
    run,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.k8s)
        item.add_marker(pytest.mark.timeout(3600))


@dataclass(frozen=True)
class Cluster:
    kubeconfig: str
    context: str
    helm: str


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    existing = os.environ.get("E2E_KUBECONFIG")
    if KIND_NETNS and not inside_netns(KIND_NETNS):
        pytest.exit(
            f"E2E_KIND_NETNS={KIND_NETNS}: run the suite inside that network namespace, where the "
            "cluster's API and pods are: scripts/kind-cluster.sh exec .venv/bin/pytest e2e",
            returncode=2,
        )
    needed = ["kubectl"] if existing else ["docker", "kind", "kubectl"]
    missing = missing_tools(needed)
    helm = helm_path()
    if helm is None:
        missing.append("helm")
    if NODE_MODE and not existing:
        missing.append('E2E_KUBECONFIG (eval "$(scripts/k8s-node.sh env)")')
    if missing or helm is None:
        # scripts/test.sh (FERRYMQ_REQUIRE_ALL=1) runs the kind smoke test: a missing tool fails it
        give_up = pytest.fail if os.environ.get("FERRYMQ_REQUIRE_ALL") == "1" else pytest.skip
        give_up(
            f"e2e needs {', '.join(missing)} ("
            + ("set E2E_KUBECONFIG to an existing test cluster, or " if not existing else "")
            + "install docker + kind to let the suite create one; or scripts/kind-cluster.sh up "
            + "and run the suite with scripts/kind-cluster.sh exec .venv/bin/pytest e2e)"
        )
    created = False
    if existing:
        kubeconfig = existing
        context = (
            os.environ.get("E2E_CONTEXT")
            or run(
                ["kubectl", f"--kubeconfig={kubeconfig}", "config", "current-context"]
            ).stdout.strip()
        )
    else:
        kubeconfig = str(Path(tempfile.mkdtemp(prefix="ferrymq-e2e-")) / "kubeconfig")
        context = f"kind-{CLUSTER_NAME}"
        clusters = run(["kind", "get", "clusters"]).stdout.split()
        if CLUSTER_NAME not in clusters:
            run(
                ["kind", "create", "cluster", "--name", CLUSTER_NAME, "--wait", "180s"], timeout=900
            )
            created = True
        run(["kind", "export", "kubeconfig", "--name", CLUSTER_NAME, "--kubeconfig", kubeconfig])
    try:
        check_context(context)
    except Refused as error:
        pytest.exit(str(error), returncode=2)

    if NODE_MODE:
        # Idempotent: starts whatever stopped and re-offers the local volumes earlier runs released.
        run([str(ROOT / "scripts" / "k8s-node.sh"), "up"], timeout=3600)
    if os.environ.get("E2E_SKIP_BUILD") != "1":
        if KIND_NETNS:
            # Built outside the netns (pip and debootstrap need the network), then loaded into
            # every node. The Spark image (the audit CronJob's; ~10 min on a loaded machine) only
            # when a node lacks it: without it the audit Job's pod sat in ErrImageNeverPull.
            spark = ["spark"] if images_missing_on_kind_nodes([SPARK_IMAGE]) else []
            run(
                [str(ROOT / "scripts" / "kind-cluster.sh"), "load", "broker", "operator", *spark],
                timeout=3600,
            )
        elif NODE_MODE:
            # Into the node's dockerd (DOCKER_HOST from k8s-node.sh env), where its kubelet looks.
            # The Spark image (~4 min, and another suite may be using it) only when it is absent.
            docker = "/usr/bin/docker" if os.access("/usr/bin/docker", os.X_OK) else "docker"
            has_spark = run([docker, "image", "inspect", SPARK_IMAGE], check=False).returncode == 0
            images = ["broker", "operator"] + ([] if has_spark else ["spark"])
            run([str(ROOT / "scripts" / "build-images.sh"), *images], timeout=3600)
        else:
            run(
                ["docker", "build", "-f", "broker_image/Dockerfile", "-t", BROKER_IMAGE, "."],
                timeout=1800,
            )
            run(
                ["docker", "build", "-f", "operator/Dockerfile", "-t", OPERATOR_IMAGE, "."],
                timeout=1800,
            )
            if not existing:
                for image in (BROKER_IMAGE, OPERATOR_IMAGE):
                    run(
                        ["kind", "load", "docker-image", image, "--name", CLUSTER_NAME],
                        timeout=900,
                    )
    try:
        yield Cluster(kubeconfig, context, helm)
    finally:
        if created and os.environ.get("E2E_KEEP_CLUSTER") != "1":
            run(["kind", "delete", "cluster", "--name", CLUSTER_NAME], check=False)


def _namespace(cluster: Cluster, prefix: str) -> Kube:
    namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
    k = Kube(cluster.kubeconfig, cluster.context, namespace)
    k.kubectl("create", "namespace", namespace)
    return k


@pytest.fixture(scope="session")
def kube(cluster: Cluster) -> Iterator[Kube]:
    """A namespace with the chart's operator watching it (installed with ``helm install``)."""
    k = _namespace(cluster, "ferrymq-e2e")
    release = "ferrymq-e2e"
    helm_env = {"KUBECONFIG": cluster.kubeconfig}
    # one operator pod on the host network: two replicas on one node would share its ports
    host_network = ["--set", "hostNetwork=true", "--set", "replicas=1"] if NODE_MODE else []
    # helm installs a chart's CRDs only when they are absent and never upgrades them; on a cluster
    # that outlives runs (the node), the CRDs of this tree are applied first.
    k.kubectl("apply", "-f", str(ROOT / "charts" / "ferrymq-operator" / "crds"))
    try:
        run(
            [
                cluster.helm, "install", release, str(ROOT / "charts" / "ferrymq-operator"),
                "--kube-context", cluster.context, "--namespace", k.namespace, "--wait",
                "--timeout", "5m",
                "--set", f"image.repository={OPERATOR_IMAGE_REPO}", "--set", f"image.tag={TAG}",
                "--set", "image.pullPolicy=Never",
                "--set", f"watchNamespaces={{{k.namespace}}}",
                *host_network,
            ],
            env=helm_env,
            timeout=600,
        )  # fmt: skip
        yield k
    finally:
        # Delete everything: custom resources first (their children go with them), then the chart.
        # Topics and ConsumerGroups before their Broker, while the operator runs: their finalizer
        # needs it (left behind, they would keep the namespace Terminating for good).
        k.ns("delete", "topics,consumergroups", "--all", "--wait=true", timeout=300, check=False)
        k.ns("delete", "brokers,nameservers", "--all", "--wait=true", timeout=600, check=False)
        run(
            [cluster.helm, "uninstall", release, "--kube-context", cluster.context,
             "--namespace", k.namespace],
            env=helm_env,
            check=False,
        )  # fmt: skip
        k.kubectl("delete", "namespace", k.namespace, "--wait=true", timeout=600, check=False)


@pytest.fixture
def bare_kube(cluster: Cluster) -> Iterator[Kube]:
    """A fresh namespace without the operator, deleted after the test."""
    k = _namespace(cluster, "ferrymq-node")
    try:
        yield k
    finally:
        k.kubectl("delete", "namespace", k.namespace, "--wait=true", timeout=600, check=False)


@pytest.fixture(scope="session")
def broker_image() -> str:
    return BROKER_IMAGE


@pytest.fixture(scope="session")
def spark_image() -> str:
    return SPARK_IMAGE
