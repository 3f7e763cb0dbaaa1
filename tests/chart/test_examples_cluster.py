"""examples/ against a real kube-apiserver: the server-side dry run of every file passes with the
generated CRDs installed (schemas, enums, required fields, quantities checked by the API server)."""

from __future__ import annotations

from pathlib import Path

import pytest
from k8s.control_plane import KubeApi
from k8s.operator_env import ferrymq_crds

from chart.helm import ROOT, run

__all__ = ["ferrymq_crds"]

pytestmark = pytest.mark.k8s

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def test_every_example_passes_a_server_side_dry_run(
    kubectl_bin: Path, kube_api: KubeApi, ferrymq_crds: list[str], k8s_namespace: str
) -> None:
    assert len(EXAMPLES) >= 7
    for path in EXAMPLES:
        out = run(
            [kubectl_bin, "apply", "--dry-run=server", "-n", k8s_namespace, "-f", path],
            env=kube_api.env(),
        )
        assert "(server dry run)" in out.stdout, (path.name, out.stdout, out.stderr)


def test_a_broken_example_is_refused(
    kubectl_bin: Path,
    kube_api: KubeApi,
    ferrymq_crds: list[str],
    k8s_namespace: str,
    tmp_path: Path,
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (ROOT / "examples" / "minimal.yaml").read_text().replace("type: ephemeral", "type: tmpfs")
    )
    out = run(
        [kubectl_bin, "apply", "--dry-run=server", "-n", k8s_namespace, "-f", bad],
        env=kube_api.env(),
        check=False,
    )
    assert out.returncode != 0 and "spec.storage.type" in out.stderr, out.stderr
