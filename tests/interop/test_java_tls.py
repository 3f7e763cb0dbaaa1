"""The Java client (rocketmq-client 4.9.8 and 5.4.0) with TLS (``useTLS``) against Apache
RocketMQ 5.4.0 and ferrymq whose brokers enforce TLS: what the user sees must be equal
(tests/interop/README.md). Upstream's tls.* keys (Apache: system properties, ferrymq:
namesrv.conf / broker.conf), one certificate from ferrymq.remoting.certs. The clusters are this
module's own: started once, stopped at its end.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from ferrymq.client.credentials import ClientSecurity
from ferrymq.remoting.certs import make_ca, make_cert
from ferrymq.remoting.tls import ClientTls

from .differential import PERM_RW, differential
from .java_runner import JavaScenarios
from .reference import ApacheCluster, Target, ferrymq_cluster
from .reference.java import DEFAULT_JVM_OPTS
from .test_java_scenarios import names

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def tls_targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Target]]:
    """Apache and ferrymq whose brokers enforce TLS, NameServers permissive (plain-text route
    lookups and readiness checks still work, a client with useTLS speaks TLS to both)."""
    certs = tmp_path_factory.mktemp("tls-certs")
    server = make_cert(certs, make_ca(certs), "broker")
    tls_keys = {"tls.server.certPath": server.cert, "tls.server.keyPath": server.key}
    apache_opts = (
        *DEFAULT_JVM_OPTS,
        *(f"-D{k}={v}" for k, v in tls_keys.items()),
        "-Dtls.server.mode=enforcing",
        "-Dtls.test.mode.enable=false",  # else Apache serves a generated test certificate
        "-Dtls.enable=true",  # the broker's own calls (registration) over TLS
    )
    security = ClientSecurity(tls=ClientTls())
    with (
        ApacheCluster(
            tmp_path_factory.mktemp("apache-tls"),
            jvm_opts=apache_opts,
            namesrv_jvm_opts=("-Dtls.server.mode=permissive",),
        ) as apache,
        ferrymq_cluster(
            tmp_path_factory.mktemp("ferrymq-tls"),
            broker_conf={**tls_keys, "tls.server.mode": "enforcing"},
            namesrv_conf={**tls_keys, "tls.server.mode": "permissive"},
        ) as ferry,
    ):
        yield [
            Target("apache", apache, security=security),
            Target("ferrymq", ferry, security=security),
        ]


def test_tls_send_consume_and_a_plain_client(
    module_java_client: JavaScenarios, tls_targets: list[Target]
) -> None:
    """useTLS clients send and consume; a plain client's send to the enforcing broker fails the
    same way on both."""
    topic = names(module_java_client, "TlsTopic")

    def check(obs: dict[str, Any]) -> None:
        assert obs["tlsSend"]["status"] == "SEND_OK", obs
        assert obs["consumed"] == ["tls-ok"]
        assert "status" not in obs["plainSend"], obs

    differential(
        module_java_client,
        tls_targets,
        "tls",
        topics={topic: (2, PERM_RW)},
        topic=topic,
        group=names(module_java_client, "CG_tls"),
        check=check,
    )
