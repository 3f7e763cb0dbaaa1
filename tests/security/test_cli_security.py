"""``ferrymq`` processes with ACL and TLS: a broker started from broker.conf with aclEnable,
aclFilePath and tls.server.*; the CLI producing with --access-key/--secret-key/--tls-trust-cert
(and the same through FERRYMQ_* variables), and refused without them, with exit codes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_process import FERRYMQ, Proc, clean_env
from security_helpers import APP_AK, APP_SK, PLAIN_ACL, CertFiles, make_ca, make_cert


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CertFiles]:
    d = tmp_path_factory.mktemp("pki")
    ca = make_ca(d)
    return {"ca": ca, "server": make_cert(d, ca, "server")}


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, pki: dict[str, CertFiles]
) -> Iterator[tuple[str, str]]:
    d = tmp_path_factory.mktemp("cluster")
    (d / "plain_acl.yml").write_text(PLAIN_ACL)
    # a TLS client speaks TLS to the NameServer too; permissive keeps the broker's
    # plaintext registration working on the same port
    ns_conf = d / "namesrv.conf"
    ns_conf.write_text(
        f"tls.server.mode=permissive\ntls.server.certPath={pki['server'].cert}\n"
        f"tls.server.keyPath={pki['server'].key}\n"
    )
    namesrv = Proc(
        ["namesrv", "-c", str(ns_conf), "--listen-port", "0", "--bind", "127.0.0.1"],
        d,
        clean_env(),
    )
    try:
        port = namesrv.wait_line(r"NameServer ready on port (\d+)", timeout=30).group(1)
        ns = f"127.0.0.1:{port}"
        conf = d / "broker.conf"
        conf.write_text(
            "\n".join(
                [
                    "brokerClusterName=SecCluster",
                    "brokerName=broker-sec",
                    "brokerIP1=127.0.0.1",
                    "bindAddress=127.0.0.1",
                    "listenPort=0",
                    f"namesrvAddr={ns}",
                    f"storePathRootDir={d / 'store'}",
                    "mappedFileSizeCommitLog=1048576",
                    "aclEnable=true",
                    f"aclFilePath={d / 'plain_acl.yml'}",
                    "tls.server.mode=enforcing",
                    f"tls.server.certPath={pki['server'].cert}",
                    f"tls.server.keyPath={pki['server'].key}",
                    "",
                ]
            )
        )
        broker = Proc(["broker", "-c", str(conf)], d, clean_env())
        try:
            port = broker.wait_line(r"Broker broker-sec ready on port (\d+)", timeout=30).group(1)
            yield ns, f"127.0.0.1:{port}"
        finally:
            broker.stop()
    finally:
        namesrv.stop()


def cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*FERRYMQ, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean_env(), **(env or {})},
        check=False,
    )


def flat(result: subprocess.CompletedProcess[str]) -> str:
    """stdout + stderr with rich's line wrapping undone."""
    return " ".join((result.stdout + result.stderr).split())


def test_cli_produces_with_credentials_and_tls(
    cluster: tuple[str, str], pki: dict[str, CertFiles]
) -> None:
    ns = cluster[0]
    ok = cli(
        [
            "--access-key",
            APP_AK,
            "--secret-key",
            APP_SK,
            "--tls-trust-cert",
            str(pki["ca"].cert),
            "produce",
            "-n",
            ns,
            "-t",
            "allowed",
            "-c",
            "3",
        ]
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "sent 3/3" in ok.stdout

    # the same through the environment
    env = {
        "FERRYMQ_ACCESS_KEY": APP_AK,
        "FERRYMQ_SECRET_KEY": APP_SK,
        "FERRYMQ_TLS_TRUST_CERT_PATH": str(pki["ca"].cert),
    }
    via_env = cli(["produce", "-n", ns, "-t", "allowed", "-c", "2"], env)
    assert via_env.returncode == 0, via_env.stdout + via_env.stderr
    assert "sent 2/2" in via_env.stdout


def test_cli_is_refused_without_credentials_or_tls(
    cluster: tuple[str, str], pki: dict[str, CertFiles]
) -> None:
    ns = cluster[0]
    unsigned = cli(["--tls-trust-cert", str(pki["ca"].cert), "produce", "-n", ns, "-t", "allowed"])
    assert unsigned.returncode == 1
    assert "AccessKey" in flat(unsigned)

    no_pub = cli(
        [
            "--access-key",
            APP_AK,
            "--secret-key",
            APP_SK,
            "--tls-trust-cert",
            str(pki["ca"].cert),
            "produce",
            "-n",
            ns,
            "-t",
            "subOnly",
        ]
    )
    assert no_pub.returncode == 1
    assert "NO_PERMISSION (16)" in flat(no_pub)
    assert "no permission to access Topic:subOnly from" in flat(no_pub)

    plaintext = cli(
        ["--access-key", APP_AK, "--secret-key", APP_SK, "produce", "-n", ns, "-t", "allowed"]
    )
    assert plaintext.returncode == 1

    half = cli(["--access-key", APP_AK, "produce", "-n", ns, "-t", "allowed"])
    assert half.returncode == 2
    assert "--secret-key" in flat(half)


def test_broker_with_acl_but_no_file_refuses_to_start(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"aclEnable=true\nstorePathRootDir={tmp_path / 'store'}\nlistenPort=0\n"
        "bindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\n"
    )
    env = {"ROCKETMQ_HOME": str(tmp_path / "nowhere")}
    result = cli(["broker", "-c", str(conf)], env)
    assert result.returncode == 2
    assert "plain_acl.yml" in flat(result)

    conf.write_text("tls.server.mode=enforcing\n")
    result = cli(["broker", "-c", str(conf)])
    assert result.returncode == 2
    assert "tls.server.certPath" in flat(result)


def test_probe_speaks_tls_from_the_environment(
    cluster: tuple[str, str], pki: dict[str, CertFiles]
) -> None:
    addr = cluster[1]
    probe = [sys.executable, "-m", "ferrymq.cli.probe", "--addr", addr, "--timeout", "10"]
    plain = subprocess.run(probe, capture_output=True, text=True, timeout=60, env=clean_env())
    assert plain.returncode == 1  # the enforcing broker closes a plaintext probe
    env = {**clean_env(), "FERRYMQ_TLS_TRUST_CERT_PATH": str(pki["ca"].cert)}
    env["FERRYMQ_TLS_ENABLE"] = "true"
    tls = subprocess.run(probe, capture_output=True, text=True, timeout=60, env=env)
    assert tls.returncode == 0, tls.stdout + tls.stderr
    assert "answered" in tls.stdout
