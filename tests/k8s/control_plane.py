"""A real Kubernetes 1.20 control plane (etcd + kube-apiserver + kube-controller-manager) on 127.0.0.1.

The binaries come from the cache that ``scripts/k8s-control-plane.sh`` provisions. There is no kubelet and
no scheduler: Pods are created by the controllers and stay Pending; tests mark them Ready through the
status subresource when they need to drive roll-out logic.

Everything a run needs (CA, serving certificate, service-account signing key, token file, kubeconfig,
etcd data, logs) is generated into one temporary directory. Processes are stopped by the PIDs of the
``subprocess.Popen`` objects this module started, never by name.
"""

from __future__ import annotations

import os
import secrets
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import yaml
from ferrymq.broker.local_cluster import pick_free_ports
from kubernetes import client as k8s_client
from subprocess_helpers import popen as start_child

PROVISION_SCRIPT = "scripts/k8s-control-plane.sh"
CONTROL_PLANE_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
TOOL_BINARIES = ("helm", "kubectl")
# The service CIDR only numbers ClusterIPs inside the API; nothing routes to it (no kube-proxy here).
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


class ControlPlaneError(RuntimeError):
    """The control plane could not be started; the message carries the tail of the failing log."""


def cache_dir() -> Path:
    """The provisioning cache: ``$FERRYMQ_K8S_CACHE`` or ``~/.cache/ferrymq-k8s`` (as the script uses)."""
    env = os.environ.get("FERRYMQ_K8S_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "ferrymq-k8s"


def binary_path(name: str, cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / "bin" / name


def missing_binaries(names: tuple[str, ...], cache: Path | None = None) -> list[str]:
    return [n for n in names if not os.access(binary_path(n, cache), os.X_OK)]


def skip_reason(names: tuple[str, ...], cache: Path | None = None) -> str | None:
    """Why the tests needing ``names`` cannot run, or None when the cache is provisioned."""
    missing = missing_binaries(names, cache)
    if not missing:
        return None
    return (
        f"Kubernetes test binaries not provisioned ({', '.join(missing)} missing in "
        f"{(cache or cache_dir()) / 'bin'}); run {PROVISION_SCRIPT} first"
    )


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ControlPlaneError(
            f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}"
        )


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path


def make_pki(directory: Path) -> Pki:
    """A throw-away CA, an apiserver serving certificate for 127.0.0.1 and a service-account key pair."""
    if shutil.which("openssl") is None:
        raise ControlPlaneError(
            f"openssl not found (apt-get install openssl, or run {PROVISION_SCRIPT})"
        )
    directory.mkdir(parents=True, exist_ok=True)
    d = directory
    _run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3",
         "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=ferrymq-test-ca"],
        d,
    )  # fmt: skip
    (d / "serving.ext").write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n"
    )
    _run(
        ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key",
         "-out", "apiserver.csr", "-subj", "/CN=kube-apiserver"],
        d,
    )  # fmt: skip
    _run(
        ["openssl", "x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
         "-CAcreateserial", "-days", "3", "-extfile", "serving.ext", "-out", "apiserver.crt"],
        d,
    )  # fmt: skip
    _run(["openssl", "genrsa", "-out", "sa.key", "2048"], d)
    _run(["openssl", "rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"], d)
    return Pki(
        ca_cert=d / "ca.crt",
        ca_key=d / "ca.key",
        serving_cert=d / "apiserver.crt",
        serving_key=d / "apiserver.key",
        sa_key=d / "sa.key",
        sa_pub=d / "sa.pub",
    )


