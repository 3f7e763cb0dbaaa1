"""Container image names: the one place that says what ``scripts/build-images.sh`` builds and what
the chart, the CRD defaults and the operator's builders refer to.

``python -m ferrymq_operator.images`` prints them as shell assignments for the build script
(``BROKER_IMAGE=ferrymq/ferrymq:0.1.0`` ...), so a rename here reaches every consumer.
"""

from __future__ import annotations

import sys

from ferrymq import __version__

#: Tag of every image built from this tree (the package version, as the chart's appVersion).
TAG = __version__

BROKER_REPOSITORY = "ferrymq/ferrymq"
OPERATOR_REPOSITORY = "ferrymq/ferrymq-operator"
SPARK_REPOSITORY = "ferrymq/ferrymq-spark"

#: NameServer and Broker pods (broker_image/Dockerfile).
BROKER_IMAGE = f"{BROKER_REPOSITORY}:{TAG}"
#: The operator Deployment of the chart (operator/Dockerfile).
OPERATOR_IMAGE = f"{OPERATOR_REPOSITORY}:{TAG}"
#: ferrymq with its spark extra, PySpark and a JRE (spark/k8s/Dockerfile): audit CronJobs, Spark jobs.
SPARK_IMAGE = f"{SPARK_REPOSITORY}:{TAG}"


def shell_assignments() -> str:
    """The names as ``KEY=value`` lines that a POSIX shell can ``eval``."""
    names = {
        "FERRYMQ_IMAGE_TAG": TAG,
        "BROKER_IMAGE": BROKER_IMAGE,
        "OPERATOR_IMAGE": OPERATOR_IMAGE,
        "SPARK_IMAGE": SPARK_IMAGE,
    }
    return "".join(f"{key}={value}\n" for key, value in names.items())


if __name__ == "__main__":
    sys.stdout.write(shell_assignments())
