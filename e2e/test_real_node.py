"""The real-cluster suite (issues 16 and 32): the chart's operator, a NameServer of 2 and a Broker
of 2 groups x (master + slave), SYNC_MASTER, driven by clients outside the pods.

Two clusters run it:

- kind (``E2E_KIND_NETNS``, run inside the netns of scripts/kind-cluster.sh): 3 nodes of
  Kubernetes 1.34, pods on the pod network; master and slave of each group on different workers
  (``podAntiAffinity: Required``); the clients run in the netns, which routes every podCIDR;
- the single node of scripts/k8s-node.sh (``E2E_NODE=1``): Kubernetes 1.20, every pod on the host
  network on its own ports (contract-hostnetwork.md: NameServer pod k on PORT + k; broker pod with
  global index i = group * replicasPerGroup + brokerId on LISTEN_PORT + 10 * i), clients on the host.

The tests share one NameServer/Broker pair and run in file order: produce/consume (ferrymq and the
upstream C++ client), a Topic and a ConsumerGroup by kubectl, the 5.x gRPC proxy of ``spec.proxy``
(kind only: the Python 5.x client through it), kill -9 of a master, the pause and manual-restart
annotations, a config roll under load, scale 2 -> 3 -> 2, the audit CronJob, a controller-mode roll
(SwitchOver, ReplicasInSync), and deletion of the custom resources.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.kind_env import KIND_NETNS, NODE_MODE, ROOT, Kube, outside_netns, run, wait_for

pytestmark = pytest.mark.skipif(
    not (NODE_MODE or KIND_NETNS),
    reason="only on the clusters of scripts/kind-cluster.sh (exec) or scripts/k8s-node.sh (env)",
)
#: Every pod on the node's network (k8s-node.sh) or each on its own pod IP (kind).
HOST_NETWORK = NODE_MODE

NS_NAME = "routes"
BROKER = "orders"
NS_PORT = 19876
NS_REPLICAS = 2
LISTEN_PORT = 20911
PER_GROUP = 2
DEFAULT_NS_PORT, DEFAULT_LISTEN_PORT = 9876, 10911
# Where the clients find the NameServers: fixed ports on the host, pod IPs on kind (set by `stack`).
ENDPOINTS = {"namesrv": ";".join(f"127.0.0.1:{NS_PORT + k}" for k in range(NS_REPLICAS))}


def namesrv() -> str:
    return ENDPOINTS["namesrv"]


CPP_CLIENT = ROOT / "tests" / "interop" / "cpp_client.py"
# Debian's client matches the Debian dockerd of both clusters (DOCKER_HOST from their `env`).
DOCKER = "/usr/bin/docker" if os.access("/usr/bin/docker", os.X_OK) else "docker"
# A CPU request makes the pods Burstable: BestEffort containers get the minimum CPU weight (2
# shares) and starved next to other pods with requests (a broker got 1 s of CPU in 10 minutes, its
# probes failed). Small enough that 10 broker pods, the NameServers, the operator and another
# suite's Spark pods fit the node's 2 CPUs.
POD_REQUESTS = {"cpu": "100m", "memory": "128Mi"}
AUDIT_REQUESTS = {"cpu": "200m", "memory": "512Mi"}
PAUSE = "ferrymq.io/pause-reconciliation"
# The chart's defaults; conftest's helm install sets replicas=1 on the node only.
CHART_VALUES = yaml.safe_load((ROOT / "charts" / "ferrymq-operator" / "values.yaml").read_text())
OPERATOR_REPLICAS = 1 if NODE_MODE else int(CHART_VALUES["replicas"])
LEADER_LEASE = str(CHART_VALUES["leaderElection"]["leaseName"])
RESTART = "ferrymq.io/manual-rolling-restart"


def broker_port(group: int, broker_id: int) -> int:
    if not HOST_NETWORK:
        return DEFAULT_LISTEN_PORT
    return LISTEN_PORT + 10 * (group * PER_GROUP + broker_id)


def placement() -> dict[str, Any]:
    """Spec fields of where pods go: the node's network and ports, or kind's workers."""
    if HOST_NETWORK:
        # One node: a Required rule would leave the second replica Pending.
        return {"hostNetwork": True, "podAntiAffinity": "Preferred"}
    # Two workers: the two NameServers, and master and slave of each group, on different ones.
    return {"podAntiAffinity": "Required"}


def nameserver_cr(image: str) -> dict[str, Any]:
    return {
        "apiVersion": "ferrymq.io/v1alpha1",
        "kind": "NameServer",
        "metadata": {"name": NS_NAME},
        "spec": {
            "replicas": NS_REPLICAS,
            "image": image,
            "imagePullPolicy": "Never",
            **placement(),
            **({"port": NS_PORT} if HOST_NETWORK else {}),
            "resources": {"requests": POD_REQUESTS},
        },
    }


def broker_cr(image: str) -> dict[str, Any]:
    return {
        "apiVersion": "ferrymq.io/v1alpha1",
        "kind": "Broker",
        "metadata": {"name": BROKER},
        "spec": {
            "nameServerRef": {"name": NS_NAME},
            "groups": 2,
            "replicasPerGroup": PER_GROUP,
            "brokerRole": "SYNC_MASTER",
            "image": image,
            "imagePullPolicy": "Never",
            **placement(),
            **(
                {"listenPort": LISTEN_PORT, "externalAccess": {"type": "HostNetwork"}}
                if HOST_NETWORK
                else {}
            ),
            "resources": {"requests": POD_REQUESTS},
            "storage": {"size": "1Gi", "deleteClaimOnScaleDown": True},
            "config": {"autoCreateTopicEnable": "true", "slaveReadEnable": "true"},
        },
    }


def condition_true(kube: Kube, plural: str, name: str, kind: str) -> dict[str, Any] | None:
    """The resource's condition ``kind`` when its status is True."""
    cond = kube.condition(plural, name, kind)
    return cond if cond and cond.get("status") == "True" else None


