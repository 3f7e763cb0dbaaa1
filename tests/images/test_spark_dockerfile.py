"""Static checks of spark/k8s/Dockerfile (the image of the audit CronJob and the Spark jobs).

scripts/build-images.sh builds and smoke-tests it (uid, `ferrymq report --help`, `java -version`,
`import pyspark`); these checks need no Docker engine.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from images.dockerfile_lint import check, final_instruction, parse, stages

ROOT = Path(__file__).resolve().parents[2]
SPARK = ROOT / "spark" / "k8s" / "Dockerfile"


def test_spark_dockerfile_passes_the_checks() -> None:
    findings = check(SPARK, ROOT)
    assert findings == [], "\n".join(map(str, findings))


def test_debian_base_is_overridable_like_the_other_images() -> None:
    instructions = parse(SPARK.read_text())
    assert instructions[0].keyword == "ARG" and instructions[0].args.startswith("BASE_IMAGE=")
    all_stages = stages(instructions)
    assert len(all_stages) == 2 and all(s.base == "${BASE_IMAGE}" for s in all_stages)
    runs = " ".join(i.args for i in all_stages[1].instructions if i.keyword == "RUN")
    # Java from Debian, not from a registry image.
    assert "openjdk-17-jre-headless" in runs
    installs = " ".join(i.args for i in all_stages[0].instructions if i.keyword == "RUN")
    assert '".[spark]"' in installs and "-c constraints.txt" in installs


def test_runs_ferrymq_as_the_operators_non_root_uid() -> None:
    user = final_instruction(SPARK, "USER")
    assert user is not None and user.args == "10001:10001"
    entry = final_instruction(SPARK, "ENTRYPOINT")
    # Spark's pods start the image with `driver ...`/`executor`; anything else is a ferrymq
    # command line (the operator's audit CronJob), through the image's own entrypoint script
    assert entry is not None and entry.exec_form() == ["/opt/ferrymq/bin/ferrymq-spark-entrypoint"]
    script = (SPARK.parent / "entrypoint.sh").read_text()
    assert 'exec ferrymq "$@"' in script


def test_the_wheel_directory_exists_and_its_wheels_stay_out_of_git() -> None:
    wheels = ROOT / "spark" / "k8s" / "wheels"
    assert wheels.is_dir()  # COPY spark/k8s/wheels needs it even when empty
    out = subprocess.run(
        ["git", "check-ignore", "-q", "spark/k8s/wheels/pyspark-4.3.0-py2.py3-none-any.whl"],
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 0