def write_kubeconfig(path: Path, server: str, ca_file: Path, token: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "ferrymq-test",
                "cluster": {"server": server, "certificate-authority": str(ca_file)},
            }
        ],
        "users": [{"name": "ferrymq-admin", "user": {"token": token}}],
        "contexts": [
            {
                "name": "ferrymq-test",
                "context": {"cluster": "ferrymq-test", "user": "ferrymq-admin"},
            }
        ],
        "current-context": "ferrymq-test",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class KubeApi:
    """What a test needs to talk to the running control plane."""

    server: str
    token: str
    kubeconfig_path: Path
    ca_file: Path
    workdir: Path
    bin_dir: Path
    _procs: list[_Proc] = field(default_factory=list, repr=False)
    _scratch: list[Path] = field(default_factory=list, repr=False)

    def configuration(self) -> k8s_client.Configuration:
        conf = k8s_client.Configuration()
        conf.host = self.server
        conf.ssl_ca_cert = str(self.ca_file)
        conf.verify_ssl = True
        conf.api_key = {"authorization": self.token}
        conf.api_key_prefix = {"authorization": "Bearer"}
        return conf

    def api_client(self) -> k8s_client.ApiClient:
        """A new ApiClient for this server; the caller closes it (or uses it as a context manager)."""
        return k8s_client.ApiClient(self.configuration())

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """An environment for subprocesses (kubectl, helm, kopf) pointing at this control plane."""
        env = dict(os.environ if base is None else base)
        env["KUBECONFIG"] = str(self.kubeconfig_path)
        return env

    def pids(self) -> dict[str, int]:
        return {p.name: p.popen.pid for p in self._procs}

    def logs(self) -> dict[str, Path]:
        return {p.name: p.log_path for p in self._procs}

    def check_alive(self) -> None:
        for p in self._procs:
            rc = p.popen.poll()
            if rc is not None:
                raise ControlPlaneError(f"{p.name} exited with {rc}:\n{p.log_tail()}")


def _start(name: str, argv: list[str], workdir: Path) -> _Proc:
    log_path = workdir / f"{name}.log"
    log_file = log_path.open("wb")
    popen = start_child(
        argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir
    )
    return _Proc(name=name, popen=popen, log_path=log_path, log_file=log_file)


def _stop(procs: list[_Proc], timeout: float = 15.0) -> None:
    """Stops in reverse start order: controller-manager, apiserver, then etcd."""
    for p in reversed(procs):
        if p.popen.poll() is None:
            p.popen.terminate()
            try:
                p.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait(timeout=timeout)
        p.log_file.close()


def _wait_http_ok(
    url: str,
    deadline: float,
    procs: list[_Proc],
    *,
    token: str | None = None,
    ca_file: Path | None = None,
) -> None:
    ctx = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    last = "no answer yet"
    while time.monotonic() < deadline:
        for p in procs:
            rc = p.popen.poll()
            if rc is not None:
                raise ControlPlaneError(
                    f"{p.name} exited with {rc} during start-up:\n{p.log_tail()}"
                )
        try:
            req = urllib.request.Request(url, headers=headers)
            with urllib.request.urlopen(req, timeout=2, context=ctx) as resp:
                if resp.status == 200:
                    return
                last = f"HTTP {resp.status}"
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}: {exc.read()[:500]!r}"
        except (OSError, ssl.SSLError) as exc:
            last = repr(exc)
        time.sleep(0.2)  # poll interval of a deadline-bounded readiness loop
    tails = "\n".join(f"--- {p.name}:\n{p.log_tail()}" for p in procs)
    raise ControlPlaneError(f"{url} not ready before the deadline (last: {last})\n{tails}")


def _wait_default_service_account(api: KubeApi, deadline: float) -> None:
    """Pods need the `default` ServiceAccount (and its token Secret, on 1.20) before admission lets them in."""
    with api.api_client() as c:
        core = k8s_client.CoreV1Api(c)
        while time.monotonic() < deadline:
            api.check_alive()
            sas = core.list_namespaced_service_account("default").items
            if any(sa.metadata and sa.metadata.name == "default" and sa.secrets for sa in sas):
                return
            time.sleep(0.2)  # poll interval
    raise ControlPlaneError(
        "the controller-manager did not create the default ServiceAccount in time"
    )


START_ATTEMPTS = 3


@contextmanager
def running_control_plane(
    workdir: Path, cache: Path | None = None, start_timeout: float = 120.0
) -> Iterator[KubeApi]:
    """Starts etcd, kube-apiserver and kube-controller-manager; stops them on exit.

    Ports are picked free just before the processes bind them; another process on a shared machine
    can take one in between, so a start that fails with "address already in use" is retried.
    """
    reason = skip_reason(CONTROL_PLANE_BINARIES, cache)
    if reason:
        raise ControlPlaneError(reason)
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            api = start_control_plane(workdir / f"attempt-{attempt}", cache, start_timeout)
        except ControlPlaneError as exc:
            if "address already in use" in str(exc) and attempt < START_ATTEMPTS:
                continue
            raise
        try:
            yield api
        finally:
            stop_control_plane(api)
        return


