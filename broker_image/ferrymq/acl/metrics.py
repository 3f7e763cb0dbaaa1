"""Prometheus families of the security layer, read at scrape time: ACL refusals by request code
and reason, ACL reloads, TLS plaintext refusals and handshake failures, and the days left
before each configured certificate expires."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ferrymq.acl.service import AclService
from ferrymq.remoting.tls import ServerTls


class SecurityCollector(Collector):
    def __init__(
        self, labels: dict[str, str], acl: AclService | None, tls: ServerTls | None
    ) -> None:
        self.labels = labels
        self.acl = acl
        self.tls = tls

    def collect(self) -> Iterator[Metric]:
        names = list(self.labels)
        values = list(self.labels.values())
        acl = self.acl
        if acl is not None:
            refused = CounterMetricFamily(
                "ferrymq_acl_refused_requests",
                "Requests answered NO_PERMISSION by the ACL, by request code and reason",
                labels=[*names, "code", "reason"],
            )
            for (code, reason), count in sorted(acl.refused.items()):
                refused.add_metric([*values, str(code), reason], count)
            yield refused
            reloads = CounterMetricFamily(
                "ferrymq_acl_reloads", "ACL files reloaded after a change", labels=names
            )
            reloads.add_metric(values, acl.reloads)
            yield reloads
            failures = CounterMetricFamily(
                "ferrymq_acl_reload_failures",
                "ACL file changes not applied (bad file; previous accounts kept)",
                labels=names,
            )
            failures.add_metric(values, acl.reload_failures)
            yield failures
        tls = self.tls
        if tls is not None:
            plain = CounterMetricFamily(
                "ferrymq_tls_plaintext_refused",
                "Plaintext connections refused (tls.server.mode=enforcing)",
                labels=names,
            )
            plain.add_metric(values, tls.plaintext_refused)
            yield plain
            failed = CounterMetricFamily(
                "ferrymq_tls_handshake_failures", "Failed TLS handshakes", labels=names
            )
            failed.add_metric(values, tls.handshake_failures)
            yield failed
            expiry = GaugeMetricFamily(
                "ferrymq_tls_certificate_expiry_days",
                "Days until the certificate expires (negative: expired)",
                labels=[*names, "path"],
            )
            for path, days in sorted(tls.certificate_expiry_days().items()):
                expiry.add_metric([*values, path], days)
            yield expiry