def ready(kube: Kube, plural: str, name: str) -> bool:
    return condition_true(kube, plural, name, "Ready") is not None


def broker_pods(kube: Kube, broker: str = BROKER) -> dict[str, dict[str, Any]]:
    items = kube.get_json("pods").get("items", [])
    return {
        p["metadata"]["name"]: p
        for p in items
        if p["metadata"]["name"].startswith(f"{broker}-broker-")
    }


def pod_ready(pod: dict[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def pod_ip(pod: dict[str, Any]) -> str:
    return "127.0.0.1" if HOST_NETWORK else str(pod["status"]["podIP"])


def listening(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, port)) == 0


def traffic(*args: str, timeout: float = 300) -> tuple[int, list[dict[str, Any]]]:
    proc = subprocess.run(
        [sys.executable, "-m", "e2e.traffic", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode not in (0, 3):
        raise AssertionError(f"traffic {args} crashed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.returncode, events


def routed(topic: str, namesrv: str, broker_name: str) -> bool:
    """Whether ``namesrv``'s route of ``topic`` lists ``broker_name`` (ferrymq admin topic route)."""
    proc = subprocess.run(
        [sys.executable, "-m", "ferrymq.cli.main", "admin", "topic", "route", "-t", topic,
         "-n", namesrv],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return proc.returncode == 0 and broker_name in proc.stdout


def acked(events: list[dict[str, Any]]) -> list[str]:
    return [e["acked"] for e in events if "acked" in e]


def consumed(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["body"]: e for e in events if "body" in e}


def produce(topic: str, prefix: str, count: int, ns: str | None = None) -> list[str]:
    rc, events = traffic(
        "produce", ns or namesrv(), topic, "--count", str(count), "--prefix", prefix
    )
    bodies = acked(events)
    assert rc == 0 and len(bodies) == count, events[-5:]
    return bodies


def consume_all(
    topic: str, group: str, expected: list[str], timeout: float = 180, ns: str | None = None
) -> dict[str, dict[str, Any]]:
    """Consumes until every expected body arrived (a send that failed on the client may still
    have been stored, so counting messages is not enough)."""
    with tempfile.TemporaryDirectory() as tmp:
        until = Path(tmp) / "expected.json"
        until.write_text(json.dumps(expected))
        _rc, events = traffic(
            "consume", ns or namesrv(), topic, group, "--until-file", str(until), "--from-first",
            "--timeout", str(timeout), timeout=timeout + 60,
        )  # fmt: skip
    got = consumed(events)
    missing = sorted(set(expected) - set(got))
    assert not missing, f"{len(missing)} acknowledged message(s) not consumed: {missing[:10]}"
    return got


@pytest.fixture(scope="module")
def stack(kube: Kube, broker_image: str) -> Iterator[Kube]:
    kube.apply(nameserver_cr(broker_image))
    kube.apply(broker_cr(broker_image))
    wait_for("the NameServer Ready", lambda: ready(kube, "nameservers", NS_NAME), timeout=600)
    wait_for("the Broker Ready", lambda: ready(kube, "brokers", BROKER), timeout=900)
    if not HOST_NETWORK:
        pods = [
            p
            for p in kube.get_json("pods").get("items", [])
            if p["metadata"]["name"].startswith(f"{NS_NAME}-namesrv-")
        ]
        ENDPOINTS["namesrv"] = ";".join(f"{pod_ip(p)}:{DEFAULT_NS_PORT}" for p in pods)
    yield kube


def test_operator_runs_in_a_pod_and_stays_ready(kube: Kube) -> None:
    """The chart's replicas (2 with leader election by default; 1 on the node's host network, where
    two would share its ports), all Ready, one of them holding the leader Lease."""
    pods = [
        p for p in kube.get_json("pods").get("items", []) if "operator" in p["metadata"]["name"]
    ]
    assert len(pods) == OPERATOR_REPLICAS, [p["metadata"]["name"] for p in pods]
    for pod in pods:
        if HOST_NETWORK:
            assert pod["spec"].get("hostNetwork") is True
            assert pod["spec"].get("dnsPolicy") == "ClusterFirstWithHostNet"
        else:
            assert not pod["spec"].get("hostNetwork")
        assert pod_ready(pod)
        assert all(s["restartCount"] == 0 for s in pod["status"]["containerStatuses"])
    holder = wait_for(
        "an operator pod holding the leader Lease",
        lambda: kube.get_json("lease", LEADER_LEASE).get("spec", {}).get("holderIdentity"),
        timeout=120,
    )
    assert holder in {p["metadata"]["name"] for p in pods}, holder


def test_nameserver_and_broker_pods_are_placed_and_listening(stack: Kube) -> None:
    ns_pods = sorted(
        (
            p
            for p in stack.get_json("pods").get("items", [])
            if p["metadata"]["name"].startswith(f"{NS_NAME}-namesrv-")
        ),
        key=lambda p: str(p["metadata"]["name"]),
    )
    assert len(ns_pods) == NS_REPLICAS
    pods = broker_pods(stack)
    assert sorted(pods) == [f"{BROKER}-broker-{g}-{b}" for g in range(2) for b in range(2)]
    for pod in [*ns_pods, *pods.values()]:
        assert pod_ready(pod), pod["metadata"]["name"]
        if HOST_NETWORK:
            assert pod["spec"]["nodeName"] == "127.0.0.1"
            assert pod["spec"].get("hostNetwork") is True
        else:
            assert not pod["spec"].get("hostNetwork")
    if not HOST_NETWORK:
        # kind: master and slave of each group on different workers, both workers used
        for g in range(2):
            nodes = {pods[f"{BROKER}-broker-{g}-{b}"]["spec"]["nodeName"] for b in range(2)}
            assert len(nodes) == 2, f"group {g} on {nodes}"
        assert len({p["spec"]["nodeName"] for p in ns_pods}) == NS_REPLICAS
    for k, pod in enumerate(ns_pods):
        port = NS_PORT + k if HOST_NETWORK else DEFAULT_NS_PORT
        assert listening(pod_ip(pod), port), f"NameServer pod {k} not on {pod_ip(pod)}:{port}"
    for g in range(2):
        for b in range(2):
            host = pod_ip(pods[f"{BROKER}-broker-{g}-{b}"])
            assert listening(host, broker_port(g, b)), f"broker {g}-{b} not on {host}"
        # The master's HA port (listenPort + 1) takes the slave's replication connection.
        master = pod_ip(pods[f"{BROKER}-broker-{g}-0"])
        assert listening(master, broker_port(g, 0) + 1), f"master {g} HA port"
    # The group ConfigMaps carry each pod's own ports (broker-<id>.conf).
    conf = stack.get_json("configmap", f"{BROKER}-broker-1-config")["data"]
    assert f"listenPort={broker_port(1, 1)}" in conf["broker-1.conf"]
    assert f"haListenPort={broker_port(1, 0) + 1}" in conf["broker-0.conf"]


def test_produce_and_consume_from_the_host_with_tags_and_keys(stack: Kube) -> None:
    topic = "node-host"
    bodies = produce(topic, "host", 200)
    got = consume_all(topic, "g-host", bodies)
    for body in bodies:
        i = int(body.rsplit("-", 1)[1])
        assert got[body]["tags"] == f"Tag{i % 3}"
        assert got[body]["keys"] == [f"key-host-{i}"]


def run_cpp(args: list[str], home: Path, timeout: float) -> tuple[int, list[dict[str, Any]]]:
    proc = subprocess.run(
        [sys.executable, str(CPP_CLIENT), *args],
        capture_output=True,
        timeout=timeout,
        env={**os.environ, "HOME": str(home)},  # the C++ client logs under $HOME/logs
        check=False,
    )
    out = proc.stdout.decode(errors="replace").splitlines()
    events = [json.loads(line) for line in out if line.startswith("{")]
    if proc.returncode not in (0, 3):
        raise AssertionError(f"C++ client crashed ({proc.returncode}): {proc.stderr[-2000:]!r}")
    return proc.returncode, events


def test_the_upstream_cpp_client_produces_and_consumes_from_the_host(
    stack: Kube, tmp_path: Path
) -> None:
    pytest.importorskip("rocketmq.client", reason="rocketmq==0.4.4 (the interop extra) missing")
    topic = "node-cpp"
    rc, sent = run_cpp(["produce", namesrv(), topic, "50"], tmp_path, timeout=180)
    assert rc == 0 and len(sent) == 50 and all(e["status"] == 0 for e in sent), sent[-3:]
    rc, events = run_cpp(["consume", namesrv(), topic, "g-cpp", "50", "120"], tmp_path, 240)
    got = {e["body"]: e for e in events if "body" in e}
    assert rc == 0 and len(got) == 50
    for i in range(50):
        assert got[f"cpp-body-{i}"]["tags"] == "TagCpp"
        assert got[f"cpp-body-{i}"]["keys"] == f"cpp-key-{i}"
    # And ferrymq's consumer reads what the C++ producer wrote, tags and keys intact.
    rc, events = traffic(
        "consume", namesrv(), topic, "g-cpp-ferrymq", "--count", "50", "--from-first",
        "--timeout", "120", timeout=240,
    )  # fmt: skip
    mine = consumed(events)
    assert mine["cpp-body-7"]["tags"] == "TagCpp" and mine["cpp-body-7"]["keys"] == ["cpp-key-7"]


TOPIC_YAML = """\
apiVersion: ferrymq.io/v1alpha1
kind: Topic
metadata:
  name: node-declared
spec:
  brokerRef: {name: %(broker)s}
  name: Node_Declared   # a RocketMQ name Kubernetes names cannot spell
  queues: 3             # not the auto-create default (4): the producer's queues prove the CR
  perm: 6
---
apiVersion: ferrymq.io/v1alpha1
kind: ConsumerGroup
metadata:
  name: node-declared-readers
spec:
  brokerRef: {name: %(broker)s}
  name: g_node_declared
  retryMaxTimes: 3
  consumeBroadcastEnable: false
"""


def test_a_topic_and_a_consumer_group_applied_with_kubectl_serve_host_clients(
    stack: Kube, tmp_path: Path
) -> None:
    manifest = tmp_path / "topic-and-group.yaml"
    manifest.write_text(TOPIC_YAML % {"broker": BROKER})
    stack.ns("apply", "-f", str(manifest))
    groups = [f"{BROKER}-broker-{g}" for g in range(2)]

    def status_ready(plural: str, name: str) -> dict[str, Any] | None:
        status = stack.get_json(plural, name).get("status") or {}
        ready_cond = [c for c in status.get("conditions") or [] if c["type"] == "Ready"]
        if (
            ready_cond
            and ready_cond[0]["status"] == "True"
            and status.get("brokerGroups") == groups
        ):
            return dict(status)
        return None

    topic_status = wait_for(
        "the Topic Ready on both groups",
        lambda: status_ready("topics", "node-declared"),
        timeout=300,
    )
    assert (topic_status["name"], topic_status["queues"]) == ("Node_Declared", "3/3")
    group_status = wait_for(
        "the ConsumerGroup Ready on both groups",
        lambda: status_ready("consumergroups", "node-declared-readers"),
        timeout=300,
    )
    assert group_status["name"] == "g_node_declared"
    # From the host: the producer finds the topic's route (3 queues on each group, as declared;
    # an auto-created topic would have 4) and the declared group consumes it.
    rc, events = traffic("produce", namesrv(), "Node_Declared", "--count", "60", "--prefix", "decl")
    bodies = acked(events)
    assert rc == 0 and len(bodies) == 60, events[-5:]
    queues = {e["queue"] for e in events if "queue" in e}
    assert queues == {f"{g}:{q}" for g in groups for q in range(3)}, sorted(queues)
    got = consume_all("Node_Declared", "g_node_declared", bodies)
    assert got["decl-7"]["tags"] == "Tag1" and got["decl-7"]["keys"] == ["key-decl-7"]
    printed = stack.ns("get", "topics,consumergroups")
    assert "node-declared" in printed and "node-declared-readers" in printed, printed
    # Deleted with kubectl: the finalizer removes the topic from the brokers, then lets go.
    stack.ns("delete", "-f", str(manifest), "--wait=true", timeout=300)


PROXY_TOPIC, PROXY_GROUP = "Node_V5", "g_node_v5"


# tests/proxy's 5.x client runners (tests/ is not a package; appended, so nothing is shadowed)
TESTS_DIR = ROOT / "tests"
if str(TESTS_DIR) not in sys.path:
    sys.path.append(str(TESTS_DIR))


def python5_client() -> Path:
    """The interpreter of the 5.x Python client's venv (tests/proxy/python5.py), made outside the
    cluster's netns when missing (pip needs the registry)."""
    code = f"import sys; sys.path.append({str(TESTS_DIR)!r}); from proxy.python5 import python5; print(python5())"
    done = run(outside_netns([sys.executable, "-c", code]), timeout=1200)
    return Path(done.stdout.strip().splitlines()[-1])


def test_the_5x_proxy_serves_a_5x_client_and_goes_with_spec_proxy(
    stack: Kube, tmp_path: Path
) -> None:
    """spec.proxy: the proxy Deployment's pod Ready, status.proxy and ProxyReady set, the Python 5.x
    client (rocketmq-python-client, tests/proxy's runner) sends and receives through it from the
    netns; removing spec.proxy deletes its objects and status.proxy."""
    if HOST_NETWORK:
        pytest.skip("the proxy Deployment runs on a pod network, which scripts/k8s-node.sh lacks")
    from proxy.java5 import by_event
    from proxy.python5 import run_python5

    python = python5_client()
    name = f"{BROKER}-proxy"
    stack.apply(
        {
            "apiVersion": "ferrymq.io/v1alpha1",
            "kind": "Topic",
            "metadata": {"name": "node-v5"},
            "spec": {"brokerRef": {"name": BROKER}, "name": PROXY_TOPIC, "queues": 4,
                     "messageType": "NORMAL"},
        }
    )  # fmt: skip
    stack.ns("patch", "brokers", BROKER, "--type=merge", "-p", '{"spec":{"proxy":{"replicas":1}}}')
    try:
        wait_for(
            "ProxyReady=True",
            lambda: condition_true(stack, "brokers", BROKER, "ProxyReady"),
            timeout=600,
        )
        status = stack.get_json("brokers", BROKER)["status"]["proxy"]
        endpoint = f"{name}.{stack.namespace}.svc.cluster.local:8081"
        assert (status["endpoint"], status["replicas"], status["readyReplicas"]) == (
            endpoint,
            1,
            1,
        ), status
        pods = stack.get_json("pods", "-l", f"app.kubernetes.io/instance={BROKER},"
                              "app.kubernetes.io/component=proxy")["items"]  # fmt: skip
        assert len(pods) == 1 and pod_ready(pods[0]), [p["metadata"]["name"] for p in pods]
        assert stack.get_json("service", name)["spec"]["ports"][0]["port"] == 8081
        wait_for("the Topic Ready", lambda: ready(stack, "topics", "node-v5"), timeout=300)
        events = run_python5(
            python, f"{pod_ip(pods[0])}:8081", PROXY_TOPIC, PROXY_GROUP, tmp_path, 180
        )
        (sent,) = by_event(events, "sent")
        received = by_event(events, "received")
        assert received and received[0]["id"] == sent["id"], events
        assert (received[0]["tag"], received[0]["keys"]) == ("TagA", ["k1"]), received
    finally:
        stack.ns("patch", "brokers", BROKER, "--type=json",
                 "-p", '[{"op":"remove","path":"/spec/proxy"}]', check=False)  # fmt: skip
        stack.ns("delete", "topics", "node-v5", "--wait=true", timeout=300, check=False)
    wait_for(
        "the proxy's Deployment, Service and ConfigMap deleted",
        lambda: (
            not stack.ns(
                "get", "deployment,service,configmap", name, "--ignore-not-found", "-o", "name"
            ).strip()
        ),
        timeout=300,
    )
    wait_for(
        "status.proxy removed",
        lambda: "proxy" not in (stack.get_json("brokers", BROKER).get("status") or {}),
        timeout=120,
    )


def kill_9(kube: Kube, pod: str) -> int:
    """SIGKILL to the pod's broker process, from outside the pod; returns its restart count before.

    The node's dockerd knows the container's host PID; on kind the process lives in a node
    container, whose containerd (``ctr tasks ls``) knows its PID in that node's PID namespace."""
    body = kube.get_json("pod", pod)
    status = body["status"]["containerStatuses"][0]
    runtime, cid = status["containerID"].split("://", 1)
    if runtime == "docker":
        out = run([DOCKER, "inspect", "-f", "{{.State.Pid}}", cid]).stdout.strip()
        os.kill(int(out), signal.SIGKILL)
    else:
        node = body["spec"]["nodeName"]
        tasks = run([DOCKER, "exec", node, "ctr", "-n", "k8s.io", "tasks", "ls"]).stdout
        pids = [line.split()[1] for line in tasks.splitlines() if line.startswith(cid)]
        assert pids, f"container {cid} of {pod} not among {node}'s tasks:\n{tasks}"
        run([DOCKER, "exec", node, "kill", "-9", pids[0]])
    return int(status["restartCount"])


def test_kill_9_of_a_master_consumers_continue_and_it_returns_with_every_ack(
    stack: Kube,
) -> None:
    topic = "node-kill"
    bodies = produce(topic, "kill", 200)
    master = f"{BROKER}-broker-0-0"
    restarts = kill_9(stack, master)
    # While the master restarts, a new group reads group 0's queues from its slave.
    consume_all(topic, "g-kill-during", bodies)
    wait_for(
        "the killed master restarted and Ready",
        lambda: (
            (p := broker_pods(stack).get(master))
            and pod_ready(p)
            and p["status"]["containerStatuses"][0]["restartCount"] > restarts
        ),
        timeout=300,
    )
    # Back: the master's own store (its volume) still has every acknowledged message.
    consume_all(topic, "g-kill-after", bodies)
    wait_for("the Broker Ready again", lambda: ready(stack, "brokers", BROKER), timeout=300)


def test_pause_and_manual_restart_annotations_act_within_10_s(stack: Kube) -> None:
    stack.ns("annotate", "brokers", BROKER, f"{PAUSE}=true", "--overwrite")
    wait_for(
        "ReconciliationPaused=True",
        lambda: condition_true(stack, "brokers", BROKER, "ReconciliationPaused"),
        timeout=10,
    )
    stack.ns("annotate", "brokers", BROKER, f"{PAUSE}-")
    wait_for(
        "ReconciliationPaused cleared",
        lambda: (
            (c := stack.condition("brokers", BROKER, "ReconciliationPaused")) is None
            or c.get("status") != "True"
        ),
        timeout=10,
    )
    before = {name: p["metadata"]["uid"] for name, p in broker_pods(stack).items()}
    stack.ns("annotate", "brokers", BROKER, f"{RESTART}={int(time.time())}", "--overwrite")

    def a_pod_restarted() -> bool:
        now = broker_pods(stack)
        return any(
            name not in now
            or now[name]["metadata"]["uid"] != uid
            or now[name]["metadata"].get("deletionTimestamp")
            for name, uid in before.items()
        )

    wait_for("the first pod of the manual restart", a_pod_restarted, timeout=10)
    wait_for(
        "every broker pod restarted and the Broker Ready",
        lambda: (
            all(
                (p := broker_pods(stack).get(name)) and p["metadata"]["uid"] != uid and pod_ready(p)
                for name, uid in before.items()
            )
            and ready(stack, "brokers", BROKER)
        ),
        timeout=900,
    )


def test_a_config_change_rolls_one_pod_at_a_time_slaves_first_losing_no_ack(
    stack: Kube, tmp_path: Path
) -> None:
    topic = "node-roll"
    stop, expect = tmp_path / "stop", tmp_path / "expected.json"
    before = {name: p["metadata"]["uid"] for name, p in broker_pods(stack).items()}
    producer = subprocess.Popen(
        [sys.executable, "-m", "e2e.traffic", "produce", namesrv(), topic, "--count", "1000000",
         "--prefix", "roll", "--stop-file", str(stop), "--deadline", "1500", "--interval", "0.05"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    consumer = subprocess.Popen(
        [sys.executable, "-m", "e2e.traffic", "consume", namesrv(), topic, "g-roll",
         "--until-file", str(expect), "--from-first", "--timeout", "1800"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    replaced: list[str] = []
    most_unready = 0
    try:
        stack.ns(
            "patch", "brokers", BROKER, "--type=merge",
            "-p", json.dumps({"spec": {"config": {"flushIntervalCommitLog": "400"}}}),
        )  # fmt: skip
        deadline = time.monotonic() + 1200
        while time.monotonic() < deadline:
            pods = broker_pods(stack)
            # Pods the roll has taken down: deleted, terminating, or replaced and not Ready yet
            # (a pod restarted in place by its liveness probe is not the roll's doing).
            most_unready = max(
                most_unready,
                sum(
                    1
                    for n, uid in before.items()
                    if n not in pods
                    or pods[n]["metadata"].get("deletionTimestamp")
                    or (pods[n]["metadata"]["uid"] != uid and not pod_ready(pods[n]))
                ),
            )
            for name, uid in before.items():
                if name in pods and pods[name]["metadata"]["uid"] != uid and name not in replaced:
                    replaced.append(name)
            if len(replaced) == len(before) and ready(stack, "brokers", BROKER):
                break
            time.sleep(1)  # sampling interval of the pod watch
        assert len(replaced) == len(before), f"roll incomplete: replaced {replaced}"
        stop.touch()
        out, _ = producer.communicate(timeout=120)
        bodies = [json.loads(line)["acked"] for line in out.splitlines() if '"acked"' in line]
        assert len(bodies) > 50, "the producer acknowledged almost nothing during the roll"
        expect.write_text(json.dumps(bodies))
        out, _ = consumer.communicate(timeout=600)
    finally:
        # Never leave the host-side clients running after a failure (they are ours, by PID).
        stop.touch()
        for proc in (producer, consumer):
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    got = {json.loads(line)["body"] for line in out.splitlines() if '"body"' in line}
    missing = sorted(set(bodies) - got)
    assert not missing, f"{len(missing)} acknowledged message(s) lost in the roll: {missing[:10]}"
    assert most_unready <= 1, f"the roll had {most_unready} broker pods down at once"
    for g in range(2):
        slave, master = f"{BROKER}-broker-{g}-1", f"{BROKER}-broker-{g}-0"
        assert replaced.index(slave) < replaced.index(master), replaced


def test_scale_out_to_3_groups_copies_topics_and_in_to_2_drains(stack: Kube) -> None:
    topic = "node-host"  # created on groups 0 and 1 by the first test
    stack.ns("patch", "brokers", BROKER, "--type=merge", "-p", '{"spec":{"groups":3}}')
    wait_for(
        "group 2 Ready with the cluster's topics",
        lambda: (
            ready(stack, "brokers", BROKER)
            and 2
            in (
                (stack.get_json("brokers", BROKER).get("status") or {}).get("topicSyncedGroups")
                or []
            )
        ),
        timeout=900,
    )
    # The new group registers the copied topic with every NameServer on its own schedule: a
    # producer asking before that is routed to groups 0 and 1 only.
    wait_for(
        "every NameServer routing the topic to group 2",
        lambda: all(routed(topic, ns, f"{BROKER}-broker-2") for ns in namesrv().split(";")),
        timeout=300,
    )
    rc, events = traffic("produce", namesrv(), topic, "--count", "120", "--prefix", "scale")
    assert rc == 0
    assert any(e["queue"].startswith(f"{BROKER}-broker-2:") for e in events if "queue" in e)
    bodies = acked(events)
    stack.ns("patch", "brokers", BROKER, "--type=merge", "-p", '{"spec":{"groups":2}}')

    def drain_message() -> str:
        drains = (stack.get_json("brokers", BROKER).get("status") or {}).get("drains") or []
        return " ".join(str(d.get("message", "")) for d in drains)

    # g-host read node-host on groups 0 and 1 (the first test) and has read none of group 2's
    # messages: the drain waits for it, naming it, instead of removing the group (it used to see
    # no consumer offsets on group 2, call it drained at once and delete its claims).
    wait_for("the drain waiting for g-host", lambda: "g-host" in drain_message(), timeout=300)
    assert stack.ns("get", "statefulset", f"{BROKER}-broker-2", "--ignore-not-found")
    # The application's consumer group comes back and empties group 2 (writes are off), which is
    # what lets the drain finish.
    consume_all(topic, "g-host", bodies, timeout=600)
    wait_for(
        "group 2 drained and removed",
        lambda: not stack.ns("get", "statefulset", f"{BROKER}-broker-2", "--ignore-not-found"),
        timeout=900,
    )
    events_text = stack.ns("get", "events", "--field-selector", f"involvedObject.name={BROKER}")
    assert "Drained" in events_text, events_text
    wait_for("the Broker Ready after scale-in", lambda: ready(stack, "brokers", BROKER), 600)


def never_pulled(kube: Kube, job: str) -> None:
    """Fails at once when a pod of ``job`` waits for an image no node has (pull policy Never):
    it would wait for good (on kind: ``scripts/kind-cluster.sh load spark``)."""
    for pod in kube.get_json("pods", "-l", f"job-name={job}").get("items", []):
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (status.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") == "ErrImageNeverPull":
                raise AssertionError(
                    f"{pod['metadata']['name']}: image {status.get('image')} is not on its node "
                    f"({waiting.get('message')}); build and load it (scripts/build-images.sh "
                    "spark, on kind scripts/kind-cluster.sh load spark)"
                )


def test_the_audit_cronjob_runs_to_completion_with_default_settings(stack: Kube) -> None:
    stack.ns(
        "patch", "brokers", BROKER, "--type=merge",
        # Image, command and job settings are the defaults; the CPU request only keeps the Spark
        # JVM from starving as a BestEffort pod on this shared node (it took > 4 min to start).
        "-p", json.dumps({"spec": {"audit": {"schedule": "*/1 * * * *",
                                              "storage": {"size": "1Gi"},
                                              "resources": {"requests": AUDIT_REQUESTS}}}}),
    )  # fmt: skip

    def succeeded_job() -> str | None:
        for job in stack.get_json("jobs").get("items", []):
            if job["metadata"]["name"].startswith(f"{BROKER}-audit"):
                if (job.get("status") or {}).get("succeeded"):
                    return str(job["metadata"]["name"])
                if ((job.get("status") or {}).get("failed") or 0) > 0:
                    pods = stack.ns("logs", f"job/{job['metadata']['name']}", check=False)
                    raise AssertionError(f"audit job failed:\n{pods[-3000:]}")
                never_pulled(stack, job["metadata"]["name"])
        return None

    name = wait_for("an audit Job to succeed", succeeded_job, timeout=600)
    log = stack.ns("logs", f"job/{name}")
    assert "PySpark is not installed" not in log
    # The reports are on the audit claim: its PersistentVolume is a directory of the node that
    # holds it (k8s-node.sh: a `local` volume on this host; kind: local-path-provisioner's
    # hostPath inside the node container).
    claim = stack.get_json("pvc", f"{BROKER}-audit")
    volume = stack.get_json("pv", claim["spec"]["volumeName"])["spec"]
    wanted = [
        f"reports/{r}/{w}"
        for r in ("backlog", "rebalance")
        for w in ("report.html", "summary.json")
    ]
    if "local" in volume:
        reports = Path(volume["local"]["path"])
        for rel in wanted:
            path = reports / rel
            assert path.is_file() and path.stat().st_size > 0, sorted(map(str, reports.rglob("*")))
    else:
        terms = volume["nodeAffinity"]["required"]["nodeSelectorTerms"]
        node = terms[0]["matchExpressions"][0]["values"][0]
        base = volume["hostPath"]["path"]
        listing = run([DOCKER, "exec", node, "find", base, "-type", "f"]).stdout
        for rel in wanted:
            check = run([DOCKER, "exec", node, "test", "-s", f"{base}/{rel}"], check=False)
            assert check.returncode == 0, f"{rel} missing or empty on {node}:\n{listing}"


HA_BROKER = "ha"
HA_LISTEN_PORT = 21911  # controller pods on 21906-21907, broker pods on 21921 and 21931


def ha_broker_cr(image: str) -> dict[str, Any]:
    """1 group x 2 replicas with a controller (issue 17): the smallest controller-mode group, as
    the brief allows on this machine (a group of 2 groups would be 4 more broker pods)."""
    cr = broker_cr(image)
    cr["metadata"]["name"] = HA_BROKER
    cr["spec"].update({"groups": 1, "replicasPerGroup": 2, "failover": "controller"})
    if HOST_NETWORK:
        cr["spec"]["listenPort"] = HA_LISTEN_PORT
    return cr


HA_TOPIC_YAML = """\
apiVersion: ferrymq.io/v1alpha1
kind: Topic
metadata:
  name: %(topic)s
spec:
  brokerRef: {name: %(broker)s}
  queues: 4
"""


def group_master(kube: Kube) -> dict[str, Any] | None:
    masters = (kube.get_json("brokers", HA_BROKER).get("status") or {}).get("groupMasters") or []
    return dict(masters[0]) if masters else None


def test_a_controller_mode_broker_rolls_with_a_switchover_and_no_send_fails(
    stack: Kube, broker_image: str, tmp_path: Path
) -> None:
    stack.apply(ha_broker_cr(broker_image))
    try:
        wait_for(
            "the controller-mode Broker Ready", lambda: ready(stack, "brokers", HA_BROKER), 900
        )
        first = wait_for(
            "a master elected with both replicas in its SyncStateSet",
            lambda: (m := group_master(stack)) and len(m.get("syncStateSet") or []) == 2 and m,
            timeout=300,
        )
        # The topic lives on this Broker only: auto-created, it would also go to the `orders`
        # Broker of the same NameServers, and that Broker's masters (not rolled, but at load 50
        # slow to answer within the client's 3 s) failed 4 of the 5 sends of the 02:20 run.
        topic = "node-failover"
        stack.ns("apply", "-f", "-", stdin=HA_TOPIC_YAML % {"broker": HA_BROKER, "topic": topic})
        wait_for(
            "the Topic Ready on the controller-mode Broker",
            lambda: ready(stack, "topics", topic),
            timeout=300,
        )
        wait_for(
            "every NameServer routing the topic to the controller-mode Broker",
            lambda: all(routed(topic, ns, f"{HA_BROKER}-broker-0") for ns in namesrv().split(";")),
            timeout=120,
        )
        warm = produce(topic, "warm", 20)
        stop = tmp_path / "stop"
        pods = {n: p["metadata"]["uid"] for n, p in broker_pods(stack, HA_BROKER).items()}
        producer = subprocess.Popen(
            [sys.executable, "-m", "e2e.traffic", "produce", namesrv(), topic, "--count", "1000000",
             "--prefix", "ha", "--stop-file", str(stop), "--deadline", "1500",
             "--interval", "0.05"],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            stack.ns(
                "patch", "brokers", HA_BROKER, "--type=merge",
                "-p", json.dumps({"spec": {"config": {"flushIntervalCommitLog": "400"}}}),
            )  # fmt: skip
            wait_for(
                "both broker pods replaced and the Broker Ready",
                lambda: (
                    (now := broker_pods(stack, HA_BROKER)).keys() == pods.keys()
                    and all(
                        now[n]["metadata"]["uid"] != uid and pod_ready(now[n])
                        for n, uid in pods.items()
                    )
                    and ready(stack, "brokers", HA_BROKER)
                ),
                timeout=1200,
            )
        finally:
            stop.touch()
            out, _ = producer.communicate(timeout=120)
        events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        errors = [f"{e.get('at')} {e['error']}" for e in events if "error" in e]
        bodies = acked(events)
        slowest = sorted(events, key=lambda e: -int(e.get("ms", 0)))[:10]
        print("slowest sends:", [(e.get("at"), e.get("ms"), e.get("error", "ok")) for e in slowest])
        print("failed sends:", errors)
        groups = {e["queue"].split(":")[0] for e in events if "queue" in e}
        print("acknowledged by:", sorted(groups))
        assert len(bodies) > 50, "the producer acknowledged almost nothing during the roll"
        # mastership was handed over (the old master was rolled as a slave) ...
        text = stack.ns("get", "events", "--field-selector", f"involvedObject.name={HA_BROKER}")
        assert "SwitchOver" in text, text
        now_master = group_master(stack)
        assert now_master and now_master["masterEpoch"] > first["masterEpoch"], now_master
        # both rolled replicas back in the SyncStateSet, as the condition tells
        in_sync = wait_for(
            "ReplicasInSync=True after the roll",
            lambda: condition_true(stack, "brokers", HA_BROKER, "ReplicasInSync"),
            timeout=300,
        )
        assert in_sync["reason"] == "AllInSyncStateSet", in_sync
        # ... and every acknowledged message is there
        consume_all(topic, "g-failover", warm + bodies, timeout=300)
        # last, so that a failed send does not hide the checks above
        assert not errors, f"{len(errors)} send(s) failed during the roll: {errors[:5]}"
        # the client fell back to TBW102 (auto-create on the orders Broker) in the 02:35 run
        assert groups == {f"{HA_BROKER}-broker-0"}, groups
    finally:
        stack.ns("delete", "topics", "node-failover", "--ignore-not-found", check=False)
        stack.ns("delete", "brokers", HA_BROKER, "--wait=true", timeout=600, check=False)
        wait_for("the controller-mode pods gone", lambda: not broker_pods(stack, HA_BROKER), 600)


def test_deleting_the_resources_removes_children_and_keeps_claims(stack: Kube) -> None:
    stores = {
        f"persistentvolumeclaim/store-{BROKER}-broker-{g}-{b}" for g in range(2) for b in range(2)
    }
    claims = set(stack.ns("get", "pvc", "-o", "name").split())
    assert stores <= claims, claims
    stack.ns("delete", "brokers", BROKER, "--wait=true", timeout=600)
    stack.ns("delete", "nameservers", NS_NAME, "--wait=true", timeout=600)
    for kind in ("statefulsets", "configmaps", "cronjobs", "poddisruptionbudgets"):
        wait_for(
            f"every {kind} of the resources gone",
            lambda kind=kind: (
                not stack.ns(
                    "get", kind, "-l", "app.kubernetes.io/managed-by=ferrymq-operator", "-o", "name"
                ).strip()
            ),
            timeout=600,
        )
    wait_for("the pods gone", lambda: not broker_pods(stack), timeout=600)
    kept = set(stack.ns("get", "pvc", "-o", "name").split())
    assert stores <= kept, f"store claims deleted with the Broker: {sorted(stores - kept)}"