def stop_control_plane(api: KubeApi) -> None:
    _stop(api._procs)
    for path in api._scratch:
        shutil.rmtree(path, ignore_errors=True)


def start_control_plane(workdir: Path, cache: Path | None, start_timeout: float) -> KubeApi:
    """Starts the three processes and waits until Pods can be admitted; cleans up on failure."""
    bin_dir = (cache or cache_dir()) / "bin"
    workdir.mkdir(parents=True, exist_ok=True)
    pki = make_pki(workdir / "pki")
    token = secrets.token_hex(16)
    tokens = workdir / "tokens.csv"
    tokens.write_text(f"{token},ferrymq-admin,ferrymq-admin-uid,system:masters\n")
    tokens.chmod(0o600)

    etcd_client, etcd_peer, api_port = pick_free_ports("127.0.0.1", 3)
    server = f"https://127.0.0.1:{api_port}"
    kubeconfig = workdir / "kubeconfig"
    write_kubeconfig(kubeconfig, server, pki.ca_cert, token)
    api = KubeApi(
        server=server,
        token=token,
        kubeconfig_path=kubeconfig,
        ca_file=pki.ca_cert,
        workdir=workdir,
        bin_dir=bin_dir,
    )
    # etcd fsyncs every write; on tmpfs that costs nothing, and test data is disposable.
    shm = Path("/dev/shm")
    etcd_data = Path(
        tempfile.mkdtemp(prefix="ferrymq-etcd-", dir=shm if os.access(shm, os.W_OK) else workdir)
    )
    api._scratch.append(etcd_data)
    deadline = time.monotonic() + start_timeout
    try:
        etcd_url = f"http://127.0.0.1:{etcd_client}"
        peer_url = f"http://127.0.0.1:{etcd_peer}"
        api._procs.append(
            _start(
                "etcd",
                [
                    str(bin_dir / "etcd"),
                    "--name=ferrymq-test",
                    f"--data-dir={etcd_data}",
                    f"--listen-client-urls={etcd_url}",
                    f"--advertise-client-urls={etcd_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=ferrymq-test={peer_url}",
                    "--log-level=warn",
                ],
                workdir,
            )
        )
        _wait_http_ok(f"{etcd_url}/health", deadline, api._procs)
        api._procs.append(
            _start(
                "kube-apiserver",
                [
                    str(bin_dir / "kube-apiserver"),
                    f"--etcd-servers={etcd_url}",
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--secure-port={api_port}",
                    "--insecure-port=0",
                    f"--cert-dir={workdir / 'apiserver-certs'}",
                    f"--tls-cert-file={pki.serving_cert}",
                    f"--tls-private-key-file={pki.serving_key}",
                    f"--client-ca-file={pki.ca_cert}",
                    f"--token-auth-file={tokens}",
                    "--authorization-mode=RBAC",
                    "--anonymous-auth=false",
                    f"--service-account-key-file={pki.sa_pub}",
                    f"--service-account-signing-key-file={pki.sa_key}",
                    f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                    f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                    # ServiceAccount admission is what the StatefulSet controller's Pods go through.
                    "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,"
                    "DefaultStorageClass,ResourceQuota,LimitRanger",
                    "--allow-privileged=true",
                    "--v=1",
                ],
                workdir,
            )
        )
        _wait_http_ok(f"{server}/readyz", deadline, api._procs, token=token, ca_file=pki.ca_cert)
        api._procs.append(
            _start(
                "kube-controller-manager",
                [
                    str(bin_dir / "kube-controller-manager"),
                    f"--kubeconfig={kubeconfig}",
                    "--leader-elect=false",
                    "--port=0",
                    "--secure-port=0",
                    "--controllers=*",
                    f"--service-account-private-key-file={pki.sa_key}",
                    f"--root-ca-file={pki.ca_cert}",
                    f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                    "--use-service-account-credentials=false",
                    # No kubelet ever reports, so a short GC/namespace sync keeps deletions quick.
                    "--concurrent-gc-syncs=5",
                    "--v=1",
                ],
                workdir,
            )
        )
        _wait_default_service_account(api, deadline)
    except BaseException:
        stop_control_plane(api)
        raise
    return api
