"""The chart README states exactly what each watch mode grants (its tables are compared with the
rendered chart), and the default grants nothing cluster-wide but read-only discovery."""

from __future__ import annotations

from pathlib import Path

from chart.helm import by_kind, documents, template
from chart.rbac_readme import MODES, README, block_pattern, expected_blocks

WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


def test_readme_rbac_tables_match_the_rendered_chart(helm_bin: Path) -> None:
    text = README.read_text()
    for mode, block in expected_blocks(helm_bin).items():
        found = block_pattern(mode).search(text)
        assert found is not None, f"README has no <!-- rbac:{mode} --> block"
        assert found.group(1) == block, (
            f"README's {mode} RBAC table differs from the chart "
            f"(run `python tests/chart/rbac_readme.py`); expected:\n{block}"
        )


def test_only_the_all_namespaces_mode_writes_cluster_wide(helm_bin: Path) -> None:
    for mode, args in MODES.items():
        docs = documents(template(helm_bin, *args).stdout)
        bound = {b["roleRef"]["name"] for b in by_kind(docs, "ClusterRoleBinding")}
        cluster_writes = [
            rule
            for role in by_kind(docs, "ClusterRole")
            if role["metadata"]["name"] in bound
            for rule in role["rules"]
            if set(rule["verbs"]) & WRITE_VERBS
        ]
        secrets = [
            rule
            for role in by_kind(docs, "ClusterRole")
            if role["metadata"]["name"] in bound
            for rule in role["rules"]
            if "secrets" in rule.get("resources", [])
        ]
        if mode == "all":
            assert cluster_writes and secrets
        else:
            assert not cluster_writes, (mode, cluster_writes)
            assert not secrets, (mode, secrets)


def test_aggregated_roles_for_topic_self_service(helm_bin: Path) -> None:
    docs = documents(template(helm_bin).stdout)
    roles = {r["metadata"]["name"]: r for r in by_kind(docs, "ClusterRole")}
    edit = roles["ferrymq-ferrymq-operator-edit"]
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    writable = {
        res for rule in edit["rules"] if "create" in rule["verbs"] for res in rule["resources"]
    }
    assert writable == {"topics", "consumergroups"}
    view = roles["ferrymq-ferrymq-operator-view"]
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert all(set(rule["verbs"]) == {"get", "list", "watch"} for rule in view["rules"])
    off = documents(template(helm_bin, "--set", "rbac.aggregateToDefaultRoles=false").stdout)
    assert "ferrymq-ferrymq-operator-edit" not in {
        r["metadata"]["name"] for r in by_kind(off, "ClusterRole")
    }
