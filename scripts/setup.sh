#!/usr/bin/env bash
# Creates .venv/ at the repository root and installs ferrymq with every extra the tests need.
# Idempotent: a second run only checks. Installs a JRE for PySpark and Prometheus (the
# observability tests) where they are not present.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! command -v java >/dev/null 2>&1; then
  echo "setup: installing a Java runtime for PySpark (openjdk-17-jre-headless)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  # the observability tests start a real Prometheus server and run promtool on the chart's rules
  echo "setup: installing Prometheus and promtool (Debian package prometheus)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
fi
# The interop tests (tests/interop) run Apache RocketMQ and the Java clients: a JDK and Maven.
if ! command -v javac >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
  echo "setup: installing a JDK and Maven for the interop tests (openjdk-17-jdk-headless, maven)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless maven >/dev/null
fi
# System tools the default test run calls by name, installed here so a fresh machine has them:
# runc (tests/k8s/test_node_script.py drives the real runc through scripts/k8s-node/runc-clamp).
missing=()
command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || missing+=(runc)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]} (Debian packages)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.ferrymq-installed
# constraints.txt pins every version (scripts/lock.sh refreshes it); a change to it or to
# pyproject.toml re-runs the install.
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[all,dev,interop]"
  touch "$stamp"
fi
# Apache RocketMQ 5.4.0's jars and the Java scenario module, fetched from Maven Central into ~/.m2
# once, and the Go client's scenario program (tests/interop/go: Go installed if missing, modules
# from the Go module proxy) built into ~/.cache/ferrymq-interop (cached; a no-op afterwards), so
# no test pays the cold fetch inside its timeout.
PYTHONPATH=tests .venv/bin/python -m interop.reference
# the gRPC proxy's stubs, generated from the published RocketMQ 5.x .proto files (not committed)
./scripts/gen-proto.sh
echo "setup: ready (.venv/bin/ferrymq)"
