#!/usr/bin/env bash
# Refreshes constraints.txt, the pinned versions every install uses (scripts/setup.sh, .ci/run through
# it, and the Dockerfiles): `scripts/lock.sh` after changing a dependency range in pyproject.toml,
# then commit both. `scripts/lock.sh --upgrade` moves every pin to the newest version the ranges allow.
#
# uv resolves for Linux and Python 3.11 whatever machine runs this. lock-overrides.txt holds the
# pins that are narrower than pyproject.toml's ranges on purpose (each with its reason).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || ./scripts/setup.sh
.venv/bin/python -m pip install -q 'uv>=0.5,<1'
.venv/bin/uv pip compile pyproject.toml --extra all --extra dev --extra interop \
  --python-version 3.11 --python-platform linux --constraint scripts/lock-overrides.txt \
  --no-header --annotation-style line --output-file constraints.txt "$@"
echo "lock: constraints.txt written"
