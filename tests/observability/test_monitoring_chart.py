"""The chart's monitoring pieces: dashboards as sidecar-labelled ConfigMaps, the PrometheusRule and
PodMonitor only with their switch on and the Prometheus operator's CRDs served, the rules passing
``promtool check rules`` and ``promtool test rules`` (series that fire and that stay quiet)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from chart.helm import CHART, by_kind, documents, template
from k8s.fixtures import helm_bin

from .prometheus import PROMTOOL

__all__ = ["helm_bin"]

RULES = CHART / "rules" / "ferrymq.rules.yaml"
RULES_TEST = Path(__file__).parent / "promtool" / "ferrymq.rules.test.yaml"
DASHBOARDS = sorted((CHART / "dashboards").glob("*.json"))
PROM_API = ["--api-versions", "monitoring.coreos.com/v1/PrometheusRule"]
PM_API = ["--api-versions", "monitoring.coreos.com/v1/PodMonitor"]
ALL_ON = {
    "monitoring.dashboards.enabled": "true",
    "monitoring.prometheusRule.enabled": "true",
    "monitoring.podMonitor.enabled": "true",
}


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PROMTOOL, *map(str, args)], capture_output=True, text=True, timeout=60, check=False
    )


def test_promtool_checks_and_unit_tests_the_shipped_rules() -> None:
    checked = promtool("check", "rules", RULES)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 15 rules found" in checked.stdout
    tested = promtool("test", "rules", RULES_TEST)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_promtool_test_fails_when_an_alert_is_expected_wrongly(tmp_path: Path) -> None:
    # the unit tests can fail: expecting the busy (healthy) group to alert is refused
    text = RULES_TEST.read_text().replace(
        "consumer_group: slow, topic: T", "consumer_group: busy, topic: T"
    )
    broken = tmp_path / "broken.test.yaml"
    broken.write_text(text.replace("../../../charts", str(CHART.parent)))
    assert promtool("test", "rules", broken).returncode != 0


def test_monitoring_is_off_by_default(helm_bin: Path) -> None:
    docs = documents(template(helm_bin, *PROM_API, *PM_API).stdout)
    assert not by_kind(docs, "PrometheusRule") and not by_kind(docs, "PodMonitor")
    assert not [d for d in by_kind(docs, "ConfigMap") if "dashboard" in d["metadata"]["name"]]


def test_dashboards_render_as_sidecar_configmaps(helm_bin: Path) -> None:
    docs = documents(template(helm_bin, values={"monitoring.dashboards.enabled": "true"}).stdout)
    maps = [
        d for d in by_kind(docs, "ConfigMap") if d["metadata"]["labels"].get("grafana_dashboard")
    ]
    # the broker dashboards and the operator's own (dashboards/operator/)
    assert len(maps) == len(DASHBOARDS) + 1 == 5
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        [(name, text)] = cm["data"].items()
        found = [*(CHART / "dashboards").glob(name), *(CHART / "dashboards/operator").glob(name)]
        shipped = json.loads(found[0].read_text())
        assert json.loads(text) == shipped
        assert shipped["panels"] and all(p["targets"] for p in shipped["panels"])


def test_rule_and_monitor_need_their_crds_or_force(helm_bin: Path) -> None:
    without = documents(template(helm_bin, values=ALL_ON).stdout)
    assert not by_kind(without, "PrometheusRule") and not by_kind(without, "PodMonitor")
    docs = documents(template(helm_bin, *PROM_API, *PM_API, values=ALL_ON).stdout)
    [rule] = by_kind(docs, "PrometheusRule")
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    monitors = {m["metadata"]["name"]: m for m in by_kind(docs, "PodMonitor")}
    monitor = monitors["ferrymq-ferrymq-operator-brokers"]
    # brokers and NameServers, told apart by the component label copied onto the targets
    assert monitor["spec"]["selector"] == {
        "matchLabels": {"app.kubernetes.io/name": "ferrymq"},
        "matchExpressions": [
            {
                "key": "app.kubernetes.io/component",
                "operator": "In",
                "values": ["broker", "namesrv"],
            }
        ],
    }
    assert "app.kubernetes.io/component" in monitor["spec"]["podTargetLabels"]
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    operator = monitors["ferrymq-ferrymq-operator-operator"]
    assert operator["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    forced = documents(
        template(
            helm_bin,
            values={
                **ALL_ON,
                "monitoring.prometheusRule.force": "true",
                "monitoring.podMonitor.force": "true",
                "monitoring.prometheusRule.labels.release": "kube-prometheus-stack",
            },
        ).stdout
    )
    [rule] = by_kind(forced, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert by_kind(forced, "PodMonitor")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("monitoring.podMonitor.interval", "soon", "monitoring.podMonitor.interval"),
        ("monitoring.dashboards.enabled", "maybe", "monitoring.dashboards.enabled"),
        ("monitoring.nothing", "1", "nothing"),
    ],
)
def test_bad_monitoring_values_are_refused(
    helm_bin: Path, key: str, value: str, message: str
) -> None:
    result = template(helm_bin, values={key: value}, check=False)
    assert result.returncode != 0 and message in result.stderr
