"""The chart README's RBAC tables, made from what the chart renders (one per watch mode).

``python tests/chart/rbac_readme.py`` rewrites the README's blocks between ``<!-- rbac:<mode> -->``
and ``<!-- /rbac:<mode> -->``; tests/chart/test_chart_rbac_readme.py fails while they differ.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chart.helm import CHART, by_kind, documents, template

README = CHART / "README.md"
RELEASE_NAMESPACE = "ferrymq-system"
# mode name -> helm --set arguments
MODES: dict[str, list[str]] = {
    "default": [],
    "listed": ["--set", "watchNamespaces={team-a,team-b}"],
    "all": ["--set", "watchNamespaces={*}"],
}
ROLE_KINDS = ("ClusterRole", "Role")


def _scope(role: dict[str, Any], bindings: list[dict[str, Any]]) -> str | None:
    """Where a role takes effect for the operator: 'cluster', a namespace, or None for roles the
    operator's account is not bound to (the aggregated self-service roles)."""
    for binding in bindings:
        if binding["roleRef"]["name"] != role["metadata"]["name"]:
            continue
        if binding["roleRef"]["kind"] != role["kind"]:
            continue
        if binding["kind"] == "ClusterRoleBinding":
            return "cluster-wide"
        return str(binding["metadata"]["namespace"])
    return None


def table(docs: list[dict[str, Any]]) -> str:
    """A Markdown table of every rule the chart grants, the operator's and the aggregated ones."""
    bindings = by_kind(docs, "ClusterRoleBinding") + by_kind(docs, "RoleBinding")
    rows = []
    for role in (r for kind in ROLE_KINDS for r in by_kind(docs, kind)):
        scope = _scope(role, bindings)
        if scope is None:
            labels = role["metadata"].get("labels", {})
            aggregated = sorted(
                k.rsplit("-", 1)[-1]
                for k, v in labels.items()
                if k.startswith("rbac.authorization.k8s.io/aggregate-to-") and v == "true"
            )
            scope = "aggregated into " + "/".join(aggregated)
        elif scope == RELEASE_NAMESPACE:
            scope = "release namespace"
        for rule in role["rules"]:
            groups = ", ".join(g or "core" for g in rule.get("apiGroups", []))
            resources = ", ".join(rule.get("resources", []))
            if rule.get("resourceNames"):
                resources += f" (only {', '.join(rule['resourceNames'])})"
            verbs = ", ".join(rule["verbs"])
            rows.append(f"| {scope} | {groups} | {resources} | {verbs} |")
    head = "| where | API groups | resources | verbs |\n|---|---|---|---|\n"
    return head + "\n".join(dict.fromkeys(rows)) + "\n"


def expected_blocks(helm: Path) -> dict[str, str]:
    return {
        mode: table(documents(template(helm, *args, namespace=RELEASE_NAMESPACE).stdout))
        for mode, args in MODES.items()
    }


def block_pattern(mode: str) -> re.Pattern[str]:
    return re.compile(rf"<!-- rbac:{mode} -->\n(.*?)<!-- /rbac:{mode} -->", re.S)


def rewrite(helm: Path) -> None:
    text = README.read_text()
    for mode, block in expected_blocks(helm).items():
        text, count = block_pattern(mode).subn(
            f"<!-- rbac:{mode} -->\n{block}<!-- /rbac:{mode} -->", text
        )
        if count != 1:
            raise SystemExit(f"{README}: no <!-- rbac:{mode} --> block")
    README.write_text(text)


if __name__ == "__main__":
    from k8s.control_plane import binary_path

    rewrite(binary_path("helm"))
